#!/usr/bin/env python3
"""Large-k top-k+top-p sampling under several kernel builds / knob settings, side by side (issue 5:
k > 1024 against FlashInfer, and joint k=2048 on peaked rows).

Each config runs in its own process (`name=DIR[:ENV=VAL;ENV=VAL]`: FIB_KERNELS_DIR=DIR plus the
knobs); every process times the same points with the grid's method (benchmarks/sampling.py
graph_time: CUDA graphs over 4 inputs, median of 3): ours from probs (top_k_first), from logits
(top_k_first) and from logits in the joint order, per-row top_k tensors, top_p = 0.9. The parent
also times FlashInfer's regular path for the same semantics (cake does not take k > 1024). Points:
k = 2048 on the issue's grid (B 1..512 x V 32000 / 128256 / 151936 x peaked / flat) and k = 256 /
512 / 1024 at B = 1 / 64 (to place FIB_SAMPLING_REJECT_MIN_K). JSON to --out.

With --joint-knobs NAME, config NAME's process also times joint from logits under forced kernels
(JKNOB: the resident-row cluster kernel against the policy's filter kernel at B >= 64).

Usage: python benchmarks/sampling_large_k.py --configs old=DIR,new=DIR2,newK=DIR2:FIB_SAMPLING_REJECT_MIN_K=512
       [--joint-knobs new]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GRID = [(B, V, kind, 2048) for V in (32000, 128256, 151936) for kind in ("peaked", "flat")
        for B in (1, 16, 64, 256, 512)]
KSWEEP = [(B, V, kind, k) for k in (256, 512, 1024) for V in (32000, 128256) for kind in ("peaked", "flat")
          for B in (1, 64)]
OPS = ("probs", "logits", "logits_joint")
# joint from logits under forced kernels (FIB_SAMPLING_CLUSTER: 0 the policy, S = 1..8 the resident-row
# cluster kernel with S CTAs per row), where the policy takes the filter kernel: (B, V, kind, k, knob)
JKNOB = [(B, V, kind, k, cl) for B in (256, 512) for kind in ("peaked", "flat") for k in (50, 2048)
         for V, cl in ((32000, 0), (32000, 1), (32000, 2))] + \
        [(B, V, kind, 2048, cl) for B in (64, 256) for kind in ("peaked", "flat") for V, cl in
         ((128256, 0), (128256, 3), (128256, 4))]


def time_points(points, fi=False):
    import torch

    from benchmarks.sampling import FI, graph_time, make_inputs
    from fib_runtime.kernels import sampling as S

    if fi:
        FI.load()
    seed_t = torch.tensor([1234], dtype=torch.int64, device="cuda")
    off_t = torch.tensor([0], dtype=torch.int64, device="cuda")
    res = []
    for B, V, kind, k in points:
        lgs = make_inputs(B, V, kind)
        prs = [torch.softmax(x, -1) for x in lgs]
        pt = torch.full((B,), 0.9, device="cuda")
        kt = torch.full((B,), k, dtype=torch.int32, device="cuda")
        outs = [torch.empty(B, dtype=torch.int64, device="cuda") for _ in range(4)]
        r = {"B": B, "V": V, "kind": kind, "k": k}
        if fi:
            if not FI.ok:
                r["fi_error"] = FI.err
            else:
                fis = FI.fis
                r["probs"] = graph_time([(lambda i=i: fis.top_k_top_p_sampling_from_probs(prs[i], kt, pt, seed=1234,
                                                                                         offset=0)) for i in range(4)])
                r["logits"] = graph_time([(lambda i=i: fis.top_k_top_p_sampling_from_logits(lgs[i], kt, pt, seed=1234,
                                                                                           offset=0))
                                          for i in range(4)])
                r["logits_joint"] = graph_time([
                    (lambda i=i: fis.top_k_top_p_sampling_from_logits(lgs[i], kt, pt, filter_apply_order="joint",
                                                                      seed=1234, offset=0)) for i in range(4)])
        else:
            r["probs"] = graph_time([(lambda i=i: S.top_k_top_p_sampling_from_probs(
                prs[i], kt, pt, seed=seed_t, offset=off_t, out=outs[i])) for i in range(4)])
            r["logits"] = graph_time([(lambda i=i: S.top_k_top_p_sampling_from_logits(
                lgs[i], kt, pt, seed=seed_t, offset=off_t, out=outs[i])) for i in range(4)])
            r["logits_joint"] = graph_time([(lambda i=i: S.top_k_top_p_sampling_from_logits(
                lgs[i], kt, pt, filter_apply_order="joint", seed=seed_t, offset=off_t, out=outs[i]))
                for i in range(4)])
        res.append(r)
        print(json.dumps(r), flush=True)
        del lgs, prs
        torch.cuda.empty_cache()
    return res


def time_joint_knobs(points):
    import torch

    from benchmarks.sampling import graph_time, make_inputs
    from fib_runtime.kernels import sampling as S

    seed_t = torch.tensor([1234], dtype=torch.int64, device="cuda")
    off_t = torch.tensor([0], dtype=torch.int64, device="cuda")
    res = []
    for B, V, kind, k, cl in points:
        lgs = make_inputs(B, V, kind)
        pt = torch.full((B,), 0.9, device="cuda")
        kt = torch.full((B,), k, dtype=torch.int32, device="cuda")
        outs = [torch.empty(B, dtype=torch.int64, device="cuda") for _ in range(4)]
        old, S._CLUSTER = S._CLUSTER, cl
        try:
            us = graph_time([(lambda i=i: S.top_k_top_p_sampling_from_logits(
                lgs[i], kt, pt, filter_apply_order="joint", seed=seed_t, offset=off_t, out=outs[i]))
                for i in range(4)])
        finally:
            S._CLUSTER = old
        r = {"B": B, "V": V, "kind": kind, "k": k, "knob": cl, "logits_joint": us}
        res.append(r)
        print(json.dumps(r), flush=True)
        del lgs
        torch.cuda.empty_cache()
    return res


def parse_configs(spec):
    out = []
    for item in filter(None, spec.split(",")):
        name, rest = item.split("=", 1)
        d, _, envs = rest.partition(":")
        env = dict(e.split("=", 1) for e in filter(None, envs.split(";")))
        out.append((name, d, env))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--child", default="")
    ap.add_argument("--no-fi", action="store_true")
    ap.add_argument("--joint-knobs", default="", help="config name whose process also times JKNOB")
    args = ap.parse_args()
    points = GRID + KSWEEP
    if args.child:
        name, _, jk = args.child.partition("+")
        r = {"points": time_points(points, fi=name == "fi")}
        if jk:
            r["joint_knobs"] = time_joint_knobs(JKNOB)
        json.dump(r, open(args.out, "w"))
        return
    import torch

    meta = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "configs": {}}
    del torch
    runs = {}
    cfgs = parse_configs(args.configs) + ([] if args.no_fi else [("fi", "", {})])
    for name, d, env in cfgs:
        e = dict(os.environ)
        if d:
            e["FIB_KERNELS_DIR"] = str(Path(d).resolve())
        e.update(env)
        meta["configs"][name] = {"dir": d, "env": env}
        tmp = Path(args.out) / f"_large_k_{name}.json"
        child = ("fi" if name == "fi" else name) + ("+jk" if name == args.joint_knobs else "")
        r = subprocess.run([sys.executable, __file__, "--child", child, "--out", str(tmp)], env=e, cwd=str(ROOT))
        got = json.load(open(tmp)) if r.returncode == 0 and tmp.exists() else {}
        runs[name] = got.get("points", [])
        if "joint_knobs" in got:
            meta["joint_knobs"] = got["joint_knobs"]
        if tmp.exists():
            tmp.unlink()
    names = [c[0] for c in cfgs]
    print("\n| B | V | kind | k | op | " + " | ".join(names) + " |")
    for i, (B, V, kind, k) in enumerate(points):
        for op in OPS:
            vals = []
            for n in names:
                rr = runs.get(n) or []
                vals.append(f"{rr[i][op]:.1f}" if i < len(rr) and op in rr[i] else "-")
            print(f"| {B} | {V} | {kind} | {k} | {op} | " + " | ".join(vals) + " |")
    if meta.get("joint_knobs"):
        print("\n| B | V | kind | k | knob | joint from logits us |")
        for r in meta["joint_knobs"]:
            print(f"| {r['B']} | {r['V']} | {r['kind']} | {r['k']} | {r['knob']} | {r['logits_joint']:.1f} |")
    out = Path(args.out) / "sampling_large_k_h200.json"
    json.dump({"meta": meta, "points": points, "runs": runs}, open(out, "w"), indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
