"""One fib cascade call (shared level first) for Nsight Compute: P, B, S, Hq, Hkv from argv.

    ncu --clock-control none -k regex:cascade_level -c 1 --section WarpStateStats ... \
        python3 benchmarks/cascade_profile.py 32768 256 64 32 8
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cascade import make_problem  # noqa: E402  (benchmarks/cascade.py)
from fib_runtime.kernels import cascade as fc  # noqa: E402

P, B, S, Hq, Hkv = (int(x) for x in (sys.argv[1:6] if len(sys.argv) > 5 else (32768, 256, 64, 32, 8)))
if len(sys.argv) > 6 and sys.argv[6] == "t64":
    fc.TUNING["max_tile_rows"] = 64
cache, lv, flat, qs = make_problem(P, B, S, Hq, Hkv)
w = fc.MultiLevelCascadeAttentionWrapper(2, torch.empty(128 << 20, dtype=torch.uint8, device="cuda"))
w.plan(lv["qo"], lv["kv_indptr"], lv["kv_indices"], lv["last"], Hq, Hkv, 128, 16)
print(w.plan_info())
w.run(qs[0], cache)
torch.cuda.synchronize()
