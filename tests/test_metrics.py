"""fib_runtime.metrics asserted through real Prometheus registries: single process (injected
registry) and multiprocess mode (two worker processes writing mmap files, one aggregating
MultiProcessCollector), plus the laziness contract (no prometheus_client at import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from prometheus_client import CollectorRegistry

from fib_runtime import metrics
from fib_runtime.dispatch import disable, dispatch, enable

REPO = Path(__file__).resolve().parents[1]

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
    for name, body in (("sol_a", "def run(x, w):\n    return x * w\n"),
                       ("sol_bad", "def run(x, w):\n    raise ValueError('no')\n")):
        s = {"name": name, "definition": "scale_h4", "author": "test",
             "spec": {"language": "python", "target_hardware": ["CPU"], "entry_point": "m.py::run",
                      "dependencies": [], "destination_passing_style": False},
             "sources": [{"path": "m.py", "content": body}]}
        p = root / "solutions" / "test" / "toy" / "scale_h4" / f"{name}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(s))
    rows = []
    for sol, batch in (("sol_a", 8), ("sol_bad", 64)):
        rows.append({"definition": "scale_h4", "solution": sol,
                     "workload": {"axes": {"batch": batch}, "uuid": f"{sol}{batch}",
                                  "inputs": {"x": {"type": "random"}, "w": {"type": "random"}}},
                     "evaluation": {"status": "PASSED", "environment": {"hardware": "cpu", "libs": {}},
                                    "timestamp": "2026-12-01T00:00:00", "log": "",
                                    "correctness": {"max_relative_error": 0, "max_absolute_error": 0},
                                    "performance": {"latency_ms": 1, "reference_latency_ms": 1,
                                                    "speedup_factor": 1}}})
    p = root / "traces" / "test" / "toy" / "scale_h4.jsonl"
    p.parent.mkdir(parents=True)
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.fixture
def clean(tmp_path, monkeypatch):
    monkeypatch.setenv("FIB_CACHE_PATH", str(tmp_path / "cache"))
    monkeypatch.delenv("FIB_STRICT", raising=False)
    disable()
    metrics.reset()
    yield
    disable()
    metrics.reset()


def run_calls():
    x8, x64, w = torch.randn(8, 4), torch.randn(64, 4), torch.randn(4)
    for _ in range(3):
        dispatch("scale_h4", (x8, w), lambda: x8)       # hit sol_a
    dispatch("scale_h4", (x64, w), lambda: x64)         # sol_bad raises -> fallback_error
    dispatch("scale_h4", (x64, w), lambda: x64)         # quarantined, nothing else -> quarantined
    dispatch("scale_h4", (torch.randn(3, 5), w), lambda: None)  # mismatch
    dispatch("unknown_def_x", (x8,), lambda: None)      # miss


def test_single_process_registry(tmp_path, clean):
    reg = CollectorRegistry()
    metrics.configure(registry=reg)
    enable(make_dataset(tmp_path / "ds"), hardware="CPU", reload_interval=0, builtins="off",
           max_distance=1)  # sol_a (bucket of 8) must not be lent to batch 64
    run_calls()
    metrics.inc_trace_records("scale_h4", 2)
    metrics.inc_trace_dropped("rate")
    metrics.inc_trace_bytes(4096)
    assert metrics.flush() is True
    g = reg.get_sample_value
    assert g("fib_dispatch_total", {"definition": "scale_h4", "solution": "sol_a", "outcome": "hit"}) == 3
    assert g("fib_dispatch_total", {"definition": "scale_h4", "solution": "sol_bad",
                                    "outcome": "fallback_error"}) == 1
    assert g("fib_dispatch_total", {"definition": "scale_h4", "solution": "none", "outcome": "quarantined"}) == 1
    assert g("fib_dispatch_total", {"definition": "scale_h4", "solution": "none",
                                    "outcome": "fallback_mismatch"}) == 1
    assert g("fib_dispatch_total", {"definition": "unknown_def_x", "solution": "none",
                                    "outcome": "fallback_miss"}) == 1
    assert g("fib_quarantine_total", {"definition": "scale_h4", "solution": "sol_bad", "reason": "raised"}) == 1
    assert g("fib_solutions_loaded", {"language": "python"}) == 1   # sol_bad dropped when quarantined
    assert g("fib_solution_build_seconds_count", {"language": "python"}) == 2
    assert g("fib_table_generation") == 1
    assert g("fib_trace_records_total", {"definition": "scale_h4"}) == 2
    assert g("fib_trace_dropped_total", {"reason": "rate"}) == 1
    assert g("fib_trace_bytes_total") == 4096
    # deltas only: a second flush adds nothing, new calls add exactly themselves
    metrics.flush()
    x8 = torch.randn(8, 4)
    dispatch("scale_h4", (x8, torch.randn(4)), lambda: x8)
    metrics.flush()
    assert g("fib_dispatch_total", {"definition": "scale_h4", "solution": "sol_a", "outcome": "hit"}) == 4
    # the in-process snapshot agrees, without a flush
    assert metrics.stats()["fib_dispatch_total"][("scale_h4", "sol_a", "hit")] == 4


def test_reload_counted(tmp_path, clean):
    reg = CollectorRegistry()
    metrics.configure(registry=reg)
    rt = enable(make_dataset(tmp_path / "ds"), hardware="CPU", reload_interval=0, builtins="off")
    rt.reload()
    metrics.flush()
    assert reg.get_sample_value("fib_table_reloads_total", {"result": "swapped"}) == 1
    assert reg.get_sample_value("fib_table_generation") == 2


def test_declared_once_with_fixed_labels(clean):
    with pytest.raises(ValueError):
        metrics.counter("fib_dispatch_total", "only-one-label")
    with pytest.raises(ValueError):
        metrics.counter("fib_not_declared_total")
    assert all(n.startswith("fib_") for n in metrics.SPECS)


WORKER = textwrap.dedent("""
    import sys, torch
    from fib_runtime import metrics
    from fib_runtime.dispatch import enable, dispatch
    enable(sys.argv[1], hardware="CPU", reload_interval=0, builtins="off")
    x, w = torch.randn(8, 4), torch.randn(4)
    n = int(sys.argv[2])
    for _ in range(n):
        dispatch("scale_h4", (x, w), lambda: x)
    metrics.inc_trace_bytes(100)
    assert metrics.flush()
    print("prometheus_client" in sys.modules)
