"""Op specs of the vLLM adapter (see :mod:`fib_runtime.adapters.flashinfer.ops` for the pattern).

``TopKTopPSampler.forward_{native,cpu,cuda}(self, logits, generators, k, p)`` is one sampling
call: logits float32 ``[num_reqs, V]`` (temperature already applied), ``k`` int32 / ``p`` float32
``[num_reqs]`` or None. It maps to

* ``top_k_top_p_sampling_from_logits_v{V}`` when ``k`` or ``p`` is given (a missing one is
  disabled: ``k = V``, ``p = 1``; vLLM's order is top-k, then top-p on the renormalised rest,
  i.e. FlashInfer's ``top_k_first``);
* ``sampling_from_logits_v{V}`` when neither is.

vLLM's exact semantics are kept by *not* dispatching (the original runs) when any request has
its own generator (seeded requests: vLLM draws their noise from that generator), when
``use_fp64_gumbel`` is set, or when the sampler must return processed logits/logprobs.

``apply_top_k_top_p(logits, k, p)`` (a mask, used by the rejection sampler and the new GPU model
runner) maps to ``top_k_top_p_mask_logits_v{V}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from fib_runtime.adapters.base import Call, note_min_top_k
from fib_runtime.definitions import sampling as _defs

PROCESSED_MODES = ("processed_logits", "processed_logprobs")


def _get(args: tuple, kwargs: dict, i: int, name: str) -> Any:
    if len(args) > i:
        return args[i]
    return kwargs.get(name)


def _rows(k: Any, p: Any, batch: int, vocab: int, device) -> Optional[tuple]:
    if k is None:
        k_t = torch.full((batch,), vocab, dtype=torch.int32, device=device)
    elif isinstance(k, torch.Tensor) and k.dim() == 1 and k.shape[0] == batch:
        k_t = k if k.dtype == torch.int32 else k.to(torch.int32)
    else:
        return None
    if p is None:
        p_t = torch.ones((batch,), dtype=torch.float32, device=device)
    elif isinstance(p, torch.Tensor) and p.dim() == 1 and p.shape[0] == batch:
        p_t = p if p.dtype == torch.float32 else p.to(torch.float32)
    else:
        return None
    return k_t, p_t


def _samples(out: Any) -> tuple:
    t = out[0] if isinstance(out, (tuple, list)) else out
    t = t.reshape(-1)
    return (t if t.dtype == torch.int64 else t.to(torch.int64)), None


@dataclass(frozen=True)
class SamplerForwardSpec:
    def bind(self, instance: Any, args: tuple, kwargs: dict) -> Optional[Call]:
        if len(args) + len(kwargs) != 4:
            return None
        logits = _get(args, kwargs, 0, "logits")
        generators = _get(args, kwargs, 1, "generators")
        k = _get(args, kwargs, 2, "k")
        p = _get(args, kwargs, 3, "p")
        if generators:
            return None  # seeded requests: vLLM's own RNG stream
        if instance is not None and (getattr(instance, "use_fp64_gumbel", False)
                                     or getattr(instance, "logprobs_mode", None) in PROCESSED_MODES):
            return None
        if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.dtype != torch.float32:
            return None
        batch, vocab = logits.shape
        if k is None and p is None:
            return Call(_defs.name("sampling_from_logits", vocab), (logits,), ("logits",),
                        adapt=_samples,
                        definition_factory=lambda: _defs.definition("sampling_from_logits", vocab))
        rows = _rows(k, p, batch, vocab, logits.device)
        if rows is None:
            return None
        kind = "top_k_top_p_sampling_from_logits"
        return Call(_defs.name(kind, vocab), (logits,) + rows, ("logits", "top_k", "top_p"),
                    adapt=_samples, definition_factory=lambda: _defs.definition(kind, vocab))


@dataclass(frozen=True)
class FlashInferSampleSpec:
    """``flashinfer_sample(logits, k, p, generators={})`` (vLLM's GPU model runner binds it by
    name): the same mapping as the sampler's forward; requests with generators stay vLLM's."""

    def bind(self, instance: Any, args: tuple, kwargs: dict) -> Optional[Call]:
        if not 3 <= len(args) + len(kwargs) <= 4:
            return None
        gens = _get(args, kwargs, 3, "generators")
        call = SamplerForwardSpec().bind(None, (_get(args, kwargs, 0, "logits"), gens or {},
                                                _get(args, kwargs, 1, "k"), _get(args, kwargs, 2, "p")), {})
        if call is None or call.definition.startswith("sampling_from_logits"):
            return None  # flashinfer_sample asserts k or p is given

        def adapt(out: Any) -> Any:
            return _samples(out)[0]

        call.adapt = adapt
        return call


@dataclass(frozen=True)
class ApplyTopKTopPSpec:
    """``apply_top_k_top_p(logits, k, p)``, ``apply_top_k_top_p_pytorch(logits, k, p,
    allow_cpu_sync=False)`` and ``apply_top_k_only(logits, k)`` (``k_only``)."""

    k_only: bool = False

    def bind(self, instance: Any, args: tuple, kwargs: dict) -> Optional[Call]:
        n = len(args) + len(kwargs)
        logits = _get(args, kwargs, 0, "logits")
        k = _get(args, kwargs, 1, "k")
        if self.k_only:
            if n != 2:
                return None
            p = None
        else:
            if n not in (3, 4) or (n == 4 and "allow_cpu_sync" not in kwargs and len(args) < 4):
                return None
            p = _get(args, kwargs, 2, "p")
        if k is None and p is None:
            return None  # the original returns logits untouched
        if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.dtype != torch.float32:
            return None
        batch, vocab = logits.shape
        rows = _rows(k, p, batch, vocab, logits.device)
        if rows is None:
            return None
        kind = "top_k_top_p_mask_logits"

        def adapt(out: Any) -> torch.Tensor:
            t = out[0] if isinstance(out, (tuple, list)) else out
            if t.shape != logits.shape:
                raise ValueError("masked logits of the wrong shape")
            return t if t.dtype == logits.dtype else t.to(logits.dtype)

        return Call(_defs.name(kind, vocab), (logits,) + rows, ("logits", "top_k", "top_p"),
                    adapt=adapt, definition_factory=lambda: _defs.definition(kind, vocab))


@dataclass(frozen=True)
class InputBatchTopKSpec:
    """``InputBatch._make_sampling_metadata()`` (vLLM's model runner, on each batch change): the
    returned metadata's ``top_k`` is the device slice ``top_k[:num_reqs]`` that the sampler gets;
    its smallest entry is on the host (``top_k_cpu``). Observed only: vLLM's call is unchanged."""

    def observe(self, instance: Any, args: tuple, kwargs: dict, md: Any) -> None:
        k = getattr(md, "top_k", None)
        if k is None:
            return
        n = getattr(instance, "num_reqs", 0)
        if n:
            note_min_top_k(k, instance.top_k_cpu[:n].min())  # (no top-k: the vocabulary size)


@dataclass(frozen=True)
class SamplingStatesTopKSpec:
    """``SamplingStates.get_top_k_top_p(expanded_idx_mapping, idx_mapping_np)`` (the GPU model
    runner v2, every step): the gathered per-row ``top_k`` it returns goes to ``flashinfer_sample``;
    its entries' host copies are ``top_k.np[idx_mapping_np]``. Observed only."""

    def observe(self, instance: Any, args: tuple, kwargs: dict, out: Any) -> None:
        k = out[0] if isinstance(out, tuple) and out else None
        if k is None:
            return
        idx = args[1] if len(args) > 1 else kwargs.get("idx_mapping_np")
        if idx is not None and len(idx):
            note_min_top_k(k, instance.top_k.np[idx].min())


SPECS = {
    "vllm_topk_topp_sample": SamplerForwardSpec(),
    "vllm_flashinfer_sample": FlashInferSampleSpec(),
    "vllm_apply_top_k_top_p": ApplyTopKTopPSpec(),
    "vllm_apply_top_k_only": ApplyTopKTopPSpec(k_only=True),
    "vllm_input_batch_top_k": InputBatchTopKSpec(),
    "vllm_sampling_states_top_k": SamplingStatesTopKSpec(),
}
