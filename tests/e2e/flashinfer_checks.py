"""The FlashInfer adapter against the real flashinfer-python 0.7.2.post1 modules (CPU: they
import, their kernels raise). Prints one JSON object for ``test_flashinfer_real.py``."""

from __future__ import annotations

import json
import sys


def main() -> None:
    import importlib

    import torch

    for m in ("flashinfer", "flashinfer.sampling", "flashinfer.cake_sampling", "flashinfer.norm",
              "flashinfer.cascade", "flashinfer.decode", "flashinfer.prefill", "flashinfer.attention._core"):
        importlib.import_module(m)
    from fib_runtime.adapters import base
    from fib_runtime.adapters.flashinfer import FlashInferInstrumentor
    from fib_runtime.adapters.flashinfer.targets import TARGETS

    def raw(t):
        owner, attr = base._resolve_owner(sys.modules[t.module], t.attr)
        return base._raw(owner, attr)

    before = {t.path: raw(t) for t in TARGETS}
    calls = []

    def dispatcher(name, inputs, fallback):
        calls.append(name)
        if name.startswith("top_k_top_p_sampling_from_probs_v"):
            return torch.zeros(inputs[0].shape[0], dtype=torch.int64)
        return fallback()

    inst = FlashInferInstrumentor()
    rep = inst.instrument(dispatcher, None)
    rep2 = inst.instrument(dispatcher, None)
    import flashinfer

    one_layer = all(not base.is_fib_wrapper(getattr(raw(t), "__wrapped__", None)) for t in TARGETS)
    probs = torch.softmax(torch.randn(3, 50), -1)
    out = flashinfer.top_k_top_p_sampling_from_probs(probs, 5, 0.9)  # package re-export, dispatched
    err = None
    try:
        flashinfer.sampling.top_p_sampling_from_probs(probs, 0.9)  # not answered: FlashInfer runs (raises on CPU)
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"[:160]
    # class aliases on the real classes are separate attributes, each wrapped
    D = flashinfer.decode.BatchDecodeWithPagedKVCacheWrapper
    P = flashinfer.prefill.BatchPrefillWithPagedKVCacheWrapper
    alias_wrapped = {f"{c.__name__}.{a}": base.is_fib_wrapper(vars(c)[a])
                     for c in (D, P) for a in ("plan", "begin_forward", "run", "run_return_lse", "forward",
                                               "forward_return_lse")}
    inst.uninstrument()
    restored = all(raw(t) is before[t.path] for t in TARGETS)
    print(json.dumps({"version": flashinfer.__version__, "patched": len(rep.patched), "targets": len(TARGETS),
                      "missing": rep.missing, "second_patched": len(rep2.patched), "one_layer": one_layer,
                      "aliases": rep.aliases, "dispatched_out": out.tolist(), "dtype": str(out.dtype),
                      "calls": calls, "fallback_error": err, "alias_wrapped": alias_wrapped,
                      "restored": restored}))


if __name__ == "__main__":
    main()
