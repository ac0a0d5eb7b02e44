#!/usr/bin/env python3
"""CPU replay of the two-pass kernel's speculative candidates (twopass.cuh, FIB_TWOPASS_SPEC=1: rows
with 128 < k <= 2048; =2: k <= 128 too, here k = 50).

Per slice: 8 tokens per thread sampled evenly (thread t: the fp32 vectors g0, g0 + 1 at
g0 = floor(t nv / 512) & ~1), the r-th largest sample (r = m + 5 sqrt(m) + 8, m = 4096 k / n) to 22
key bits, and the slice's tokens at or above it. The speculation holds where k <= that count <=
kTpCap (7168); else the kernel reads the slice again (radix path). Prints, per (V, row kind, k) and
per launch shape (PD loads in flight, S CTAs per row: PD4S1 is the kernel for two CTAs per SM, PD8S2
one CTA per SM with two per row), how often each outcome occurred over 10 rows and the range of
count / k where it held ("off": the rule is not used for that slice size).

`--row`: at two CTAs per row, the merged candidates of these per-slice bounds against a bound for the
row's k-th largest (a sample of the whole row every rank draws alike, or both slices' samples pooled).

Usage: python benchmarks/sampling_spec_replay.py [--row]
"""
from __future__ import annotations

import math
import sys

import numpy as np

THREADS = 512
CAP = 7168  # the candidate buffer's entries (kTpCap)
KINDS = ("peaked", "flat", "zipf_id", "ascending", "block")


def f2key(x):
    """The kernels' order-preserving float -> uint32 key."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    return np.where(b & 0x80000000, ~b, b | 0x80000000).astype(np.uint32)


def key2f(k):
    k = int(k)
    b = (k & 0x7FFFFFFF) if (k & 0x80000000) else (~k & 0xFFFFFFFF)
    return np.array([b], dtype=np.uint32).view(np.float32)[0]


def speculate(sl, k, pd):
    """Outcome for one fp32 logits slice: ("off",), ("nobound",) or (ok / under / over, count)."""
    n = sl.size
    nv = n // 4
    nvt = -(-nv // THREADS)
    m = 4096 * k / n
    r = math.ceil(m + 5 * math.sqrt(m) + 8)
    if not (nvt >= 2 * pd and r <= 2048 and k * r <= 0.75 * CAP * m):
        return ("off",)
    g0 = np.minimum((np.arange(THREADS) * nv // THREADS) & ~1, nv - 2)
    vec = sl[: nv * 4].reshape(nv, 4)
    sample = np.concatenate([vec[g0], vec[g0 + 1]], axis=1).ravel()
    keys = np.sort(f2key(sample))[::-1]
    t = key2f(int(keys[r - 1]) & ~0x3FF)  # the r-th largest, to 22 key bits
    if not t > -np.inf:
        return ("nobound",)
    c = int((sl >= t).sum())
    return ("ok" if k <= c <= CAP else ("under" if c < k else "over"), c)


def make_row(rng, V, kind):
    if kind == "peaked":
        return rng.standard_normal(V) * 4
    if kind == "flat":
        return rng.standard_normal(V)
    if kind == "zipf_id":  # logits falling with the token id (frequency-ordered vocabularies), noise
        return -1.1 * np.log1p(np.arange(V)) + rng.standard_normal(V) * 2
    if kind == "ascending":
        return np.sort(rng.standard_normal(V))
    x = rng.standard_normal(V)  # "block": the top tokens in one block of 3000 ids
    x[1000:4000] += 6
    return x


def sample_of(sl):
    """The 4096 tokens the kernel samples from a slice (thread t: fp32 vectors g0, g0 + 1)."""
    nv = sl.size // 4
    g0 = np.minimum((np.arange(THREADS) * nv // THREADS) & ~1, nv - 2)
    vec = sl[: nv * 4].reshape(nv, 4)
    return np.concatenate([vec[g0], vec[g0 + 1]], axis=1).ravel()


def threshold(sample, k, n):
    """The r-th largest of a sample of a span of n tokens (r = m + 5 sqrt(m) + 8, m = sample.size k / n),
    to 22 key bits."""
    m = sample.size * k / n
    r = math.ceil(m + 5 * math.sqrt(m) + 8)
    return key2f(int(np.sort(f2key(sample))[::-1][r - 1]) & ~0x3FF)


def row_estimates():
    """Two CTAs per row (S = 2): the merged candidates / k of today's per-slice estimates (each slice
    its own k-th largest: each holds ~1.5 k) against a bound for the row's k-th largest, from a
    sample of the whole row that every rank draws alike (no exchange before the pass) or from both
    slices' samples pooled (an exchange); `under`: rows where fewer than k tokens reached it."""
    rng = np.random.default_rng(3)
    for V in (32000, 128256, 151936):
        for kind in ("peaked", "flat", "zipf_id", "ascending", "block"):
            for k in (256, 1024, 2048):
                res = {"per_slice": [], "row_sample": [], "pooled": []}
                under = {"row_sample": 0, "pooled": 0}
                for _ in range(10):
                    lg = make_row(rng, V, kind).astype(np.float32)
                    n = (-(-V // 2) + 7) & ~7
                    sls = [lg[:n], lg[n:]]
                    res["per_slice"].append(sum(int((sl >= threshold(sample_of(sl), k, sl.size)).sum()) for sl in sls) / k)
                    for name, smp in (("row_sample", sample_of(lg)), ("pooled", np.concatenate([sample_of(sl) for sl in sls]))):
                        c = int((lg >= threshold(smp, k, V)).sum())
                        under[name] += c < k
                        res[name].append(c / k)
                print(V, kind, k, {a: f"{min(b):.2f}-{max(b):.2f}" for a, b in res.items()}, "under", under)


def main():
    if "--row" in sys.argv:
        row_estimates()
        return
    rng = np.random.default_rng(1)
    for V in (32000, 128256, 151936):
        for kind in KINDS:
            for k in (50, 129, 256, 1024, 2048):
                out = {}
                for pd, S in ((4, 1), (8, 2)):
                    res = []
                    for _ in range(10):
                        lg = make_row(rng, V, kind).astype(np.float32)
                        n = (-(-V // S) + 7) & ~7  # the launch's slice (p.chunk)
                        res += [speculate(lg[r * n:(r + 1) * n], k, pd) for r in range(S)]
                    tags = [x[0] for x in res]
                    held = [x[1] / k for x in res if x[0] == "ok"]
                    out[f"PD{pd}S{S}"] = ({t: tags.count(t) for t in sorted(set(tags))},
                                          f"{min(held):.2f}-{max(held):.2f}" if held else "")
                print(V, kind, k, out)


if __name__ == "__main__":
    main()
