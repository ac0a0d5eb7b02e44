"""FlashInfer Trace Definitions of the sampling ops the adapters intercept, at any vocab size.

Names follow the public dataset: the FlashInfer API name plus one const-axis token, ``_v{V}``
(``top_k_top_p_sampling_from_probs_v128256``). The top-k + top-p ops come in two filter orders:
``top_k_first`` (top-k, renormalise, then top-p: FlashInfer's default, vLLM's semantics and the
public dataset's reference) keeps the plain name; ``joint`` (top-k ∩ top-p of the unrenormalised
distribution, SGLang's choice) appends ``_joint`` before the vocab token
(``top_k_top_p_sampling_from_probs_joint_v128256``).

    from fib_runtime.definitions import sampling
    d = sampling.definition("top_k_top_p_sampling_from_probs", 128256)   # a dict
    sampling.name("top_p_sampling_from_probs", 32000)  # 'top_p_sampling_from_probs_v32000'

Every definition has var axis ``batch_size`` and const axis ``vocab_size``; per-row parameters are
``top_k`` int32 ``[batch_size]``, ``top_p`` / ``min_p`` float32 ``[batch_size]``; samples are int64
``[batch_size]`` (as in the public dataset; the adapters cast back to what the engine expects).
The ``reference`` is a float32 PyTorch ``run`` (vectorised, sort-based). Conventions it fixes:
``top_k <= 0`` or ``>= V`` disables top-k; ties at the top-k boundary keep the lower index (a
stable descending sort); top-p keeps the smallest prefix whose mass reaches ``p`` (at least one
token; ``p >= 1`` keeps everything); min-p keeps ``prob >= min_p * max_prob``.
"""

from __future__ import annotations

import functools
from typing import Dict, Tuple

__all__ = ["KINDS", "name", "definition", "parse_name"]

_PREAMBLE = '''import torch


def _top_k_mask(x, top_k):
    # x: [B, V] float32 scores (probs or logits); keep the top_k[i] largest per row (stable: lower
    # index wins ties). top_k <= 0 or >= V keeps the whole row.
    B, V = x.shape
    k = top_k.to(torch.int64).reshape(-1)
    k = torch.where((k <= 0) | (k >= V), torch.full_like(k, V), k)
    order = torch.sort(x, dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(V, device=x.device).expand(B, V))
    return rank < k[:, None]


def _top_p_mask(probs, top_p):
    # keep the smallest prefix (by descending prob) whose mass reaches p; always >= 1 token
    B, V = probs.shape
    p = top_p.to(torch.float32).reshape(-1, 1)
    vals, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    before = torch.cumsum(vals, dim=-1) - vals          # mass strictly before each token
    keep_sorted = before <= p * vals.sum(dim=-1, keepdim=True)
    keep_sorted[:, 0] = True
    keep = torch.zeros_like(keep_sorted)
    keep.scatter_(1, order, keep_sorted)
    return keep


def _renorm(probs, keep):
    x = torch.where(keep, probs, torch.zeros_like(probs))
    return x / x.sum(dim=-1, keepdim=True)


def _sample(probs):
    return torch.multinomial(probs, 1, replacement=True).reshape(-1).to(torch.int64)
'''

# kind -> (inputs [(name, shape, dtype, description)], outputs, body of run, fi_api, description)
_V = ["batch_size", "vocab_size"]
_B = ["batch_size"]
_PROBS = ("probs", _V, "float32", "Probability distributions (after softmax)")
_LOGITS = ("logits", _V, "float32", "Pre-softmax logits")
_K = ("top_k", _B, "int32", "Per-row top-k (<= 0 or >= vocab_size: disabled)")
_P = ("top_p", _B, "float32", "Per-row top-p threshold")
_MINP = ("min_p", _B, "float32", "Per-row min-p (relative to the row maximum)")
_SAMPLES = ("samples", _B, "int64", "Sampled token indices")

