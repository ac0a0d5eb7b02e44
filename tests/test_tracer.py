"""Tracer, in process: round trip through the validator and the reference, dedup, limits, capture.

Every test gets a fresh tracer (``enable`` in the test, ``disable`` in teardown) writing into a
temp dataset; nothing here needs a GPU (CUDA-graph capture is simulated by patching
``torch.cuda.is_current_stream_capturing``).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

import fib_runtime.tracer as tracer
from fib_runtime.definitions import sampling
from fib_runtime.inputs import materialize
from fib_runtime.reference import compile_reference, outputs_tuple
from fib_runtime.schema import Definition, SafetensorsInput, ScalarInput
from fib_runtime.store import Dataset
from fib_runtime.tracer import Policy
from fib_runtime.tracer import writer as writer_mod

GATHER = {
    "name": "gather_scaled_h16",
    "op_type": "gather",
    "description": "out = x[idx] * scale (a test definition: float activations, int indices, a scalar)",
    "axes": {"n": {"type": "var"}, "m": {"type": "var"}, "hidden": {"type": "const", "value": 16}},
    "inputs": {
        "x": {"shape": ["n", "hidden"], "dtype": "float32"},
        "idx": {"shape": ["m"], "dtype": "int64"},
        "scale": {"shape": None, "dtype": "float32"},
    },
    "outputs": {"out": {"shape": ["m", "hidden"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(x, idx, scale):\n    return x[idx] * scale\n",
}
NAME = GATHER["name"]
OPEN = Policy(keep_first_k=1, keep_per_bucket=None, max_workloads=None)


def traced(defn):
    """What an adapter does: offer the call to the tracer, then run the function."""
    names = list(defn["inputs"])

    def deco(fn):
        def wrapper(*args):
            tracer.record(defn, dict(zip(names, args)))
            return fn(*args)

        return wrapper

    return deco


@traced(GATHER)
def gather_scaled(x, idx, scale):
    return x[idx] * scale


def call(n, m, scale=0.5, dtype=torch.float32, hidden=16):
    x = torch.randn(n, hidden, dtype=dtype)
    idx = torch.randint(0, n, (m,), dtype=torch.int64)
    return x, idx, scale


@pytest.fixture(autouse=True)
def _fresh():
    yield
    tracer.disable()


@pytest.fixture
def root(tmp_path) -> Path:
    return tmp_path / "trace"


def _lines(root: Path, op="gather", name=NAME):
    p = root / "workloads" / op / f"{name}.jsonl"
    return p.read_text().splitlines() if p.exists() else []


def _enable(root, **kw):
    kw.setdefault("rate_limit", None)
    kw.setdefault("ranks", "all")
    kw.setdefault("default_policy", OPEN)
    return tracer.enable(root, **kw)


# ---- round trip -------------------------------------------------------------------------------

def test_round_trip_validator_and_reference(root):
    _enable(root)
    calls = {}
    for n, m, s in [(4, 3, 0.5), (10, 1, 2.0), (7, 7, -1.25), (4, 3, 9.0)]:  # last: dedup hit
        x, idx, scale = call(n, m, s)
        gather_scaled(x, idx, scale)
        calls.setdefault((n, m), (idx.clone(), scale))
    assert tracer.flush(5)
    ds = Dataset.open(root)
    assert ds.problems == []
    wls = ds.workloads_for(NAME)
    assert len(wls) == 3
    defn = ds.definitions[NAME]
    run = compile_reference(defn)
    for t in wls:
        wl = t.workload
        n, m = wl.axes["n"], wl.axes["m"]
        assert wl.inputs["x"].type == "random"
        assert isinstance(wl.inputs["idx"], SafetensorsInput)
        assert isinstance(wl.inputs["scale"], ScalarInput)
        assert ds.blob_problem(wl.inputs["idx"].path) is None
        assert ds.resolve_blob(wl.inputs["idx"].path) == ds.blob_path(NAME, wl.uuid)
        args = materialize(defn, wl, dataset_root=ds.root, seed=0)
        idx0, scale0 = calls[(n, m)]
        assert tuple(args["x"].shape) == (n, 16)
        assert torch.equal(args["idx"], idx0)          # the real indices, replayable
        assert args["scale"] == pytest.approx(scale0)
        (out,) = outputs_tuple(defn, run(*args.values()))
        assert tuple(out.shape) == defn.shape_of("out", wl.axes) == (m, 16)
    st = tracer.stats()
    assert st["records"] == {NAME: 3}
    assert st["dropped"] == {"dedup": 1}


def test_sampling_definition_round_trip(root):
    d = sampling.definition("top_k_sampling_from_probs", 1000)
    _enable(root)
    tracer.register_definition(d)
    for b in (1, 5, 33):
        probs = torch.softmax(torch.randn(b, 1000), -1)
        top_k = torch.randint(1, 100, (b,), dtype=torch.int32)
        assert tracer.record(d["name"], (probs, top_k))   # by name, tuple inputs
    assert tracer.flush(5)
    ds = Dataset.open(root)
    assert ds.problems == []
    defn = ds.definitions[d["name"]]
    run = compile_reference(defn)
    for t in ds.workloads_for(d["name"]):
        assert t.workload.inputs["probs"].type == "random"
        assert t.workload.inputs["top_k"].type == "safetensors"
        args = materialize(defn, t.workload, dataset_root=ds.root, seed=1)
        out = outputs_tuple(defn, run(*args.values()))[0]
        assert tuple(out.shape) == (t.workload.axes["batch_size"],)


def test_policies_all_none_named(root):
    _enable(root, policies={NAME: "all"})
    gather_scaled(*call(3, 2))
    tracer.flush(5)
    wl = Dataset.open(root).workloads_for(NAME)[0].workload
    assert wl.inputs["x"].type == "safetensors" and wl.inputs["idx"].type == "safetensors"
    assert wl.inputs["scale"].type == "scalar"  # a Python scalar is a scalar under every policy
    tracer.disable()

    root2 = root.parent / "t2"
    _enable(root2, policies={"gather_*": Policy(dump=["x"], keep_per_bucket=None)})
    gather_scaled(*call(3, 2))
    tracer.flush(5)
    wl = Dataset.open(root2).workloads_for(NAME)[0].workload
    assert wl.inputs["x"].type == "safetensors" and wl.inputs["idx"].type == "random"


def test_dataset_definition_resolved_by_name(root):
    (root / "definitions" / "gather").mkdir(parents=True)
    (root / "definitions" / "gather" / f"{NAME}.json").write_text(Definition.model_validate(GATHER).to_json(2))
    _enable(root)
    x, idx, s = call(5, 2)
    assert tracer.record(NAME, {"x": x, "idx": idx, "scale": s})
    assert not tracer.record("no_such_definition", {"x": x})
    tracer.flush(5)
    assert tracer.stats()["dropped"] == {"unknown_definition": 1}
    ds = Dataset.open(root)
    assert ds.problems == [] and len(ds.workloads_for(NAME)) == 1


def test_mismatched_calls_are_dropped(root):
    _enable(root)
    x, idx, s = call(5, 2, dtype=torch.float16)         # dtype differs from the definition
    assert not tracer.record(GATHER, (x, idx, s))
    x, idx, s = call(5, 3, hidden=32)                    # const axis differs
    assert not tracer.record(GATHER, (x, idx, s))
    assert not tracer.record(GATHER, {"x": torch.randn(5, 16), "idx": None, "scale": 1.0})
    assert tracer.stats()["dropped"] == {"mismatch": 3}
    assert _lines(root) == []


# ---- dedup and limits -------------------------------------------------------------------------

def test_keep_first_k_per_signature(root):
    _enable(root, default_policy=Policy(keep_first_k=2, keep_per_bucket=None, max_workloads=None))
    kept = [tracer.record(GATHER, call(4, 4)) for _ in range(5)]
    assert kept == [True, True, False, False, False]
    tracer.flush(5)
    assert len(_lines(root)) == 2
    assert tracer.stats()["dropped"] == {"dedup": 3}


def test_keep_per_bucket_and_definition_cap(root):
    _enable(root, default_policy=Policy(keep_first_k=1, keep_per_bucket=1, max_workloads=3))
    # n in 4..7 share the dispatcher's bucket 3 (m fixed at 1)
    kept = [tracer.record(GATHER, call(n, 1)) for n in (4, 5, 6, 7)]
    assert kept == [True, False, False, False]
    assert tracer.stats()["dropped"] == {"bucket": 3}
    from fib_runtime.dispatch.table import bucket_of

    assert tracer.bucket_of is bucket_of                 # the dispatcher's buckets, not a copy
    assert tracer.bucket_of((5, 1)) == (3, 1) and tracer.bucket_of((0, 8)) == (0, 4)
    kept = [tracer.record(GATHER, call(n, 1)) for n in (16, 32, 64, 128)]
    assert kept == [True, True, False, False]          # 3 per definition
    tracer.flush(5)
    assert len(_lines(root)) == 3
    assert tracer.stats()["dropped"] == {"bucket": 3, "definition_cap": 2}
    assert not tracer.record(GATHER, call(64, 1))       # a decided signature: cached
    assert tracer.stats()["dropped"]["definition_cap"] == 3


def test_rate_limit(root):
    _enable(root, rate_limit=1e-6, burst=3)
    kept = [tracer.record(GATHER, call(n, 1)) for n in range(1, 11)]
    assert sum(kept) == 3
    assert tracer.stats()["dropped"] == {"rate_limit": 7}
    tracer.disable()
    _enable(root.parent / "t2", rate_limit=4.0, burst=1)  # (a token per 250 ms: a loaded host's pauses fit)
    assert tracer.record(GATHER, call(1, 1))
    assert not tracer.record(GATHER, call(2, 1))        # bucket empty
    time.sleep(0.3)                                      # 1.2 tokens later (burst 1)
    assert tracer.record(GATHER, call(2, 1))            # a rate drop does not close the signature


def test_byte_cap(root):
    cap = 20_000
    _enable(root, policies={NAME: "all"}, max_bytes=cap)
    for n in range(60, 100):                             # each blob ~ n*16*4 bytes
        tracer.record(GATHER, call(n, 8))
    assert tracer.flush(5)
    st = tracer.stats()
    assert st["dropped"]["byte_cap"] >= 1 and 1 <= st["records"][NAME] < 10
    written = sum(p.stat().st_size for p in (root / "blob").rglob("*") if p.is_file())
    written += sum(p.stat().st_size for p in (root / "workloads").rglob("*.jsonl"))
    assert written <= cap and st["bytes"] == written
    assert Dataset.open(root).problems == []


def test_queue_full_is_counted(root):
    gate = threading.Event()
    orig = writer_mod._write_one

    def slow(*a, **k):
        gate.wait(5)
        return orig(*a, **k)

    writer_mod._write_one = slow
    try:
        _enable(root, queue_size=1)
        kept = [tracer.record(GATHER, call(n, 1)) for n in range(1, 6)]
        drops = tracer.stats()["dropped"].get("queue_full", 0)
        assert drops >= 3 and sum(kept) + drops == 5
        gate.set()
        assert tracer.flush(5)
        assert len(_lines(root)) == sum(kept)
    finally:
        writer_mod._write_one = orig
        gate.set()


# ---- capture, ranks, lifecycle ----------------------------------------------------------------

def test_nothing_recorded_during_cuda_graph_capture(root, monkeypatch):
    _enable(root)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert not tracer.record(GATHER, call(4, 2))
    assert not tracer.record(GATHER, call(4, 2))
    assert tracer.stats()["dropped"] == {"cuda_graph_capture": 2}
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert tracer.record(GATHER, call(4, 2))            # the slot was not used up by capture
    tracer.flush(5)
    assert len(_lines(root)) == 1


def test_nothing_recorded_while_compiling(root, monkeypatch):
    _enable(root)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not tracer.record(GATHER, call(4, 2))
    assert tracer.stats()["dropped"] == {"compiling": 1}


@pytest.mark.parametrize("spec,rank,local,expect", [
    ("0", 0, 0, True), ("0", 1, 1, False), ("all", 5, 1, True), ("local0", 8, 0, True),
    ("local0", 9, 1, False), ("every:4", 8, 0, True), ("every:4", 9, 1, False), ("0,8", 8, 0, True),
])
def test_rank_filter(root, monkeypatch, spec, rank, local, expect):
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_RANK", str(local))
    _enable(root, ranks=spec)
    assert tracer.record(GATHER, call(3, 1)) is expect
    if not expect:
        assert tracer.stats()["dropped"] == {"rank": 1}


@pytest.mark.parametrize("tp,expect", [(0, True), (1, False)])
def test_default_ranks_one_per_tp_group(root, monkeypatch, tp, expect):
    import sys
    import types

    fake = types.ModuleType("vllm.distributed.parallel_state")
    fake.model_parallel_is_initialized = lambda: True
    fake.get_tensor_model_parallel_rank = lambda: tp
    monkeypatch.setitem(sys.modules, "vllm.distributed.parallel_state", fake)
    monkeypatch.setenv("RANK", "5")                      # global rank 5, TP rank 0 of its group
    t = tracer.enable(root, rate_limit=None, default_policy=OPEN)
    assert t.config.ranks == "tp0"
    assert tracer.record(GATHER, call(3, 1)) is expect
    monkeypatch.delitem(sys.modules, "vllm.distributed.parallel_state")
    from fib_runtime.tracer.config import rank_records

    assert rank_records("tp0", 0, 0, None) and not rank_records("tp0", 3, 0, None)  # no engine: rank 0


def test_env_configuration(root, monkeypatch):
    monkeypatch.setenv("FIB_TRACE_PATH", str(root))
    monkeypatch.setenv("FIB_TRACE_DEFINITIONS", "gather_*,other")
    monkeypatch.setenv("FIB_TRACE_DUMP", "all")
    monkeypatch.setenv("FIB_TRACE_KEEP_FIRST_K", "3")
    monkeypatch.setenv("FIB_TRACE_RATE", "0")
    monkeypatch.setenv("FIB_TRACE_RANKS", "all")
    t = tracer.enable()
    c = t.config
    assert c.dataset_path == str(root) and c.definitions == ("gather_*", "other")
    assert c.default_policy.dump == "all" and c.default_policy.keep_first_k == 3
    assert c.rate_limit is None and c.ranks == "all"
    assert c.selected(NAME) and not c.selected("rmsnorm_h64")
    t2 = tracer.enable(definitions=["rmsnorm_*"], rate_limit=5.0)   # explicit arguments win
    assert t2.config.definitions == ("rmsnorm_*",) and t2.config.rate_limit == 5.0
    assert not tracer.record(GATHER, call(3, 1))        # not selected: not traced, not a drop
    assert tracer.stats()["dropped"] == {}


def test_disabled_record_is_a_noop(root):
    tracer.disable()
    assert tracer.record(GATHER, call(3, 1)) is False
    assert tracer.recorder() is None
    assert tracer.stats()["enabled"] is False
    _enable(root)
    assert tracer.recorder() is tracer.record


def test_metrics_are_pushed(root):
    from prometheus_client import CollectorRegistry

    from fib_runtime import metrics

    reg = CollectorRegistry()
    metrics.reset()
    metrics.configure(registry=reg, enabled=True)
    try:
        _enable(root)
        tracer.record(GATHER, call(3, 1))
        tracer.record(GATHER, call(3, 1))
        tracer.record(GATHER, call(3, 2, dtype=torch.float64))
        assert tracer.flush(5)
        st = metrics.stats()
        assert st["fib_trace_records_total"] == {(NAME,): 1}
        assert st["fib_trace_dropped_total"] == {("dedup",): 1, ("mismatch",): 1}
        assert st["fib_trace_bytes_total"] == {(): tracer.stats()["bytes"]}
        # flush() also moved them into Prometheus (tracing may run without the dispatcher)
        assert reg.get_sample_value("fib_trace_records_total", {"definition": NAME}) == 1
        assert reg.get_sample_value("fib_trace_dropped_total", {"reason": "dedup"}) == 1
        assert reg.get_sample_value("fib_trace_bytes_total") == tracer.stats()["bytes"]
    finally:
        tracer.disable()
        metrics.reset()


def test_sigterm_handler_installed_and_restored(root):
    import signal

    prev = signal.getsignal(signal.SIGTERM)
    _enable(root)
    assert signal.getsignal(signal.SIGTERM) is tracer._on_sigterm
    tracer.disable()
    assert signal.getsignal(signal.SIGTERM) is prev


def test_fork_child_gets_a_fresh_writer(root):
    import os

    _enable(root)
    assert tracer.record(GATHER, call(1, 1))
    tracer.flush(5)
    t = tracer.get_tracer()
    assert t.writer is not None and t.writer.is_alive()
    pid = os.fork()
    if pid == 0:  # child: no inherited thread, an empty queue, its own writer on demand
        ok = t.writer is None and t.n_put == 0 and t.queue.empty() and t.bytes_written == 0
        ok = ok and tracer.record(GATHER, call(2, 1)) and not tracer.record(GATHER, call(1, 1))
        ok = ok and tracer.flush(5) and t.writer is not None and t.writer.is_alive()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert tracer.record(GATHER, call(3, 1))
    tracer.flush(5)
    sigs = sorted(tuple(Dataset.open(root).workloads_for(NAME)[i].workload.axes.values()) for i in range(3))
    assert sigs == [(1, 1), (2, 1), (3, 1)]


def test_token_ids_are_not_dumped_by_the_ints_policy(root):
    d = {**GATHER, "name": "embed_h16", "inputs": {
        "x": GATHER["inputs"]["x"], "input_ids": {"shape": ["m"], "dtype": "int64"},
        "scale": GATHER["inputs"]["scale"]}}
    d["reference"] = "import torch\n\ndef run(x, input_ids, scale):\n    return x[input_ids] * scale\n"
    _enable(root)
    x, idx, s = call(5, 3)
    assert tracer.record(d, (x, idx, s))
    tracer.flush(5)
    wl = Dataset.open(root).workloads_for("embed_h16")[0].workload
    assert wl.inputs["input_ids"].type == "random"      # user content stays out of the dataset
    assert not list(root.rglob("*.safetensors"))


def test_export_env_reaches_child_configuration(root, monkeypatch):
    from fib_runtime.tracer.config import build_config

    import os

    # export_env writes os.environ: give it a private copy, restored after the test
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if not k.startswith("FIB_")})
    pol = Policy(dump=["x", "idx"], keep_first_k=3, keep_per_bucket=None)
    t = tracer.enable(root, definitions=["gather_*"], default_policy=pol, rate_limit=7.0,
                      max_bytes=12345, ranks="local0", export_env=True)
    child = build_config()  # what a spawned worker builds from its environment
    assert tracer.config.tracing_requested()
    for f in ("dataset_path", "definitions", "default_policy", "rate_limit", "max_bytes", "ranks"):
        assert getattr(child, f) == getattr(t.config, f), f


def test_record_never_raises(root):
    _enable(root)
    bad = {"name": "broken", "op_type": "x", "axes": {}, "inputs": {}, "outputs": {}, "reference": "nope("}
    assert tracer.record(bad, ()) is False               # invalid definition dict
    assert tracer.record({"no": "name"}, ()) is False    # no name
    assert tracer.record(object(), ()) is False          # not a definition at all
    assert tracer.record(GATHER, None) is False          # no inputs
    assert tracer.record(GATHER, {"x": "not a tensor", "idx": 3, "scale": 1.0}) is False
    d = tracer.stats()["dropped"]
    assert d.get("error", 0) == 3 and d.get("mismatch", 0) == 2


def test_unwritable_dataset_counts_write_errors(root, caplog):
    _enable(root)
    (root / "blob").rmdir()
    (root / "blob").write_text("not a folder")           # blobs cannot be written
    for n in (1, 2, 3):
        assert tracer.record(GATHER, call(n, 1))         # queued: the failure is the writer's
    assert tracer.flush(5)
    assert tracer.stats()["dropped"] == {"write_error": 3}
    assert tracer.stats()["records"] == {}
    assert len([r for r in caplog.records if "writing a workload" in r.getMessage()]) == 1
    assert _lines(root) == []                            # no line points at a missing blob


def test_resume_counts_workloads_already_in_the_dataset(root):
    _enable(root, default_policy=Policy(keep_first_k=1, keep_per_bucket=2, max_workloads=None))
    assert tracer.record(GATHER, call(4, 1)) and tracer.record(GATHER, call(5, 1))
    tracer.disable()
    _enable(root, default_policy=Policy(keep_first_k=1, keep_per_bucket=2, max_workloads=None))
    assert not tracer.record(GATHER, call(4, 1))         # recorded by the previous run
    assert not tracer.record(GATHER, call(6, 1))         # its bucket (4..7) is full already
    assert tracer.record(GATHER, call(9, 1))
    assert tracer.stats()["dropped"] == {"dedup": 1, "bucket": 1}
    tracer.disable()
    _enable(root, resume=False)                           # per-process limits only
    assert tracer.record(GATHER, call(4, 1))
    tracer.flush(5)
    assert len(_lines(root)) == 4
