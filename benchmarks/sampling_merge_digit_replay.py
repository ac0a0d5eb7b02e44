#!/usr/bin/env python3
"""CPU replay (numpy, no GPU) of the two-pass kernel's large-k merge at B=64, k=2048: how many radix
passes rank 0 runs over the merged set today, and how many it would run if every rank counted its own
candidates into a first-digit histogram fixed in advance before the merge.

Today (twopass.cuh, the row's-bound kernel, S=2): each rank appends its slice's tokens at or above
the row's bound. Rank 0 then runs `kth_prefix` over the ~3.5K merged composites (key << 32 | ~index):
one pass for the extremes, then 8-bit digits from the highest bit in which they differ, until the
k-th entry's bin holds no more than it needs.

The alternative: the first digit is the 11 key bits below the highest bit in which the row's bound L
and an upper limit U differ (U: the key of 1.0 for probs, of +inf for logits). Every rank knows L
(the same sample of the row in every rank) and U before the merge, so each rank can count its own set
into that histogram and push it beside its entries. Rank 0 sums the histograms and picks the bin.
Only the passes after that bin run over the merged set.

Rows: the issue-5 grid's peaked (randn * 4) and flat (randn) logits, and their softmax as probs. The
bound is the kernel's: each of 512 threads reads 8 consecutive tokens at tid * (V - 8) / 512, and
the bound is the r-th largest of that sample, with r = ceil(m + 5 sqrt(m) + 8) and m = 4096 k / V.

Usage: python benchmarks/sampling_merge_digit_replay.py [--rows N]
"""
from __future__ import annotations

import argparse
import math

import numpy as np

M64 = (1 << 64) - 1


def f2key(x):
    """Order-preserving u32 key of fp32 values (as the kernels' f2key), as uint64."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    neg = (b >> np.uint64(31)) == 1
    return np.where(neg, (~b) & np.uint64(0xFFFFFFFF), b | np.uint64(0x80000000))


def kth_bin(cnt, rem):
    """The bin that holds the rem-th largest entry of a histogram (bins ascending), and the count above it."""
    above = 0
    for b in range(cnt.size - 1, -1, -1):
        if cnt[b] > 0 and above < rem <= above + cnt[b]:
            return b, above
        above += cnt[b]
    raise ValueError("rem exceeds the histogram's total")


def digit_passes(comp, k, top, prefix, width=8):
    """kth_prefix's digit passes from bit `top` down (the bits above it fixed to `prefix`): the
    number of passes and the size of the k-th entry's bin after each one."""
    mask = M64 ^ ((1 << top) - 1) if top < 64 else 0
    rem, sizes = k, []
    while True:
        w = min(top, width)
        shift = top - w
        sel = comp[(comp & np.uint64(mask)) == np.uint64(prefix)]
        cnt = np.bincount(((sel >> np.uint64(shift)) & np.uint64((1 << w) - 1)).astype(np.int64), minlength=1 << w)
        b, above = kth_bin(cnt, rem)
        rem -= above
        sizes.append(int(cnt[b]))
        prefix |= b << shift
        mask |= ((1 << w) - 1) << shift
        top = shift
        if cnt[b] <= rem or top == 0:
            return len(sizes), sizes


def replay_row(x, k, src):
    V = x.size
    pos = (np.arange(512) * (V - 8)) // 512
    sample = np.concatenate([x[p:p + 8] for p in pos])
    m = 4096 * k / V
    r = math.ceil(m + 5 * math.sqrt(m) + 8)
    bound = np.sort(sample)[::-1][r - 1]
    idx = np.nonzero(x >= bound)[0]
    keys = f2key(x[idx])
    comp = (keys << np.uint64(32)) | (np.uint64(0xFFFFFFFF) - idx.astype(np.uint64))
    mx, mn = int(comp.max()), int(comp.min())
    top = (mx ^ mn).bit_length()
    today, _ = digit_passes(comp, k, top, mx & (M64 ^ ((1 << top) - 1)))
    # the fixed first digit: 11 key bits below the highest bit in which L and U differ
    lo = int(f2key(bound))
    hi = int(f2key(np.float32(1.0) if src == "probs" else np.float32(np.inf)))
    ktop = (lo ^ hi).bit_length()
    sh = max(ktop - 11, 0)
    cnt = np.bincount(((keys >> np.uint64(sh)) & np.uint64((1 << (ktop - sh)) - 1)).astype(np.int64),
                      minlength=1 << (ktop - sh))
    b, above = kth_bin(cnt, k)
    rem = k - above
    vb = int(cnt[b])
    after = 0
    if vb > rem:
        pre = ((lo >> ktop) << ktop) | (b << sh)
        after, _ = digit_passes(comp, rem, sh + 32, pre << 32)
    return idx.size, today, vb, after


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8)
    args = ap.parse_args()
    rng = np.random.default_rng(3)
    k = 2048
    print("| V | logits | src | merged entries | rank 0's passes today (extremes + digits) "
          "| first bin with the fixed digit | passes after it |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for V in (128256, 151936):
        for kind, scale in (("peaked", 4.0), ("flat", 1.0)):
            for src in ("probs", "logits"):
                res = []
                for _ in range(args.rows):
                    lg = (rng.standard_normal(V) * scale).astype(np.float32)
                    e = np.exp(lg - lg.max())
                    x = lg if src == "logits" else (e / e.sum()).astype(np.float32)
                    res.append(replay_row(x, k, src))
                n, today, vb, after = (np.array(c) for c in zip(*res))
                print(f"| {V} | {kind} | {src} | {n.min()}-{n.max()} | {1 + today.min()}-{1 + today.max()} "
                      f"| {vb.min()}-{vb.max()} | {after.min()}-{after.max()} |")


if __name__ == "__main__":
    main()
