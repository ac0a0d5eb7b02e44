"""fib bench on the CPU: statuses of the solution zoo, isolation (timeout, crash), resume, CLI.

The zoo (``fib_runtime.bench.zoo``) wraps the definition's reference and breaks it one way each:
the runner must give exactly the expected status, in spawned workers, with a 2 s timeout.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fib_runtime.bench import BenchConfig, run_bench
from fib_runtime.bench.zoo import zoo
from fib_runtime.store import Dataset

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "flashinfer-trace"
if not FIXTURES.is_dir():  # CI lays shared/ beside the clone
    FIXTURES = Path("/work/shared/fixtures/flashinfer-trace")

FAST = dict(timeout_s=2.0, warmup=1, iterations=2, trials=1, prepare_timeout_s=120.0, cpu_threads=1)


def fixture_dataset(tmp: Path, n_workloads: int = 1) -> Dataset:
    if not FIXTURES.is_dir():
        pytest.skip("fixture dataset not available")
    root = tmp / "ds"
    shutil.copytree(FIXTURES, root)
    wl = root / "workloads" / "rmsnorm" / "rmsnorm_h4096.jsonl"
    wl.write_text("\n".join(wl.read_text().splitlines()[:n_workloads]) + "\n")
    return Dataset.open(root)


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory):
    """One run of the whole zoo on one rmsnorm_h4096 (bf16) workload, two CPU workers."""
    ds = fixture_dataset(tmp_path_factory.mktemp("zoo"))
    d = ds.definitions["rmsnorm_h4096"]
    z = zoo(d)
    for s, _ in z.values():
        ds.add_solution(s)
    summary = run_bench(ds, definitions=["rmsnorm_h4096"], authors=["zoo"], devices="cpu:0,cpu:1",
                        cfg=BenchConfig(**FAST), progress=False)
    return ds, z, summary


def test_zoo_statuses_exact(zoo_run):
    ds, z, summary = zoo_run
    want = {s.name: status for s, status in z.values()}
    got = {t.solution: t.evaluation.status.value for t in summary.traces}
    assert got == want
    # all seven statuses of the format occur
    assert set(got.values()) == {"PASSED", "INCORRECT_NUMERICAL", "INCORRECT_SHAPE", "INCORRECT_DTYPE",
                                 "RUNTIME_ERROR", "COMPILE_ERROR", "TIMEOUT"}
    assert summary.respawns >= 2  # the hang and the crash each cost a worker


def test_traces_written_valid_and_logged(zoo_run):
    ds, z, summary = zoo_run
    path = ds.root / "traces" / "zoo" / "rmsnorm" / "rmsnorm_h4096.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) == len(z)
    fresh = Dataset.open(ds.root, strict=False)
    by_sol = {t.solution: t.evaluation for t in fresh.traces_for("rmsnorm_h4096") if t.solution.startswith("zoo_")}
    assert len(by_sol) == len(z)
    ok = by_sol[z["correct"][0].name]
    assert ok.performance.latency_ms > 0 and ok.performance.reference_latency_ms > 0
    assert ok.performance.speedup_factor == pytest.approx(
        ok.performance.reference_latency_ms / ok.performance.latency_ms)
    assert ok.correctness.max_absolute_error == 0.0
    assert ok.environment.libs["device"] in ("cpu:0", "cpu:1")
    assert ok.environment.hardware.startswith("CPU") and "torch" in ok.environment.libs
    assert "deliberate failure" in by_sol[z["raises"][0].name].log
    assert "exit code 7" in by_sol[z["crashes"][0].name].log
    assert "killed after 2 s" in by_sol[z["hangs"][0].name].log
    assert "SyntaxError" in by_sol[z["syntax"][0].name].log
    wrong = by_sol[z["wrong"][0].name]
    assert wrong.correctness is not None and wrong.performance is None and wrong.correctness.max_absolute_error > 0.1
    assert by_sol[z["mutates_input"][0].name].correctness.extra["reason"] == "input_mutated"
    assert by_sol[z["dps_overflow"][0].name].correctness.extra["reason"] == "out_of_bounds_write"
    assert "(7,)" not in by_sol[z["wrong_shape"][0].name].log or "shape" in by_sol[z["wrong_shape"][0].name].log


def test_resume_skips_done_work(zoo_run, tmp_path):
    ds, z, summary = zoo_run
    path = ds.root / "traces" / "zoo" / "rmsnorm" / "rmsnorm_h4096.jsonl"
    before = path.read_text()
    again = run_bench(Dataset.open(ds.root), definitions=["rmsnorm_h4096"], authors=["zoo"],
                      devices="cpu:0,cpu:1", cfg=BenchConfig(**FAST), progress=False)
    assert again.planned == 0 and again.evaluated == 0 and again.already_done == len(z)
    assert path.read_text() == before
    # a new solution: only it runs
    ds2 = Dataset.open(ds.root)
    extra = zoo(ds2.definitions["rmsnorm_h4096"], include=["correct"])["correct"][0]
    extra = extra.model_copy(update={"name": "zoo_correct_again"})
    ds2.add_solution(extra)
    third = run_bench(ds2, definitions=["rmsnorm_h4096"], authors=["zoo"], cfg=BenchConfig(**FAST),
                      inline=True, progress=False)
    assert third.planned == 1 and third.already_done == len(z)
    assert [t.solution for t in third.traces] == ["zoo_correct_again"]
    assert third.traces[0].evaluation.status.value == "PASSED"


def test_cli_bench_json(tmp_path):
    from fib_runtime.cli.main import main

    ds = fixture_dataset(tmp_path)
    for s, _ in zoo(ds.definitions["rmsnorm_h4096"], include=["correct", "wrong_dtype"]).values():
        ds.add_solution(s)
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["bench", str(ds.root), "--definitions", "rmsnorm_*", "--authors", "zoo", "--inline",
                   "--devices", "cpu:0", "--warmup", "1", "--iterations", "2", "--trials", "1", "--json"])
    assert rc == 0
    out = json.loads(buf.getvalue())
    assert out["counts"] == {"PASSED": 1, "INCORRECT_DTYPE": 1}
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["bench", str(ds.root), "--authors", "zoo", "--inline", "--dry-run", "--json"]) == 0


def test_tolerances_per_definition():
    from fib_runtime.bench.config import BenchConfig, parse_tolerance_args
    from fib_runtime.schema import Definition
    from fib_runtime.definitions import norm

    raw = norm.definition("rmsnorm", 128)
    d = Definition.model_validate(raw)
    cfg = BenchConfig()
    assert cfg.tolerance_for(d, "bfloat16").atol == 1e-2
    assert cfg.tolerance_for(d, "int64").atol == 0.0
    raw2 = dict(raw, tags=raw["tags"] + ["tol:atol=0.5"], tolerance={"bfloat16": {"rtol": 0.25}})
    d2 = Definition.model_validate(raw2)
    t = cfg.tolerance_for(d2, "bfloat16")
    assert (t.atol, t.rtol) == (0.5, 0.25)
    cfg3 = BenchConfig(tolerances=parse_tolerance_args(["rmsnorm_*:atol=0.75,mismatch=0.01"]))
    t3 = cfg3.tolerance_for(d2, "bfloat16")
    assert (t3.atol, t3.rtol, t3.mismatch) == (0.75, 0.25, 0.01)
    with pytest.raises(ValueError):
        parse_tolerance_args(["x:foo=1"])


def test_scalar_inputs_and_input_guard(tmp_path):
    """A definition with a Python-scalar input (shape null), as the cascade run's sm_scale."""
    import uuid

    from fib_runtime.schema import Definition, Trace

    ds = Dataset.open(tmp_path / "ds", create=True)
    d = Definition.model_validate({
        "name": "scale_h8", "op_type": "toy", "axes": {"n": {"type": "var"}, "h": {"type": "const", "value": 8}},
        "inputs": {"x": {"shape": ["n", "h"], "dtype": "float32"}, "alpha": {"shape": None, "dtype": "float32"}},
        "outputs": {"y": {"shape": ["n", "h"], "dtype": "float32"}},
        "reference": "def run(x, alpha):\n    return x * alpha\n"})
    ds.add_definition(d)
    ds.add_workloads([Trace.model_validate({"definition": d.name, "workload": {
        "uuid": str(uuid.uuid4()), "axes": {"n": 5},
        "inputs": {"x": {"type": "random"}, "alpha": {"type": "scalar", "value": 0.5}}}})])
    z = zoo(d, include=["correct", "mutates_input", "dps_correct", "dps_overflow", "wrong"])
    for s, _ in z.values():
        ds.add_solution(s)
    summary = run_bench(ds, cfg=BenchConfig(**FAST), inline=True, progress=False)
    assert {t.solution: t.evaluation.status.value for t in summary.traces} == {s.name: st for s, st in z.values()}


