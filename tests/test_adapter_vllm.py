"""vLLM adapter against a fake vLLM sampler module (CPU). The real vLLM runs in tests/e2e."""

from __future__ import annotations

import os
import sys

import pytest
import torch
import wrapt

sys.path.insert(0, os.path.dirname(__file__))
from fakes import fake_engines  # noqa: E402

import fib_runtime.adapters.vllm as vllm_adapter  # noqa: E402
from fib_runtime.adapters import base  # noqa: E402
from fib_runtime.adapters.flashinfer import FlashInferInstrumentor  # noqa: E402
from fib_runtime.adapters.vllm import VllmInstrumentor  # noqa: E402


class Disp:
    def __init__(self, solutions=None):
        self.calls, self.solutions = [], solutions or {}

    def __call__(self, name, inputs, fallback):
        self.calls.append(name)
        sol = self.solutions.get(name)
        return sol(*inputs) if sol else fallback()


def _zero_sampler(logits, top_k, top_p):
    return torch.zeros(logits.shape[0], dtype=torch.int64)


@pytest.fixture
def vl(monkeypatch, tmp_path):
    marker = tmp_path / "marker.txt"
    monkeypatch.setenv("FIB_PLUGIN_MARKER", str(marker))
    monkeypatch.setattr(vllm_adapter, "_DONE_PID", None)
    base.STATS.reset()
    with fake_engines.fake_vllm() as fake:
        fake.marker = marker
        yield fake
        for inst in (VllmInstrumentor(), FlashInferInstrumentor()):
            if inst.is_instrumented:
                inst.uninstrument()


def _logits(b=3, v=40):
    return torch.randn(b, v)


def test_register_default_patches_nothing_but_writes_marker(vl, monkeypatch):
    monkeypatch.delenv("FIB_ENABLE_APPLY", raising=False)
    monkeypatch.delenv("FIB_ENABLE_TRACING", raising=False)
    orig = vl.topk.TopKTopPSampler.__dict__["forward_cpu"]
    vllm_adapter.register()
    vllm_adapter.register()  # re-entrant: one marker line per process
    assert vl.topk.TopKTopPSampler.__dict__["forward_cpu"] is orig
    lines = vl.marker.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vllm register pid={os.getpid()}")


def test_register_enabled_routes_sampler_and_is_reentrant(vl, monkeypatch):
    d = Disp({"top_k_top_p_sampling_from_logits_v40": _zero_sampler})
    monkeypatch.setenv("FIB_ENABLE_APPLY", "1")
    monkeypatch.setattr(vllm_adapter, "runtime_hooks", lambda: (d, None, None))
    vllm_adapter.register()
    w = vl.topk.TopKTopPSampler.__dict__["forward_cpu"]
    vllm_adapter.register()
    assert vl.topk.TopKTopPSampler.__dict__["forward_cpu"] is w and base.is_fib_wrapper(w)
    s = vl.topk.TopKTopPSampler()
    k = torch.tensor([5, 5, 40], dtype=torch.int32)
    out, extra = s(_logits(), {}, k, None)
    assert out.dtype == torch.int64 and out.tolist() == [0, 0, 0] and extra is None
    assert d.calls == ["top_k_top_p_sampling_from_logits_v40"]
    assert vl.topk.CALLS["forward_cpu"] == 0
    s(_logits(), {}, None, None)
    assert d.calls[-1] == "sampling_from_logits_v40"
    assert "instrumented" in vl.marker.read_text()


def test_host_top_k_minimum_noted_on_the_sampler_tensor(vl):
    """Observed, not dispatched: InputBatch._make_sampling_metadata (model runner v1) and
    SamplingStates.get_top_k_top_p (v2) run unchanged, and the batch's smallest top_k, read from
    their host copies, is noted on the per-row tensor they return when it exceeds 128 (rows
    without top-k hold the vocabulary size); the sampler call that gets that tensor then carries
    the hint to fib's kernels."""
    from fib_runtime.kernels import sampling as S

    S._hints.clear()
    VllmInstrumentor().instrument(Disp(), None)
    ib = vl.input_batch.InputBatch([300, 0, 500])  # (0: no top-k -> the vocabulary size)
    md = ib._make_sampling_metadata()
    assert md.top_k.tolist() == [300, 1000, 500] and S._hints[id(md.top_k)] == (md.top_k, 300)
    small = vl.input_batch.InputBatch([300, 20])._make_sampling_metadata()
    assert id(small.top_k) not in S._hints  # (min 20: the default kernel)
    assert vl.input_batch.InputBatch([0, 0])._make_sampling_metadata().top_k is None
    st = vl.states.SamplingStates([1000, 200, 150, 20])
    k, p = st.get_top_k_top_p(torch.tensor([1, 1, 2]), __import__("numpy").array([1, 2]))
    assert k.tolist() == [200, 200, 150] and p is None and S._hints[id(k)] == (k, 150)
    k2, _ = st.get_top_k_top_p(torch.tensor([2, 3]), __import__("numpy").array([2, 3]))
    assert id(k2) not in S._hints
    assert st.get_top_k_top_p(torch.tensor([0]), __import__("numpy").array([0]))[0] is None
    # the sampler's call with that tensor reaches the dispatcher with it (the hint travels on it)
    seen = []
    VllmInstrumentor().uninstrument()
    VllmInstrumentor().instrument(lambda name, inputs, fb: seen.append(inputs[1]) or fb(), None)
    sampler = vl.topk.TopKTopPSampler()
    sampler.forward(torch.randn(3, 1000), {}, md.top_k, None)
    assert seen and seen[-1] is md.top_k
    S._hints.clear()


