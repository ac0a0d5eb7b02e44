"""Import-level checks of the SGLang adapter against the real ``sglang`` package (0.5.23).

Run with the engines venv's python (no CUDA, no sgl_kernel: the recipe's light route)::

    /work/venv-vllm/bin/python tests/e2e/sglang_checks.py

Prints one JSON object (the test in ``test_sglang_import.py`` asserts on it):
targets patched / missing, the dispatcher calls seen from SGLang's pytorch path and from the
``fib`` backend, and whether ``--sampling-backend fib`` parses and resolves to our sampler.
"""

from __future__ import annotations

import enum
import json
import os
import sys
import time
import types


def stub_torchvision() -> None:
    """sglang.srt.configs imports torchvision.transforms; the PyPI torchvision breaks on CPU torch."""
    try:
        from transformers.utils import import_utils as iu

        for f in ("is_torchvision_available", "is_torchvision_v2_available"):
            if hasattr(iu, f):
                getattr(iu, f)()
    except Exception:
        pass
    tv = types.ModuleType("torchvision")
    tr = types.ModuleType("torchvision.transforms")
    fn = types.ModuleType("torchvision.transforms.functional")

    class InterpolationMode(enum.Enum):
        NEAREST = "nearest"
        BILINEAR = "bilinear"
        BICUBIC = "bicubic"
        LANCZOS = "lanczos"

    tr.InterpolationMode = fn.InterpolationMode = InterpolationMode
    tv.transforms, tr.functional = tr, fn
    tv.__version__ = "0.0.0"
    sys.modules.update({"torchvision": tv, "torchvision.transforms": tr,
                        "torchvision.transforms.functional": fn})


def batch_top_k_checks(answer: dict, fib_sampler, V: int) -> dict:
    """SGLang's real SamplingBatchInfo (observed): the batch's top_k bound through
    from_schedule_batch, merge_batch and filter_batch, noted on the top_ks tensor, which the fib
    backend's dispatched call then gets (the same object)."""
    import torch
    import sglang.srt.sampling.sampling_batch_info as sbi
    from sglang.srt.sampling.sampling_params import SamplingParams

    from fib_runtime.kernels import sampling as S

    NS = types.SimpleNamespace
    sbi.get_exec = lambda: NS(deterministic=NS(enable_deterministic_inference=False),
                              features=NS(enable_custom_logit_processor=False, enable_watermark=False))

    class Batch:  # (the penalizers hold a weak reference to it)
        def __init__(self, ks):
            self.device = "cpu"
            self.reqs = []
            for k in ks:
                sp = SamplingParams(top_k=k, top_p=0.9)
                sp.normalize(None)
                self.reqs.append(NS(sampling_params=sp, return_sampling_mask=False, custom_logit_processor=None,
                                    sampling_logprobs_mode=None))

    def noted(t):
        h = S._hints.get(id(t))
        return h[1] if h is not None and h[0] is t else None

    S._hints.clear()
    a = sbi.SamplingBatchInfo.from_schedule_batch(Batch([300, -1, 500]), V)
    out = {"new": noted(a.top_ks), "new_values": a.top_ks.tolist()}
    out["small"] = noted(sbi.SamplingBatchInfo.from_schedule_batch(Batch([300, 20]), V).top_ks)
    a.merge_batch(sbi.SamplingBatchInfo.from_schedule_batch(Batch([200]), V))
    out["merged"], out["merged_values"] = noted(a.top_ks), a.top_ks.tolist()
    a.filter_batch([0, 3], torch.tensor([0, 3]))
    out["filtered"], out["filtered_values"] = noted(a.top_ks), a.top_ks.tolist()
    seen = []
    answer[f"top_k_top_p_sampling_from_probs_joint_v{V}"] = (
        lambda p, k, q: seen.append(k) or torch.zeros(p.shape[0], dtype=torch.int64))
    info = NS(top_ks=a.top_ks, top_ps=a.top_ps, min_ps=a.min_ps, need_min_p_sampling=False, sampling_seed=None,
              sampling_mask_batch_indices=None, max_top_k=None)
    fib_sampler._sample_from_probs(torch.randn(2, V).softmax(-1), info, torch.zeros(2, dtype=torch.int64), False)
    answer.clear()
    out["dispatched_same_tensor"] = bool(seen) and seen[0] is a.top_ks
    S._hints.clear()
    return out


