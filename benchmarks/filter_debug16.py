#!/usr/bin/env python3
"""The open 16-bit question of the filter kernel (docs/kernels.md, "Seeded threshold"): with the
seed and the ranked sort, bf16 / fp16 rows returned tokens outside the top-k. Run under a build
with -DFIB_FILTER_DEBUG (the sm_90 command of kernels_cuda/build.py plus the define, FIB_KERNELS_DIR
pointing at it): that build enables both on every dtype and returns, for a row whose final set
holds duplicates or out-of-range entries or whose sorted output is out of order,
-(1e6 * dup + 1e3 * bad + unsorted) - 1 (counts of threads that saw one). Prints, per dtype, row
order and k, the mismatches against the streaming kernel and the decoded codes.

H200, 2026-12-02: fp32 clean; bf16 / fp16 at k = 100 / 200 (ranked sort) every row out of order
(codes 1-95: no duplicate, no bad entry), at k = 50 (seed, one-warp sort) 16-22 rows of 64 out of
order with one CTA per row, and at k = 1 (seed) on ascending rows 8 of 64 rows drew another token
with a clean set, i.e. the top token was missing. The same build with -DFIB_FILTER_NST16=2 (two
8 KB ring stages for 16-bit rows instead of five) was clean everywhere: the depth of the 16-bit
ring matters, the new code does not by itself.
"""
import torch
from sampling_ab import knob as run  # (benchmarks/: the script's own folder)

from fib_runtime.kernels import sampling as S


def main():
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(3)
    B, V = 64, 50021
    for name, dt in (("bf16", torch.bfloat16), ("f16", torch.float16), ("f32", torch.float32)):
        for kind in ("rand", "asc"):
            lg = torch.randn(B, V, generator=gen, device=dev) * 3
            if kind == "asc":
                lg = torch.sort(lg, dim=1).values
            x = lg.to(dt)
            res = []
            for kv in (1, 50, 100, 200, 300):
                k = torch.full((B,), kv, dtype=torch.int32, device=dev)
                p = torch.full((B,), 0.99, device=dev)
                fn = lambda: S.top_k_top_p_sampling_from_logits(x, k, p, seed=11, offset=3)
                ref = run(-1, fn)
                out = []
                for cl in (1001, 1003):
                    g = run(cl, fn)
                    neg = g[g < 0]
                    codes = sorted(set((-(neg + 1)).tolist()))[:3]
                    out.append(f"mm={int((g != ref).sum())} neg={int((g < 0).sum())} codes={codes}")
                res.append(f"k={kv}: " + " | ".join(out))
            print(name, kind, " ;; ".join(res), flush=True)


if __name__ == "__main__":
    main()
