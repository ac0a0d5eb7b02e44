#!/usr/bin/env python3
"""Sampling benchmark: fib-runtime kernels vs FlashInfer 0.7.2 (best path) vs the vLLM-style PyTorch path.

Grid (issue 5): B in {1,16,64,256,512} x V in {32000,128256,151936} x {peaked (randn*4), flat (randn*1)}
logits x k in {50, 2048}, per-row tensors top_k, top_p=0.9. Semantics compared like with like:
- probs / top_k_first: ours vs FlashInfer cake_sampling (k <= 1024) and regular top_k_top_p_sampling_from_probs;
- logits / top_k_first: ours (logits-native) vs FlashInfer softmax + cake (k <= 1024) and regular
  top_k_top_p_sampling_from_logits; and the vLLM-style PyTorch sort path;
- logits / joint: ours vs FlashInfer regular joint.
Extra rows at V=128256: top_p, min_p, plain sampling and top_k alone from probs (FlashInfer regular).
Device time: CUDA graph of 4 calls on 4 different inputs (so input-dependent times are means over 4
inputs), replayed; median per call over 5 repeats. Host cost: wall clock of 1000 back-to-back calls at
B=1, V=32000 (best of 3). Floor = B*V*4 bytes / the device's copy bandwidth, measured at the start of
the run (merge_state_device.copy_bandwidth_4g: a 4 GiB device-to-device copy, bytes read + written;
4285 GB/s on our H200). Grids before 2026-12-06 06:00 UTC used 4285 GB/s on every device, so their
H100 floors are ~30% low (an H100 copies at ~3000 GB/s) and their ratios to the floor ~40% high.

Writes benchmarks/results/sampling_<gpu>.json, .md and .log (or --out DIR), <gpu> the device's model
(sampling_h200.*, sampling_h100.*). The .md opens with the issue-5 acceptance summary (summary_lines: per
criterion the points that meet it and the misses, worst or nearest first), then the grid.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fib_runtime.kernels import sampling as S  # noqa: E402

BW = 4285e9  # (replaced by this device's copy bandwidth at the start of main)
DEV = "cuda"
# pass min_top_k=k with the per-row top_k tensor (--no-hint: without; the batches with k > 128 then
# run the two-pass kernel's default instantiation instead of its large-k one)
HINT = True


def floor_us(B, V, elem=4):
    return B * V * elem / BW * 1e6


def graph_time(calls, reps=None, repeats=3):
    """calls: list of zero-arg closures (4 different inputs). Median device us per call."""
    for c in calls:
        c()
        c()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    g.replay()
    torch.cuda.synchronize()
    one = time.perf_counter() - t0
    if reps is None:
        reps = max(3, min(100, int(0.02 / max(one, 1e-6))))
    res = []
    for _ in range(repeats):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            g.replay()
        e1.record()
        e1.synchronize()
        res.append(e0.elapsed_time(e1) * 1e3 / (reps * len(calls)))
    del g
    return statistics.median(res)


def host_enqueue(fn, n=300, rounds=5):
    """Host cost only: the loop's wall clock while ~50 ms of GPU work is queued ahead."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(rounds):
        torch.cuda._sleep(100_000_000)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return best


def host_cost(fn, n=1000, rounds=3):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


# ----------------------------------------------------------------------------- methods
def torch_topk_topp(logits, k, p):
    """vLLM v1 PyTorch path (apply_top_k_top_p + exponential race), same semantics as top_k_first."""
    logits_sort, idx = logits.sort(dim=-1, descending=False)
    top_k_mask = logits_sort.size(1) - k.to(torch.long)
    thr = logits_sort.gather(1, top_k_mask.unsqueeze(1))
    logits_sort.masked_fill_(logits_sort < thr, -float("inf"))
    probs_sort = logits_sort.softmax(dim=-1)
    probs_sum = torch.cumsum(probs_sort, dim=-1, out=probs_sort)
    mask = probs_sum <= 1 - p.unsqueeze(1)
    mask[:, -1] = False
    logits_sort.masked_fill_(mask, -float("inf"))
    logits = logits_sort.scatter(dim=-1, index=idx, src=logits_sort)
    probs = logits.softmax(dim=-1)
    q = torch.empty_like(probs).exponential_()
    return probs.div_(q).argmax(dim=-1)


class FI:
    ok = False
    err = ""

    @classmethod
    def load(cls):
        try:
            import flashinfer.cake_sampling as cake  # noqa: F401
            import flashinfer.sampling as fis  # noqa: F401

            cls.fis, cls.cake = fis, cake
            cls.ok = True
        except Exception as exc:  # noqa: BLE001
            cls.err = f"{type(exc).__name__}: {exc}"