def main() -> None:
    t0 = time.time()
    os.environ["FIB_ENABLE_APPLY"] = "1"
    stub_torchvision()
    import torch

    calls = []
    answer = {}

    def dispatcher(name, inputs, fallback):
        calls.append(name)
        if name in answer:
            return answer[name](*inputs)
        return fallback()

    import fib_runtime.adapters as fa

    fa.runtime_hooks = lambda: (dispatcher, None, None)
    t = time.time()
    import sglang.srt.layers.sampler as sm  # noqa: F401
    import_s = time.time() - t
    import importlib

    extra = {}
    for mod in ("sglang.kernels.ops.sampling.renorm", "sglang.srt.layers.layernorm",
                "sglang.srt.layers.attention.flashinfer_backend", "sglang.srt.sampling.sampling_batch_info"):
        try:
            importlib.import_module(mod)
            extra[mod] = "imported"
        except Exception as e:  # noqa: BLE001
            extra[mod] = f"{type(e).__name__}: {e}"[:200]

    # what SGLang binds on CUDA (form L): LazyImport proxies of flashinfer.sampling (real FlashInfer
    # 0.7.2 is importable here; its kernels are not), set before the plugin runs, as on a GPU box
    from sglang.utils import LazyImport

    sm.top_k_top_p_sampling_from_probs = LazyImport("flashinfer.sampling", "top_k_top_p_sampling_from_probs")
    sm.min_p_sampling_from_probs = LazyImport("flashinfer.sampling", "min_p_sampling_from_probs")
    from fib_runtime.adapters import sglang as sg

    NS = types.SimpleNamespace
    exec_bag = NS(kernel=NS(sampling_backend="pytorch"),
                  deterministic=NS(rl_on_policy_target=None, enable_deterministic_inference=False),
                  features=NS(sampling_mask_max_tokens=0))
    # a scheduler process would have published these; stub them for an import-level test
    sm.get_exec = lambda: exec_bag
    sm.get_parallel = lambda: NS(tp_group=NS(device_group=None))
    sm.is_dp_attention_enabled = lambda: False
    sm.get_server_args = lambda: None
    sg.register()
    sg.register()  # re-entrant
    # main-process safety: nothing patched (no dispatcher) until a sampler is built
    patched_before_create = sg.instrumentor().is_instrumented
    created_plain = type(sm.create_sampler()).__name__  # as ModelRunner does: activates
    rep = sg.instrumentor().last_report
    # every target reached (patched) or reported missing
    from fib_runtime.adapters.sglang.targets import TARGETS

    accounted = set(rep.patched) | {m.split(" (")[0] for m in rep.missing} | set(rep.already)

    # 1. SGLang's pytorch backend path reaches our patched torch sampler
    B, V = 4, 97
    probs = torch.randn(B, V).softmax(-1)
    info = types.SimpleNamespace(top_ks=torch.tensor([1, 5, 1 << 30, 10], dtype=torch.int32),
                                 top_ps=torch.tensor([1.0, 0.9, 0.5, 1.0]), min_ps=torch.zeros(B),
                                 need_min_p_sampling=False, sampling_seed=None,
                                 sampling_mask_batch_indices=None, max_top_k=None)
    base_sampler = sm.Sampler()  # with the stubs above, as a scheduler builds it
    ids, _ = base_sampler._sample_from_probs(probs, info, torch.zeros(B, dtype=torch.int64), False)
    pytorch_calls = list(calls)
    ok_top1 = int(ids[0]) == int(probs[0].argmax())
    # 1b. the flashinfer backend branch: the LazyImport proxy is wrapped (and, resolved, reaches
    # the FlashInfer adapter's wrapper, nested: dispatched once)
    exec_bag.kernel.sampling_backend = "flashinfer"
    answer["top_k_top_p_sampling_from_probs_joint_v97"] = (
        lambda p, k, q: torch.zeros(p.shape[0], dtype=torch.int64))
    calls.clear()
    ids_fi, _ = base_sampler._sample_from_probs(probs, info, torch.zeros(B, dtype=torch.int64), False)
    flashinfer_path_calls = list(calls)
    answer.clear()
    exec_bag.kernel.sampling_backend = "pytorch"
    # 2. --sampling-backend fib: parses, resolves to FibSampler, routes through the dispatcher
    from sglang.srt.server_args import SAMPLING_BACKEND_CHOICES

    parsed = None
    try:
        import argparse

        from sglang.srt.server_args import ServerArgs

        p = argparse.ArgumentParser()
        ServerArgs.add_cli_args(p)
        parsed = p.parse_args(["--model-path", "dummy", "--sampling-backend", "fib"]).sampling_backend
    except Exception as e:  # noqa: BLE001
        parsed = f"error: {type(e).__name__}: {e}"[:300]
    factory_is_ours = sm._CUSTOM_SAMPLER_FACTORIES.get("fib") is not None
    try:
        created = type(sm.create_sampler("fib")).__name__
    except Exception as e:  # noqa: BLE001
        created = f"error: {type(e).__name__}: {e}"[:300]
    from fib_runtime.adapters.sglang.backend import make_fib_sampler

    calls.clear()
    fs = make_fib_sampler()
    ids2, _ = fs._sample_from_probs(probs, info, torch.zeros(B, dtype=torch.int64), False)
    fib_calls = list(calls)
    seeded = types.SimpleNamespace(**{**info.__dict__, "sampling_seed": torch.arange(B)})
    calls.clear()
    seeded_error = None
    try:  # SGLang's own seeded sampler (murmur hash) needs sgl_kernel, absent on CPU
        fs._sample_from_probs(probs, seeded, torch.zeros(B, dtype=torch.int64), False)
    except Exception as e:  # noqa: BLE001
        seeded_error = f"{type(e).__name__}: {e}"[:200]
    seeded_calls = list(calls)
    hint = batch_top_k_checks(answer, fs, V)
    sg.instrumentor().uninstrument()
    sg._trigger().uninstrument()
    restored = not hasattr(sm.top_k_top_p_min_p_sampling_from_probs_torch, "_self_wrapper")
    print(json.dumps({
        "sglang_version": __import__("sglang").__version__, "import_sampler_s": round(import_s, 2),
        "modules": extra, "patched": rep.patched, "missing": rep.missing, "deferred": rep.deferred,
        "targets": [t.path for t in TARGETS], "unaccounted": sorted({t.path for t in TARGETS} - accounted),
        "pytorch_path_calls": pytorch_calls, "flashinfer_path_calls": flashinfer_path_calls,
        "flashinfer_path_ids": ids_fi.tolist(), "flashinfer_path_dtype": str(ids_fi.dtype), "top1_is_argmax": ok_top1,
        "ids_dtype": str(ids.dtype), "fib_ids_dtype": str(ids2.dtype),
        "backend_choices_has_fib": "fib" in SAMPLING_BACKEND_CHOICES, "parsed_backend": parsed,
        "create_sampler": created, "factory_registered": factory_is_ours, "fib_backend_calls": fib_calls, "seeded_calls": seeded_calls, "seeded_error": seeded_error,
        "restored": restored, "patched_before_create": patched_before_create,
        "created_plain": created_plain, "hint": hint, "seconds": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