def test_wall_clock_limit_then_resume(tmp_path):
    ds = fixture_dataset(tmp_path, n_workloads=2)
    for s, _ in zoo(ds.definitions["rmsnorm_h4096"], include=["correct", "wrong"]).values():
        ds.add_solution(s)
    first = run_bench(ds, definitions=["rmsnorm_h4096"], authors=["zoo"], cfg=BenchConfig(**FAST), inline=True,
                      progress=False, max_wall_s=1e-9)
    assert first.evaluated == 0 and first.not_started == 4 and "wall-clock limit" in first.skipped[0]
    second = run_bench(Dataset.open(ds.root), definitions=["rmsnorm_h4096"], authors=["zoo"], cfg=BenchConfig(**FAST),
                       inline=True, progress=False)
    assert second.evaluated == 4 and second.not_started == 0


def test_max_workloads_spreads_over_signatures(tmp_path):
    from fib_runtime.bench.runner import plan

    ds = fixture_dataset(tmp_path, n_workloads=14)
    ds.add_solution(zoo(ds.definitions["rmsnorm_h4096"], include=["correct"])["correct"][0])
    tasks, _ = plan(ds, ["rmsnorm_h4096"], authors=["zoo"], max_workloads=3)
    sizes = [t.workload.workload.axes["batch_size"] for t in tasks]
    assert sizes == [1, 64, 14509]          # smallest, middle, largest of the 14 fixture batch sizes
