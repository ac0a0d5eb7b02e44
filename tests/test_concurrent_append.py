"""8 processes appending 500 traces each to one JSONL file: 4000 whole, valid lines after."""

import json
import multiprocessing as mp
import shutil

from fib_runtime.default_dataset import default_dataset_path
from fib_runtime.schema import Trace
from fib_runtime.store import Dataset

N_PROC, N_EACH = 8, 500
DEF = "gemm_n128_k2048"


def _writer(root: str, rank: int, start) -> None:
    ds = Dataset.open(root, check_blobs=False)
    proto = ds.traces_for(DEF)[0].to_dict()
    start.wait()
    for i in range(N_EACH):
        d = json.loads(json.dumps(proto))
        d["workload"]["uuid"] = f"rank{rank}-{i}"
        # a log well above PIPE_BUF (4 KiB) so that unlocked writes could tear
        d["evaluation"]["log"] = f"rank {rank} line {i} " + "x" * (5000 + 97 * rank)
        ds.add_trace(Trace.model_validate(d), author="stress")


def test_eight_processes_one_file(tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(default_dataset_path(), root)
    ctx = mp.get_context("fork")
    start = ctx.Barrier(N_PROC)
    procs = [ctx.Process(target=_writer, args=(str(root), r, start)) for r in range(N_PROC)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    path = root / "traces" / "stress" / "gemm" / f"{DEF}.jsonl"
    data = path.read_bytes()
    assert data.endswith(b"\n")
    lines = data.decode().split("\n")[:-1]
    assert len(lines) == N_PROC * N_EACH
    uuids = set()
    for line in lines:
        t = Trace.model_validate(json.loads(line))
        assert t.evaluation.log.startswith("rank ")
        uuids.add(t.workload.uuid)
    assert len(uuids) == N_PROC * N_EACH
    ds = Dataset.open(root, check_blobs=False)
    assert ds.problems == []
    assert sum(1 for t in ds.traces_for(DEF) if t.workload.uuid.startswith("rank")) == N_PROC * N_EACH