def make_inputs(B, V, kind, n=4, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed + B * 131 + V)
    scale = 4.0 if kind == "peaked" else 1.0
    return [torch.randn(B, V, device=DEV, generator=g) * scale for _ in range(n)]


def run_grid(args, log, res=None):
    rows = res["grid"] if res is not None else []
    Bs = [1, 16, 64, 256, 512]
    Vs = [32000, 128256, 151936]
    kinds = ["peaked", "flat"]
    ks = [50, 2048]
    if args.quick:
        Bs, Vs = [1, 64, 512], [128256]
    seed_t = torch.tensor([1234], dtype=torch.int64, device=DEV)
    off_t = torch.tensor([0], dtype=torch.int64, device=DEV)
    for V in Vs:
        for kind in kinds:
            for B in Bs:
                lgs = make_inputs(B, V, kind)
                prs = [torch.softmax(x, -1) for x in lgs]
                pt = torch.full((B,), 0.9, device=DEV)
                outs = [torch.empty(B, dtype=torch.int64, device=DEV) for _ in range(4)]
                torch_us = None
                for k in ks:
                    kt = torch.full((B,), k, dtype=torch.int32, device=DEV)
                    r = {"B": B, "V": V, "logits": kind, "k": k, "p": 0.9, "floor_us": floor_us(B, V)}
                    # min_top_k: the batch's smallest top_k, known on the host (as cake's top_k_max)
                    hint = k if HINT else None
                    r["ours_probs"] = graph_time([
                        (lambda i=i: S.top_k_top_p_sampling_from_probs(prs[i], kt, pt, seed=seed_t, offset=off_t,
                                                                         min_top_k=hint, out=outs[i])) for i in range(4)])
                    r["ours_logits"] = graph_time([
                        (lambda i=i: S.top_k_top_p_sampling_from_logits(lgs[i], kt, pt, seed=seed_t, offset=off_t,
                                                                          min_top_k=hint, out=outs[i])) for i in range(4)])
                    r["ours_logits_joint"] = graph_time([
                        (lambda i=i: S.top_k_top_p_sampling_from_logits(lgs[i], kt, pt, filter_apply_order="joint",
                                                                          seed=seed_t, offset=off_t, min_top_k=hint,
                                                                          out=outs[i]))
                        for i in range(4)])
                    if FI.ok:
                        fis, cake = FI.fis, FI.cake
                        if k <= 1024:
                            r["fi_cake_probs"] = graph_time([
                                (lambda i=i: cake.top_k_top_p_sampling_from_probs(prs[i], kt, pt, top_k_max=k,
                                                                                 philox_seed=1234, philox_offset=0))
                                for i in range(4)])
                            r["fi_softmax_cake"] = graph_time([
                                (lambda i=i: cake.top_k_top_p_sampling_from_probs(fis.softmax(lgs[i]), kt, pt,
                                                                                 top_k_max=k, philox_seed=1234,
                                                                                 philox_offset=0))
                                for i in range(4)])
                        r["fi_regular_probs"] = graph_time([
                            (lambda i=i: fis.top_k_top_p_sampling_from_probs(prs[i], kt, pt, seed=1234, offset=0))
                            for i in range(4)])
                        r["fi_regular_logits"] = graph_time([
                            (lambda i=i: fis.top_k_top_p_sampling_from_logits(lgs[i], kt, pt, seed=1234, offset=0))
                            for i in range(4)])
                        r["fi_regular_logits_joint"] = graph_time([
                            (lambda i=i: fis.top_k_top_p_sampling_from_logits(lgs[i], kt, pt,
                                                                              filter_apply_order="joint",
                                                                              seed=1234, offset=0))
                            for i in range(4)])
                    if not args.no_torch:
                        if torch_us is None:  # sort path: time independent of k; measured once per (B,V,kind)
                            torch_us = graph_time([(lambda i=i: torch_topk_topp(lgs[i], kt, pt)) for i in range(4)],
                                                  reps=2, repeats=2)
                        r["torch_sort_path"] = torch_us
                    fill_ratios(r)
                    rows.append(r)
                    log(fmt_row(r))
                del lgs, prs
                torch.cuda.empty_cache()
    return rows


