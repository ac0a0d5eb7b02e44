"""SGLang adapter against a fake SGLang sampler module (CPU); the real modules: tests/e2e."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from fakes import fake_engines, fake_flashinfer  # noqa: E402

import fib_runtime.adapters as fa  # noqa: E402
import fib_runtime.adapters.sglang as sg  # noqa: E402
from fib_runtime.adapters import base  # noqa: E402
from fib_runtime.adapters.flashinfer import FlashInferInstrumentor  # noqa: E402
from fib_runtime.adapters.sglang import backend as sg_backend  # noqa: E402


class Disp:
    def __init__(self, answer=None):
        self.calls, self.answer = [], answer or {}

    def __call__(self, name, inputs, fallback):
        self.calls.append(name)
        f = self.answer.get(name)
        return f(*inputs) if f else fallback()


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("FIB_PLUGIN_MARKER", str(tmp_path / "m.txt"))
    monkeypatch.setattr(sg, "_DONE_PID", None)
    monkeypatch.setattr(sg, "_BACKEND_PID", None)
    monkeypatch.setattr(sg, "_ACTIVE_PID", None)
    monkeypatch.setattr(sg_backend, "_JOINT", None)
    base.STATS.reset()
    d = Disp()
    monkeypatch.setattr(fa, "runtime_hooks", lambda: (d, None, None))
    with fake_flashinfer.installed(), fake_engines.fake_sglang() as fake:
        fake.d = d
        fake.marker = tmp_path / "m.txt"
        yield fake
        for inst in (sg.instrumentor(), FlashInferInstrumentor(), sg._trigger()):
            if inst.is_instrumented:
                inst.uninstrument()


def _info(b=3):
    return types.SimpleNamespace(top_ks=torch.tensor([1, 5, 1 << 30][:b], dtype=torch.int32),
                                 top_ps=torch.tensor([1.0, 0.9, 0.5][:b]), min_ps=torch.zeros(b),
                                 need_min_p_sampling=False, sampling_seed=None,
                                 sampling_mask_batch_indices=None, max_top_k=None)


def test_register_without_flags_only_adds_backend(env, monkeypatch):
    monkeypatch.delenv("FIB_ENABLE_APPLY", raising=False)
    monkeypatch.delenv("FIB_ENABLE_TRACING", raising=False)
    orig = env.sampler.top_k_top_p_min_p_sampling_from_probs_torch
    sg.register()
    sg.register()
    assert "fib" in env.server_args.SAMPLING_BACKEND_CHOICES
    assert env.sampler.top_k_top_p_min_p_sampling_from_probs_torch is orig
    assert env.marker.read_text().count("sglang register") == 1
    assert not sg._trigger().is_instrumented


def test_register_patches_lazy_and_torch_paths(env, monkeypatch):
    monkeypatch.setenv("FIB_ENABLE_APPLY", "1")
    orig = env.sampler.top_k_top_p_min_p_sampling_from_probs_torch
    sg.register()
    # the main process (no sampler built) stays unpatched: no dispatcher, no prometheus_client
    assert env.sampler.top_k_top_p_min_p_sampling_from_probs_torch is orig
    assert not sg.instrumentor().is_instrumented
    env.sampler.create_sampler()  # what each scheduler's ModelRunner does: activates
    assert sg.instrumentor().is_instrumented
    assert "sglang activated" in env.marker.read_text()
    probs = torch.randn(3, 50).softmax(-1)
    s = env.sampler.Sampler()
    ids, _ = s._sample_from_probs(probs, _info(), None, False)
    assert ids.dtype == torch.int32 and int(ids[0]) == int(probs[0].argmax())
    env.sampler.BACKEND["name"] = "flashinfer"
    s._sample_from_probs(probs, _info(), None, False)  # the LazyImport proxy (form L)
    assert env.d.calls == ["top_k_top_p_sampling_from_probs_joint_v50"] * 2
    # the proxy resolved to fake flashinfer's (patched) function: nested, not dispatched again
    assert fake_flashinfer.CALLS["top_k_top_p_sampling_from_probs"] == 1
    seeded = _info()
    seeded.sampling_seed = torch.arange(3)
    env.sampler.BACKEND["name"] = "pytorch"
    s._sample_from_probs(probs, seeded, None, False)
    assert len(env.d.calls) == 2  # seeded: SGLang's own path


def test_fib_backend(env, monkeypatch):
    monkeypatch.setenv("FIB_ENABLE_APPLY", "1")
    sg.register()
    env.d.answer["top_k_top_p_sampling_from_probs_joint_v50"] = (
        lambda p, k, q: torch.full((p.shape[0],), 7, dtype=torch.int64))
    fs = env.sampler.create_sampler("fib")
    assert type(fs).__name__ == "FibSampler" and isinstance(fs, env.sampler.Sampler)
    ids, _ = fs._sample_from_probs(torch.randn(3, 50).softmax(-1), _info(), None, False)
    assert ids.tolist() == [7, 7, 7] and ids.dtype == torch.int32
    env.d.answer.clear()
    ids, _ = fs._sample_from_probs(torch.randn(3, 50).softmax(-1), _info(), None, False)
    assert ids.shape == (3,)  # fallback: SGLang's pytorch joint sampler (CPU)


def test_batch_top_k_bound_noted(env):
    """The SamplingBatchInfo observers (real SGLang: tests/e2e/test_sglang_import.py): a new batch's
    bound is its requests' smallest top_k, a filtered batch keeps its bound, a merge takes the
    smaller one or none; bounds above 128 are noted on ``top_ks``, and the joint call passes a 1-D
    ``top_ks`` on as the same object (the note travels with it)."""
    from fib_runtime.adapters.sglang import ops as sg_ops
    from fib_runtime.kernels import sampling as S

    NS = types.SimpleNamespace
    specs = {k: sg_ops.SPECS[f"sglang_batch_top_k_{k}"] for k in ("new", "filter", "merge")}

    def new(ks):
        info = NS(top_ks=torch.tensor(ks, dtype=torch.int32))
        batch = NS(reqs=[NS(sampling_params=NS(top_k=k)) for k in ks])
        specs["new"].observe(object, (batch, 1000), {}, info)
        return info

    def noted(t):
        h = S._hints.get(id(t))
        return h[1] if h is not None and h[0] is t else None

    S._hints.clear()
    a, small, b = new([300, 1 << 30, 500]), new([300, 20]), new([200])
    assert noted(a.top_ks) == 300 and a._fib_min_top_k == 300
    assert noted(small.top_ks) is None and small._fib_min_top_k == 20
    a.top_ks = torch.cat([a.top_ks, b.top_ks])  # (what merge_batch does, then the observer)
    specs["merge"].observe(a, (b,), {}, None)
    assert noted(a.top_ks) == 200
    a.top_ks = a.top_ks[[0, 3]]
    specs["filter"].observe(a, ([0, 3], None), {}, None)
    assert noted(a.top_ks) == 200
    unknown = NS(top_ks=torch.tensor([400], dtype=torch.int32))  # (a batch no observer saw)
    a.top_ks = torch.cat([a.top_ks, unknown.top_ks])
    specs["merge"].observe(a, (), {"other": unknown}, None)
    assert noted(a.top_ks) is None and a._fib_min_top_k is None
    probs = torch.randn(3, 50).softmax(-1)
    k = torch.tensor([300, 200, 400], dtype=torch.int32)
    assert sg_ops.joint_call(probs, k, torch.full((3,), 0.9)).inputs[1] is k
    S._hints.clear()


def test_missing_cuda_names_reported(env, monkeypatch):
    monkeypatch.setenv("FIB_ENABLE_APPLY", "1")
    sg.register()
    env.sampler.create_sampler()
    rep = sg.instrumentor().last_report
    assert any(m.startswith("sglang.srt.layers.sampler:top_k_renorm_prob") for m in rep.missing)
    assert "sglang.srt.layers.sampler:top_k_top_p_sampling_from_probs" in rep.patched


def test_pth_hook_gated_and_light(tmp_path):
    src = Path(sg.__file__).with_name("fib_runtime_autoload.pth")
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / src.name).write_text(src.read_text())
    code = ("import site, sys; site.addsitedir(%r); "
            "print('fib_runtime' in sys.modules, 'torch' in sys.modules, "
            "'fib_runtime.adapters.sglang._autoload' in sys.modules)" % str(site_dir))
    envv = {k: v for k, v in os.environ.items() if not k.startswith("FIB_")}
    off = subprocess.run([sys.executable, "-c", code], env=envv, capture_output=True, text=True)
    assert off.stdout.split() == ["False", "False", "False"], off.stderr
    on = subprocess.run([sys.executable, "-c", code], env={**envv, "FIB_ENABLE_APPLY": "1"},
                        capture_output=True, text=True)
    assert on.stdout.split() == ["True", "False", "True"], on.stderr