KINDS: Dict[str, tuple] = {
    "sampling_from_probs": (
        [_PROBS], [_SAMPLES], "return _sample(probs.to(torch.float32))",
        "flashinfer.sampling.sampling_from_probs", "Sampling from probabilities"),
    "sampling_from_logits": (
        [_LOGITS], [_SAMPLES], "return _sample(torch.softmax(logits.to(torch.float32), dim=-1))",
        "flashinfer.sampling.sampling_from_logits", "Sampling from logits (softmax, then sample)"),
    "top_k_sampling_from_probs": (
        [_PROBS, _K], [_SAMPLES],
        "probs = probs.to(torch.float32)\n    return _sample(_renorm(probs, _top_k_mask(probs, top_k)))",
        "flashinfer.sampling.top_k_sampling_from_probs", "Top-k sampling from probabilities"),
    "top_p_sampling_from_probs": (
        [_PROBS, _P], [_SAMPLES],
        "probs = probs.to(torch.float32)\n    return _sample(_renorm(probs, _top_p_mask(probs, top_p)))",
        "flashinfer.sampling.top_p_sampling_from_probs", "Top-p (nucleus) sampling from probabilities"),
    "min_p_sampling_from_probs": (
        [_PROBS, _MINP], [_SAMPLES],
        "probs = probs.to(torch.float32)\n"
        "    keep = probs >= min_p.to(torch.float32).reshape(-1, 1) * probs.amax(dim=-1, keepdim=True)\n"
        "    return _sample(_renorm(probs, keep))",
        "flashinfer.sampling.min_p_sampling_from_probs", "Min-p sampling from probabilities"),
    "top_k_top_p_sampling_from_probs": (
        [_PROBS, _K, _P], [_SAMPLES],
        "probs = _renorm(probs.to(torch.float32), _top_k_mask(probs.to(torch.float32), top_k))\n"
        "    return _sample(_renorm(probs, _top_p_mask(probs, top_p)))",
        "flashinfer.sampling.top_k_top_p_sampling_from_probs",
        "Top-k, renormalise, then top-p sampling from probabilities (filter order top_k_first)"),
    "top_k_top_p_sampling_from_probs_joint": (
        [_PROBS, _K, _P], [_SAMPLES],
        "probs = probs.to(torch.float32)\n"
        "    keep = _top_k_mask(probs, top_k) & _top_p_mask(probs, top_p)\n"
        "    return _sample(_renorm(probs, keep))",
        "flashinfer.sampling.top_k_top_p_sampling_from_probs",
        "Top-k and top-p of the unrenormalised distribution (filter order joint), from probabilities"),
    "top_k_top_p_sampling_from_logits": (
        [_LOGITS, _K, _P], [_SAMPLES],
        "probs = torch.softmax(logits.to(torch.float32), dim=-1)\n"
        "    probs = _renorm(probs, _top_k_mask(probs, top_k))\n"
        "    return _sample(_renorm(probs, _top_p_mask(probs, top_p)))",
        "flashinfer.sampling.top_k_top_p_sampling_from_logits",
        "Softmax, top-k, renormalise, then top-p sampling from logits (filter order top_k_first)"),
    "top_k_top_p_sampling_from_logits_joint": (
        [_LOGITS, _K, _P], [_SAMPLES],
        "probs = torch.softmax(logits.to(torch.float32), dim=-1)\n"
        "    keep = _top_k_mask(probs, top_k) & _top_p_mask(probs, top_p)\n"
        "    return _sample(_renorm(probs, keep))",
        "flashinfer.sampling.top_k_top_p_sampling_from_logits",
        "Softmax, then top-k and top-p of the unrenormalised distribution (joint), from logits"),
    "top_k_renorm_probs": (
        [_PROBS, _K], [("renorm_probs", _V, "float32", "Renormalised top-k probabilities")],
        "probs = probs.to(torch.float32)\n    return _renorm(probs, _top_k_mask(probs, top_k))",
        "flashinfer.sampling.top_k_renorm_probs", "Top-k renormalised probabilities"),
    "top_p_renorm_probs": (
        [_PROBS, _P], [("renorm_probs", _V, "float32", "Renormalised top-p probabilities")],
        "probs = probs.to(torch.float32)\n    return _renorm(probs, _top_p_mask(probs, top_p))",
        "flashinfer.sampling.top_p_renorm_probs", "Top-p renormalised probabilities"),
    "top_k_mask_logits": (
        [_LOGITS, _K], [("masked_logits", _V, "float32", "Logits outside the top-k set to -inf")],
        "logits = logits.to(torch.float32)\n"
        "    return torch.where(_top_k_mask(logits, top_k), logits, torch.full_like(logits, float('-inf')))",
        "flashinfer.sampling.top_k_mask_logits", "Top-k masked logits"),
    # vLLM's apply_top_k_top_p: top-k then top-p (on the softmax of the top-k-masked logits)
    "top_k_top_p_mask_logits": (
        [_LOGITS, _K, _P], [("masked_logits", _V, "float32", "Logits outside top-k/top-p set to -inf")],
        "logits = logits.to(torch.float32)\n"
        "    keep = _top_k_mask(logits, top_k)\n"
        "    probs = _renorm(torch.softmax(logits, dim=-1), keep)\n"
        "    keep = keep & _top_p_mask(probs, top_p)\n"
        "    return torch.where(keep, logits, torch.full_like(logits, float('-inf')))",
        "vllm.v1.sample.ops.topk_topp_sampler.apply_top_k_top_p",
        "Top-k then top-p masking of logits (vLLM apply_top_k_top_p semantics)"),
}


