"""Tracer on a GPU (H200; skipped without CUDA): CUDA tensors are copied without blocking the
stream, the values written are the values at call time, and real CUDA-graph capture records
nothing."""

from __future__ import annotations

import time

import pytest
import torch

import fib_runtime.tracer as tracer
from fib_runtime.definitions import sampling
from fib_runtime.inputs import materialize
from fib_runtime.store import Dataset
from fib_runtime.tracer import Policy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

V = 32000


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "trace"
    tracer.enable(r, ranks="all", rate_limit=None, default_policy=Policy(keep_per_bucket=None, max_workloads=None))
    tracer.register_definition(sampling.definition("top_k_sampling_from_probs", V))
    yield r
    tracer.disable()


NAME = sampling.name("top_k_sampling_from_probs", V)


def test_cuda_inputs_recorded_without_sync(root):
    probs = torch.softmax(torch.randn(64, V, device="cuda"), -1)
    top_k = torch.randint(1, 100, (64,), device="cuda", dtype=torch.int32)
    expect = top_k.cpu()
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)                  # ~0.1 s of GPU work queued on the stream
    t0 = time.perf_counter()
    assert tracer.record(NAME, (probs, top_k))
    dt = time.perf_counter() - t0
    top_k.fill_(7)                                  # stream-ordered after the copy: not seen
    assert dt < 0.02, f"record blocked for {dt * 1e3:.1f} ms"
    assert tracer.flush(30)
    ds = Dataset.open(root)
    assert ds.problems == []
    wl = ds.workloads_for(NAME)[0].workload
    args = materialize(ds.definitions[NAME], wl, dataset_root=ds.root)
    assert torch.equal(args["top_k"], expect)


def test_steady_state_cost_on_cuda_tensors(root):
    probs = torch.softmax(torch.randn(8, V, device="cuda"), -1)
    top_k = torch.randint(1, 100, (8,), device="cuda", dtype=torch.int32)
    tracer.record(NAME, (probs, top_k))
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        tracer.record(NAME, (probs, top_k))
    per_call = (time.perf_counter() - t0) / n
    assert per_call < 5e-6, per_call


def test_nothing_recorded_during_real_graph_capture(root):
    probs = torch.softmax(torch.randn(16, V, device="cuda"), -1)
    top_k = torch.randint(1, 100, (16,), device="cuda", dtype=torch.int32)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        kept = tracer.record(NAME, (probs, top_k))
        probs.mul_(1.0)
    assert kept is False
    assert tracer.stats()["dropped"] == {"cuda_graph_capture": 1}
    g.replay()
    assert tracer.record(NAME, (probs, top_k))      # eager again: recorded
    assert tracer.flush(30)
