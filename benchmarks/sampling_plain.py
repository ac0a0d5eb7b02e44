#!/usr/bin/env python3
"""Plain sampling on the GPU: the one-pass plain kernel (plain.cuh, knob -2) beside the
resident-row cluster kernel it replaces at large batches (knob 999), the automatic policy,
FlashInfer's regular ``sampling_from_probs`` / ``sampling_from_logits`` and the vLLM-style PyTorch
path (softmax, exponential noise, argmax), from probs, fp32 logits and bf16 logits. Device time per
call from CUDA graphs (4 inputs, median of 3), the ratio to FlashInfer and to the bandwidth floor
(one read of the input). JSON and a markdown table to --out.

Usage: python benchmarks/sampling_plain.py [--out DIR] [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fib_runtime.kernels import sampling as S  # noqa: E402
from sampling import FI, floor_us, graph_time, make_inputs, run_meta  # noqa: E402
from sampling_ab import knob  # noqa: E402

DEV = "cuda"


def vllm_style(x, is_logits):
    probs = x.softmax(dim=-1, dtype=torch.float32) if is_logits else x
    q = torch.empty_like(probs).exponential_()
    return probs.div(q).argmax(dim=-1)


def run(args, log):
    rows = []
    seed_t = torch.tensor([1234], dtype=torch.int64, device=DEV)
    off_t = torch.tensor([0], dtype=torch.int64, device=DEV)
    Vs = [128256] if args.quick else [32000, 128256, 151936]
    Bs = [64, 256, 512] if args.quick else [1, 16, 64, 128, 256, 512]
    # (top-p alone went through the plain kernel in commit fad2fcf: results/sampling_plain_topp_tried_h200.md)
    for src in ("probs", "logits", "bf16"):
        is_logits = src != "probs"
        for V in Vs:
            for kind in ("peaked", "flat"):
                for B in Bs:
                    xs = make_inputs(B, V, kind, seed=3)
                    if src == "probs":
                        xs = [torch.softmax(x, -1) for x in xs]
                    elif src == "bf16":
                        xs = [x.to(torch.bfloat16) for x in xs]
                    outs = [torch.empty(B, dtype=torch.int64, device=DEV) for _ in range(4)]
                    f = S.sampling_from_logits if is_logits else S.sampling_from_probs
                    ours = lambda i, f=f: f(xs[i], seed=seed_t, offset=off_t, out=outs[i])  # noqa: E731
                    elem = 2 if src == "bf16" else 4
                    r = {"op": "plain", "src": src, "V": V, "logits": kind, "B": B, "floor_us": floor_us(B, V, elem)}
                    for name, cl in (("auto", 0), ("plain_kernel", -2), ("cluster_kernel", 999)):
                        r[name] = knob(cl, lambda: graph_time([(lambda i=i: ours(i)) for i in range(4)]))
                    if FI.ok:
                        try:
                            fn = FI.fis.sampling_from_logits if is_logits else FI.fis.sampling_from_probs
                            fi = lambda i, fn=fn: fn(xs[i], seed=1234, offset=0)  # noqa: E731
                            r["fi_regular"] = graph_time([(lambda i=i: fi(i)) for i in range(4)])
                        except Exception as exc:  # noqa: BLE001
                            r["fi_error"] = f"{type(exc).__name__}: {exc}"[:200]
                    r["torch"] = graph_time([(lambda i=i: vllm_style(xs[i], is_logits)) for i in range(4)])
                    if "fi_regular" in r:
                        r["ratio_auto_vs_fi"] = r["auto"] / r["fi_regular"]
                    r["plain_over_floor"] = r["plain_kernel"] / r["floor_us"]
                    r["ratio_plain_vs_cluster"] = r["plain_kernel"] / r["cluster_kernel"]
                    rows.append(r)
                    log(f"{src:>6} V={V:>6} {kind:>6} B={B:>3}: auto {r['auto']:.1f} plain {r['plain_kernel']:.1f} "
                        f"cluster {r['cluster_kernel']:.1f} fi {r.get('fi_regular', float('nan')):.1f} "
                        f"torch {r['torch']:.1f} floor {r['floor_us']:.2f}")
                    del xs, outs
    return rows


def write_md(path, meta, rows):
    f = lambda v: "–" if v is None else f"{v:.1f}"  # noqa: E731
    g = lambda v: "–" if v is None else f"{v:.2f}"  # noqa: E731
    lines = [f"# Plain sampling on {meta['device']} ({meta['date']})", "",
             f"torch {meta['torch']}, FlashInfer {meta['flashinfer']}, driver {meta['driver']}. Device time per call in "
             "µs from CUDA graphs (4 inputs, median of 3). auto: the policy; plain: the one-pass plain kernel (knob -2); "
             "cluster: the resident-row cluster kernel (knob 999); FI: FlashInfer's regular sampling_from_probs / "
             "sampling_from_logits (temperature 1); torch: softmax + exponential + argmax (vLLM's random sampler). "
             "floor = one read of the input at 4285 GB/s.", "",
             "| op | src | V | logits | B | auto | plain | cluster | FI | torch | auto/FI | plain/floor |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['op']} | {r['src']} | {r['V']} | {r['logits']} | {r['B']} | {f(r['auto'])} | {f(r['plain_kernel'])} | "
                     f"{f(r['cluster_kernel'])} | {f(r.get('fi_regular'))} | {f(r.get('torch'))} | "
                     f"{g(r.get('ratio_auto_vs_fi'))} | {g(r['plain_over_floor'])} |")
    slower = [r for r in rows if r.get("ratio_auto_vs_fi", 0) > 1.0]
    lines += ["", f"Points where the policy is slower than FlashInfer: {len(slower)}/{len(rows)}"]
    path.write_text("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    FI.load()
    meta = run_meta()
    meta["kernels_dir"] = os.environ.get("FIB_KERNELS_DIR")
    print(json.dumps(meta), flush=True)
    rows = run(args, lambda s: print(s, flush=True))
    (out / "sampling_plain_h200.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    write_md(out / "sampling_plain_h200.md", meta, rows)


if __name__ == "__main__":
    main()