def name(kind: str, vocab_size: int) -> str:
    """Definition name of ``kind`` at ``vocab_size``: ``f"{kind}_v{vocab_size}"``."""
    return f"{kind}_v{int(vocab_size)}"


def parse_name(definition_name: str) -> Tuple[str, int] | None:
    """Inverse of :func:`name`: ``(kind, vocab_size)``, or None if not a sampling name."""
    head, sep, v = definition_name.rpartition("_v")
    if not sep or not v.isdigit() or head not in KINDS:
        return None
    return head, int(v)


@functools.lru_cache(maxsize=None)
def _definition_cached(kind: str, vocab_size: int) -> tuple:
    ins, outs, body, fi_api, desc = KINDS[kind]
    args = ", ".join(i[0] for i in ins)
    ref = (f"{_PREAMBLE}\n\n@torch.no_grad()\ndef run({args}):\n"
           f"    assert {ins[0][0]}.shape[-1] == {int(vocab_size)}\n    {body}\n")
    d = {
        "name": name(kind, vocab_size),
        "op_type": "sampling",
        "description": f"{desc} with vocab_size={int(vocab_size)}. Generated by fib-runtime.",
        "tags": ["status:generated", f"fi_api:{fi_api}"],
        "axes": {
            "batch_size": {"type": "var", "description": "Number of sequences to sample from"},
            "vocab_size": {"type": "const", "value": int(vocab_size), "description": "Vocabulary size"},
        },
        "inputs": {n: {"shape": list(s), "dtype": t, "description": dd} for n, s, t, dd in ins},
        "outputs": {n: {"shape": list(s), "dtype": t, "description": dd} for n, s, t, dd in outs},
        "reference": ref,
    }
    import json

    return (json.dumps(d),)


def definition(kind: str, vocab_size: int) -> dict:
    """The Definition (a plain dict in the public format) of ``kind`` at ``vocab_size``."""
    import json

    if kind not in KINDS:
        raise KeyError(f"unknown sampling kind {kind!r}; known: {sorted(KINDS)}")
    return json.loads(_definition_cached(kind, int(vocab_size))[0])
