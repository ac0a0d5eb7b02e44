"""Issue 9, CPU part: two (faked) devices split the work, each evaluation records its worker's
device, and the statuses equal those of a one-worker run."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from fib_runtime.bench import BenchConfig, parse_devices, run_bench
from fib_runtime.bench.zoo import zoo
from fib_runtime.store import Dataset

FIXTURES = Path("/work/shared/fixtures/flashinfer-trace")
for _p in Path(__file__).resolve().parents:
    if (_p / "shared" / "fixtures" / "flashinfer-trace").is_dir():
        FIXTURES = _p / "shared" / "fixtures" / "flashinfer-trace"
        break

CFG = dict(timeout_s=5.0, warmup=1, iterations=2, trials=1, cpu_threads=1)
KINDS = ["correct", "wrong", "raises", "wrong_dtype", "dps_correct"]


def _dataset(tmp: Path, name: str) -> Dataset:
    if not FIXTURES.is_dir():
        pytest.skip("fixture dataset not available")
    root = tmp / name
    shutil.copytree(FIXTURES, root)
    wl = root / "workloads" / "rmsnorm" / "rmsnorm_h4096.jsonl"
    wl.write_text("\n".join(wl.read_text().splitlines()[:3]) + "\n")   # batch 7, 1, 34
    ds = Dataset.open(root)
    for s, _ in zoo(ds.definitions["rmsnorm_h4096"], include=KINDS).values():
        ds.add_solution(s)
    return ds


def _statuses(summary):
    return {(t.workload.uuid, t.solution): t.evaluation.status.value for t in summary.traces}


def test_parse_devices():
    assert parse_devices("cpu*2") == ["cpu:0", "cpu:1"]
    assert parse_devices("cuda:0,cuda:3") == ["cuda:0", "cuda:3"]
    assert parse_devices("0,1") == ["cuda:0", "cuda:1"]
    assert parse_devices(["cpu:0"]) == ["cpu:0"]


def test_two_workers_split_and_match_one_worker(tmp_path):
    one = run_bench(_dataset(tmp_path, "one"), definitions=["rmsnorm_h4096"], authors=["zoo"],
                    devices="cpu:0", cfg=BenchConfig(**CFG), progress=False)
    two = run_bench(_dataset(tmp_path, "two"), definitions=["rmsnorm_h4096"], authors=["zoo"],
                    devices="cpu*2", cfg=BenchConfig(**CFG), progress=False)
    n = 3 * len(KINDS)
    assert one.evaluated == two.evaluated == n
    assert _statuses(one) == _statuses(two)                         # same verdicts
    assert set(one.by_device) == {"cpu:0"}
    assert set(two.by_device) == {"cpu:0", "cpu:1"}                 # the work was split
    assert min(two.by_device.values()) >= 1                         # (shares depend on start-up order)
    recorded = Counter(t.evaluation.environment.libs["device"] for t in two.traces)
    assert recorded == two.by_device                                 # each evaluation names its worker
    for t in two.traces:
        assert t.evaluation.environment.libs["device_index"] == t.evaluation.environment.libs["device"][-1]
    # the files on disk say the same
    disk = Dataset.open(tmp_path / "two")
    assert Counter(t.evaluation.environment.libs["device"] for t in disk.traces_for("rmsnorm_h4096")
                   if t.solution.startswith("zoo_")) == recorded
