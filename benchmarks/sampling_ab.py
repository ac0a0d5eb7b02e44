#!/usr/bin/env python3
"""A/B of sampling kernel builds on the GPU: the same top-k+top-p points (device time from CUDA
graphs) and the same token-identity checks under several builds of libfib_sampling.so, one
subprocess per build (FIB_KERNELS_DIR), printed side by side; profiling builds
(-DFIB_SAMPLING_PROFILE) print the phase times of the filter kernel and of the cluster kernel's
small-batch path instead. JSON to --out. sampling_filter_probe.py reuses knob, identity_checks
and profile.

Usage: python benchmarks/sampling_ab.py --builds name=DIR[,name=DIR...] [--out DIR] [--cake]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (B, V, k, cluster knob): 0 = the launch policy, 1000 + S = the filter kernel with S CTAs per row
POINTS = [(1, 128256, 50, 0), (1, 128256, 50, 1004), (1, 128256, 50, 1008), (1, 32000, 50, 0),
          (1, 32000, 50, 1002), (16, 128256, 50, 0), (16, 128256, 50, 1004), (64, 128256, 50, 0),
          (64, 128256, 50, 1002), (64, 128256, 50, 1004), (64, 151936, 50, 0), (64, 32000, 50, 0),
          (256, 128256, 50, 0), (512, 128256, 50, 0), (512, 151936, 50, 0), (512, 32000, 50, 0),
          (64, 128256, 2048, 0), (512, 128256, 2048, 0), (1, 32000, 2048, 0), (16, 32000, 2048, 0),
          (64, 32000, 2048, 0), (1, 151936, 2048, 0)]
PROFILE = [(1, 128256, 50, 1001), (1, 128256, 50, 1004), (64, 128256, 50, 1002), (512, 128256, 50, 1001),
           (512, 128256, 2048, 1001), (1, 32000, 50, 999), (1, 128256, 50, 999), (16, 128256, 50, 999),
           (1, 32000, 2048, 999)]
# sample_row (the cluster kernel, knob 999) phases: t1..t8 - t0
ROW_NAMES = ["loaded", "sync_a", "selected", "listed", "sync_b", "gathered", "sorted", "finished"]
PROF_NAMES = ["tma_issued", "head_tail", "first_stage", "loop_done", "local_topk", "joint", "merged", "sorted",
              "end"]


def knob(cl, fn):
    """Runs fn with the kernel knob FIB_SAMPLING_CLUSTER set to cl (see fib_runtime/envs.py)."""
    from fib_runtime.kernels import sampling as S

    old = S._CLUSTER
    S._CLUSTER = cl
    try:
        return fn()
    finally:
        S._CLUSTER = old


def identity_checks(log, knobs=(1001, 1002, 1003, 1008, 1, 4, 8)):
    """Token identity of the filter kernel (1000 + S) and the cluster kernel (S) against the
    streaming kernel (-1), same inputs, seed and offset, both filter orders; plus top-k membership."""
    import torch

    from fib_runtime.kernels import sampling as S

    dev = "cuda"
    rows = []
    gen = torch.Generator(device=dev).manual_seed(5)
    for B, V, dtype, src in [(300, 128256, torch.float32, "probs"), (7, 32000, torch.float32, "logits"),
                             (64, 151936, torch.bfloat16, "logits"), (33, 1001, torch.float16, "logits"),
                             (5, 262208, torch.float32, "probs"), (1, 128256, torch.float32, "probs")]:
        lg = torch.randn(B, V, generator=gen, device=dev) * torch.where(
            torch.rand(B, 1, generator=gen, device=dev) < 0.5, 4.0, 1.0)
        x = torch.softmax(lg, -1) if src == "probs" else lg.to(dtype)
        k = torch.randint(1, 2049, (B,), generator=gen, device=dev).to(torch.int32)
        k[: min(B, 4)] = torch.tensor([50, 1, 256, 300][: min(B, 4)], dtype=torch.int32)
        p = torch.rand(B, generator=gen, device=dev).clamp_min(0.05)
        fn = S.top_k_top_p_sampling_from_probs if src == "probs" else S.top_k_top_p_sampling_from_logits
        for order in ("top_k_first", "joint"):
            ref = knob(-1, lambda: fn(x, k, p, filter_apply_order=order, seed=3, offset=9))
            xf = x.float()
            for cl in knobs:
                got = knob(cl, lambda: fn(x, k, p, filter_apply_order=order, seed=3, offset=9))
                larger = (xf > xf.gather(1, got[:, None])).sum(1)
                r = {"B": B, "V": V, "src": src, "dtype": str(dtype), "order": order, "cluster": cl,
                     "mismatch": int((got != ref).sum()), "outside_top_k": int((larger >= k).sum())}
                rows.append(r)
                if r["mismatch"] or r["outside_top_k"]:
                    log(f"IDENTITY FAIL {r}")
    log(f"identity checks: {len(rows)} failures: {sum(1 for r in rows if r['mismatch'] or r['outside_top_k'])}")
    return rows


def profile(mod, log, points=PROFILE):
    """Phase times (row 0, rank 0) from a -DFIB_SAMPLING_PROFILE build: the filter kernel (knob
    1000 + S) or the cluster kernel's small-batch path (knob 999)."""
    import torch

    from fib_runtime.kernels import sampling as S

    dev = "cuda"
    rows = []
    gen = torch.Generator(device=dev).manual_seed(1)
    for B, V, k, cl in points:
        x = torch.softmax(torch.randn(B, V, generator=gen, device=dev) * 4, -1)
        kt = torch.full((B,), k, dtype=torch.int32, device=dev)
        pt = torch.full((B,), 0.9, device=dev)
        for _ in range(3):
            knob(cl, lambda: S.top_k_top_p_sampling_from_probs(x, kt, pt, seed=1, offset=0))
        torch.cuda.synchronize()
        vals = [int(v) for v in str(mod.prof_read()).split(",")]
        r = {"B": B, "V": V, "k": k, "cluster": cl}
        if cl == 999:
            r.update({n: vals[i] / 1000.0 for i, n in enumerate(ROW_NAMES)})
            r["candidates"] = vals[9]
        else:
            r.update({n: vals[i] / 1000.0 for i, n in enumerate(PROF_NAMES)})
            r["compactions"], r["compacted_entries"] = vals[9], vals[10]
            r["first_compaction"] = [vals[11] / 1000.0, vals[12] / 1000.0]
            r["slow_warp_stages"], r["warp_stages"] = vals[13], vals[14]
            if cl > 1001:  # (merge steps exist with a cluster only)
                r["merge_sync1"], r["merge_pushed"], r["merge_sync2"], r["merge_selected"] = (
                    v / 1000.0 for v in vals[15:19])
            r["mbar_wait_total"] = vals[19] / 1000.0
        rows.append(r)
        log("prof " + str({a: (round(b, 2) if isinstance(b, float) else b) for a, b in r.items()}))
    return rows


