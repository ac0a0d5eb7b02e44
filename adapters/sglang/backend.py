"""``--sampling-backend fib``: SGLang's sampler with fib-runtime choosing the top-k/top-p kernel.

:func:`register_backend` calls SGLang's ``register_sampler_backend("fib", FibSampler)`` (SGLang
≥ 0.5.10), which adds ``fib`` to the ``--sampling-backend`` choices and makes
``create_sampler()`` build a :class:`FibSampler` in every scheduler. The plugin's
:func:`fib_runtime.adapters.sglang.register` does it in the main process (before argparse) and
in each scheduler.

What :class:`FibSampler` does with a batch that needs top-k/top-p (not min-p, no per-request
seed, no sampling-mask capture): dispatch ``top_k_top_p_sampling_from_probs_joint_v{V}``
(SGLang's ``joint`` semantics); the fallback is FlashInfer's joint sampler on CUDA when it is
importable, else SGLang's pytorch sampler. Every other batch runs SGLang's pytorch path, which
handles seeds, min-p and capture exactly as ``--sampling-backend pytorch`` would.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional

log = logging.getLogger("fib_runtime.adapters.sglang")

BACKEND = "fib"
_JOINT: Optional[Callable] = None
_LOCK = threading.Lock()


def _builtin_joint(probs, top_ks, top_ps):
    """Fallback of the ``fib`` backend: FlashInfer (CUDA) or SGLang's pytorch joint sampler."""
    if probs.is_cuda:
        try:
            import flashinfer.sampling as fs

            return fs.top_k_top_p_sampling_from_probs(probs.contiguous(), top_ks, top_ps,
                                                      filter_apply_order="joint")
        except Exception:
            pass
    from sglang.srt.layers import sampler as sm

    return sm.top_k_top_p_min_p_sampling_from_probs_torch(probs, top_ks, top_ps, None, False,
                                                           None, None)


def joint_sampler() -> Callable:
    """The wrapped ``(probs, top_ks, top_ps) -> int32 ids`` the ``fib`` backend calls."""
    global _JOINT
    if _JOINT is None:
        with _LOCK:
            if _JOINT is None:
                import wrapt

                from fib_runtime.adapters import runtime_hooks
                from fib_runtime.adapters.base import make_wrapper

                from .ops import SPECS

                dispatcher, recorder, registrar = runtime_hooks()
                if dispatcher is None:  # an explicit backend choice: dispatch even if APPLY unset
                    try:
                        from fib_runtime.dispatch import dispatch as dispatcher
                    except Exception:
                        dispatcher = None
                _JOINT = wrapt.FunctionWrapper(_builtin_joint, make_wrapper(
                    "sglang_fib_backend", SPECS["sglang_fib_backend"].bind, dispatcher, recorder,
                    registrar=registrar))
    return _JOINT


def _make_class():
    from sglang.srt.layers import sampler as sm

    class FibSampler(sm.Sampler):
        """SGLang ``Sampler`` whose top-k/top-p sampling goes through fib-runtime."""

        fib_backend = BACKEND

        def _sample_from_probs(self, probs, sampling_info, positions, simple_sampling_case):
            if simple_sampling_case:  # never consults the backend
                return super()._sample_from_probs(probs, sampling_info, positions, True)
            capture = getattr(sampling_info, "sampling_mask_batch_indices", None) is not None
            if (not capture and getattr(sampling_info, "sampling_seed", None) is None
                    and not getattr(sampling_info, "need_min_p_sampling", False)):
                ids = joint_sampler()(probs, sampling_info.top_ks, sampling_info.top_ps)
                return ids, None
            return self._fib_torch_path(probs, sampling_info, positions, capture)

        def _fib_torch_path(self, probs, sampling_info, positions, capture):
            res = sm.top_k_top_p_min_p_sampling_from_probs_torch(
                probs, sampling_info.top_ks, sampling_info.top_ps, sampling_info.min_ps,
                sampling_info.need_min_p_sampling, sampling_info.sampling_seed, positions,
                return_filtered_probs=capture, max_top_k=getattr(sampling_info, "max_top_k", None))
            if not capture:
                return res, None
            ids, filtered, token_ids, selected = res
            rows = sampling_info.sampling_mask_batch_indices
            pick = lambda t: sm._select_sampling_mask_rows(t, batch_indices=rows)  # noqa: E731
            return ids, sm._SamplingMaskCapture(weights=pick(filtered), token_ids=pick(token_ids),
                                                selected_weight=pick(selected), batch_rows=rows)

    return FibSampler


_CLASS: Any = None


def fib_sampler_class():
    global _CLASS
    if _CLASS is None:
        _CLASS = _make_class()
    return _CLASS


def make_fib_sampler():
    """Factory given to ``register_sampler_backend``: a new :class:`FibSampler`."""
    return fib_sampler_class()()


def register_backend() -> bool:
    """Register ``fib`` with SGLang's sampler registry; False if this SGLang has none."""
    try:
        from sglang.srt.layers import sampler as sm
    except Exception:
        log.debug("fib-runtime: sglang sampler not importable", exc_info=True)
        return False
    reg = getattr(sm, "register_sampler_backend", None)
    if reg is None and getattr(getattr(sm, "__spec__", None), "_initializing", False):
        return False  # reached mid-import (a circular import): the caller retries later
    if reg is None:
        log.info("fib-runtime: this SGLang has no register_sampler_backend (< 0.5.10)")
        return False
    if BACKEND in getattr(sm, "_CUSTOM_SAMPLER_FACTORIES", {}):
        return True
    reg(BACKEND, make_fib_sampler)
    return True
