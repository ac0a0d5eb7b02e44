"""Dispatcher on the CPU with python solutions: hit, miss, buckets, quarantine, strict, allow/deny,
apply(), DPS, capture, built-ins, hot reload under concurrent calls."""

from __future__ import annotations

import json
import sys
import threading
import time
import types
from pathlib import Path

import pytest
import torch

from fib_runtime import metrics
from fib_runtime.dispatch import (SolutionError, apply, disable, dispatch, enable, explain,
                                  register_definition, reload, stats)
from fib_runtime.dispatch import runtime as rt_mod

DEF = {
    "name": "scale_h4", "op_type": "toy",
    "axes": {"batch": {"type": "var"}, "h": {"type": "const", "value": 4}},
    "inputs": {"x": {"shape": ["batch", "h"], "dtype": "float32"},
               "w": {"shape": ["h"], "dtype": "float32"}},
    "outputs": {"y": {"shape": ["batch", "h"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(x, w):\n    return x * w\n",
}

# each solution fills its output with its own number, so a test sees which one ran
BODIES = {
    "sol_a": "import torch\n\ndef run(x, w):\n    return torch.full_like(x, 1.0)\n",
    "sol_b": "import torch\n\ndef run(x, w):\n    return torch.full_like(x, 2.0)\n",
    "sol_c": "import torch\n\ndef run(x, w):\n    return torch.full_like(x, 3.0)\n",
    "sol_raise": "def run(x, w):\n    raise RuntimeError('kernel exploded')\n",
    "sol_shape": "def run(x, w):\n    return x[:1].clone()\n",
    "sol_dtype": "def run(x, w):\n    return x.double()\n",
    "sol_count": "def run(x, w):\n    return (x, x)\n",
    "sol_loaderr": "import module_that_does_not_exist_xyz\n\ndef run(x, w):\n    return x\n",
    "sol_dps": "def run(x, w, y):\n    y.fill_(5.0)\n",
}


def solution(name: str, dps: bool = False) -> dict:
    return {"name": name, "definition": "scale_h4", "author": "test",
            "spec": {"language": "python", "target_hardware": ["CPU"], "entry_point": "main.py::run",
                     "dependencies": [], "destination_passing_style": dps},
            "sources": [{"path": "main.py", "content": BODIES[name]}]}


def trace(sol: str, batch: int, status: str = "PASSED", lat: float = 1.0, hw: str = "Intel Xeon cpu") -> dict:
    ev = {"status": status, "environment": {"hardware": "cpu" if hw.endswith("cpu") else hw, "libs": {}},
          "timestamp": "2026-12-01T00:00:00", "log": ""}
    if status == "PASSED":
        ev["correctness"] = {"max_relative_error": 0.0, "max_absolute_error": 0.0}
        ev["performance"] = {"latency_ms": lat, "reference_latency_ms": 1.0, "speedup_factor": 1.0 / lat}
    elif status == "INCORRECT_NUMERICAL":
        ev["correctness"] = {"max_relative_error": 1.0, "max_absolute_error": 1.0}
    return {"definition": "scale_h4",
            "workload": {"axes": {"batch": batch}, "inputs": {"x": {"type": "random"}, "w": {"type": "random"}},
                         "uuid": f"{sol}-{batch}-{status}-{lat}"},
            "solution": sol, "evaluation": ev}


def make_dataset(root: Path, sols, traces) -> Path:
    (root / "definitions" / "toy").mkdir(parents=True, exist_ok=True)
    (root / "definitions" / "toy" / "scale_h4.json").write_text(json.dumps(DEF))
    for s in sols:
        s = solution(s, dps=(s == "sol_dps")) if isinstance(s, str) else s
        p = root / "solutions" / "test" / "toy" / "scale_h4" / f"{s['name']}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(s))
    write_traces(root, traces)
    return root


def write_traces(root: Path, traces, name: str = "scale_h4.jsonl") -> None:
    p = root / "traces" / "test" / "toy" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(json.dumps(t) + "\n" for t in traces))


X = {n: (torch.randn(n, 4), torch.randn(4)) for n in (1, 7, 8, 9, 50, 64, 100, 300)}


def call(n: int, d: str = "scale_h4"):
    x, w = X[n] if n in X else (torch.randn(n, 4), torch.randn(4))
    out = dispatch(d, (x, w), lambda: torch.zeros_like(x))
    return float(out.flatten()[0])


@pytest.fixture(autouse=True)
def clean(tmp_path, monkeypatch):
    monkeypatch.setenv("FIB_CACHE_PATH", str(tmp_path / "cache"))
    for var in ("FIB_STRICT", "FIB_ALLOW_DEFINITIONS", "FIB_DENY_DEFINITIONS", "FIB_ALLOW_SOLUTIONS",
                "FIB_DENY_SOLUTIONS", "FIB_HARDWARE", "FIB_BUILTINS", "FIB_ENABLE_APPLY"):
        monkeypatch.delenv(var, raising=False)
    disable()
    metrics.reset()
    metrics.configure(enabled=False)
    yield
    disable()
    metrics.reset()


def on(root, **kw):
    kw.setdefault("hardware", "CPU")
    kw.setdefault("reload_interval", 0)
    kw.setdefault("builtins", "off")
    return enable(root, **kw)


def counts():
    return stats()["dispatch"]


def test_disabled_runs_fallback(tmp_path):
    assert call(8) == 0.0
    assert counts() == {}


def test_hit_exact(tmp_path):
    root = make_dataset(tmp_path / "ds", ["sol_a", "sol_b"],
                        [trace("sol_a", 8, lat=1.0), trace("sol_b", 8, lat=2.0)])
    on(root)
    assert call(8) == 1.0 and call(8) == 1.0
    assert counts()[("scale_h4", "sol_a", "hit")] == 2
    assert "[exact]" in explain("scale_h4", {"batch": 8})


def test_miss_without_traces(tmp_path):
    root = make_dataset(tmp_path / "ds", ["sol_a"], [])
    on(root)
    assert call(8) == 0.0
    assert counts() == {("scale_h4", "none", "fallback_miss"): 1}
    assert call(8, d="no_such_definition_v3") == 0.0
    assert counts()[("no_such_definition_v3", "none", "fallback_miss")] == 1


def test_other_hardware_rows_ignored(tmp_path):
    root = make_dataset(tmp_path / "ds", ["sol_a"], [trace("sol_a", 8, hw="NVIDIA H200")])
    on(root)
    assert call(8) == 0.0
    rt_mod.disable()
    on(root, hardware="H200")
    assert call(8) == 1.0


def test_same_bucket_and_nearest_bucket(tmp_path):
    # sol_a wins at 8 (bucket [8,15]); sol_b wins at 64 (bucket [64,127])
    root = make_dataset(tmp_path / "ds", ["sol_a", "sol_b"],
                        [trace("sol_a", 8, lat=1.0), trace("sol_b", 8, lat=2.0),
                         trace("sol_a", 64, lat=3.0), trace("sol_b", 64, lat=1.0)])
    on(root)
    assert call(9) == 1.0              # same bucket as 8
    assert "[bucket]" in explain("scale_h4", {"batch": 9})
    assert call(50) == 2.0             # bucket [32,63]: nearest is [64,127] (distance 1) -> sol_b
    assert "[nearest]" in explain("scale_h4", {"batch": 50})
    assert call(300) == 2.0            # far above: nearest bucket is [64,127]
    assert call(1) == 1.0              # far below: nearest is [8,15]


def test_failure_in_bucket_taints_solution(tmp_path):
    root = make_dataset(tmp_path / "ds", ["sol_a", "sol_b"],
                        [trace("sol_a", 8, lat=1.0), trace("sol_a", 9, status="INCORRECT_NUMERICAL"),
                         trace("sol_b", 64, lat=5.0)])
    on(root)
    assert call(8) == 1.0    # exact pass still counts
    assert call(9) == 2.0    # failed here: never sol_a; sol_b lent by the nearest bucket
    assert call(12) == 2.0   # unseen, in the tainted bucket: not sol_a


def test_quarantine_on_load_error(tmp_path):
    root = make_dataset(tmp_path / "ds", ["sol_loaderr", "sol_a"],
                        [trace("sol_loaderr", 8, lat=0.5), trace("sol_a", 8, lat=1.0)])
    on(root)
    assert call(8) == 1.0
    s = stats()
    assert s["quarantined"] == {"sol_loaderr": "load_error"}
    assert s["quarantine_events"] == {("scale_h4", "sol_loaderr", "load_error"): 1}
    assert "module_that_does_not_exist_xyz" in s["load_errors"]["sol_loaderr"]


@pytest.mark.parametrize("bad,reason", [("sol_raise", "raised"), ("sol_shape", "bad_output"),
                                        ("sol_dtype", "bad_output"), ("sol_count", "bad_output")])
def test_quarantine_on_raise_and_bad_outputs(tmp_path, bad, reason, caplog):
    root = make_dataset(tmp_path / "ds", [bad, "sol_a"], [trace(bad, 8, lat=0.5), trace("sol_a", 8, lat=1.0)])
    on(root)
    with caplog.at_level("WARNING", logger="fib_runtime.dispatch"):
        assert call(8) == 0.0   # the bad solution ran, got caught, the original ran
        assert call(8) == 1.0   # re-decided without it
        assert call(8) == 1.0
    c = counts()
    assert c[("scale_h4", bad, "fallback_error")] == 1
    assert c[("scale_h4", "sol_a", "hit")] == 2
    assert stats()["quarantine_events"] == {("scale_h4", bad, reason): 1}
    assert sum("quarantined" in r.message for r in caplog.records) == 1  # logged once


def test_quarantine_without_other_candidate_counts_quarantined(tmp_path):
    root = make_dataset(tmp_path / "ds", ["sol_raise"], [trace("sol_raise", 8)])
    on(root)
    assert call(8) == 0.0 and call(8) == 0.0
    c = counts()
    assert c[("scale_h4", "sol_raise", "fallback_error")] == 1
    assert c[("scale_h4", "none", "quarantined")] == 1


def test_strict_mode_reraises(tmp_path, monkeypatch):
    root = make_dataset(tmp_path / "ds", ["sol_raise", "sol_shape"],
                        [trace("sol_raise", 8), trace("sol_shape", 64)])
    on(root, strict=True)
    with pytest.raises(SolutionError, match="kernel exploded"):
        call(8)
    with pytest.raises(SolutionError, match="bad_output"):
        call(64)
    disable()
    monkeypatch.setenv("FIB_STRICT", "1")
    on(root)  # from the environment
    with pytest.raises(SolutionError):
        call(64)


def test_strict_mode_load_error_raises_at_enable(tmp_path):
    root = make_dataset(tmp_path / "ds", ["sol_loaderr"], [trace("sol_loaderr", 8)])
    with pytest.raises(SolutionError, match="module_that_does_not_exist_xyz"):
        on(root, strict=True)


def test_allow_deny_solutions_and_definitions(tmp_path, monkeypatch):
    root = make_dataset(tmp_path / "ds", ["sol_a", "sol_b"],
                        [trace("sol_a", 8, lat=1.0), trace("sol_b", 8, lat=2.0)])
    on(root, deny_solutions=["sol_a"])
    assert call(8) == 2.0
    disable()
    on(root, allow_solutions=["sol_b*"])
    assert call(8) == 2.0
    disable()
    monkeypatch.setenv("FIB_DENY_DEFINITIONS", "scale_*")
    on(root)
    assert call(8) == 0.0
    assert "denied" in explain("scale_h4", {"batch": 8})
    disable()
    monkeypatch.delenv("FIB_DENY_DEFINITIONS")
    monkeypatch.setenv("FIB_ALLOW_DEFINITIONS", "other_*")
    on(root)
    assert call(8) == 0.0
    disable()
    monkeypatch.setenv("FIB_ALLOW_DEFINITIONS", "scale_h4")
    monkeypatch.setenv("FIB_DENY_SOLUTIONS", "sol_b")
    on(root)
    assert call(8) == 1.0


def test_input_mismatch_falls_back(tmp_path):
    root = make_dataset(tmp_path / "ds", ["sol_a"], [trace("sol_a", 8)])
    on(root)
    x = torch.randn(8, 4, dtype=torch.float64)
    assert float(dispatch("scale_h4", (x, torch.randn(4)), lambda: torch.zeros(1))[0]) == 0.0
    x = torch.randn(8, 5)  # const axis h=4 violated
    assert float(dispatch("scale_h4", (x, torch.randn(5)), lambda: torch.zeros(1))[0]) == 0.0
    assert float(dispatch("scale_h4", (None,), lambda: torch.zeros(1))[0]) == 0.0
    assert counts()[("scale_h4", "none", "fallback_mismatch")] == 3
    assert call(8) == 1.0


def test_dps_solution(tmp_path):
    root = make_dataset(tmp_path / "ds", ["sol_dps"], [trace("sol_dps", 8)])
    on(root)
    x, w = X[8]
    out = dispatch("scale_h4", (x, w), lambda: None)
    assert out.shape == (8, 4) and out.dtype == torch.float32 and float(out[0, 0]) == 5.0


def test_capture_only_uses_known_decisions(tmp_path, monkeypatch):
    root = make_dataset(tmp_path / "ds", ["sol_a"], [trace("sol_a", 8), trace("sol_a", 9)])
    on(root)
    assert call(8) == 1.0
    monkeypatch.setattr(rt_mod, "_capturing", lambda: True)
    assert call(8) == 1.0       # decided before capture: used
    assert call(9) == 0.0       # new during capture: original
    assert counts()[("scale_h4", "none", "fallback_capture")] == 1
    monkeypatch.setattr(rt_mod, "_capturing", lambda: False)
    assert call(9) == 1.0       # decided after capture


def test_capture_check_is_false_without_cuda():
    assert rt_mod._capturing() is False


def test_apply_decorator_and_call(tmp_path):
    root = make_dataset(tmp_path / "ds", ["sol_a"], [trace("sol_a", 8)])

    @apply(lambda x, w: f"scale_h{x.shape[1]}")
    def scale(x, w):
        return torch.zeros_like(x)

    @apply("scale_h4")
    def scale_kw(x, w=None):
        return torch.zeros_like(x)

    x, w = X[8]
    assert float(scale(x, w)[0, 0]) == 0.0  # not enabled yet
    on(root)
    assert float(scale(x, w)[0, 0]) == 1.0
    assert float(scale(x, w=w)[0, 0]) == 1.0
    assert float(scale_kw(w=w, x=x)[0, 0]) == 1.0
    assert float(apply("scale_h4", args=(x,), kwargs={"w": w}, fallback=lambda x, w: x)[0, 0]) == 1.0
    disable()
    on(root, deny_solutions=["*"])  # a miss: the reference runs when no fallback is given
    assert torch.equal(apply("scale_h4", args=(x, w)), x * w)


def test_register_definition_and_builtin(tmp_path, monkeypatch):
    mod = types.ModuleType("fib_runtime.kernels.builtin_table")

    class BuiltinKernel:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    impl = types.ModuleType("fib_test_builtin_impl")
    impl.fill7 = lambda x, w: torch.full_like(x, 7.0)
    monkeypatch.setitem(sys.modules, "fib_test_builtin_impl", impl)
    mod.BUILTINS = [BuiltinKernel(definition_prefix="scale_h", callable_path="fib_test_builtin_impl:fill7",
                                  op_type="toy", description="test built-in",
                                  supports=lambda inputs: inputs[0].shape[0] < 100)]
    monkeypatch.setitem(sys.modules, "fib_runtime.kernels.builtin_table", mod)
    import fib_runtime.kernels

    monkeypatch.setattr(fib_runtime.kernels, "builtin_table", mod, raising=False)
    root = make_dataset(tmp_path / "ds", ["sol_a"], [trace("sol_a", 8)])
    on(root, builtins="default")
    assert call(8) == 1.0    # traced winner first
    assert call(50) == 1.0   # nearest bucket of sol_a beats the built-in default
    other = dict(DEF, name="scale_h8")
    other["axes"] = {"batch": {"type": "var"}, "h": {"type": "const", "value": 8}}
    register_definition(other)
    x = torch.randn(3, 8)
    assert float(dispatch("scale_h8", (x, torch.randn(8)), lambda: torch.zeros(1))[0, 0]) == 7.0
    x = torch.randn(200, 8)   # supports() says no
    assert float(dispatch("scale_h8", (x, torch.randn(8)), lambda: torch.zeros(1))[0]) == 0.0
    c = counts()
    assert c[("scale_h8", "fib-runtime_fill7_scale_h8", "hit")] == 1
    assert "[builtin]" in explain("scale_h8", {"batch": 3})
    from fib_runtime.solutions import builtin

    sol = builtin.to_solution(mod.BUILTINS[0], "scale_h8")
    assert sol.author == "fib-runtime" and sol.spec.language == "python"
    assert sol.spec.destination_passing_style is False
    assert sol.sources[0].content == "from fib_test_builtin_impl import fill7 as run\n"


def test_reload_swaps_winner_while_calls_run(tmp_path):
    root = make_dataset(tmp_path / "ds", ["sol_a", "sol_b"], [trace("sol_a", 8, lat=1.0)])
    on(root)
    assert call(8) == 1.0
    seen, errors, stop = [], [], threading.Event()

    def worker():
        x, w = X[8]
        while not stop.is_set():
            try:
                seen.append(float(dispatch("scale_h4", (x, w), lambda: torch.zeros_like(x))[0, 0]))
            except Exception as e:  # pragma: no cover - the assertion below reports it
                errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    try:
        deadline = time.time() + 5  # the worker has dispatched before the swap (a loaded host)
        while time.time() < deadline and len(seen) < 3:
            time.sleep(0.01)
        write_traces(root, [trace("sol_a", 8, lat=1.0), trace("sol_b", 8, lat=0.1)])
        assert reload() is True
        deadline = time.time() + 5
        while time.time() < deadline and (not seen or seen[-1] != 2.0):
            time.sleep(0.01)
    finally:
        stop.set()
        t.join()
    assert not errors
    assert seen[0] == 1.0 and seen[-1] == 2.0
    assert set(seen) <= {1.0, 2.0}           # never the fallback, never a mix
    first_b = seen.index(2.0)
    assert all(v == 2.0 for v in seen[first_b:])
    s = stats()
    assert s["generation"] == 2 and s["reloads"] == {"swapped": 1}


def test_reload_redecides_known_keys_without_slow_path(tmp_path, monkeypatch):
    root = make_dataset(tmp_path / "ds", ["sol_a", "sol_b"], [trace("sol_a", 8, lat=1.0)])
    on(root)
    assert call(8) == 1.0
    write_traces(root, [trace("sol_a", 8, lat=1.0), trace("sol_b", 8, lat=0.1)])
    assert reload() is True

    def no_slow(*a):
        raise AssertionError("slow path taken after reload")

    monkeypatch.setattr(rt_mod.Runtime, "_decide", no_slow)
    monkeypatch.setattr(rt_mod, "_capturing", lambda: True)  # as if a CUDA graph were being captured
    assert call(8) == 2.0
    assert counts()[("scale_h4", "sol_b", "hit")] == 1


def test_poller_picks_up_new_traces(tmp_path):
    root = make_dataset(tmp_path / "ds", ["sol_a", "sol_b"], [trace("sol_a", 8, lat=1.0)])
    on(root, reload_interval=0.05)
    assert call(8) == 1.0
    write_traces(root, [trace("sol_b", 8, lat=0.1)], name="more.jsonl")
    deadline = time.time() + 5
    while time.time() < deadline and call(8) != 2.0:
        time.sleep(0.02)
    assert call(8) == 2.0
    assert stats()["reloads"].get("swapped", 0) >= 1


def test_env_enable_at_first_call(tmp_path, monkeypatch):
    root = make_dataset(tmp_path / "ds", ["sol_a"], [trace("sol_a", 8)])
    monkeypatch.setenv("FIB_ENABLE_APPLY", "1")
    monkeypatch.setenv("FIB_DATASET_PATH", str(root))
    monkeypatch.setenv("FIB_HARDWARE", "CPU")
    monkeypatch.setenv("FIB_RELOAD_INTERVAL", "0")
    monkeypatch.setattr(rt_mod, "_ENV_DONE", False)
    assert call(8) == 1.0
    assert rt_mod.active() is not None


def test_enable_from_env_is_idempotent(tmp_path, monkeypatch):
    from fib_runtime.dispatch import enable_from_env

    root = make_dataset(tmp_path / "ds", ["sol_a"], [trace("sol_a", 8)])
    assert enable_from_env() is None  # FIB_ENABLE_APPLY unset
    monkeypatch.setenv("FIB_ENABLE_APPLY", "1")
    monkeypatch.setenv("FIB_DATASET_PATH", str(root))
    monkeypatch.setenv("FIB_HARDWARE", "CPU")
    monkeypatch.setenv("FIB_RELOAD_INTERVAL", "0")
    rt = enable_from_env()
    assert rt is not None and enable_from_env() is rt
    assert call(8) == 1.0


def test_register_definition_dict_twice_is_cheap(tmp_path, monkeypatch):
    other = dict(DEF, name="scale_h8")
    other["axes"] = {"batch": {"type": "var"}, "h": {"type": "const", "value": 8}}
    register_definition(other)
    from fib_runtime.schema import Definition

    monkeypatch.setattr(Definition, "model_validate", classmethod(lambda cls, *a, **k: 1 / 0))
    register_definition(dict(other))  # same content: not validated again


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_fork_child_dispatches_and_restarts_poller(tmp_path):
    import multiprocessing as mp

    root = make_dataset(tmp_path / "ds", ["sol_a"], [trace("sol_a", 8)])
    on(root, reload_interval=0.05)
    assert call(8) == 1.0
    ctx = mp.get_context("fork")
    q = ctx.Queue()

    def child():
        try:
            names = [t.name for t in threading.enumerate()]
            got = call(8)
            before = metrics.counter("fib_dispatch_total", "scale_h4", "sol_a", "hit")
            q.put((got, "fib-runtime-poller" in names, before.value - before.flushed))
        except Exception as e:  # pragma: no cover
            q.put(repr(e))

    p = ctx.Process(target=child)
    p.start()
    got = q.get(timeout=30)
    p.join(timeout=30)
    assert got[0] == 1.0 and got[1] is True
    assert got[2] == 1   # the child counts only its own calls (the parent's are not re-flushed)


def test_hardware_classes_and_detection_without_cuda_init(monkeypatch):
    from fib_runtime.dispatch import hardware as hw

    assert hw.normalize_hardware("NVIDIA H200") == "H200"
    assert hw.normalize_hardware("NVIDIA H200 NVL") == "H200"
    assert hw.normalize_hardware("NVIDIA A800-SXM4-80GB") == "A800"
    assert hw.normalize_hardware("NVIDIA H100 80GB HBM3") == "H100"
    assert hw.normalize_hardware("NVIDIA GeForce RTX 4090") == "RTX4090"
    assert hw.normalize_hardware(None) == "CPU" and hw.normalize_hardware("cpu") == "CPU"
    monkeypatch.setattr(hw, "_nvml_name", lambda: "NVIDIA H200")
    assert hw.detect_hardware() == "H200"
    monkeypatch.setattr(hw, "_nvml_name", lambda: None)
    monkeypatch.setattr(hw, "_proc_name", lambda: "NVIDIA B200")
    assert hw.detect_hardware() == "B200"
    monkeypatch.setattr(hw, "_proc_name", lambda: None)
    assert hw.detect_hardware() == "CPU"
    assert not torch.cuda.is_initialized()


def test_registered_definition_gets_its_traces(tmp_path):
    """Traces of a definition the dataset has no file for are used once it is registered."""
    root = make_dataset(tmp_path / "ds", ["sol_a"], [trace("sol_a", 8)])
    other = dict(DEF, name="scale_h16")
    other["axes"] = {"batch": {"type": "var"}, "h": {"type": "const", "value": 16}}
    s8 = dict(solution("sol_a"), name="sol_a16", definition="scale_h16")
    p = root / "solutions" / "test" / "toy" / "scale_h16" / "sol_a16.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(s8))
    t8 = dict(trace("sol_a16", 3), definition="scale_h16")
    t8["workload"] = dict(t8["workload"], axes={"batch": 3})
    write_traces(root, [t8], name="scale_h16.jsonl")
    on(root, reload_interval=0)
    x, w = torch.randn(3, 16), torch.randn(16)
    assert float(dispatch("scale_h16", (x, w), lambda: torch.zeros(3, 16))[0, 0]) == 0.0  # not known yet: the original
    register_definition(other)  # e.g. generated by an adapter for an unusual size
    deadline = time.time() + 10
    while time.time() < deadline and float(dispatch("scale_h16", (x, w), lambda: torch.zeros(3, 16))[0, 0]) != 1.0:
        time.sleep(0.02)
    assert float(dispatch("scale_h16", (x, w), lambda: torch.zeros(3, 16))[0, 0]) == 1.0


def test_baseline_winner_runs_the_original(tmp_path):
    """A trace winner by author ``baseline`` (the FlashInfer API itself) means: keep the original,
    even where a slower solution of ours passed; elsewhere ours still wins."""
    base = dict(solution("sol_loaderr"), name="flashinfer_baseline_scale_h4", author="baseline")  # never loaded
    root = make_dataset(tmp_path / "ds", ["sol_a", base],
                        [trace("sol_a", 8, lat=2.0), trace("flashinfer_baseline_scale_h4", 8, lat=1.0),
                         trace("sol_a", 64, lat=1.0), trace("flashinfer_baseline_scale_h4", 64, lat=2.0)])
    on(root)
    assert call(8) == 0.0                       # the fallback (original) ran, not sol_a
    assert call(64) == 1.0                      # ours is faster here
    c = counts()
    assert c[("scale_h4", "none", "original_best")] == 1
    assert c[("scale_h4", "sol_a", "hit")] == 1
    assert "baseline" in explain("scale_h4", {"batch": 8})
