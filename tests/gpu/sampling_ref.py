"""Shared pieces of the sampling GPU tests: the float64 references, the statistical check and the
guard that skips them without CUDA or without the built kernels.

Statistical rule used throughout: N >= 2^20 draws of one distribution; expected counts from the exact
filtered distribution computed here in float64; bins with expected count < 5 pooled; the chi-square
statistic converted to a z-score (Wilson-Hilferty) must stay below 4.75 (one-sided p ~ 1e-6 per
case), and not one draw may fall outside the support. The total-variation distance is reported and
must stay below 4 * sqrt(support / N) + 1e-3.
"""
from __future__ import annotations

import math

import pytest
import torch

from fib_runtime import envs

__all__ = ["GPU_ONLY", "S", "loader", "DEV", "Z_MAX", "N_ROWS", "N_CALLS", "REJ_MIN_K", "rejects", "ref_kept",
           "ref_kept_batch", "chi2_z", "draw_counts", "assert_distribution", "make_row"]

cuda_ok = torch.cuda.is_available()
#: the test modules' ``pytestmark``
GPU_ONLY = pytest.mark.skipif(not cuda_ok, reason="needs a CUDA GPU")
S = loader = None
if cuda_ok:
    from fib_runtime.kernels import loader
    from fib_runtime.kernels import sampling as S

    if loader.load_family("sampling") is None:  # pragma: no cover
        GPU_ONLY = pytest.mark.skip(reason=f"sampling kernels unavailable: {loader.reason('sampling')}")

DEV = "cuda"
Z_MAX = 4.75
#: FIB_SAMPLING_REJECT_MIN_K as the kernels read it (once per process): top_k_first rows with a larger
#: k sample top-p by rejection (the cluster kernel, the two-pass kernel's large-k rejection tail), so
#: they return another token than the sorted paths; the same-token tests check only the support there
REJ_MIN_K = int(envs.get("FIB_SAMPLING_REJECT_MIN_K"))


def rejects(k) -> bool:
    """Whether top_k_first rows with this k take the rejection paths (k > FIB_SAMPLING_REJECT_MIN_K)."""
    return REJ_MIN_K > 0 and k > REJ_MIN_K


def ref_kept(vals: torch.Tensor, is_logits: bool, k=None, p=None, min_p=None, joint=False, temperature=1.0):
    """Exact filtered distribution of one row (float64). Returns (q, margin): q sums to 1 over the
    kept set; margin = distance of the top-p decision from its boundary (small = ambiguous)."""
    v = vals.double()
    V = v.numel()
    if is_logits:
        v = torch.nan_to_num(v, nan=-math.inf)
        if temperature is not None and temperature <= 0:
            k, p, min_p = 1, None, None
            temperature = 1.0
        x = v / (temperature or 1.0)
        if torch.isposinf(x).any():
            prob = torch.isposinf(x).double()
        elif torch.isneginf(x).all():
            prob = torch.zeros_like(x)
        else:
            prob = torch.softmax(x, 0)
        key = v
    else:
        prob = torch.nan_to_num(v, nan=0.0).clamp_min(0.0)
        if torch.isposinf(prob).any():
            prob = torch.isposinf(prob).double()
        key = prob
    keep = torch.ones(V, dtype=torch.bool, device=v.device)
    # top-k: exactly k, ties to the lower index (stable sort on -key)
    if k is not None and 0 < k < V:
        order = torch.sort(-key, stable=True).indices
        keep = torch.zeros_like(keep)
        keep[order[:k]] = True
    if min_p is not None and min_p > 0:
        keep &= prob >= min(min_p, 1.0) * prob.max()
    margin = math.inf
    if p is not None and p < 1.0 and prob.sum() > 0:
        base = prob.sum() if joint else prob[keep].sum()
        pk = torch.where(keep, prob, torch.zeros_like(prob))
        vals_sorted, idx = torch.sort(pk, descending=True)
        # mass strictly larger: group equal values
        uniq, inv, cnt = torch.unique_consecutive(vals_sorted, return_inverse=True, return_counts=True)
        group_mass = uniq * cnt
        strictly_larger = torch.cumsum(group_mass, 0) - group_mass
        thr = p * base if p > 0 else 0.0
        kept_group = strictly_larger < thr if p > 0 else strictly_larger <= 0
        if p > 0:
            d = (strictly_larger - thr).abs() / max(float(base), 1e-300)
            margin = float(d.min())
        keep_sorted = kept_group[inv]
        newkeep = torch.zeros_like(keep)
        newkeep[idx[keep_sorted]] = True
        keep &= newkeep
    q = torch.where(keep, prob, torch.zeros_like(prob))
    s = q.sum()
    q = q / s if s > 0 else q
    return q, margin


def chi2_z(obs: torch.Tensor, q: torch.Tensor, n: int):
    e = q * n
    supp = q > 0
    outside = int(obs[~supp].sum())
    e_s, o_s = e[supp], obs[supp].double()
    big = e_s >= 5
    stat = float((((o_s[big] - e_s[big]) ** 2) / e_s[big]).sum())
    bins = int(big.sum())
    if (~big).any():
        eo, oo = float(e_s[~big].sum()), float(o_s[~big].sum())
        if eo > 0:
            stat += (oo - eo) ** 2 / eo
            bins += 1
    dof = max(bins - 1, 1)
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    tv = 0.5 * float((obs.double() / n - q).abs().sum())
    return z, outside, tv, int(supp.sum())


def draw_counts(fn, row: torch.Tensor, rows: int, calls: int, **kw):
    x = row.unsqueeze(0).expand(rows, -1).contiguous()
    V = row.numel()
    counts = torch.zeros(V + 1, dtype=torch.int64, device=DEV)
    lo = torch.zeros((), dtype=torch.int64, device=DEV)
    seed = 1234
    for c in range(calls):
        s = fn(x, seed=seed, offset=c, **kw)
        lo = torch.minimum(lo, s.min())
        counts += torch.bincount(s.clamp(0, V), minlength=V + 1)[: V + 1]
    assert int(lo) >= 0, "negative token id"
    assert int(counts[V]) == 0, "token id >= V"
    return counts[:V]


def assert_distribution(counts, q, n, label):
    z, outside, tv, supp = chi2_z(counts, q, n)
    bound = 4 * math.sqrt(supp / n) + 1e-3
    msg = f"{label}: z={z:.2f} outside={outside} tv={tv:.4g} (bound {bound:.4g}) support={supp}"
    print(msg)
    assert outside == 0, msg
    assert z < Z_MAX, msg
    assert tv < bound, msg


def make_row(V, kind, gen, dtype=torch.float32):
    scale = {"peaked": 4.0, "flat": 1.0, "mid": 2.0}[kind]
    lg = torch.randn(V, generator=gen, dtype=torch.float64) * scale
    return lg.to(dtype).to(DEV)


N_ROWS, N_CALLS = 4096, 256  # 2^20 draws per case


def ref_kept_batch(x, is_logits, k, p, joint=False):
    """Kept masks for a batch (float64 sort based; top-k exact with lower-index ties)."""
    B, V = x.shape
    masks, margins = [], []
    for b in range(B):
        q, m = ref_kept(x[b], is_logits, k=int(k[b]), p=float(p[b]), joint=joint)
        masks.append(q > 0)
        margins.append(m)
    return torch.stack(masks).cpu(), torch.tensor(margins)
