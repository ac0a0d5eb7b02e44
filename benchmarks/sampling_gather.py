#!/usr/bin/env python3
"""The cluster kernel's gathered tail (kernels_cuda/include/fib/sampling/gather_tail.cuh) against its
default instantiation, in one process and one build: the issue-5 grid's small batches (B = 1 / 16 / 64,
V = 32000 / 128256 / 151936, peaked and flat, top_k_first top-k+top-p, per-row top_k = 2048, top_p =
0.9) from fp32 probs and fp32 logits, device time from CUDA graphs (4 inputs, median of 3), with the
min_top_k hint (the policy: the gathered-tail instantiation where the cluster kernel runs; kernel code
7000 + S) and without it (the default instantiation, the cluster-wide rejection rounds), plus the
token identity of the two on every input. Where the two-pass kernel takes the batch the hint picks its
large-k instantiation instead (the "kernel" column). Needs FIB_SAMPLING_GATHER_CAP > 0 (the default,
4032). JSON to --out/sampling_gather_<device>.json.

Usage: python benchmarks/sampling_gather.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from sampling import device_tag, graph_time, make_inputs, run_meta  # noqa: E402

from fib_runtime.kernels import sampling as S  # noqa: E402

DEV = "cuda"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()
    seed_t = torch.tensor([1234], dtype=torch.int64, device=DEV)
    off_t = torch.tensor([0], dtype=torch.int64, device=DEV)
    k = 2048
    rows = []
    print(f"{'V':>7} {'kind':>6} {'B':>3} {'kernel':>8} {'src':>6} {'no hint':>8} {'hint':>8} {'ratio':>6} same")
    for V in (32000, 128256, 151936):
        for kind in ("peaked", "flat"):
            for B in (1, 16, 64):
                lgs = make_inputs(B, V, kind)
                prs = [torch.softmax(x, -1) for x in lgs]
                kt = torch.full((B,), k, dtype=torch.int32, device=DEV)
                pt = torch.full((B,), 0.9, device=DEV)
                outs = [torch.empty(B, dtype=torch.int64, device=DEV) for _ in range(4)]
                lc = S._launch_config(B, V)
                for src, xs, fn in (("probs", prs, S.top_k_top_p_sampling_from_probs),
                                    ("logits", lgs, S.top_k_top_p_sampling_from_logits)):
                    r = {"V": V, "kind": kind, "B": B, "k": k, "src": src, "kernel": lc["kernel_for_top_k_sampling"],
                         "S": lc["cluster"]}
                    for name, h in (("no_hint", None), ("hint", k)):
                        r[name] = graph_time([(lambda i=i: fn(xs[i], kt, pt, seed=seed_t, offset=off_t, out=outs[i],
                                                              min_top_k=h)) for i in range(4)])
                    same = True
                    for x in xs:
                        a = fn(x, kt, pt, seed=5, offset=B)
                        b = fn(x, kt, pt, seed=5, offset=B, min_top_k=k)
                        same = same and bool(torch.equal(a, b))
                    r["ratio"] = r["hint"] / r["no_hint"]
                    r["same_tokens"] = same
                    rows.append(r)
                    print(f"{V:>7} {kind:>6} {B:>3} {r['kernel']:>8} {src:>6} {r['no_hint']:8.1f} {r['hint']:8.1f} "
                          f"{r['ratio']:6.3f} {same}", flush=True)
    meta = run_meta()
    meta["gather_cap"] = os.environ.get("FIB_SAMPLING_GATHER_CAP", "4032 (the default)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"sampling_gather_{device_tag(meta['device'])}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
