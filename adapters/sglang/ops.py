"""Op specs of the SGLang adapter: SGLang's own torch samplers; the FlashInfer-named ones reuse
:mod:`fib_runtime.adapters.flashinfer.ops` (same signatures).

``top_k_top_p_min_p_sampling_from_probs_torch(probs, top_ks, top_ps, min_ps, need_min_p_sampling,
sampling_seed, positions, *, return_filtered_probs=False, max_top_k=None)`` is SGLang's
``joint`` filter (top-k ∩ top-p of the unrenormalised distribution; ``TOP_K_ALL = 1 << 30``
means no top-k) and maps to ``top_k_top_p_sampling_from_probs_joint_v{V}``. Seeded requests
(``sampling_seed``: deterministic inference), min-p and the filtered-probs capture run SGLang's
code unchanged.

``SamplingBatchInfo.from_schedule_batch`` / ``filter_batch`` / ``merge_batch`` are observed, not
dispatched (:class:`BatchTopKSpec`): a lower bound of the batch's top_k, kept on the host beside
SGLang's own ``max_top_k``, noted on the ``top_ks`` tensor its sampler gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from fib_runtime.adapters.base import Call, note_min_top_k
from fib_runtime.adapters.flashinfer import ops as fi_ops
from fib_runtime.definitions import sampling as _defs

_TORCH_PARAMS = ("probs", "top_ks", "top_ps", "min_ps", "need_min_p_sampling", "sampling_seed",
                 "positions", "return_filtered_probs", "max_top_k")


def _int32(out: Any) -> torch.Tensor:
    t = out[0] if isinstance(out, (tuple, list)) else out
    t = t.reshape(-1)
    return t if t.dtype == torch.int32 else t.to(torch.int32)


def joint_call(probs: Any, top_ks: Any, top_ps: Any) -> Optional[Call]:
    if not isinstance(probs, torch.Tensor) or probs.dim() != 2 or probs.dtype != torch.float32:
        return None
    if not isinstance(top_ks, torch.Tensor) or not isinstance(top_ps, torch.Tensor):
        return None
    batch, vocab = probs.shape
    # (a 1-D top_ks goes on as the same object: a min_top_k note on it reaches the kernel)
    k = top_ks if top_ks.dim() == 1 else top_ks.reshape(-1)
    p = top_ps.reshape(-1)
    if k.shape[0] != batch or p.shape[0] != batch:
        return None
    k = k if k.dtype == torch.int32 else k.clamp(max=2**31 - 1).to(torch.int32)
    p = p if p.dtype == torch.float32 else p.to(torch.float32)
    kind = "top_k_top_p_sampling_from_probs_joint"
    return Call(_defs.name(kind, vocab), (probs, k, p), ("probs", "top_k", "top_p"), adapt=_int32,
                definition_factory=lambda: _defs.definition(kind, vocab))


@dataclass(frozen=True)
class TorchJointSpec:
    def bind(self, instance: Any, args: tuple, kwargs: dict) -> Optional[Call]:
        vals = fi_ops._collect(_TORCH_PARAMS, args, kwargs)
        if vals is None or vals.get("need_min_p_sampling") or vals.get("sampling_seed") is not None \
                or vals.get("return_filtered_probs"):
            return None
        return joint_call(vals.get("probs"), vals.get("top_ks"), vals.get("top_ps"))


@dataclass(frozen=True)
class TorchPlainSpec:
    def bind(self, instance: Any, args: tuple, kwargs: dict) -> Optional[Call]:
        vals = fi_ops._collect(("probs", "sampling_seed", "positions"), args, kwargs)
        if vals is None or vals.get("sampling_seed") is not None:
            return None
        probs = vals.get("probs")
        if not isinstance(probs, torch.Tensor) or probs.dim() != 2 or probs.dtype != torch.float32:
            return None
        vocab = probs.shape[1]
        return Call(_defs.name("sampling_from_probs", vocab), (probs,), ("probs",), adapt=_int32,
                    definition_factory=lambda: _defs.definition("sampling_from_probs", vocab))


@dataclass(frozen=True)
class FibBackendSpec:
    """``--sampling-backend fib``: the joint top-k/top-p sample of :class:`FibSampler`."""

    def bind(self, instance: Any, args: tuple, kwargs: dict) -> Optional[Call]:
        if len(args) != 3 or kwargs:
            return None
        return joint_call(*args)


# the host bound's attribute on a SamplingBatchInfo (a plain dataclass; copy_for_forward's copy
# drops it, the note on its top_ks tensor stays)
_MIN_ATTR = "_fib_min_top_k"


@dataclass(frozen=True)
class BatchTopKSpec:
    """``SamplingBatchInfo`` (every batch change in a scheduler): a lower bound of the batch's
    per-row top_k, kept on the host the way SGLang keeps ``max_top_k``. ``new``: the smallest
    ``sampling_params.top_k`` of the batch's requests (``TOP_K_ALL`` for no top-k); ``filter``: the
    bound stays (the kept rows' minimum is at least the batch's); ``merge``: the smaller of the two
    batches' bounds (none if either has none). The bound is noted on the new ``top_ks`` tensor
    (``note_min_top_k``: above 128 it picks fib's large-k kernel). Observed only: SGLang's call is
    unchanged."""

    kind: str  # "new", "filter" or "merge"

    def observe(self, instance: Any, args: tuple, kwargs: dict, out: Any) -> None:
        if self.kind == "new":
            info = out
            batch = args[0] if args else kwargs.get("batch")
            reqs = getattr(batch, "reqs", None)
            m = min(r.sampling_params.top_k for r in reqs) if reqs else None
        elif self.kind == "filter":
            info = instance
            m = getattr(instance, _MIN_ATTR, None)
        else:
            info = instance
            other = args[0] if args else kwargs.get("other")
            a, b = getattr(instance, _MIN_ATTR, None), getattr(other, _MIN_ATTR, None)
            m = None if a is None or b is None else min(a, b)
        setattr(info, _MIN_ATTR, m)
        if m is not None:
            note_min_top_k(info.top_ks, m)


SPECS = {
    **fi_ops.SPECS,
    "sglang_torch_top_k_top_p_min_p": TorchJointSpec(),
    "sglang_torch_sampling_from_probs": TorchPlainSpec(),
    "sglang_fib_backend": FibBackendSpec(),
    "sglang_batch_top_k_new": BatchTopKSpec("new"),
    "sglang_batch_top_k_filter": BatchTopKSpec("filter"),
    "sglang_batch_top_k_merge": BatchTopKSpec("merge"),
}
