#!/usr/bin/env python3
"""A/B of sampling kernel builds on the GPU: the same top-k+top-p points (device time from CUDA
graphs) and the same token-identity checks under several builds of libfib_sampling.so, one
subprocess per build (FIB_KERNELS_DIR), printed side by side; profiling builds
(-DFIB_SAMPLING_PROFILE) print the phase times of the filter kernel and of the cluster kernel's
small-batch path instead. JSON to --out. sampling_filter_probe.py reuses knob, identity_checks
and profile.

Usage: python benchmarks/sampling_ab.py --builds name=DIR[:VAR=VALUE...][,name=DIR...] [--out DIR] [--cake]
(a build's VAR=VALUE pairs are set in its subprocess's environment, e.g. FIB_SAMPLING_* knobs)
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
          (1, 32000, 50, 1002), (16, 128256, 50, 0), (16, 128256, 50, 1004), (16, 128256, 50, 1008),
          (64, 128256, 50, 0), (64, 128256, 50, 1002), (64, 128256, 50, 1004), (64, 128256, 50, 2),
          (64, 128256, 50, 3), (64, 151936, 50, 0), (64, 151936, 50, 2), (64, 151936, 50, 3),
          (64, 32000, 50, 0), (64, 32000, 50, 1), (128, 128256, 50, 0), (128, 128256, 50, 2),
          (256, 128256, 50, 0), (512, 128256, 50, 0), (512, 151936, 50, 0), (512, 32000, 50, 0),
          (64, 128256, 2048, 0), (512, 128256, 2048, 0), (1, 32000, 2048, 0), (16, 32000, 2048, 0),
          (64, 32000, 2048, 0), (1, 151936, 2048, 0), (16, 128256, 50, 7), (16, 151936, 50, 0),
          (16, 151936, 50, 7), (1, 128256, 50, 7)]
# single filters (no top-k: the cluster kernel's general path), from probs: (op, B, V)
OPS = [(op, B, V) for op in ("top_p", "plain", "min_p") for V, Bs in ((128256, (1, 16, 64, 256, 512)),
                                                                     (32000, (1, 512)))
       for B in Bs] + [("top_p_rows", B, 128256) for B in (64, 512)]
# top-k+top-p from 16-bit logits (top_k_first, p=0.9): (dtype, B, V, k, knob); B >= 256 at V >= 128256
# runs the filter kernel (k = 50 / 100: seeded, ranked final set; k = 200: ranked; k = 2048: sorted);
# the last points put the policy's kernel for 16-bit rows beside forced ones (its 16-bit threshold was
# 12M tokens before the 16-bit register stream, 6M as for fp32 since)
LOGITS16 = [(dt, B, V, k, 0) for dt in ("bf16", "fp16") for B, V in ((256, 128256), (512, 128256), (512, 151936))
            for k in (50, 100, 200, 2048)] + [
    ("bf16", B, V, 50, cl) for B, V, cls in ((64, 128256, (0, 1002, 1001)), (128, 128256, (0, 999)),
                                             (256, 32000, (0, 1001)), (64, 151936, (0, 1002)))
    for cl in cls]
# the grid's small batches (the cluster kernel below the filter threshold; B=64 at V >= 128256 is the
# filter kernel's): (B, V, k), from fp32 probs and fp32 logits, top_k_first and joint, p=0.9
SMALL = [(B, V, k) for V in (32000, 128256, 151936) for B in (1, 16, 64) for k in (50,)] + [
    (1, 32000, 2048), (1, 128256, 2048), (16, 128256, 2048)]
# cluster sizes forced at the small batches (--sweep): (B, V, knobs); 1000 + S: the filter kernel
SWEEP = [(B, V, (2, 3, 4, 5, 6, 8) + ((1002, 1004) if B >= 16 else ())) for B in (1, 16, 64)
         for V in (32000, 128256, 151936)]
OPS_KNOBS = [(op, B, 128256, cl) for op in ("plain", "top_p", "min_p") for B in (256, 512) for cl in (5, 6)]
PROFILE = [(1, 128256, 50, 1001), (1, 128256, 50, 1004), (16, 128256, 50, 1008), (64, 128256, 50, 1002),
           (512, 128256, 50, 1001), (512, 128256, 2048, 1001), (512, 32000, 50, 1001), (256, 32000, 50, 1001),
           (1, 32000, 50, 999), (1, 128256, 50, 999),
           (16, 128256, 50, 999), (64, 128256, 50, 999), (1, 32000, 2048, 999),
           (1, 32000, 50, 999, "logits"), (16, 32000, 50, 999, "logits"), (1, 128256, 50, 999, "logits"),
           (64, 32000, 50, 999), (64, 32000, 50, 999, "logits")]
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
    # builds with the two-pass kernel's rejection tail: its top_k_first rows with k > 1024 return
    # the cluster kernel's token (another token than the streaming kernel's)
    rt = S._build_config().get("twopass_reject_tail", 0) == 1
    for B, V, dtype, src in [(300, 128256, torch.float32, "probs"), (7, 32000, torch.float32, "logits"),
                             (64, 151936, torch.bfloat16, "logits"), (33, 1001, torch.float16, "logits"),
                             (5, 262208, torch.float32, "probs"), (1, 128256, torch.float32, "probs")]:
        lg = torch.randn(B, V, generator=gen, device=dev) * torch.where(
            torch.rand(B, 1, generator=gen, device=dev) < 0.5, 4.0, 1.0)
        if B >= 64:  # ascending rows: tau rises every stage (the adversarial order)
            lg[: B // 8] = torch.sort(lg[: B // 8], dim=1).values
        x = torch.softmax(lg, -1) if src == "probs" else lg.to(dtype)
        k = torch.randint(1, 2049, (B,), generator=gen, device=dev).to(torch.int32)
        if B >= 64:  # a third of the rows in the seeded / rank-sorted range of the filter kernel
            k[B // 3: 2 * B // 3] = torch.randint(1, 257, (2 * B // 3 - B // 3,), generator=gen, device=dev).to(torch.int32)
        k[: min(B, 4)] = torch.tensor([50, 1, 256, 300][: min(B, 4)], dtype=torch.int32)
        p = torch.rand(B, generator=gen, device=dev).clamp_min(0.05)
        fn = S.top_k_top_p_sampling_from_probs if src == "probs" else S.top_k_top_p_sampling_from_logits
        for order in ("top_k_first", "joint"):
            ref = knob(-1, lambda: fn(x, k, p, filter_apply_order=order, seed=3, offset=9))
            xf = x.float()
            # the cluster kernel samples top-p by rejection on rows with k > 1024 (top_k_first) or
            # k > 256 (joint, peaked rows): the same distribution, another token (docs/kernels.md)
            rej = k > (256 if order == "joint" else 1024)
            rej_tp = (k > 1024) & (p >= 0.25) if rt and order == "top_k_first" else torch.zeros_like(rej)
            for cl in knobs:
                got = knob(cl, lambda: fn(x, k, p, filter_apply_order=order, seed=3, offset=9))
                bad = (got < 0) | (got >= V)
                larger = (xf > xf.gather(1, got.clamp(0, V - 1)[:, None])).sum(1)
                same = got == ref
                if 1 <= cl <= 8:
                    same |= rej
                elif cl >= 3000:
                    same |= rej_tp
                r = {"B": B, "V": V, "src": src, "dtype": str(dtype), "order": order, "cluster": cl,
                     "mismatch": int((~same).sum()), "outside_top_k": int(((larger >= k) | bad).sum()),
                     "mismatch_rows_k": k[~same][:8].tolist()}
                rows.append(r)
                if r["mismatch"] or r["outside_top_k"]:
                    log(f"IDENTITY FAIL {r}")
    log(f"identity checks: {len(rows)} failures: {sum(1 for r in rows if r['mismatch'] or r['outside_top_k'])}")
    return rows


def _op_call(op, x, seed, offset, out=None, p=0.9, m=0.1):
    from fib_runtime.kernels import sampling as S

    if op in ("top_p", "top_p_rows"):
        return S.top_p_sampling_from_probs(x, _op_p(op, x, p), seed=seed, offset=offset, out=out)
    if op == "min_p":
        return S.min_p_sampling_from_probs(x, m, seed=seed, offset=offset, out=out)
    return S.sampling_from_probs(x, seed=seed, offset=offset, out=out)


def _op_p(op, x, p):
    """top_p of an op: the scalar p, or for top_p_rows one value per row in [0.5, 1), as fib bench
    draws them (a row whose rejection rounds all fail holds up the launch)."""
    import torch

    return torch.linspace(0.5, 0.999, x.shape[0], device=x.device) if op == "top_p_rows" else p


def _fi_op(op, x, p, m):
    from sampling import FI  # noqa: E402

    if op in ("top_p", "top_p_rows"):
        return FI.fis.top_p_sampling_from_probs(x, _op_p(op, x, p), seed=1234, offset=0)
    if op == "min_p":
        return FI.fis.min_p_sampling_from_probs(x, m, seed=1234, offset=0)
    return FI.fis.sampling_from_probs(x, seed=1234, offset=0)


def op_identity_checks(log):
    """Single filters: the same token under every cluster size whose rows are resident (and, for
    plain sampling and min-p, also the streamed S=1 and S=2 rows at V=128256, keys read from
    global memory)."""
    import torch

    dev = "cuda"
    rows = []
    gen = torch.Generator(device=dev).manual_seed(11)
    for B, V in [(37, 128256), (9, 32000), (3, 151936)]:
        lg = torch.randn(B, V, generator=gen, device=dev) * torch.where(
            torch.rand(B, 1, generator=gen, device=dev) < 0.5, 4.0, 1.0)
        x = torch.softmax(lg, -1)
        p = torch.rand(B, generator=gen, device=dev) * 0.7 + 0.25
        for op in ("plain", "min_p", "top_p"):
            knobs = (4, 8) if op == "top_p" and V > 40000 else (1, 2, 4, 8)
            ref = None
            for cl in knobs:
                got = knob(cl, lambda: _op_call(op, x, 3, 9, p=p))
                if ref is None:
                    ref = got
                    continue
                r = {"op": op, "B": B, "V": V, "cluster": cl, "ref_cluster": knobs[0],
                     "mismatch": int((got != ref).sum())}
                rows.append(r)
                if r["mismatch"]:
                    log(f"OP IDENTITY FAIL {r}")
    log(f"op identity checks: {len(rows)} failures: {sum(1 for r in rows if r['mismatch'])}")
    return rows


# single filters (sample_row without top-k): phases t1, t2, t11..t17 - t0 of row 0 (rank 0; t17:
# the thread that rescans the drawn span)
OP_PROFILE = [("plain", 1, 128256), ("plain", 512, 128256), ("top_p", 1, 128256), ("top_p", 512, 128256),
              ("min_p", 512, 128256)]
OP_NAMES = {1: "loaded", 2: "sync_a", 11: "rej_masses", 12: "cand_sync", 13: "checked", 14: "check_sync",
            15: "draw_start", 16: "draw_masses", 17: "drawn"}


def op_profile(mod, log, points=OP_PROFILE):
    import torch

    dev = "cuda"
    rows = []
    gen = torch.Generator(device=dev).manual_seed(1)
    for op, B, V in points:
        x = torch.softmax(torch.randn(B, V, generator=gen, device=dev) * 4, -1)
        for _ in range(3):
            _op_call(op, x, 1, 0)
        torch.cuda.synchronize()
        vals = [int(v) for v in str(mod.prof_read()).split(",")]
        r = {"op": op, "B": B, "V": V}
        raw = vals[20:44]  # every slot since t0 (0 where unset)
        r.update({n: (raw[i] / 1000.0 if raw[i] > 0 else None) for i, n in OP_NAMES.items()})
        rows.append(r)
        log("op prof " + str({a: (round(b, 2) if isinstance(b, float) else b) for a, b in r.items()}))
    return rows


def profile(mod, log, points=PROFILE):
    """Phase times (row 0, rank 0) from a -DFIB_SAMPLING_PROFILE build: the filter kernel (knob
    1000 + S) or the cluster kernel's small-batch path (knob 999)."""
    import torch

    from fib_runtime.kernels import sampling as S

    dev = "cuda"
    rows = []
    gen = torch.Generator(device=dev).manual_seed(1)
    for B, V, k, cl, *src in points:
        logits = src == ["logits"]
        x = torch.randn(B, V, generator=gen, device=dev) * 4
        if not logits:
            x = torch.softmax(x, -1)
        fn = S.top_k_top_p_sampling_from_logits if logits else S.top_k_top_p_sampling_from_probs
        kt = torch.full((B,), k, dtype=torch.int32, device=dev)
        pt = torch.full((B,), 0.9, device=dev)
        for _ in range(3):
            knob(cl, lambda: fn(x, kt, pt, seed=1, offset=0))
        torch.cuda.synchronize()
        vals = [int(v) for v in str(mod.prof_read()).split(",")]
        r = {"B": B, "V": V, "k": k, "cluster": cl, "src": "logits" if logits else "probs"}
        if cl == 999:
            r.update({n: vals[i] / 1000.0 for i, n in enumerate(ROW_NAMES)})
            r["candidates"] = vals[9]
            r["slots"] = [v / 1000.0 for v in vals[20:44]]  # every slot since t0 (0: unset)
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
        res["op_profile"] = op_profile(mod, log)
        return res
    cache = {}

    def row_args(B, k):  # per-row top_k and top_p = 0.9 tensors, and the 4 inputs' output buffers
        return (torch.full((B,), k, dtype=torch.int32, device=dev), torch.full((B,), 0.9, device=dev),
                [torch.empty(B, dtype=torch.int64, device=dev) for _ in range(4)])

    def probs_for(B, V):  # the 4 peaked inputs of one (B, V), only the latest kept on the GPU
        if (B, V) not in cache:
            cache.clear()
            torch.cuda.empty_cache()
            cache[(B, V)] = [torch.softmax(x, -1) for x in make_inputs(B, V, "peaked")]
        return cache[(B, V)]

    for B, V, k, cl in ([] if args.skip_points else POINTS):
        prs = probs_for(B, V)
        kt, pt, outs = row_args(B, k)
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
    if args.small:
        res["small"] = []
        for B, V, k in SMALL:
            lgs = make_inputs(B, V, "peaked")
            prs = [torch.softmax(x, -1) for x in lgs]
            kt, pt, outs = row_args(B, k)
            r = {"B": B, "V": V, "k": k}
            r["us"] = graph_time([(lambda i=i: S.top_k_top_p_sampling_from_probs(
                prs[i], kt, pt, seed=seed_t, offset=off_t, out=outs[i])) for i in range(4)])
            r["logits_us"] = graph_time([(lambda i=i: S.top_k_top_p_sampling_from_logits(
                lgs[i], kt, pt, seed=seed_t, offset=off_t, out=outs[i])) for i in range(4)])
            r["joint_us"] = graph_time([(lambda i=i: S.top_k_top_p_sampling_from_logits(
                lgs[i], kt, pt, filter_apply_order="joint", seed=seed_t, offset=off_t, out=outs[i])) for i in range(4)])
            if args.cake and FI.ok and k <= 1024:
                r["cake_us"] = graph_time([
                    (lambda i=i: FI.cake.top_k_top_p_sampling_from_probs(
                        prs[i], kt, pt, top_k_max=k, philox_seed=1234, philox_offset=0)) for i in range(4)])
            res["small"].append(r)
            log(f"small {r}")
            del lgs, prs
        torch.cuda.empty_cache()
    if args.sweep:
        res["sweep"] = []
        for B, V, cls in SWEEP:
            lgs = make_inputs(B, V, "peaked")
            prs = [torch.softmax(x, -1) for x in lgs]
            kt, pt, outs = row_args(B, 50)
            for cl in (0,) + cls:
                r = {"B": B, "V": V, "k": 50, "cluster": cl}
                r["us"] = knob(cl, lambda: graph_time([(lambda i=i: S.top_k_top_p_sampling_from_probs(
                    prs[i], kt, pt, seed=seed_t, offset=off_t, out=outs[i])) for i in range(4)]))
                r["logits_us"] = knob(cl, lambda: graph_time([(lambda i=i: S.top_k_top_p_sampling_from_logits(
                    lgs[i], kt, pt, seed=seed_t, offset=off_t, out=outs[i])) for i in range(4)]))
                res["sweep"].append(r)
                log(f"sweep {r}")
            del lgs, prs
        torch.cuda.empty_cache()
    if args.logits16:
        res["logits16"] = []
        for dt, B, V, k, cl in LOGITS16:
            lgs = [x.to(torch.bfloat16 if dt == "bf16" else torch.float16) for x in make_inputs(B, V, "peaked")]
            kt, pt, outs = row_args(B, k)
            r = {"dtype": dt, "B": B, "V": V, "k": k, "cluster": cl, "us": knob(cl, lambda: graph_time([
                (lambda i=i: S.top_k_top_p_sampling_from_logits(lgs[i], kt, pt, seed=seed_t, offset=off_t, out=outs[i]))
                for i in range(4)]))}
            res["logits16"].append(r)
            log(f"logits16 {r}")
            del lgs
        torch.cuda.empty_cache()
    if args.ops:
        res["ops"] = []
        for op, B, V in OPS:
            prs = probs_for(B, V)
            pt = torch.full((B,), 0.9, device=dev)
            mt = torch.full((B,), 0.1, device=dev)
            outs = [torch.empty(B, dtype=torch.int64, device=dev) for _ in range(4)]
            r = {"op": op, "B": B, "V": V, "us": graph_time([
                (lambda i=i: _op_call(op, prs[i], seed_t, off_t, outs[i], pt, mt)) for i in range(4)])}
            if args.cake and FI.ok:
                r["fi_us"] = graph_time([(lambda i=i: _fi_op(op, prs[i], pt, mt)) for i in range(4)])
            res["ops"].append(r)
            log(f"op {r}")
        for op, B, V, cl in OPS_KNOBS:  # cluster sizes forced (knob S) at the large batch
            prs = probs_for(B, V)
            outs = [torch.empty(B, dtype=torch.int64, device=dev) for _ in range(4)]
            r = {"op": op, "B": B, "V": V, "cluster": cl, "us": knob(cl, lambda: graph_time([
                (lambda i=i: _op_call(op, prs[i], seed_t, off_t, outs[i])) for i in range(4)]))}
            res.setdefault("ops_knobs", []).append(r)
            log(f"op knob {r}")
        cache.clear()
        res["op_identity"] = op_identity_checks(log)
    if not args.skip_identity:
        res["identity"] = identity_checks(log)
    return res