def test_seeded_requests_keep_vllm_semantics(vl):
    d = Disp({"top_k_top_p_sampling_from_logits_v40": _zero_sampler})
    VllmInstrumentor().instrument(d, None)
    s = vl.topk.TopKTopPSampler()
    logits = _logits()
    gens = {1: torch.Generator().manual_seed(7)}
    out1, _ = s(logits.clone(), gens, None, torch.full((3,), 0.9))
    # vLLM's own path ran (its generator consumed), nothing dispatched
    assert d.calls == [] and vl.topk.CALLS["forward_cpu"] == 1
    gens2 = {1: torch.Generator().manual_seed(7)}
    VllmInstrumentor().uninstrument()
    torch.manual_seed(0)
    ref, _ = vl.topk.TopKTopPSampler()(logits.clone(), gens2, None, torch.full((3,), 0.9))
    assert out1[1] == ref[1]  # the seeded row is reproducible exactly as in stock vLLM
    # processed logprobs mode and fp64 gumbel: not ours either
    VllmInstrumentor().instrument(d, None)
    vl.topk.TopKTopPSampler("processed_logprobs")(_logits(), {}, None, torch.full((3,), 0.9))
    vl.topk.TopKTopPSampler(use_fp64_gumbel=True)(_logits(), {}, None, torch.full((3,), 0.9))
    assert d.calls == []


def test_existing_instances_rebound_and_restored(vl):
    early = vl.topk.TopKTopPSampler()  # built before patching: self.forward is the original
    d = Disp()
    VllmInstrumentor().instrument(d, None)
    early(_logits(), {}, None, torch.full((3,), 0.5))
    assert d.calls == ["top_k_top_p_sampling_from_logits_v40"]
    late = vl.topk.TopKTopPSampler()
    VllmInstrumentor().uninstrument()
    for s in (early, late):
        assert not hasattr(s.forward, "_self_parent")  # plain bound method again
        assert s.forward.__func__ is vl.topk.TopKTopPSampler.__dict__["forward_cpu"]
    early(_logits(), {}, None, torch.full((3,), 0.5))
    assert d.calls == ["top_k_top_p_sampling_from_logits_v40"]


def test_apply_top_k_top_p_and_name_bound_copies(vl):
    d = Disp()
    rep = VllmInstrumentor().instrument(d, None)
    assert "vllm.v1.sample.rejection_sampler.apply_top_k_top_p" in rep.aliases
    out = vl.rejection.mask(_logits(), torch.full((3,), 4, dtype=torch.int32), None)
    assert out.shape == (3, 40) and d.calls == ["top_k_top_p_mask_logits_v40"]
    # nested inside the sampler: dispatched once, at the sampler level
    d.calls.clear()
    vl.topk.TopKTopPSampler()(_logits(), {}, torch.full((3,), 4, dtype=torch.int32), None)
    assert d.calls == ["top_k_top_p_sampling_from_logits_v40"]
    VllmInstrumentor().uninstrument()
    assert vl.rejection.apply_top_k_top_p is vl.topk.apply_top_k_top_p
    assert not base.is_fib_wrapper(vl.topk.apply_top_k_top_p)


def test_sampler_module_imported_after_instrument(monkeypatch):
    with fake_engines.fake_vllm(with_sampler=False) as fake:
        inst = VllmInstrumentor()
        rep = inst.instrument(Disp(), None)
        try:
            assert set(rep.deferred) == {t.path for t in vllm_adapter.TARGETS}
            topk, rej = fake.install_sampler()
            wrapt.notify_module_loaded(topk)
            assert base.is_fib_wrapper(topk.TopKTopPSampler.__dict__["forward_cpu"])
            assert base.is_fib_wrapper(topk.apply_top_k_top_p)
        finally:
            inst.uninstrument()


def test_register_never_raises(vl, monkeypatch):
    monkeypatch.setenv("FIB_ENABLE_APPLY", "1")

    def boom():
        raise RuntimeError("hooks broken")

    monkeypatch.setattr(vllm_adapter, "runtime_hooks", boom)
    vllm_adapter.register()  # logged, not raised
    assert not VllmInstrumentor().is_instrumented


def test_friends_and_flashinfer_sample(vl):
    from fakes import fake_flashinfer

    d = Disp()
    with fake_flashinfer.installed():
        VllmInstrumentor().instrument(d, None)
        FlashInferInstrumentor().instrument(d, None)
        k = torch.full((3,), 4, dtype=torch.int32)
        vl.topk.apply_top_k_only(_logits(), k)
        vl.topk.apply_top_k_top_p_pytorch(_logits(), k, torch.full((3,), 0.5), allow_cpu_sync=True)
        ids = vl.topk.flashinfer_sample(_logits(), None, torch.full((3,), 0.5))
        assert ids.shape == (3,)
        # one dispatch per outer call: the FlashInfer calls inside flashinfer_sample are nested
        assert d.calls == ["top_k_top_p_mask_logits_v40"] * 2 + ["top_k_top_p_sampling_from_logits_v40"]
        FlashInferInstrumentor().uninstrument()
