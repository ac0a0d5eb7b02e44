"""``fib trace summary``: counts, var-axis histograms, signatures with no PASSED trace."""

from __future__ import annotations

import json

import pytest
import torch

import fib_runtime.tracer as tracer
from fib_runtime.cli.main import main
from fib_runtime.cli.trace_cmd import histogram
from fib_runtime.definitions import norm
from fib_runtime.schema import Trace
from fib_runtime.store import Dataset
from fib_runtime.tracer import Policy


@pytest.fixture
def traced_root(tmp_path):
    root = tmp_path / "trace"
    d = norm.definition("rmsnorm", 64)
    tracer.enable(root, ranks="all", rate_limit=None,
                  default_policy=Policy(keep_per_bucket=None, max_workloads=None))
    try:
        for b in (1, 2, 2, 3, 8, 8, 8):
            tracer.record(d, (torch.randn(b, 64, dtype=torch.bfloat16), torch.randn(64, dtype=torch.bfloat16)))
        assert tracer.flush(5)
    finally:
        tracer.disable()
    return root, d["name"]


def _add_passed(root, name, batch):
    ds = Dataset.open(root)
    wl = next(t for t in ds.workloads_for(name) if t.workload.axes["batch_size"] == batch)
    ev = {"status": "PASSED", "environment": {"hardware": "CPU", "libs": {}}, "timestamp": "2026-01-01T00:00:00",
          "correctness": {"max_relative_error": 0.0, "max_absolute_error": 0.0},
          "performance": {"latency_ms": 0.01, "reference_latency_ms": 0.02, "speedup_factor": 2.0}}
    t = Trace.model_validate({"definition": name, "workload": wl.workload.to_dict(),
                              "solution": "some_solution", "evaluation": ev})
    ds.add_trace(t, author="tester")


def test_summary_text(traced_root, capsys):
    root, name = traced_root
    _add_passed(root, name, 2)
    assert main(["trace", "summary", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"{name}  (rmsnorm): 4 workloads, 4 signatures, 1 with a PASSED trace" in out
    assert "batch_size:" in out and "█" in out
    section = out.split("no evaluated solution yet (3):")[1]
    assert "batch_size=1" in section and "batch_size=3" in section and "batch_size=8" in section
    assert "batch_size=2" not in section


def test_summary_json(traced_root, capsys):
    root, name = traced_root
    assert main(["trace", "summary", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (s,) = doc["definitions"]
    assert s["definition"] == name and s["workloads"] == 4
    assert s["axes"]["batch_size"] == {"1": 1, "2": 1, "3": 1, "8": 1}
    assert [u["batch_size"] for u in s["unevaluated"]] == [1, 2, 3, 8]
    assert doc["problems"] == []


def test_summary_missing_path(tmp_path, capsys):
    assert main(["trace", "summary", str(tmp_path / "nope")]) == 1
    assert "fib: error:" in capsys.readouterr().err


def test_histogram_buckets_many_values():
    rows = histogram({v: 1 for v in range(1, 100)})
    labels = [r.split()[0] for r in rows]
    assert labels == ["1", "2-3", "4-7", "8-15", "16-31", "32-63", "64-127"]
    assert rows[-1].split()[1] == "36"


def test_fib_bench_replays_traced_workloads(traced_root, capsys):
    """The end-to-end loop: trace -> ``fib bench`` replays the workloads (the reference as the
    solution, on the CPU) -> ``fib trace summary`` shows every signature evaluated."""
    root, name = traced_root
    rc = main(["bench", str(root), "--reference", "--devices", "cpu", "--inline", "--warmup", "1",
               "--iterations", "2", "--trials", "1", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert main(["trace", "summary", str(root), "--json"]) == 0
    (s,) = json.loads(capsys.readouterr().out)["definitions"]
    assert s["definition"] == name and s["evaluated_signatures"] == 4 and s["unevaluated"] == []
