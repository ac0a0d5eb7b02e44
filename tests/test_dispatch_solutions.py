"""Solution loading by language: python (multi-file, cached per content hash, in-memory when the
cache is unwritable), triton without triton, cpp through apache-tvm-ffi (compiled once per hash
into FIB_CACHE_PATH, reused by a second process), and a cpp solution dispatched end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fib_runtime import metrics, solutions
from fib_runtime.dispatch import disable, dispatch, enable, stats
from fib_runtime.schema import Solution
from fib_runtime.solutions import SolutionLoadError, load_solution

REPO = Path(__file__).resolve().parents[1]


def sol(name, lang, sources, entry, dps=False, binding=None, definition="scale_h4"):
    spec = {"language": lang, "target_hardware": ["CPU"], "entry_point": entry, "dependencies": [],
            "destination_passing_style": dps}
    if binding:
        spec["binding"] = binding
    return Solution.model_validate({"name": name, "definition": definition, "author": "test", "spec": spec,
                                    "sources": [{"path": p, "content": c} for p, c in sources.items()]})


@pytest.fixture(autouse=True)
def clean(tmp_path, monkeypatch):
    monkeypatch.setenv("FIB_CACHE_PATH", str(tmp_path / "cache"))
    solutions.forget()
    disable()
    metrics.reset()
    metrics.configure(enabled=False)
    yield
    disable()
    solutions.forget()
    metrics.reset()


def test_python_multi_file_and_cache(tmp_path):
    s = sol("multi", "python", {"pkg/helper.py": "def twice(v):\n    return v * 2\n",
                                "main.py": "from .pkg.helper import twice\nimport pkg.helper as h2\n\n"
                                           "def run(x, w):\n    return twice(x) + h2.twice(w) * 0\n"},
            "main.py::run")
    a = load_solution(s)
    assert a.language == "python" and not a.dps and a.seconds > 0
    x = torch.ones(2, 4)
    assert torch.equal(a.fn(x, torch.ones(4)), x * 2)
    b = load_solution(s)           # same content hash: served from the in-process cache
    assert b.fn is a.fn and b.seconds == 0
    assert (tmp_path / "cache" / "python" / s.content_hash() / "pkg" / "helper.py").is_file()


def test_python_load_errors_are_cached(tmp_path):
    s = sol("broken", "python", {"main.py": "def run(:\n"}, "main.py::run")
    with pytest.raises(SolutionLoadError, match="SyntaxError"):
        load_solution(s)
    with pytest.raises(SolutionLoadError):  # remembered, not retried
        load_solution(s)
    s2 = sol("noentry", "python", {"main.py": "x = 1\n"}, "main.py::run")
    with pytest.raises(SolutionLoadError, match="no callable 'run'"):
        load_solution(s2)


def test_python_in_memory_when_cache_unwritable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    s = sol("mem", "python", {"main.py": "def run(x, w):\n    return x + 1\n"}, "main.py::run")
    a = load_solution(s, cache_dir=str(blocker / "sub"))
    assert a.artifact == "" and float(a.fn(torch.zeros(1), None)[0]) == 1.0


def test_unsupported_and_missing_toolchains():
    with pytest.raises(SolutionLoadError, match="not supported"):
        load_solution(sol("tl", "tilelang", {"k.py": "x=1\n"}, "k.py::run"))
    try:
        import triton  # noqa: F401
    except Exception:
        with pytest.raises(SolutionLoadError, match="triton is not importable"):
            load_solution(sol("tr", "triton", {"k.py": "def run(x):\n    return x\n"}, "k.py::run"))


CPP = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
#include "helper.h"

using tvm::ffi::TensorView;

// destination-passing: y = x * w + OFFSET (float32, CPU, contiguous)
void scale_offset(TensorView x, TensorView w, TensorView y) {
  const float* xp = static_cast<const float*>(x.data_ptr());
  const float* wp = static_cast<const float*>(w.data_ptr());
  float* yp = static_cast<float*>(y.data_ptr());
  int64_t rows = x.size(0), cols = x.size(1);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) yp[i * cols + j] = xp[i * cols + j] * wp[j] + OFFSET;
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scale_offset, scale_offset);
"""


def cpp_solution(offset="0.5f"):
    return sol("cpp_scale", "cpp", {"helper.h": f"#define OFFSET {offset}\n", "kernel.cpp": CPP},
               "kernel.cpp::scale_offset", dps=True)


needs_cxx = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None, reason="no C++ compiler")


