#!/usr/bin/env python3
"""The split-row kernel (knob 2000) beside the launch policy (knob 0) and FlashInfer cake on the
k=50 grid points of issue 5 (B x V x peaked/flat, per-row top_k = 50, top_p = 0.9): device time
from CUDA graphs (4 inputs, median of 3), from probs, from logits and joint from logits; then token
identity of the split kernel against the streaming kernel (sampling_ab.identity_checks).
JSON to --out/sampling_split_probe.json.

Usage: python benchmarks/sampling_split_probe.py [--out DIR] [--quick]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--knobs", default="0,2000")
    ap.add_argument("--bs", default="", help="batch sizes (default 1,16,64,256,512)")
    ap.add_argument("--vs", default="", help="vocabulary sizes (default 32000,128256,151936)")
    ap.add_argument("--no-identity", action="store_true")
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--name", default="sampling_split_probe.json")
    ap.add_argument("--profile", action="store_true", help="profiling build: phase times of row 0 only")
    args = ap.parse_args()
    import torch
    from sampling import FI, graph_time, make_inputs  # noqa: E402
    from sampling_ab import identity_checks, knob  # noqa: E402

    from fib_runtime.kernels import sampling as S

    FI.load()
    dev = "cuda"
    knobs = [int(v) for v in args.knobs.split(",")]
    res = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": torch.cuda.get_device_name(),
           "timing": []}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def save():
        (out / args.name).write_text(json.dumps(res, indent=1))

    if args.profile:
        from fib_runtime.kernels import loader

        mod = loader.load_family("sampling")
        names = ["lanes_sorted", "written", "arrived", "merge_start", "copied", "selected", "sorted", "end"]
        for B, V in [(1, 32000), (1, 128256), (64, 128256), (512, 128256), (512, 151936)]:
            x = torch.softmax(make_inputs(B, V, "peaked", n=1)[0], -1)
            kt = torch.full((B,), 50, dtype=torch.int32, device=dev)
            for _ in range(3):
                knob(2000, lambda: S.top_k_top_p_sampling_from_probs(x, kt, 0.9, seed=1, offset=0))
            torch.cuda.synchronize()
            vals = [int(v) for v in str(mod.prof_read()).split(",")]
            r = {"B": B, "V": V, **{n: vals[i] / 1000.0 for i, n in enumerate(names[:8])},
                 "written": vals[9], "kept": vals[10]}
            print("prof " + json.dumps(r), flush=True)
            res.setdefault("profile", []).append(r)
        save()
        return
    if not args.no_identity:
        res["identity"] = identity_checks(lambda m: print(m, flush=True), knobs=(2000, 1001))
        save()
    seed_t = torch.tensor([1234], dtype=torch.int64, device=dev)
    off_t = torch.tensor([0], dtype=torch.int64, device=dev)
    Bs, Vs = ([1, 64, 512], [128256]) if args.quick else ([1, 16, 64, 256, 512], [32000, 128256, 151936])
    if args.bs:
        Bs = [int(v) for v in args.bs.split(",")]
    if args.vs:
        Vs = [int(v) for v in args.vs.split(",")]
    for V in Vs:
        for kind in ("peaked", "flat"):
            for B in Bs:
                lgs = make_inputs(B, V, kind)
                prs = [torch.softmax(x, -1) for x in lgs]
                kt = torch.full((B,), args.k, dtype=torch.int32, device=dev)
                pt = torch.full((B,), 0.9, device=dev)
                outs = [torch.empty(B, dtype=torch.int64, device=dev) for _ in range(4)]
                r = {"B": B, "V": V, "kind": kind, "k": args.k}
                for cl in knobs:
                    r[f"probs_{cl}"] = knob(cl, lambda: graph_time([
                        (lambda i=i: S.top_k_top_p_sampling_from_probs(prs[i], kt, pt, seed=seed_t, offset=off_t,
                                                                         out=outs[i])) for i in range(4)]))
                    r[f"logits_{cl}"] = knob(cl, lambda: graph_time([
                        (lambda i=i: S.top_k_top_p_sampling_from_logits(lgs[i], kt, pt, seed=seed_t, offset=off_t,
                                                                          out=outs[i])) for i in range(4)]))
                    r[f"joint_{cl}"] = knob(cl, lambda: graph_time([
                        (lambda i=i: S.top_k_top_p_sampling_from_logits(lgs[i], kt, pt, filter_apply_order="joint",
                                                                          seed=seed_t, offset=off_t, out=outs[i]))
                        for i in range(4)]))
                    # same tokens as the policy's kernel on these inputs
                    a = knob(cl, lambda: S.top_k_top_p_sampling_from_probs(prs[0], kt, pt, seed=7, offset=3))
                    b = knob(-1, lambda: S.top_k_top_p_sampling_from_probs(prs[0], kt, pt, seed=7, offset=3))
                    r[f"mismatch_{cl}"] = int((a != b).sum())
                if FI.ok and args.k <= 1024:
                    r["cake"] = graph_time([
                        (lambda i=i: FI.cake.top_k_top_p_sampling_from_probs(prs[i], kt, pt, top_k_max=args.k,
                                                                            philox_seed=1234, philox_offset=0))
                        for i in range(4)])
                    r["fi_joint"] = graph_time([
                        (lambda i=i: FI.fis.top_k_top_p_sampling_from_logits(lgs[i], kt, pt, filter_apply_order="joint",
                                                                           seed=1234, offset=0)) for i in range(4)])
                res["timing"].append(r)
                print("time " + json.dumps({a: (round(v, 1) if isinstance(v, float) else v) for a, v in r.items()}),
                      flush=True)
                save()
                del lgs, prs
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