""")


def test_multiprocess_mode(tmp_path, clean):
    ds = make_dataset(tmp_path / "ds")
    mp = tmp_path / "prom"
    mp.mkdir()
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(mp), FIB_CACHE_PATH=str(tmp_path / "cache"),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for n in (5, 7):  # two processes, as two engine workers would be
        out = subprocess.run([sys.executable, "-c", WORKER, str(ds), str(n)], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "True"
    assert list(mp.glob("counter_*.db")) and list(mp.glob("gauge_livemax_*.db"))
    from prometheus_client import multiprocess

    reg = CollectorRegistry()
    multiprocess.MultiProcessCollector(reg, path=str(mp))
    g = reg.get_sample_value
    assert g("fib_dispatch_total", {"definition": "scale_h4", "solution": "sol_a", "outcome": "hit"}) == 12
    assert g("fib_trace_bytes_total") == 200
    assert g("fib_table_generation") == 1
    assert g("fib_solutions_loaded", {"language": "python"}) == 2


def test_import_is_lazy():
    code = ("import sys, fib_runtime, fib_runtime.metrics, fib_runtime.dispatch, fib_runtime.envs\n"
            "print(sorted(m for m in ('torch', 'prometheus_client', 'pydantic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr
    assert "torch" not in out.stdout and "prometheus_client" not in out.stdout
