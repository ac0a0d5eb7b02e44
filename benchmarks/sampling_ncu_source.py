#!/usr/bin/env python3
"""One top-k+top-p call (per-row k, top_p 0.9, min_top_k=k), four times, for Nsight Compute:

    FIB_KERNELS_DIR=<build> ncu --clock-control none -k regex:"sampler_kernel|twopass_kernel" --launch-skip 3 \
        --launch-count 1 --section WarpStateStats --section SourceCounters --warp-sampling-interval 0 \
        -o rep python benchmarks/sampling_ncu_source.py V B k probs|logits

Rows: randn * 4 logits (softmax for probs). Per source line: benchmarks/ncu_source_lines.py.
"""
import sys, torch
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[1]))
from fib_runtime.kernels import sampling as S
V, B, k, src = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
g = torch.Generator(device='cuda').manual_seed(0)
x = torch.randn(B, V, device='cuda', generator=g) * 4
if src == 'probs':
    x = torch.softmax(x, -1)
kt = torch.full((B,), k, dtype=torch.int32, device='cuda'); pt = torch.full((B,), 0.9, device='cuda')
out = torch.empty(B, dtype=torch.int64, device='cuda')
fn = S.top_k_top_p_sampling_from_probs if src == 'probs' else S.top_k_top_p_sampling_from_logits
for _ in range(4):
    fn(x, kt, pt, seed=1, offset=0, out=out, min_top_k=k)
torch.cuda.synchronize()
print("token0", int(out[0]))