def fill_ratios(r):
    cands_p = [r[m] for m in ("fi_cake_probs", "fi_regular_probs") if r.get(m) is not None]
    cands_l = [r[m] for m in ("fi_softmax_cake", "fi_regular_logits") if r.get(m) is not None]
    if cands_p:
        r["fi_best_probs"] = min(cands_p)
        r["ratio_probs_vs_fi_best"] = r["ours_probs"] / r["fi_best_probs"]
    if cands_l:
        r["fi_best_logits"] = min(cands_l)
        r["ratio_logits_vs_fi_best"] = r["ours_logits"] / r["fi_best_logits"]
    if r.get("fi_softmax_cake"):
        r["ratio_logits_vs_softmax_cake"] = r["ours_logits"] / r["fi_softmax_cake"]
    if r.get("fi_regular_logits_joint"):
        r["ratio_joint_vs_fi"] = r["ours_logits_joint"] / r["fi_regular_logits_joint"]
    if r.get("torch_sort_path"):
        r["ratio_logits_vs_torch"] = r["ours_logits"] / r["torch_sort_path"]
    for m in ("ours_probs", "ours_logits", "ours_logits_joint"):
        r[f"{m}_over_floor"] = r[m] / r["floor_us"]


def fmt_row(r):
    def g(m):
        v = r.get(m)
        return "-" if v is None else f"{v:.1f}"

    return (f"B={r['B']:>3} V={r['V']:>6} {r['logits']:>6} k={r['k']:>4} | ours probs {g('ours_probs')} "
            f"logits {g('ours_logits')} joint {g('ours_logits_joint')} | cake {g('fi_cake_probs')} "
            f"sm+cake {g('fi_softmax_cake')} fi_p {g('fi_regular_probs')} fi_l {g('fi_regular_logits')} "
            f"fi_joint {g('fi_regular_logits_joint')} torch {g('torch_sort_path')} | floor {r['floor_us']:.2f}")


def run_extra(args, log):
    """Single-filter rows from probs at V=128256 (FlashInfer regular path is its only path)."""
    rows = []
    V = 128256
    seed_t = torch.tensor([1234], dtype=torch.int64, device=DEV)
    off_t = torch.tensor([0], dtype=torch.int64, device=DEV)
    Bs = [1, 64, 512] if args.quick else [1, 16, 64, 256, 512]
    for kind in ("peaked", "flat"):
        for B in Bs:
            prs = [torch.softmax(x, -1) for x in make_inputs(B, V, kind, seed=7)]
            outs = [torch.empty(B, dtype=torch.int64, device=DEV) for _ in range(4)]
            kt = torch.full((B,), 50, dtype=torch.int32, device=DEV)
            pt = torch.full((B,), 0.9, device=DEV)
            mt = torch.full((B,), 0.1, device=DEV)
            specs = {
                "top_p_from_probs": (lambda i: S.top_p_sampling_from_probs(prs[i], pt, seed=seed_t, offset=off_t, out=outs[i]),
                                     lambda i: FI.fis.top_p_sampling_from_probs(prs[i], pt, seed=1234, offset=0)),
                "min_p_from_probs": (lambda i: S.min_p_sampling_from_probs(prs[i], mt, seed=seed_t, offset=off_t, out=outs[i]),
                                     lambda i: FI.fis.min_p_sampling_from_probs(prs[i], mt, seed=1234, offset=0)),
                "sampling_from_probs": (lambda i: S.sampling_from_probs(prs[i], seed=seed_t, offset=off_t, out=outs[i]),
                                        lambda i: FI.fis.sampling_from_probs(prs[i], seed=1234, offset=0)),
                "top_k_from_probs": (lambda i: S.top_k_sampling_from_probs(prs[i], kt, seed=seed_t, offset=off_t, out=outs[i]),
                                     lambda i: FI.fis.top_k_sampling_from_probs(prs[i], kt, seed=1234, offset=0)),
            }
            for name, (ours, fi) in specs.items():
                r = {"op": name, "B": B, "V": V, "logits": kind, "floor_us": floor_us(B, V)}
                r["ours"] = graph_time([(lambda i=i: ours(i)) for i in range(4)])
                if FI.ok:
                    r["fi_regular"] = graph_time([(lambda i=i: fi(i)) for i in range(4)])
                    r["ratio_vs_fi"] = r["ours"] / r["fi_regular"]
                r["ours_over_floor"] = r["ours"] / r["floor_us"]
                rows.append(r)
                log(f"{name:>20} B={B:>3} {kind:>6}: ours {r['ours']:.1f} fi {r.get('fi_regular', float('nan')):.1f} "
                    f"floor {r['floor_us']:.2f}")
            del prs
    return rows