@needs_cxx
def test_cpp_tvm_ffi_compiled_once_per_hash(tmp_path):
    s = cpp_solution()
    a = load_solution(s)
    assert a.dps and a.language == "cpp"
    x, w = torch.randn(3, 4), torch.randn(4)
    y = torch.empty(3, 4)
    a.fn(x, w, y)
    assert torch.allclose(y, x * w + 0.5)
    folder = tmp_path / "cache" / "cpp" / s.content_hash()
    assert (folder / "tvm-ffi.done").is_file()
    lib = Path((folder / "tvm-ffi.done").read_text().strip())
    mtime = lib.stat().st_mtime_ns
    # another process loads the finished build without compiling
    code = ("import sys, json; from fib_runtime.schema import Solution; from fib_runtime.solutions import load_solution\n"
            "s = Solution.model_validate(json.loads(sys.stdin.read())); l = load_solution(s); print(l.artifact)")
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(s.to_dict()), capture_output=True,
                         text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr
    assert lib.stat().st_mtime_ns == mtime
    # other content, other hash, other build
    b = load_solution(cpp_solution("1.5f"))
    assert b.artifact != a.artifact


@needs_cxx
def test_cpp_compile_error_is_a_load_error():
    bad = sol("cpp_bad", "cpp", {"kernel.cpp": "this is not C++;\n"}, "kernel.cpp::f", dps=True)
    with pytest.raises(SolutionLoadError, match="build failed"):
        load_solution(bad)


DEF = {
    "name": "scale_h4", "op_type": "toy",
    "axes": {"batch": {"type": "var"}, "h": {"type": "const", "value": 4}},
    "inputs": {"x": {"shape": ["batch", "h"], "dtype": "float32"},
               "w": {"shape": ["h"], "dtype": "float32"}},
    "outputs": {"y": {"shape": ["batch", "h"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(x, w):\n    return x * w\n",
}


@needs_cxx
def test_cpp_solution_dispatched(tmp_path):
    root = tmp_path / "ds"
    (root / "definitions" / "toy").mkdir(parents=True)
    (root / "definitions" / "toy" / "scale_h4.json").write_text(json.dumps(DEF))
    s = cpp_solution()
    p = root / "solutions" / "test" / "toy" / "scale_h4" / "cpp_scale.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(s.to_dict()))
    row = {"definition": "scale_h4", "solution": "cpp_scale",
           "workload": {"axes": {"batch": 8}, "uuid": "u8", "inputs": {"x": {"type": "random"}, "w": {"type": "random"}}},
           "evaluation": {"status": "PASSED", "environment": {"hardware": "cpu", "libs": {}},
                          "timestamp": "2026-12-01T00:00:00", "log": "",
                          "correctness": {"max_relative_error": 0, "max_absolute_error": 0},
                          "performance": {"latency_ms": 1, "reference_latency_ms": 1, "speedup_factor": 1}}}
    t = root / "traces" / "test" / "toy" / "scale_h4.jsonl"
    t.parent.mkdir(parents=True)
    t.write_text(json.dumps(row) + "\n")
    enable(root, hardware="CPU", reload_interval=0, builtins="off")
    x, w = torch.randn(8, 4), torch.randn(4)
    y = dispatch("scale_h4", (x, w), lambda: None)
    assert torch.allclose(y, x * w + 0.5)
    assert stats()["dispatch"] == {("scale_h4", "cpp_scale", "hit"): 1}
    assert stats()["metrics"]["fib_solution_build_seconds"][("cpp",)][0] == 1


TORCH_EXT = r"""
#include <torch/extension.h>
torch::Tensor scale_quarter(torch::Tensor x, torch::Tensor w) { return x * w + 0.25; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scale_quarter", &scale_quarter); }
"""


@needs_cxx
@pytest.mark.skipif(shutil.which("ninja") is None, reason="torch.utils.cpp_extension needs ninja")
def test_cpp_torch_binding(tmp_path):
    """binding: "torch" builds with torch.utils.cpp_extension (about a minute on 2 cores)."""
    s = sol("torch_ext", "cpp", {"k.cpp": TORCH_EXT}, "k.cpp::scale_quarter", binding="torch")
    a = load_solution(s)
    x, w = torch.randn(2, 4), torch.randn(4)
    assert torch.allclose(a.fn(x, w), x * w + 0.25)
    assert (tmp_path / "cache" / "cpp" / s.content_hash() / "build-torch").is_dir()
