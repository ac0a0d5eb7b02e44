"""Statistical evaluator for sampling definitions (op_type ``sampling``, one integer output).

A sampler is right when it draws from the *filtered* distribution, not when it matches the
reference's samples. Two checks, both on the workload's own inputs:

1. **Support.** ``support_trials`` calls (100 by default); every sample must be a token index in
   ``[0, V)`` whose probability is inside the filtered support (top-k allows ties at the k-th
   value; top-p gets ``support_eps`` slack at the nucleus boundary). One violation fails.
2. **Distribution.** Up to ``tvd_rows`` rows of the batch (evenly spaced) are repeated along the
   batch axis (up to ``tvd_max_rows`` rows, ``tvd_max_bytes``) and the solution is called until
   each of those rows has ``tvd_samples`` samples (at most ``tvd_max_calls`` calls); per row the total variation distance between the observed frequencies and the exact
   filtered distribution must be at most ``tvd_bound`` (0.2, as flashinfer-bench). The expected
   TVD of a perfect sampler (the noise, ``0.5 * sum_i sqrt(2 q_i (1 - q_i) / (pi n))``) is
   computed from the exact distribution; when it exceeds ``noise_fraction * tvd_bound`` (large
   nuclei: tens of thousands of tokens), the TVD is measured over ``bins`` equal-mass bins of
   tokens ordered by probability instead, which keeps the noise small and still catches
   mis-weighted samplers (the binned TVD is a lower bound of the token-level one).

``correctness.extra`` gets ``tvd`` (worst row), ``tvds_per_batch`` (of the rows in ``tvd_rows``),
``tvd_bound``, ``tvd_mode``
(``tokens`` / ``bins``), ``tvd_noise`` (expected TVD of an exact sampler, worst row),
``tvd_samples`` and ``support_trials``.

The exact distribution follows the filter named by the definition: ``top_k``, ``top_p``,
``min_p``, ``top_k_top_p`` (top-k, renormalise, top-p: ``top_k_first``) or ``..._joint``
(top-k ∩ top-p of the unrenormalised distribution), from ``probs`` or ``logits`` (softmax).
Conventions: ``top_k <= 0`` or ``>= V`` disables top-k; top-p keeps the smallest prefix whose mass
reaches ``p`` (``p >= 1`` keeps everything); ties keep the lower index. Sampling definitions the
evaluator does not recognise compare against the empirical distribution of the reference
(two-sample TVD, bound and noise doubled).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Dict, Optional

from .config import SamplingConfig
from .correctness import Verdict


def is_sampling_definition(definition) -> bool:
    outs = list(definition.outputs.values())
    return (definition.op_type == "sampling" and len(outs) == 1
            and outs[0].dtype in ("int64", "int32") and any(n in definition.inputs for n in ("probs", "logits")))


def filter_kind(definition) -> Optional[str]:
    name = re.sub(r"_v\d+$", "", definition.name)
    if "top_k_top_p" in name:
        return "top_k_top_p_joint" if "joint" in name else "top_k_top_p"
    for k in ("min_p", "top_k", "top_p"):
        if k in name:
            return k
    if name.startswith("sampling_from") or name in ("sampling",):
        return "none"
    return None


# ---- exact distribution -------------------------------------------------------------------
def _top_k_mask(p, top_k, ties: bool):
    import torch

    B, V = p.shape
    k = top_k.to(torch.int64).reshape(-1).to(p.device)
    k = torch.where((k <= 0) | (k >= V), torch.full_like(k, V), k)
    vals, order = torch.sort(p, dim=-1, descending=True, stable=True)
    if ties:  # any token at least as probable as the k-th largest
        kth = vals.gather(1, (k - 1).clamp(min=0)[:, None])
        return p >= kth
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(V, device=p.device).expand(B, V))
    return rank < k[:, None]


def _top_p_mask(p, top_p, eps: float = 0.0):
    import torch

    pp = top_p.to(torch.float32).reshape(-1, 1).to(p.device)
    vals, order = torch.sort(p, dim=-1, descending=True, stable=True)
    before = torch.cumsum(vals, dim=-1) - vals
    keep_sorted = before <= (pp + eps) * vals.sum(dim=-1, keepdim=True)
    keep_sorted[:, 0] = True
    keep_sorted |= (pp >= 1.0)
    keep = torch.zeros_like(keep_sorted)
    keep.scatter_(1, order, keep_sorted)
    return keep


def _renorm(p, keep):
    import torch

    x = torch.where(keep, p, torch.zeros_like(p))
    return x / x.sum(dim=-1, keepdim=True).clamp_min(1e-30)


def exact_distribution(definition, inputs: Dict[str, Any], tolerant: bool = False, eps: float = 0.0):
    """``[B, V]`` float64 filtered distribution (``tolerant``: the support-check mask as bool)."""
    import torch

    kind = filter_kind(definition)
    if "probs" in inputs:
        p = inputs["probs"].to(torch.float64)
    else:
        p = torch.softmax(inputs["logits"].to(torch.float64), dim=-1)
    p = p.clamp_min(0)
    keep = torch.ones_like(p, dtype=torch.bool)
    if kind == "top_k":
        keep = _top_k_mask(p, inputs["top_k"], tolerant)
    elif kind == "top_p":
        keep = _top_p_mask(p, inputs["top_p"], eps if tolerant else 0.0)
    elif kind == "min_p":
        thr = inputs["min_p"].to(torch.float64).reshape(-1, 1).to(p.device) * p.amax(dim=-1, keepdim=True)
        keep = p >= thr * (1 - eps if tolerant else 1)
    elif kind == "top_k_top_p":
        kk = _top_k_mask(p, inputs["top_k"], tolerant)
        q = _renorm(p, kk)
        keep = kk & _top_p_mask(q, inputs["top_p"], eps if tolerant else 0.0)
    elif kind == "top_k_top_p_joint":
        keep = _top_k_mask(p, inputs["top_k"], tolerant) & _top_p_mask(p, inputs["top_p"], eps if tolerant else 0.0)
    keep &= p > 0
    if tolerant:
        return keep
    return _renorm(p, keep)


# ---- evaluator -----------------------------------------------------------------------------
def _repeat_inputs(definition, inputs: Dict[str, Any], reps: int) -> Dict[str, Any]:
    import torch

    out = {}
    for name, v in inputs.items():
        spec = definition.inputs[name]
        if isinstance(v, torch.Tensor) and spec.shape and spec.shape[0] == "batch_size":
            out[name] = v.repeat(reps, *([1] * (v.dim() - 1))).contiguous()
        else:
            out[name] = v
    return out


def _subset_inputs(definition, inputs: Dict[str, Any], rows) -> Dict[str, Any]:
    import torch

    out = {}
    for name, v in inputs.items():
        spec = definition.inputs[name]
        if isinstance(v, torch.Tensor) and spec.shape and spec.shape[0] == "batch_size":
            out[name] = v.index_select(0, rows.to(v.device)).contiguous()
        else:
            out[name] = v
    return out


def expected_noise(q, n: int):
    """Expected TVD of ``n`` exact draws per row from ``q`` (normal approximation)."""
    import torch

    return 0.5 * torch.sqrt(2.0 * q * (1 - q) / (math.pi * n)).sum(dim=-1)


def _equal_mass_bins(q, bins: int):
    """Per row, a bin id for each token: tokens by descending q, cut into ``bins`` equal masses."""
    import torch

    vals, order = torch.sort(q, dim=-1, descending=True, stable=True)
    before = torch.cumsum(vals, dim=-1) - vals
    b_sorted = torch.clamp((before * bins).floor().to(torch.int64), 0, bins - 1)
    ids = torch.empty_like(b_sorted)
    ids.scatter_(1, order, b_sorted)
    return ids


def evaluate_sampling(definition, call: Callable[[Dict[str, Any]], Any], inputs: Dict[str, Any],
                      cfg: SamplingConfig, reference: Optional[Callable] = None,
                      synchronize: Callable[[], None] = lambda: None) -> Verdict:
    """Run both checks; ``call(inputs)`` returns the samples tensor (already structure-checked)."""
    import torch

    lead = "probs" if "probs" in inputs else "logits"
    B, V = inputs[lead].shape
    kind = filter_kind(definition)
    known = kind is not None
    dev = inputs[lead].device
    valid = exact_distribution(definition, inputs, tolerant=True, eps=cfg.support_eps) if known else None

    for trial in range(cfg.support_trials):
        s = call(inputs).reshape(-1).to(torch.int64)
        if s.numel() != B:
            return Verdict("INCORRECT_SHAPE", f"samples has {s.numel()} elements, batch is {B}")
        bad = (s < 0) | (s >= V)
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            return Verdict("INCORRECT_NUMERICAL", f"trial {trial}: row {i} sampled {int(s[i])}, outside [0, {V})",
                           math.inf, math.inf, {"reason": "sample_out_of_range", "support_trials": trial + 1})
        if valid is not None:
            ok = valid[torch.arange(B, device=valid.device), s.to(valid.device)]
            if not bool(ok.all()):
                i = int((~ok).nonzero()[0])
                return Verdict("INCORRECT_NUMERICAL",
                               f"trial {trial}: row {i} sampled token {int(s[i])}, outside the {kind} support",
                               math.inf, math.inf, {"reason": "sample_outside_support", "support_trials": trial + 1})

    # distribution, on up to ``tvd_rows`` rows of the batch (evenly spaced), repeated
    if B > cfg.tvd_rows:
        rows = torch.linspace(0, B - 1, cfg.tvd_rows).round().to(torch.int64).unique()
        inputs = _subset_inputs(definition, inputs, rows)
        B = int(rows.numel())
    else:
        rows = torch.arange(B)
    row_bytes = sum(v[:1].numel() * v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
    reps = max(1, min(cfg.tvd_max_rows // max(B, 1), cfg.tvd_max_bytes // max(row_bytes * B, 1)))
    big = _repeat_inputs(definition, inputs, reps)
    per_call = reps
    calls = max(1, min(cfg.tvd_max_calls, math.ceil(cfg.tvd_samples / per_call)))
    n = calls * per_call
    row_of = torch.arange(B * reps, device=dev) % B

    def counts_of(fn) -> Any:
        c = torch.zeros(B * V, dtype=torch.int64, device=dev)
        for _ in range(calls):
            s = fn(big).reshape(-1).to(torch.int64).to(dev)
            c += torch.bincount(row_of * V + s.clamp(0, V - 1), minlength=B * V)
        synchronize()
        return c.view(B, V).to(torch.float64)

    freq = counts_of(call) / n
    bound = cfg.tvd_bound
    if known:
        q = exact_distribution(definition, inputs).to(dev)
        noise = expected_noise(q, n)
        two_sample = 1.0
    else:
        if reference is None:
            return Verdict("PASSED", "", 0.0, 0.0, {"tvd_skipped": "unknown filter, no reference"})
        q = counts_of(reference) / n
        noise = expected_noise(q, n) * math.sqrt(2.0)
        two_sample = 2.0
    mode = "tokens"
    if float(noise.max()) > cfg.noise_fraction * bound:
        mode = "bins"
        ids = _equal_mass_bins(q, cfg.bins)
        qb = torch.zeros(B, cfg.bins, dtype=torch.float64, device=dev).scatter_add_(1, ids, q)
        fb = torch.zeros(B, cfg.bins, dtype=torch.float64, device=dev).scatter_add_(1, ids, freq)
        tvds = 0.5 * (fb - qb).abs().sum(dim=-1)
        noise = expected_noise(qb, n) * math.sqrt(two_sample)
    else:
        tvds = 0.5 * (freq - q).abs().sum(dim=-1)
    diff = (freq - q).abs()
    max_abs = float(diff.max())
    max_rel = float((diff / q.clamp_min(1e-12)).where(q > 0, torch.zeros_like(diff)).max())
    tvd_list = [float(t) for t in tvds.cpu()]
    extra = {"tvd": max(tvd_list), "tvds_per_batch": tvd_list, "tvd_rows": [int(r) for r in rows],
             "tvd_bound": bound, "tvd_mode": mode,
             "tvd_noise": float(noise.max()), "tvd_samples": n, "support_trials": cfg.support_trials,
             "filter": kind or "unknown (vs reference samples)"}
    if extra["tvd"] > bound:
        return Verdict("INCORRECT_NUMERICAL", f"TVD {extra['tvd']:.4f} > bound {bound} "
                       f"(row {tvd_list.index(extra['tvd'])}, {n} samples, {mode})", max_abs, max_rel, extra)
    return Verdict("PASSED", "", max_abs, max_rel, extra)
