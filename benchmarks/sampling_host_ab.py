#!/usr/bin/env python3
"""Host cost of one sampling call on the GPU host, this tree's wrapper + library against a baseline
wrapper + library (its ``sampling.py`` and ``libfib_sampling.so``, loaded side by side in this
process), interleaved so that host drift hits both alike. Enqueue cost: the loop's clock while
~50 ms of GPU work is queued ahead (benchmarks/sampling.py host_enqueue); best of 5 rounds of 300
calls, repeated --reps times, medians reported.

    FIB_KERNELS_DIR=<new build> python benchmarks/sampling_host_ab.py --base-py OLD.py --base-so OLD.so --out DIR
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sampling import host_call_cases, host_enqueue, host_inputs  # noqa: E402

import fib_runtime.kernels.sampling as NEW  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-py", required=True)
    ap.add_argument("--base-so", required=True)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    import tvm_ffi

    spec = importlib.util.spec_from_file_location("fib_runtime.kernels._base_sampling", args.base_py)
    OLD = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(OLD)
    OLD._fn = tvm_ffi.load_module(args.base_so).sample
    x, _, kt, pt, _, st, ot = host_inputs()
    # same tokens from both (same kernels, same seed)
    a = NEW.top_k_top_p_sampling_from_logits(x, kt, pt, seed=st, offset=ot)
    b = OLD.top_k_top_p_sampling_from_logits(x, kt, pt, seed=st, offset=ot)
    same = bool(torch.equal(a, b))
    fns = {"new": host_call_cases(NEW), "base": host_call_cases(OLD)}
    fns["torch"] = {"x.add_(0)": lambda: x.add_(0)}
    res = {k: {n: [] for n in v} for k, v in fns.items()}
    for _ in range(args.reps):
        for k, v in fns.items():
            for n, f in v.items():
                res[k][n].append(host_enqueue(f))
    med = {k: {n: round(statistics.median(v), 2) for n, v in d.items()} for k, d in res.items()}
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "tvm_ffi": getattr(tvm_ffi, "__version__", "?"), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "base_py": args.base_py, "base_so": args.base_so, "same_tokens": same,
            "what": "host enqueue us per call (B=1, V=32000), median of --reps best-of-5 rounds"}
    r = {"meta": meta, "median_us": med, "all_us": res}
    for k, d in med.items():
        print(k, d, flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "sampling_host_ab_h200.json").write_text(json.dumps(r, indent=1) + "\n")


if __name__ == "__main__":
    main()