def _table(allres, names, cols, points, key, ref_key, ref_name):
    """Prints one markdown table: a point per row, each build's time, the reference's time."""
    print("\n| " + " | ".join(cols + names + [ref_name]) + " |")
    for j, pt in enumerate(points):
        cells, ref = [], "–"
        for n in names:
            t = allres["builds"][n].get(key, [])
            cells.append(f"{t[j]['us']:.1f}" if j < len(t) else "–")
            if j < len(t) and ref_key in t[j]:
                ref = f"{t[j][ref_key]:.1f}"
        print("| " + " | ".join([str(v) for v in pt] + cells + [ref]) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builds", required=False, default="")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--cake", action="store_true", help="also time FlashInfer cake beside the policy points")
    ap.add_argument("--ops", action="store_true", help="also time top-p / plain / min-p (OPS) and check their identity")
    ap.add_argument("--skip-points", action="store_true", help="skip the top-k+top-p POINTS")
    ap.add_argument("--logits16", action="store_true", help="also time top-k+top-p from bf16 / fp16 logits (LOGITS16)")
    ap.add_argument("--small", action="store_true", help="also time the grid's small batches (SMALL), probs / logits / joint")
    ap.add_argument("--sweep", action="store_true", help="also time forced cluster sizes at the small batches (SWEEP)")
    ap.add_argument("--skip-identity", action="store_true", help="skip the top-k+top-p identity checks")
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
        d, *extra = d.split(":")  # name=DIR:VAR=VALUE:...: the build with those environment variables
        tmp = out / f".ab_{name}.json"
        env = dict(os.environ, FIB_KERNELS_DIR=str(Path(d).resolve()))
        env.update(e.split("=", 1) for e in extra)
        cmd = [sys.executable, __file__, "--child", str(tmp)] + (["--cake"] if args.cake and i == 0 else [])
        cmd += [f for f, on in (("--ops", args.ops), ("--skip-points", args.skip_points), ("--logits16", args.logits16),
                                ("--skip-identity", args.skip_identity), ("--small", args.small), ("--sweep", args.sweep)) if on]
        print(f"== build {name} ({d})", flush=True)
        rc = subprocess.call(cmd, env=env)
        allres["builds"][name] = json.loads(tmp.read_text()) if rc == 0 and tmp.exists() else {"rc": rc}
        (out / "sampling_ab.json").write_text(json.dumps(allres, indent=1))
    names = list(allres["builds"])
    _table(allres, names, ["B", "V", "k", "knob"], POINTS, "timing", "cake_us", "cake")
    if args.small:
        for key, ref in (("us", "cake_us"), ("logits_us", "cake_us"), ("joint_us", "-")):
            print(f"\n{key}")
            print("| B | V | k | " + " | ".join(names) + " | ref |")
            for j, pt in enumerate(SMALL):
                cells = []
                refv = "–"
                for n in names:
                    t = allres["builds"][n].get("small", [])
                    cells.append(f"{t[j][key]:.2f}" if j < len(t) else "–")
                    if j < len(t) and ref in t[j]:
                        refv = f"{t[j][ref]:.2f}"
                print("| " + " | ".join(map(str, pt)) + " | " + " | ".join(cells) + f" | {refv} |")
    if args.logits16:
        _table(allres, names, ["dtype", "B", "V", "k", "knob"], LOGITS16, "logits16", "-", "-")
    if args.ops:
        _table(allres, names, ["op", "B", "V"], OPS, "ops", "fi_us", "FI regular")


if __name__ == "__main__":
    main()