def run_cluster_sweep(log):
    """How the cluster size S (CTAs per row) changes our time, top_k_first from logits, k=50."""
    rows = []
    seed_t = torch.tensor([1234], dtype=torch.int64, device=DEV)
    off_t = torch.tensor([0], dtype=torch.int64, device=DEV)
    for V, Bs in ((128256, (1, 16, 64, 128, 256, 512)), (32000, (1, 64, 512)), (151936, (1, 64, 512))):
        for B in Bs:
            lgs = make_inputs(B, V, "peaked")
            kt = torch.full((B,), 50, dtype=torch.int32, device=DEV)
            pt = torch.full((B,), 0.9, device=DEV)
            outs = [torch.empty(B, dtype=torch.int64, device=DEV) for _ in range(4)]
            auto = S._launch_config(B, V)["cluster"]
            r = {"B": B, "V": V, "auto_cluster": auto}
            old = S._CLUSTER
            try:
                for cl in (-1, 2, 3, 4, 5, 6, 8):
                    if cl > 0 and V / cl * 4 + 34000 > 227 * 1024:
                        continue
                    S._CLUSTER = cl
                    r["stream" if cl < 0 else f"S{cl}"] = graph_time([(lambda i=i: S.top_k_top_p_sampling_from_logits(
                        lgs[i], kt, pt, seed=seed_t, offset=off_t, out=outs[i])) for i in range(4)])
            finally:
                S._CLUSTER = old
            rows.append(r)
            log(f"cluster sweep {r}")
    return rows


def host_inputs(dev=DEV):
    """The host-cost calls' inputs (B=1, V=32000): logits, probs, per-row k and p, an int64 out, seed and
    offset tensors."""
    x = torch.randn(1, 32000, device=dev)
    return (x, torch.softmax(x, -1), torch.full((1,), 50, dtype=torch.int32, device=dev),
            torch.full((1,), 0.9, device=dev), torch.empty(1, dtype=torch.int64, device=dev),
            torch.tensor([1], dtype=torch.int64, device=dev), torch.tensor([0], dtype=torch.int64, device=dev))


def host_call_cases(Smod, dev=DEV):
    """The call forms whose host cost is compared (sampling_host_ab.py, sampling_host_cpu.py), on the
    module `Smod` (this tree's fib_runtime.kernels.sampling or a baseline's)."""
    x, pr, kt, pt, out, st, ot = host_inputs(dev)
    c = iter(range(10 ** 9))
    return {
        "tensors_out": lambda: Smod.top_k_top_p_sampling_from_logits(x, kt, pt, seed=st, offset=ot, out=out),
        "tensors_alloc_default_rng": lambda: Smod.top_k_top_p_sampling_from_logits(x, kt, pt),
        "scalars_int_seed": lambda: Smod.top_k_top_p_sampling_from_probs(pr, 50, 0.9, seed=1, offset=next(c)),
        "plain_probs_out": lambda: Smod.sampling_from_probs(pr, seed=st, offset=ot, out=out),
    }