def child(args):
    import torch

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from sampling import FI, graph_time, make_inputs  # noqa: E402

    from fib_runtime.kernels import loader
    from fib_runtime.kernels import sampling as S

    def log(m):
        print(m, flush=True)

    dev = "cuda"
    res = {"timing": [], "identity": [], "profile": []}
    seed_t = torch.tensor([1234], dtype=torch.int64, device=dev)
    off_t = torch.tensor([0], dtype=torch.int64, device=dev)
    if args.cake:
        FI.load()
    mod = loader.load_family("sampling")
    if mod is not None and hasattr(mod, "prof_read"):  # profiling builds: phase times only
        res["profile"] = profile(mod, log)
        return res
    cache = {}
    for B, V, k, cl in POINTS:
        if (B, V) not in cache:
            cache.clear()
            torch.cuda.empty_cache()
            cache[(B, V)] = [torch.softmax(x, -1) for x in make_inputs(B, V, "peaked")]
        prs = cache[(B, V)]
        kt = torch.full((B,), k, dtype=torch.int32, device=dev)
        pt = torch.full((B,), 0.9, device=dev)
        outs = [torch.empty(B, dtype=torch.int64, device=dev) for _ in range(4)]
        us = knob(cl, lambda: graph_time([
            (lambda i=i: S.top_k_top_p_sampling_from_probs(prs[i], kt, pt, seed=seed_t, offset=off_t, out=outs[i]))
            for i in range(4)]))
        r = {"B": B, "V": V, "k": k, "cluster": cl, "us": us}
        if args.cake and FI.ok and k <= 1024 and cl == 0:
            r["cake_us"] = graph_time([
                (lambda i=i: FI.cake.top_k_top_p_sampling_from_probs(
                    prs[i], kt, pt, top_k_max=k, philox_seed=1234, philox_offset=0)) for i in range(4)])
        res["timing"].append(r)
        log(f"time {r}")
    cache.clear()
    res["identity"] = identity_checks(log)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builds", required=False, default="")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--cake", action="store_true", help="also time FlashInfer cake beside the policy points")
    ap.add_argument("--child", default="")
    args = ap.parse_args()
    if args.child:
        res = child(args)
        Path(args.child).write_text(json.dumps(res))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    allres = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "builds": {}}
    for i, spec in enumerate(args.builds.split(",")):
        name, d = spec.split("=", 1)
        tmp = out / f".ab_{name}.json"
        env = dict(os.environ, FIB_KERNELS_DIR=str(Path(d).resolve()))
        cmd = [sys.executable, __file__, "--child", str(tmp)] + (["--cake"] if args.cake and i == 0 else [])
        print(f"== build {name} ({d})", flush=True)
        rc = subprocess.call(cmd, env=env)
        allres["builds"][name] = json.loads(tmp.read_text()) if rc == 0 and tmp.exists() else {"rc": rc}
        (out / "sampling_ab.json").write_text(json.dumps(allres, indent=1))
    names = list(allres["builds"])
    print("\n| B | V | k | knob | " + " | ".join(names) + " | cake |")
    for j, (B, V, k, cl) in enumerate(POINTS):
        cells = []
        cake = "–"
        for n in names:
            t = allres["builds"][n].get("timing", [])
            cells.append(f"{t[j]['us']:.1f}" if j < len(t) else "–")
            if j < len(t) and "cake_us" in t[j]:
                cake = f"{t[j]['cake_us']:.1f}"
        print(f"| {B} | {V} | {k} | {cl} | " + " | ".join(cells) + f" | {cake} |")


if __name__ == "__main__":
    main()
