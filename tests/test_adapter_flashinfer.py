"""FlashInfer adapter against the fake flashinfer (CPU): routing, idempotence, restore, guards."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from fakes import fake_engines, fake_flashinfer  # noqa: E402

from fib_runtime.adapters import base  # noqa: E402
from fib_runtime.adapters.flashinfer import FlashInferInstrumentor  # noqa: E402
from fib_runtime.adapters.flashinfer.targets import TARGETS  # noqa: E402


class FakeDispatcher:
    """Records calls; answers with ``solutions[name](*inputs)`` or the fallback."""

    def __init__(self, solutions=None, raise_exc=None):
        self.calls = []
        self.solutions = solutions or {}
        self.raise_exc = raise_exc

    def __call__(self, name, inputs, fallback):
        self.calls.append((name, inputs))
        if self.raise_exc is not None:
            raise self.raise_exc
        sol = self.solutions.get(name)
        if sol is None:
            return fallback(*inputs)
        return sol(*inputs)


class FakeRecorder:
    def __init__(self):
        self.records = []

    def __call__(self, definition, inputs):
        self.records.append((definition, inputs))
        return True


@pytest.fixture
def fi():
    with fake_flashinfer.installed() as fake:
        inst = FlashInferInstrumentor()
        base.STATS.reset()
        yield fake
        if inst.is_instrumented:
            inst.uninstrument()


def _probs(b=4, v=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, v, generator=g).softmax(-1)


def originals(fake):
    out = {}
    for t in TARGETS:
        mod = fake.modules.get(t.module)
        if mod is None:
            continue
        owner, attr = base._resolve_owner(mod, t.attr)
        out[t.path] = base._raw(owner, attr) if isinstance(owner, type) else getattr(owner, attr)
    return out


def current(fake, path):
    module, attr = path.split(":")
    owner, name = base._resolve_owner(fake.modules[module], attr)
    return base._raw(owner, name)


def test_all_targets_patched_and_restored_exactly(fi):
    before = originals(fi)
    rep = FlashInferInstrumentor().instrument(FakeDispatcher(), None)
    assert rep.refused is None
    assert set(rep.patched) == set(before), rep.missing
    for path in before:
        assert base.is_fib_wrapper(current(fi, path)), path
    # the module alias (top_p_renorm_prob) and the package re-export are wrapped too
    assert base.is_fib_wrapper(fi.pkg.top_k_top_p_sampling_from_probs)
    FlashInferInstrumentor().uninstrument()
    for path, orig in before.items():
        assert current(fi, path) is orig, path


def test_instrument_twice_one_layer_and_uninstrument_twice_warns(fi, caplog):
    inst = FlashInferInstrumentor()
    inst.instrument(FakeDispatcher(), None)
    w1 = fi.sampling.top_p_sampling_from_probs
    rep2 = inst.instrument(FakeDispatcher(), None)
    assert rep2.patched == [] and rep2.already
    w2 = fi.sampling.top_p_sampling_from_probs
    assert w1 is w2
    assert not base.is_fib_wrapper(w2.__wrapped__)  # exactly one layer
    inst.uninstrument()
    with caplog.at_level("WARNING"):
        inst.uninstrument()
    assert "not instrumented" in caplog.text
    # re-instrument after uninstrument works again (one layer)
    inst.instrument(FakeDispatcher(), None)
    assert not base.is_fib_wrapper(fi.sampling.top_p_sampling_from_probs.__wrapped__)


def test_sampling_dispatched_with_public_names(fi):
    d = FakeDispatcher()
    FlashInferInstrumentor().instrument(d, None)
    p = _probs(3, 77)
    fi.sampling.top_k_top_p_sampling_from_probs(p, torch.tensor([5, 10, 77]), 0.9)
    fi.pkg.top_p_sampling_from_probs(p, 0.5)
    fi.sampling.top_k_sampling_from_probs(p, 3)
    fi.sampling.min_p_sampling_from_probs(p, 0.1)
    fi.sampling.top_k_top_p_sampling_from_probs(p, 5, 0.9, filter_apply_order="joint")
    names = [c[0] for c in d.calls]
    assert names == ["top_k_top_p_sampling_from_probs_v77", "top_p_sampling_from_probs_v77",
                     "top_k_sampling_from_probs_v77", "min_p_sampling_from_probs_v77",
                     "top_k_top_p_sampling_from_probs_joint_v77"]
    # per-row parameters as definition dtypes, scalars broadcast
    _, inputs = d.calls[0]
    assert inputs[1].dtype == torch.int32 and inputs[2].dtype == torch.float32
    assert inputs[2].shape == (3,)


def test_scalar_top_k_noted_for_the_large_k_kernel(fi):
    """A scalar top_k > 128 is broadcast into a per-row tensor for the dispatcher and its value noted
    as that tensor's min_top_k (fib's sampling kernels then take their large-k path); smaller
    scalars and per-row tensors are not noted."""
    from fib_runtime.kernels import sampling as S

    S._hints.clear()
    d = FakeDispatcher()
    FlashInferInstrumentor().instrument(d, None)
    p = _probs(3, 400)
    fi.sampling.top_k_top_p_sampling_from_probs(p, 300, 0.9)
    k_t = d.calls[-1][1][1]
    assert k_t.tolist() == [300, 300, 300] and S._hints[id(k_t)] == (k_t, 300)
    fi.sampling.top_k_sampling_from_probs(p, 50)
    assert id(d.calls[-1][1][1]) not in S._hints
    fi.sampling.top_k_top_p_sampling_from_probs(p, torch.tensor([200, 300, 400]), 0.9)
    assert id(d.calls[-1][1][1]) not in S._hints and len(S._hints) == 1
    S._hints.clear()


def test_nested_calls_dispatched_and_counted_once(fi):
    d = FakeDispatcher()
    FlashInferInstrumentor().instrument(d, None)
    logits = torch.randn(2, 40)
    out = fi.sampling.top_k_top_p_sampling_from_logits(logits, 5, 0.9)
    assert out.dtype == torch.int32
    assert [c[0] for c in d.calls] == ["top_k_top_p_sampling_from_logits_v40"]
    # the original ran and its nested calls went straight to the originals
    assert fake_flashinfer.CALLS["top_k_mask_logits"] == 1
    assert fake_flashinfer.CALLS["top_p_sampling_from_probs"] == 1
    st = base.stats()
    assert st["top_k_top_p_sampling_from_logits"]["calls"] == 1
    assert "top_k_mask_logits" not in st and "top_p_sampling_from_probs" not in st
    # cake falls back to flashinfer.sampling internally: still one dispatch
    d.calls.clear()
    fi.cake_sampling.top_k_top_p_sampling_from_probs(_probs(2, 40), 5, 0.9)
    assert [c[0] for c in d.calls] == ["top_k_top_p_sampling_from_probs_v40"]


def test_solution_output_adapted_to_flashinfer_contract(fi):
    def sol(probs, top_k, top_p):
        return torch.zeros(probs.shape[0], dtype=torch.int64)  # definitions return int64

    d = FakeDispatcher({"top_k_top_p_sampling_from_probs_v30": sol})
    FlashInferInstrumentor().instrument(d, None)
    out = fi.sampling.top_k_top_p_sampling_from_probs(_probs(4, 30), 3, 0.5)
    assert out.dtype == torch.int32 and out.tolist() == [0, 0, 0, 0]
    assert fake_flashinfer.CALLS["top_k_top_p_sampling_from_probs"] == 0
    assert base.stats()["top_k_top_p_sampling_from_probs"]["dispatched"] == 1


def test_rng_and_unsupported_arguments_left_to_flashinfer(fi):
    d = FakeDispatcher()
    FlashInferInstrumentor().instrument(d, None)
    p = _probs(2, 20)
    g = torch.Generator().manual_seed(1)
    fi.sampling.top_p_sampling_from_probs(p, 0.9, generator=g)
    fi.sampling.top_p_sampling_from_probs(p, 0.9, indices=torch.tensor([0, 1]))
    fi.sampling.top_p_sampling_from_probs(p, 0.9, seed=3, offset=4)
    fi.sampling.top_p_sampling_from_probs(p.double(), 0.9)
    fi.sampling.top_k_top_p_sampling_from_probs(p, 3, 0.9, filter_apply_order="weird")
    assert d.calls == []
    assert fake_flashinfer.CALLS["top_p_sampling_from_probs"] == 4
    assert base.stats()["top_p_sampling_from_probs"]["unbound"] == 4


@pytest.mark.parametrize("exc", [RuntimeError("dispatcher bug"), KeyError("x")])
def test_raising_dispatcher_never_breaks_the_call(fi, exc, monkeypatch):
    monkeypatch.delenv("FIB_STRICT", raising=False)
    FlashInferInstrumentor().instrument(FakeDispatcher(raise_exc=exc), None)
    out = fi.sampling.top_p_sampling_from_probs(_probs(2, 20), 0.9)
    assert out.shape == (2,) and fake_flashinfer.CALLS["top_p_sampling_from_probs"] == 1
    assert base.stats()["top_p_sampling_from_probs"]["error_dispatch"] == 1


def test_strict_mode_reraises(fi, monkeypatch):
    monkeypatch.setenv("FIB_STRICT", "1")
    FlashInferInstrumentor().instrument(FakeDispatcher(raise_exc=RuntimeError("boom")), None)
    with pytest.raises(RuntimeError, match="boom"):
        fi.sampling.top_p_sampling_from_probs(_probs(2, 20), 0.9)


def test_original_exception_propagates_once(fi):
    FlashInferInstrumentor().instrument(FakeDispatcher(), None)
    with pytest.raises(Exception):
        fi.sampling.top_p_sampling_from_probs(torch.zeros(2, 20), 0.9)  # multinomial on zeros
    assert fake_flashinfer.CALLS["top_p_sampling_from_probs"] == 1  # not run twice


def test_bad_solution_output_falls_back(fi, monkeypatch):
    monkeypatch.delenv("FIB_STRICT", raising=False)
    d = FakeDispatcher({"merge_state_h2_d4": lambda *a: None})
    FlashInferInstrumentor().instrument(d, None)
    v, s = torch.randn(3, 2, 4), torch.randn(3, 2)
    out = fi.cascade.merge_state(v, s, v, s)
    assert isinstance(out, tuple) and out[0].shape == (3, 2, 4)
    assert base.stats()["merge_state"]["error_adapt"] == 1


def test_failing_recorder_and_binder_run_original(fi, monkeypatch):
    monkeypatch.delenv("FIB_STRICT", raising=False)

    def bad_recorder(definition, inputs):
        raise OSError("disk full")

    FlashInferInstrumentor().instrument(None, bad_recorder)
    out = fi.sampling.top_k_sampling_from_probs(_probs(2, 20), 3)
    assert out.shape == (2,)
    assert base.stats()["top_k_sampling_from_probs"]["error_record"] == 1


def test_recorder_gets_definition_and_inputs_registrar_once(fi):
    r = FakeRecorder()
    registered = []
    FlashInferInstrumentor().instrument(None, r, registrar=registered.append)
    fi.sampling.top_k_top_p_sampling_from_probs(_probs(2, 33), 3, 0.8)
    fi.sampling.top_k_top_p_sampling_from_probs(_probs(5, 33), 3, 0.8)
    (name, inputs), _ = r.records
    assert name == "top_k_top_p_sampling_from_probs_v33" and len(inputs) == 3
    assert [d["name"] for d in registered] == ["top_k_top_p_sampling_from_probs_v33"]
    assert list(registered[0]["inputs"]) == ["probs", "top_k", "top_p"]


def test_names_bound_early_late_and_lazy(fi):
    d = FakeDispatcher()
    with fake_engines.flashinfer_engines() as eng:
        rep = FlashInferInstrumentor().instrument(d, None)
        assert "vllm_fib_fake_early.top_k_top_p_sampling_from_probs" in rep.aliases
        p = _probs(2, 21)
        eng.early.sample(p, 3, 0.9)
        eng.late.sample(p, 3, 0.9)
        eng.lazy.sample(p, 3, 0.9)  # resolved now: gets the patched function
        assert [c[0] for c in d.calls] == ["top_k_top_p_sampling_from_probs_v21"] * 2 + \
            ["top_k_top_p_sampling_from_probs_joint_v21"]
        FlashInferInstrumentor().uninstrument()
        assert eng.early.top_k_top_p_sampling_from_probs is fi.sampling.top_k_top_p_sampling_from_probs
        assert not base.is_fib_wrapper(eng.early.top_k_top_p_sampling_from_probs)


def test_missing_targets_skipped_and_reported():
    with fake_flashinfer.installed(only=("flashinfer.sampling",)) as fake:
        for n in ("norm", "cascade", "cake_sampling", "decode", "prefill"):
            if hasattr(fake.pkg, n):
                delattr(fake.pkg, n)
        for n in ("rmsnorm", "merge_state"):
            if hasattr(fake.pkg, n):
                delattr(fake.pkg, n)
        inst = FlashInferInstrumentor()
        try:
            rep = inst.instrument(FakeDispatcher(), None, defer=False)
            assert any(m.startswith("flashinfer:rmsnorm") for m in rep.missing)
            assert any(m.startswith("flashinfer.norm:rmsnorm") for m in rep.missing)
            assert "flashinfer.sampling:top_p_sampling_from_probs" in rep.patched
        finally:
            inst.uninstrument()


def test_deferred_module_patched_on_import(fi):
    # flashinfer.norm "not imported yet": instrument defers it, the import hook patches it
    norm = sys.modules.pop("flashinfer.norm")
    inst = FlashInferInstrumentor()
    rep = inst.instrument(FakeDispatcher(), None)
    assert "flashinfer.norm:rmsnorm" in rep.deferred
    sys.modules["flashinfer.norm"] = norm
    import wrapt

    wrapt.notify_module_loaded(norm)
    assert base.is_fib_wrapper(norm.rmsnorm)
    inst.uninstrument()
    assert not base.is_fib_wrapper(norm.rmsnorm)


def test_version_check_refuses(monkeypatch):
    with fake_flashinfer.installed(version="0.1.0"):
        monkeypatch.setattr(base, "installed_version", lambda dep: "0.1.0")
        inst = FlashInferInstrumentor()
        rep = inst.instrument(FakeDispatcher(), None)
        assert rep.refused and not rep.patched and not inst.is_instrumented
        assert base.check_dependency(base.Dependency("x", min="0.6", max="0.9")) is not None
        monkeypatch.setattr(base, "installed_version", lambda dep: "0.7.2.post1")
        assert base.check_dependency(base.Dependency("x", min="0.6", max="0.9")) is None


def test_norm_dispatch_inplace_contract(fi):
    h = 8

    def sol(x, r, w):
        return torch.full_like(x, 2.0)

    d = FakeDispatcher({f"fused_add_rmsnorm_h{h}": sol})
    FlashInferInstrumentor().instrument(d, None)
    x = torch.ones(3, h, dtype=torch.bfloat16)
    r = torch.ones(3, h, dtype=torch.bfloat16)
    w = torch.ones(h, dtype=torch.bfloat16)
    assert fi.norm.fused_add_rmsnorm(x, r, w, 1e-5) is None
    assert torch.all(r == 2) and torch.all(x == 2)
    fi.norm.fused_add_rmsnorm(x, r, w)  # eps 1e-6 (default): not the definition's eps
    fi.pkg.rmsnorm(x, w, eps=1e-5)
    assert [c[0] for c in d.calls] == [f"fused_add_rmsnorm_h{h}", f"rmsnorm_h{h}"]


def test_cascade_wrapper_plan_run_and_merge(fi):
    d = FakeDispatcher()
    registered = []
    FlashInferInstrumentor().instrument(d, None, registrar=registered.append)
    w = fi.cascade.MultiLevelCascadeAttentionWrapper(2)
    ind = [torch.tensor([0, 1], dtype=torch.int32)] * 2
    w.begin_forward(ind, ind, ind, ind, 4, 2, 8, 16)
    q = torch.randn(1, 4, 8)
    kv = torch.randn(3, 2, 16, 2, 8)
    out = w.run(q, kv)
    assert out.shape == q.shape
    assert [c[0] for c in d.calls] == ["multi_level_cascade_run_h4_kv2_d8_ps16"]
    # inner prefill runs and merge_state_in_place are nested: originals, not dispatched
    assert fake_flashinfer.CALLS["merge_state_in_place"] == 1
    v, s = torch.randn(3, 2, 4), torch.randn(3, 2)
    fi.cascade.merge_state_in_place(v, s, v.clone(), s.clone())
    fi.pkg.merge_states(torch.randn(3, 5, 2, 4), torch.randn(3, 5, 2))
    assert [c[0] for c in d.calls][1:] == ["merge_state_in_place_h2_d4", "merge_states_h2_d4"]
    # generated definitions (the cascade owner's generator) at the call's dtype and level count
    by_name = {r["name"]: r for r in registered}
    assert by_name["merge_states_h2_d4"]["inputs"]["v"]["dtype"] == "float32"
    run_def = by_name["multi_level_cascade_run_h4_kv2_d8_ps16"]
    assert "kv_last_page_len_1" in run_def["inputs"] and list(run_def["inputs"])[-1] == "sm_scale"


def test_attention_aliases_all_reach_one_dispatch(fi):
    d = FakeDispatcher()
    FlashInferInstrumentor().instrument(d, None)
    w = fi.decode.BatchDecodeWithPagedKVCacheWrapper()
    b, hq, hkv, dim = 2, 4, 2, 8
    indptr = torch.tensor([0, 3, 5], dtype=torch.int32)
    w.begin_forward(indptr, torch.arange(5, dtype=torch.int32), torch.ones(2, dtype=torch.int32),
                    hq, hkv, dim, 1)
    q = torch.randn(b, hq, dim)
    kv = (torch.randn(9, 1, hkv, dim), torch.randn(9, 1, hkv, dim))
    w.forward(q, kv)
    w.run(q, kv)
    o, lse = w.run_return_lse(q, kv)
    o2, lse2 = w.forward_return_lse(q, kv)
    assert lse.shape == (b, hq) and lse2.shape == (b, hq)
    assert [c[0] for c in d.calls] == ["gqa_paged_decode_h4_kv2_d8_ps1"] * 4
    # SGLang's fast_decode_plan updates the wrapper's own state: the next run sees it
    fi.decode.fast_decode_plan(w, torch.tensor([0, 1, 2], dtype=torch.int32),
                               torch.arange(2, dtype=torch.int32), None, hq, hkv, dim, 1)
    w.run(q, kv)
    assert d.calls[-1][1][3].tolist() == [0, 1, 2]
    # prefill: aliases patched, calls observed and run unchanged
    pw = fi.prefill.BatchPrefillWithPagedKVCacheWrapper()
    pw.begin_forward()
    pw.forward_return_lse(q)
    pw.run_return_lse(q)
    st = base.stats()
    assert st["paged_prefill_run"]["calls"] == 2 and st["wrapper_plan"]["calls"] >= 2