def run_host_cost(log):
    res = {}
    x, pr, kt, pt, out, st, ot = host_inputs()
    c = iter(range(10 ** 9))
    res["tiny_torch_op(x.add_(1))"] = host_cost(lambda: x.add_(0))
    res["ours top_k_top_p_from_logits (tensors, out=, seed/offset tensors)"] = host_cost(
        lambda: S.top_k_top_p_sampling_from_logits(x, kt, pt, seed=st, offset=ot, out=out))
    res["ours top_k_top_p_from_logits (tensors, allocating, default rng)"] = host_cost(
        lambda: S.top_k_top_p_sampling_from_logits(x, kt, pt))
    res["ours top_k_top_p_from_probs (scalars 50/0.9, int seed/offset)"] = host_cost(
        lambda: S.top_k_top_p_sampling_from_probs(pr, 50, 0.9, seed=1, offset=next(c)))
    res["ours sampling_from_probs (out=)"] = host_cost(lambda: S.sampling_from_probs(pr, seed=st, offset=ot, out=out))
    mod = S.load_family("sampling")
    fn = mod.sample
    res["raw tvm-ffi call (no Python wrapper)"] = host_cost(
        lambda: fn(x, out, S._SAMPLE | S._LOGITS, kt, pt, None, None, st, ot, 0, -1))
    if FI.ok:
        fis, cake = FI.fis, FI.cake
        res["fi top_k_top_p_sampling_from_logits"] = host_cost(
            lambda: fis.top_k_top_p_sampling_from_logits(x, kt, pt, seed=1, offset=0))
        res["fi cake top_k_top_p_from_probs (explicit philox)"] = host_cost(
            lambda: cake.top_k_top_p_sampling_from_probs(pr, kt, pt, top_k_max=50, philox_seed=1, philox_offset=0))
        res["fi softmax + cake (explicit philox)"] = host_cost(
            lambda: cake.top_k_top_p_sampling_from_probs(fis.softmax(x), kt, pt, top_k_max=50, philox_seed=1,
                                                         philox_offset=0))
    res["torch sort path"] = host_cost(lambda: torch_topk_topp(x, kt, pt), n=200)
    enq = {}
    enq["ours top_k_top_p_from_logits (tensors, out=, seed/offset tensors)"] = host_enqueue(
        lambda: S.top_k_top_p_sampling_from_logits(x, kt, pt, seed=st, offset=ot, out=out))
    enq["ours top_k_top_p_from_logits (tensors, allocating, default rng)"] = host_enqueue(
        lambda: S.top_k_top_p_sampling_from_logits(x, kt, pt))
    enq["ours top_k_top_p_from_probs (scalars 50/0.9, int seed/offset)"] = host_enqueue(
        lambda: S.top_k_top_p_sampling_from_probs(pr, 50, 0.9, seed=1, offset=next(c)))
    enq["raw tvm-ffi call (no Python wrapper)"] = host_enqueue(
        lambda: fn(x, out, S._SAMPLE | S._LOGITS, kt, pt, None, None, st, ot, 0, -1))
    enq["tiny_torch_op(x.add_(1))"] = host_enqueue(lambda: x.add_(0))
    if FI.ok:
        enq["fi top_k_top_p_sampling_from_logits"] = host_enqueue(
            lambda: fis.top_k_top_p_sampling_from_logits(x, kt, pt, seed=1, offset=0))
        enq["fi cake top_k_top_p_from_probs (explicit philox)"] = host_enqueue(
            lambda: cake.top_k_top_p_sampling_from_probs(pr, kt, pt, top_k_max=50, philox_seed=1, philox_offset=0))
    for k, v in res.items():
        log(f"wall per call (back-to-back) {k}: {v:.2f} us/call")
    for k, v in enq.items():
        log(f"host enqueue {k}: {v:.2f} us/call")
    return {"wall_back_to_back_us": res, "host_enqueue_us": enq}


def acceptance(grid, extra):
    acc = {}
    slower = [r for r in grid if r.get("ratio_probs_vs_fi_best", 0) > 1 or r.get("ratio_logits_vs_fi_best", 0) > 1
              or r.get("ratio_joint_vs_fi", 0) > 1]
    acc["grid_points"] = len(grid)
    acc["points_slower_than_fi_best"] = [
        {k: r.get(k) for k in ("B", "V", "logits", "k", "ratio_probs_vs_fi_best", "ratio_logits_vs_fi_best",
                               "ratio_joint_vs_fi")} for r in slower]
    half = [r["ratio_logits_vs_softmax_cake"] for r in grid if r.get("ratio_logits_vs_softmax_cake")]
    acc["logits_vs_softmax_cake_max_ratio"] = max(half) if half else None
    acc["logits_at_most_half_of_softmax_cake"] = bool(half) and max(half) <= 0.5
    big = [(r["fi_best_probs"] / r["ours_probs"], r["fi_best_logits"] / r["ours_logits"]) for r in grid
           if r["k"] > 1024 and r.get("fi_best_probs")]
    acc["k_gt_1024_min_speedup_vs_fi"] = min(min(a) for a in big) if big else None
    acc["k_gt_1024_at_least_5x"] = bool(big) and min(min(a) for a in big) >= 5
    goal = [r["ours_logits"] / r["fi_cake_probs"] for r in grid if r.get("fi_cake_probs")]
    acc["logits_vs_cake_from_probs_max_ratio"] = max(goal) if goal else None
    ex = [r["ratio_vs_fi"] for r in extra if r.get("ratio_vs_fi")]
    acc["extra_max_ratio_vs_fi"] = max(ex) if ex else None
    # per criterion: the points that miss it (the acceptance summary of write_md)
    for col, key in (("ratio_probs_vs_fi_best", "slower_probs"), ("ratio_logits_vs_fi_best", "slower_logits"),
                     ("ratio_joint_vs_fi", "slower_joint")):
        acc[key] = [_pt(r, r[col]) for r in grid if r.get(col) is not None and r[col] > 1]
    for src in ("probs", "logits"):
        pts = [r for r in grid if r["k"] > 1024 and r.get(f"fi_best_{src}")]
        acc[f"k_gt_1024_points_{src}"] = len(pts)
        acc[f"k_gt_1024_below_5x_{src}"] = [_pt(r, r[f"fi_best_{src}"] / r[f"ours_{src}"]) for r in pts
                                            if r[f"fi_best_{src}"] / r[f"ours_{src}"] < 5]
        # misses whose 5x time (FlashInfer's best / 5) is below what the same batch, vocabulary and
        # logits kind take at k = 50 from the same source with ours (from probs: and with cake): k > 1024
        # would have to run faster than the k = 50 samplers
        k50 = {(r["B"], r["V"], r["logits"]): r for r in grid if r["k"] == 50}
        need_lt_k50 = []
        for r in pts:
            need, r50 = r[f"fi_best_{src}"] / 5, k50.get((r["B"], r["V"], r["logits"]))
            if r[f"ours_{src}"] > need and r50 and need < r50[f"ours_{src}"] and (
                    src == "logits" or need < (r50.get("fi_cake_probs") or 0)):
                need_lt_k50.append(_pt(r, need / r50[f"ours_{src}"]))
        acc[f"k_gt_1024_5x_below_k50_{src}"] = need_lt_k50
    gp = [r for r in grid if r.get("fi_cake_probs")]
    acc["logits_goal_points"] = len(gp)
    acc["logits_goal_missed"] = [_pt(r, r["ours_logits"] / r["fi_cake_probs"]) for r in gp
                                 if r["ours_logits"] > r["fi_cake_probs"]]
    return acc


