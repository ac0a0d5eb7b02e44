"""Dispatcher on a CUDA device (H200; skipped without CUDA): CUDA-graph capture uses only
decisions made before it, a new key falls back (``fallback_capture``) and is decided after;
a hit's output check does not synchronise; the capture check costs nothing on a hit."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("CUDA not available", allow_module_level=True)

from fib_runtime import metrics  # noqa: E402
from fib_runtime.dispatch import disable, dispatch, enable, stats  # noqa: E402
from fib_runtime.dispatch import runtime as rt_mod  # noqa: E402

DEF = {
    "name": "scale_h4", "op_type": "toy",
    "axes": {"batch": {"type": "var"}, "h": {"type": "const", "value": 4}},
    "inputs": {"x": {"shape": ["batch", "h"], "dtype": "float32"},
               "w": {"shape": ["h"], "dtype": "float32"}},
    "outputs": {"y": {"shape": ["batch", "h"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(x, w):\n    return x * w\n",
}


def make_dataset(root: Path) -> Path:
    (root / "definitions" / "toy").mkdir(parents=True)
    (root / "definitions" / "toy" / "scale_h4.json").write_text(json.dumps(DEF))
    s = {"name": "gpu_scale", "definition": "scale_h4", "author": "t",
         "spec": {"language": "python", "target_hardware": ["H200"], "entry_point": "m.py::run",
                  "dependencies": [], "destination_passing_style": False},
         "sources": [{"path": "m.py", "content": "def run(x, w):\n    return x * w + 1.0\n"}]}
    p = root / "solutions" / "t" / "toy" / "scale_h4" / "gpu_scale.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(s))
    rows = []
    for b in (8, 9):
        rows.append({"definition": "scale_h4", "solution": "gpu_scale",
                     "workload": {"axes": {"batch": b}, "uuid": f"u{b}",
                                  "inputs": {"x": {"type": "random"}, "w": {"type": "random"}}},
                     "evaluation": {"status": "PASSED", "environment": {"hardware": torch.cuda.get_device_name(0),
                                                                        "libs": {}},
                                    "timestamp": "2026-12-01T00:00:00", "log": "",
                                    "correctness": {"max_relative_error": 0, "max_absolute_error": 0},
                                    "performance": {"latency_ms": 0.01, "reference_latency_ms": 0.02,
                                                    "speedup_factor": 2}}})
    p = root / "traces" / "t" / "toy" / "scale_h4.jsonl"
    p.parent.mkdir(parents=True)
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.fixture
def rt(tmp_path, monkeypatch):
    monkeypatch.setenv("FIB_CACHE_PATH", str(tmp_path / "cache"))
    disable()
    metrics.reset()
    metrics.configure(enabled=False)
    r = enable(make_dataset(tmp_path / "ds"), reload_interval=0, builtins="off")  # hardware detected
    yield r
    disable()
    metrics.reset()


def test_detected_hardware_class_selects_rows(rt):
    assert rt.hardware != "CPU"
    x, w = torch.randn(8, 4, device="cuda"), torch.randn(4, device="cuda")
    y = dispatch("scale_h4", (x, w), lambda: x * w)
    assert torch.allclose(y, x * w + 1.0)


def test_capture_uses_known_decisions_only(rt):
    w = torch.randn(4, device="cuda")
    x8, x9 = torch.randn(8, 4, device="cuda"), torch.randn(9, 4, device="cuda")
    dispatch("scale_h4", (x8, w), lambda: x8 * w)  # decided eagerly
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            assert rt_mod._capturing()
            y8 = dispatch("scale_h4", (x8, w), lambda: x8 * w)       # known: the solution
            y9 = dispatch("scale_h4", (x9, w), lambda: x9 * w)       # new: the original
    torch.cuda.current_stream().wait_stream(s)
    x8.copy_(torch.ones(8, 4, device="cuda"))
    x9.copy_(torch.ones(9, 4, device="cuda"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.allclose(y8, torch.ones(8, 4, device="cuda") * w + 1.0)
    assert torch.allclose(y9, torch.ones(9, 4, device="cuda") * w)
    c = stats()["dispatch"]
    assert c[("scale_h4", "none", "fallback_capture")] == 1
    y9 = dispatch("scale_h4", (x9, w), lambda: x9 * w)            # after capture: decided
    assert torch.allclose(y9, x9 * w + 1.0)
    assert stats()["dispatch"][("scale_h4", "gpu_scale", "hit")] == 3   # eager x8, captured x8, x9 after


def test_hit_does_not_synchronise(rt):
    w = torch.randn(4096, device="cuda")
    x = torch.randn(8, 4, device="cuda")
    dispatch("scale_h4", (x, w[:4]), lambda: x)
    big = torch.randn(8192, 8192, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(3):
        big = big @ big  # queue ~ms of GPU work
        big = big / big.norm()
    t_queue = time.perf_counter() - t0
    t1 = time.perf_counter()
    dispatch("scale_h4", (x, w[:4]), lambda: x)
    t_hit = time.perf_counter() - t1
    torch.cuda.synchronize()
    t_all = time.perf_counter() - t0
    assert t_hit < 0.2 * t_all, (t_queue, t_hit, t_all)  # the hit did not wait for the queue
