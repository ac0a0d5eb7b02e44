#!/usr/bin/env python3
"""One k=2048 top-k+top-p call from probs with the `min_top_k` hint (the cluster kernel's
gathered-tail instantiation), repeated three times, for Nsight Compute's stall reasons:

    FIB_KERNELS_DIR=<build> ncu --clock-control none -k regex:sampler_kernel --launch-skip 2 \
        --launch-count 1 --section WarpStateStats \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio,smsp__inst_executed.sum" \
        python benchmarks/sampling_gather_ncu.py V B

Rows: softmax(randn * 4), top_p 0.9. Results: benchmarks/results/sampling_gather_ncu_h100.txt.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from fib_runtime.kernels import sampling as S  # noqa: E402


def main():
    V, B = int(sys.argv[1]), int(sys.argv[2])
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.softmax(torch.randn(B, V, device="cuda", generator=g) * 4, -1)
    kt = torch.full((B,), 2048, dtype=torch.int32, device="cuda")
    pt = torch.full((B,), 0.9, device="cuda")
    out = torch.empty(B, dtype=torch.int64, device="cuda")
    for _ in range(3):
        S.top_k_top_p_sampling_from_probs(x, kt, pt, seed=1, offset=0, out=out, min_top_k=2048)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