def _pt(r, ratio):
    return {"B": r["B"], "V": r["V"], "logits": r["logits"], "k": r["k"], "ratio": round(float(ratio), 3)}


def summary_lines(acc, host):
    """The issue-5 acceptance summary table (markdown lines) from acceptance()'s dict and the host costs."""
    n = acc.get("grid_points", 0)

    def pts(lst, cap=6):  # (largest ratio first: the worst slower point, the nearest miss of 5x)
        lst = sorted(lst, key=lambda p: -p["ratio"])
        s = ", ".join(f"B={p['B']} V={p['V']} {p['logits']} k={p['k']} {p['ratio']:.3f}" for p in lst[:cap])
        return s + (f", ... ({len(lst) - cap} more)" if len(lst) > cap else "")

    def row(name, missed, total, what):
        ok = "yes" if not missed else "**no**"
        return f"| {name} | {what}: {total - len(missed)}/{total}" + (f"; misses: {pts(missed)}" if missed else "") + f" | {ok} |"

    L = ["## Acceptance summary (issue 5)", "", "| criterion | result | met? |", "|---|---|---|",
         row("no grid point slower than FlashInfer's best, from probs", acc.get("slower_probs", []), n, "not slower"),
         row("no grid point slower than FlashInfer's best, from logits", acc.get("slower_logits", []), n, "not slower"),
         row("no grid point slower than FlashInfer's best, joint from logits", acc.get("slower_joint", []), n,
             "not slower")]
    half = acc.get("logits_vs_softmax_cake_max_ratio")
    L.append(f"| from logits at most half of softmax + cake | max {half:.3f} | "
             f"{'yes' if acc.get('logits_at_most_half_of_softmax_cake') else '**no**'} |" if half is not None else
             "| from logits at most half of softmax + cake | – | – |")
    for src in ("probs", "logits"):
        L.append(row(f"k > 1024 at least 5x faster than FlashInfer's best, from {src}",
                     acc.get(f"k_gt_1024_below_5x_{src}", []), acc.get(f"k_gt_1024_points_{src}", 0), "at least 5x"))
    for src in ("probs", "logits"):
        lt = acc.get(f"k_gt_1024_5x_below_k50_{src}")
        miss = acc.get(f"k_gt_1024_below_5x_{src}", [])
        if miss and lt is not None:
            what = "ours and cake's" if src == "probs" else "ours"
            L.append(f"| (5x misses from {src} where 5x is below {what} k = 50 time, same B, V, logits) | "
                     f"{len(lt)}/{len(miss)}" + (f" (5x time / ours at k = 50: {min(p['ratio'] for p in lt):.2f}-"
                                                 f"{max(p['ratio'] for p in lt):.2f})" if lt else "") + " | |")
    L.append(row("goal: from logits as fast as cake from probs", acc.get("logits_goal_missed", []),
                 acc.get("logits_goal_points", 0), "as fast"))
    enq = (host or {}).get("host_enqueue_us", {})
    key = next((k for k in enq if k.startswith("ours top_k_top_p_from_logits (tensors, out=")), None)
    if key:
        L.append(f"| host cost of one whole call <= 10 us | {enq[key]:.2f} us enqueue ({key}) | "
                 f"{'yes' if enq[key] <= 10 else '**no**'} |")
    return L + [""]


