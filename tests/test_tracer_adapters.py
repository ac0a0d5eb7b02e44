"""The FlashInfer adapter feeding the real tracer (fake flashinfer, CPU): what the adapters record
validates and replays through the reference for every op family they intercept."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from fakes import fake_flashinfer  # noqa: E402

import fib_runtime.tracer as tracer  # noqa: E402
from fib_runtime.adapters import base  # noqa: E402
from fib_runtime.adapters.flashinfer import FlashInferInstrumentor  # noqa: E402
from fib_runtime.inputs import materialize  # noqa: E402
from fib_runtime.reference import compile_reference, outputs_tuple  # noqa: E402
from fib_runtime.store import Dataset  # noqa: E402
from fib_runtime.tracer import Policy  # noqa: E402


@pytest.fixture
def fi(tmp_path):
    root = tmp_path / "trace"
    with fake_flashinfer.installed() as fake:
        base.STATS.reset()
        tracer.enable(root, ranks="all", rate_limit=None,
                      default_policy=Policy(keep_per_bucket=None, max_workloads=None))
        inst = FlashInferInstrumentor()
        inst.instrument(None, tracer.record, registrar=tracer.register_definition)
        yield fake, root
        inst.uninstrument()
        tracer.disable()


def _probs(b, v, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, v, generator=g).softmax(-1)


def test_adapter_calls_recorded_valid_and_replayable(fi):
    fake, root = fi
    s = fake.sampling
    for b in (1, 3, 3, 8):
        s.top_k_sampling_from_probs(_probs(b, 50), 5)                     # top_k as a Python int
        s.top_p_sampling_from_probs(_probs(b, 50), torch.full((b,), 0.7))  # per-row tensor
        s.top_k_top_p_sampling_from_probs(_probs(b, 50), torch.full((b,), 4, dtype=torch.int32), 0.9)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    fake.norm.rmsnorm(x, torch.ones(64, dtype=torch.bfloat16), eps=1e-5)
    assert tracer.flush(10)
    ds = Dataset.open(root)
    assert ds.problems == []
    names = sorted(n for n in ds.definitions if ds.workloads_for(n))
    assert len(names) >= 3, (names, base.stats(), tracer.stats())
    replayed = 0
    for name in names:
        d = ds.definitions[name]
        run = compile_reference(d)
        wls = ds.workloads_for(name)
        assert len({tuple(t.workload.axes.values()) for t in wls}) == len(wls)   # dedup per signature
        for t in wls:
            args = materialize(d, t.workload, dataset_root=ds.root, seed=0)
            for iname, v in args.items():
                shape = d.shape_of(iname, t.workload.axes)
                if shape is not None and v is not None:
                    assert tuple(v.shape) == shape
            outs = outputs_tuple(d, run(*args.values()))
            for oname, o in zip(d.outputs, outs):
                assert tuple(o.shape) == d.shape_of(oname, t.workload.axes)
            replayed += 1
    assert replayed == sum(len(ds.workloads_for(n)) for n in names)
    rec = tracer.stats()["records"]
    topk = next(n for n in rec if n.startswith("top_k_sampling_from_probs"))
    assert rec[topk] == 3          # batch 1, 3, 8
    # the Python int top_k was stored as the per-row tensor the definition declares
    wl = ds.workloads_for(topk)[0].workload
    args = materialize(ds.definitions[topk], wl, dataset_root=ds.root)
    assert args["top_k"].dtype == torch.int32 and bool((args["top_k"] == 5).all())
    # sampling's per-row float parameters keep their real values; probs stay random
    both = next(n for n in rec if n.startswith("top_k_top_p_sampling_from_probs"))
    wl = ds.workloads_for(both)[0].workload
    assert wl.inputs["probs"].type == "random" and wl.inputs["top_p"].type == "safetensors"
    args = materialize(ds.definitions[both], wl, dataset_root=ds.root)
    assert torch.allclose(args["top_p"], torch.full_like(args["top_p"], 0.9))
