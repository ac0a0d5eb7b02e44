"""Tracer across processes: 8 concurrent writers, SIGTERM and exit flushes, env activation.

Each test runs small Python scripts in subprocesses (the installed ``fib_runtime``), so the
signal handlers, ``atexit`` and file locking are the real ones.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fib_runtime.store import Dataset

DEFN = {
    "name": "gather_scaled_h16", "op_type": "gather",
    "axes": {"n": {"type": "var"}, "m": {"type": "var"}, "hidden": {"type": "const", "value": 16}},
    "inputs": {"x": {"shape": ["n", "hidden"], "dtype": "float32"},
               "idx": {"shape": ["m"], "dtype": "int64"},
               "scale": {"shape": None, "dtype": "float32"}},
    "outputs": {"out": {"shape": ["m", "hidden"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(x, idx, scale):\n    return x[idx] * scale\n",
}
NAME = DEFN["name"]

PRELUDE = r"""
import json, os, signal, sys, time
import torch
import fib_runtime.tracer as tracer
from fib_runtime.tracer import Policy, writer
DEFN = json.loads(os.environ["TEST_DEFN"])
ROOT = os.environ["TEST_ROOT"]

def call(n, m):
    return {"x": torch.randn(n, 16), "idx": torch.randint(0, n, (m,)), "scale": 0.5}

def slow_writer(delay):
    orig = writer._write_one
    def slow(*a, **k):
        time.sleep(delay)
        return orig(*a, **k)
    writer._write_one = slow

OPEN = Policy(keep_first_k=1, keep_per_bucket=None, max_workloads=None)
"""


def _env(root: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIB_")}
    env.update(TEST_DEFN=json.dumps(DEFN), TEST_ROOT=str(root), **extra)
    return env


def _run(code: str, root: Path, **extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PRELUDE + code], env=_env(root, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines(root: Path):
    p = root / "workloads" / "gather" / f"{NAME}.jsonl"
    return p.read_text().splitlines() if p.exists() else []


def _check_dataset(root: Path, expect: int):
    lines = _lines(root)
    assert len(lines) == expect
    uuids = set()
    for line in lines:
        obj = json.loads(line)  # every line whole and valid JSON
        uuids.add(obj["workload"]["uuid"])
    assert len(uuids) == expect
    ds = Dataset.open(root)
    assert ds.problems == []
    wls = ds.workloads_for(NAME)
    assert len(wls) == expect
    for t in wls:
        assert ds.blob_problem(t.workload.inputs["idx"].path) is None
    return ds


WORKER = r"""
# one launcher imports torch once, then forks 8 workers (separate processes, separate tracers)
def worker(rank):
    tracer.enable(ROOT, ranks="all", rate_limit=None, default_policy=OPEN,
                  resume=False)  # every worker writes all 40 signatures: 8 x 40 lines
    tracer.register_definition(DEFN)
    while not os.path.exists(os.path.join(ROOT, "go")):
        time.sleep(0.001)
    for i in range(40):
        tracer.record(DEFN["name"], call(1 + i, 1 + (i % 7)))
        tracer.record(DEFN["name"], call(1 + i, 1 + (i % 7)))   # a dedup hit each time
    assert tracer.flush(60)
    st = tracer.stats()
    assert st["records"] == {DEFN["name"]: 40}, st
    assert st["dropped"] == {"dedup": 40}, st

os.makedirs(ROOT, exist_ok=True)
pids = []
for rank in range(8):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            worker(rank)
            code = 0
        except BaseException:
            import traceback; traceback.print_exc()
        finally:
            os._exit(code)
    pids.append(pid)
time.sleep(0.5)
open(os.path.join(ROOT, "go"), "w").close()
codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]
print(json.dumps(codes))
"""


def test_eight_processes_same_definition(tmp_path):
    root = tmp_path / "trace"
    p = _run(WORKER, root)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert json.loads(out) == [0] * 8, err
    _check_dataset(root, 8 * 40)
    # one blob per line, nothing orphaned, no temp file left behind
    blobs = list((root / "blob").rglob("*.safetensors"))
    assert len(blobs) == 8 * 40
    assert not [p for p in root.rglob("*.tmp")]


SIGTERM_SCRIPT = r"""
mode = sys.argv[1]
slow_writer(0.05)
if mode == "chain":
    def prev(signum, frame):
        open(os.path.join(ROOT, "prev_called"), "w").write(str(signum))
        os._exit(3)
    signal.signal(signal.SIGTERM, prev)