def write_md(path, meta, grid, extra, host, acc, sweep):
    L = [f"# Sampling on {meta['device']} ({meta['date']})", "",
         f"torch {meta['torch']}, FlashInfer {meta['flashinfer']}, apache-tvm-ffi {meta['tvm_ffi']}, "
         f"driver {meta['driver']}. Device time per call in µs from CUDA graphs (4 inputs, median of 3); "
         f"floor = B·V·4 B / {meta.get('copy_GBs', 4285):.0f} GB/s (this device's copy bandwidth). per-row top_k tensor" + (
             " with min_top_k=k (the host's bound, as cake's top_k_max=k; its large-k kernel "
             + ("on" if meta.get("twopass_large_k") else "off: FIB_SAMPLING_TWOPASS_LARGE_K=0") + ")"
             if HINT else "") + ", top_p=0.9." + (
             " Set for this run: " + ", ".join(f"{k}={v}" for k, v in meta["env"].items()) + "."
             if meta.get("env") else ""), ""] + summary_lines(acc, host) + ["## Grid", "",
         "| V | logits | B | k | ours probs | FI best probs | ratio | ours logits | FI best logits | ratio | softmax+cake | ours/sm+cake | ours joint | FI joint | ratio | torch | ours logits/floor |",
         "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def f(v, d=1):
        return "–" if v is None else f"{v:.{d}f}"

    for r in grid:
        L.append(f"| {r['V']} | {r['logits']} | {r['B']} | {r['k']} | {f(r['ours_probs'])} | {f(r.get('fi_best_probs'))} | "
                 f"{f(r.get('ratio_probs_vs_fi_best'), 2)} | {f(r['ours_logits'])} | {f(r.get('fi_best_logits'))} | "
                 f"{f(r.get('ratio_logits_vs_fi_best'), 2)} | {f(r.get('fi_softmax_cake'))} | "
                 f"{f(r.get('ratio_logits_vs_softmax_cake'), 2)} | {f(r['ours_logits_joint'])} | "
                 f"{f(r.get('fi_regular_logits_joint'))} | {f(r.get('ratio_joint_vs_fi'), 2)} | "
                 f"{f(r.get('torch_sort_path'))} | {f(r['ours_logits_over_floor'], 1)} |")
    L += ["", "## Single filters from probs, V=128256 (FlashInfer regular path)", "",
          "| op | logits | B | ours µs | FI µs | ratio | ours/floor |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in extra:
        L.append(f"| {r['op']} | {r['logits']} | {r['B']} | {f(r['ours'])} | {f(r.get('fi_regular'))} | "
                 f"{f(r.get('ratio_vs_fi'), 2)} | {f(r['ours_over_floor'], 1)} |")
    L += ["", "## Host cost per call (B=1, V=32000)", "",
          "wall = 1000 back-to-back calls then one sync (includes device time when that is larger); "
          "enqueue = the loop's clock while the GPU is kept busy (host cost alone).", "",
          "| call | wall µs | enqueue µs |", "|---|---:|---:|"]
    wall, enq = host.get("wall_back_to_back_us", {}), host.get("host_enqueue_us", {})
    for k in list(dict.fromkeys(list(wall) + list(enq))):
        w, e = wall.get(k), enq.get(k)
        L.append(f"| {k} | {'–' if w is None else f'{w:.2f}'} | {'–' if e is None else f'{e:.2f}'} |")
    if sweep:
        L += ["", "## Cluster size sweep (logits, top_k_first, k=50, peaked)", "", "```"]
        L += [json.dumps(s) for s in sweep] + ["```"]
    L += ["", "## Acceptance", "", "```", json.dumps(acc, indent=1), "```", ""]
    Path(path).write_text("\n".join(L))


def device_tag(name=None):
    """The GPU's model for result file names: "NVIDIA H100 80GB HBM3" -> "h100" ("cpu" without one)."""
    if name is None:
        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return name.replace("NVIDIA ", "").split()[0].lower() if name.strip() else "gpu"


def profile_module():
    """The sampling library loaded from FIB_KERNELS_DIR, which must be a -DFIB_SAMPLING_PROFILE build
    (exits otherwise)."""
    from fib_runtime.kernels import loader

    mod = loader.load_family("sampling")
    if mod is None or not hasattr(mod, "prof_read"):
        sys.exit("needs a -DFIB_SAMPLING_PROFILE build in FIB_KERNELS_DIR")
    return mod


def topk_topp_case(lgs, B, k, src):
    """A profile point's top-k + top-p call from `src` ("probs": the softmax of the logits lgs, or
    "logits"): (inputs, function, per-row top_k = k, per-row top_p = 0.9)."""
    xs = [torch.softmax(x, -1) for x in lgs] if src == "probs" else lgs
    fn = S.top_k_top_p_sampling_from_probs if src == "probs" else S.top_k_top_p_sampling_from_logits
    return (xs, fn, torch.full((B,), k, dtype=torch.int32, device="cuda"),
            torch.full((B,), 0.9, device="cuda"))


def prof_slots(mod, raw=None):
    """The phase timestamps of the last call of a -DFIB_SAMPLING_PROFILE build (`mod.prof_read()`, or its
    fields already read as ints, `raw`): slot i as us since slot 0, None where unset (slots a call did not
    reach read as negative)."""
    vals = (raw if raw is not None else [int(v) for v in str(mod.prof_read()).split(",")])[20:52]
    return [v / 1000.0 if v > 0 else None for v in vals]


def median_slots(per_input, names):
    """Per phase name, the median over the inputs' timestamps (None where fewer than 3 inputs reached it)."""
    med = {}
    for n in names:
        vs = sorted(s[n] for s in per_input if s[n] is not None)
        med[n] = vs[len(vs) // 2] if len(vs) >= 3 else None
    return med


def write_profile(out_dir, stem, mod, rows):
    """A profile script's rows with the run's metadata and the build's switches, to
    <out_dir>/<stem>_<gpu>.json."""
    meta = run_meta()
    meta["build_config"] = str(mod.build_config())
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}_{device_tag(meta['device'])}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


def run_meta():
    """Device, driver, library versions and date of a benchmark run (FI.load() first)."""
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
    except Exception:  # noqa: BLE001
        driver = "?"
    import tvm_ffi

    return {"device": torch.cuda.get_device_name(), "driver": driver, "torch": torch.__version__,
            "cuda": torch.version.cuda, "tvm_ffi": getattr(tvm_ffi, "__version__", "?"),
            "flashinfer": getattr(getattr(FI, "fis", None), "__version__", None) or os.environ.get("FI_VERSION", "0.7.2.post1"),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "python": sys.version.split()[0],
            "sms": torch.cuda.get_device_properties(0).multi_processor_count,
            # the policy switches set for this run (FIB_SAMPLING_*; unset: the library's defaults)
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("FIB_SAMPLING_")}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--skip-grid", action="store_true")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--skip-host", action="store_true")
    ap.add_argument("--no-hint", action="store_true", help="no min_top_k with the per-row top_k")
    args = ap.parse_args()
    global HINT
    HINT = not args.no_hint
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    FI.load()
    stem = f"sampling_{device_tag()}"  # (named after the GPU's model: sampling_h100.* on an H100)
    logf = open(out / f"{stem}.log", "a")

    def log(s):
        print(s, flush=True)
        logf.write(s + "\n")
        logf.flush()

    if not FI.ok:
        log(f"FlashInfer not available: {FI.err}")
    meta = run_meta()
    from merge_state_device import copy_bandwidth_4g  # (the 4 GiB copy the cascade benchmarks anchor on)

    global BW
    meta["copy_GBs"] = copy_bandwidth_4g()
    BW = meta["copy_GBs"] * 1e9
    meta["min_top_k_hint"] = HINT
    from fib_runtime import envs

    meta["twopass_large_k"] = bool(envs.get("FIB_SAMPLING_TWOPASS_LARGE_K"))  # (the hint's kernel enabled)
    log(json.dumps(meta))
    t0 = time.time()
    res = {"meta": meta, "grid": [], "extra": [], "host_cost_us": {}, "cluster_sweep": [], "acceptance": {}}

    def save():
        meta["bench_seconds"] = time.time() - t0
        res["acceptance"] = acceptance(res["grid"], res["extra"]) if res["grid"] else {}
        (out / f"{stem}.json").write_text(json.dumps(res, indent=1))
        if res["host_cost_us"] or res["grid"]:
            write_md(out / f"{stem}.md", meta, res["grid"], res["extra"], res["host_cost_us"], res["acceptance"],
                     res["cluster_sweep"])

    import signal

    def on_term(signum, frame):  # timeout(1): keep what was measured
        raise SystemExit(124)

    signal.signal(signal.SIGTERM, on_term)
    try:
        if not args.skip_host:
            res["host_cost_us"] = run_host_cost(log)
        if not args.skip_grid:
            res["grid"] = run_grid(args, log, res)
        save()
        if FI.ok:
            res["extra"] = run_extra(args, log)
        save()
        if not args.skip_sweep:
            res["cluster_sweep"] = run_cluster_sweep(log)
    finally:
        save()
        log(json.dumps(res["acceptance"], indent=1))

if __name__ == "__main__":
    main()