tracer.enable(ROOT, ranks="all", rate_limit=None, default_policy=OPEN)
for b in range(1, 21):
    tracer.record(DEFN, call(b, 2))
print("ready", tracer.stats()["pending"], flush=True)
if mode == "exit":
    sys.exit(0)
# An engine's main thread wakes often; one long sleep would race the signal: a SIGTERM landing
# after the last eval-breaker check but before the sleep syscall runs its Python handler only
# when the sleep ends (CPython runs handlers on the main thread, between bytecodes).
for _ in range(600):
    time.sleep(0.1)
"""


@pytest.mark.parametrize("mode", ["default", "chain", "exit"])
def test_flush_on_sigterm_and_exit(tmp_path, mode):
    root = tmp_path / "trace"
    p = _run(SIGTERM_SCRIPT.replace("sys.argv[1]", repr(mode)), root)
    line = p.stdout.readline().split()
    assert line[0] == "ready", p.stderr.read()
    assert int(line[1]) > 10                              # most still queued when the signal lands
    if mode != "exit":
        p.send_signal(signal.SIGTERM)
    p.communicate(timeout=60)
    expect_rc = {"default": -signal.SIGTERM, "chain": 3, "exit": 0}[mode]
    assert p.returncode == expect_rc
    _check_dataset(root, 20)
    if mode == "chain":
        assert (root / "prev_called").read_text() == str(int(signal.SIGTERM))


ENV_SCRIPT = r"""
tracer.register_definition(DEFN)
kept = tracer.record(DEFN["name"], call(3, 2))
print(json.dumps({"kept": kept, "enabled": tracer.is_enabled()}))
"""


def test_env_activation(tmp_path):
    root = tmp_path / "trace"
    p = _run(ENV_SCRIPT, root, FIB_ENABLE_TRACING="1", FIB_TRACE_PATH=str(root), FIB_TRACE_RANKS="all")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert json.loads(out) == {"kept": True, "enabled": True}
    _check_dataset(root, 1)
    # FIB_TRACE_PATH unset: the dataset path is used
    root2 = tmp_path / "ds"
    p = _run(ENV_SCRIPT, root2, FIB_ENABLE_TRACING="1", FIB_DATASET_PATH=str(root2))
    out, err = p.communicate(timeout=60)
    assert json.loads(out)["kept"] is True, err
    _check_dataset(root2, 1)
    # off: nothing starts, nothing is written
    root3 = tmp_path / "off"
    p = _run(ENV_SCRIPT, root3, FIB_TRACE_PATH=str(root3))
    out, err = p.communicate(timeout=60)
    assert json.loads(out) == {"kept": False, "enabled": False}, err
    assert not root3.exists()


MP_SCRIPT = r"""
import multiprocessing as mp

def child(n0):
    slow_writer(0.02)
    for b in range(n0, n0 + 10):
        tracer.record(DEFN, call(b, 1))
    # returns: multiprocessing ends a fork child with os._exit (no atexit)

if __name__ == "__main__":
    tracer.enable(ROOT, ranks="all", rate_limit=None, default_policy=OPEN)
    tracer.record(DEFN, call(100, 1))
    ctx = mp.get_context("fork")
    ps = [ctx.Process(target=child, args=(1 + 10 * i,)) for i in range(2)]
    [p.start() for p in ps]
    [p.join(60) for p in ps]
    assert all(p.exitcode == 0 for p in ps), [p.exitcode for p in ps]
"""


def test_multiprocessing_fork_children_flush(tmp_path):
    root = tmp_path / "trace"
    p = _run(MP_SCRIPT, root)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    _check_dataset(root, 21)
