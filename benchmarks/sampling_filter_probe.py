#!/usr/bin/env python3
"""Probe of the one-pass filter kernel on the H200: token identity against the streaming kernel
(same top-k, same sorted-CDF draw), top-k membership, and device time next to the previous policy
(cluster kernel / streaming kernel), FlashInfer cake and FlashInfer regular; plus a sweep of the CTAs
per row. Prints tables and writes sampling_filter_probe.json to --out.

Usage: python benchmarks/sampling_filter_probe.py [--out DIR] [--quick]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sampling import FI, graph_time, make_inputs, floor_us  # noqa: E402
from sampling_ab import identity_checks as ab_identity, knob, profile as ab_profile  # noqa: E402

from fib_runtime.kernels import sampling as S  # noqa: E402

DEV = "cuda"


def with_cluster(cl, fn):
    return knob(cl, fn)


def identity_checks(log):
    return ab_identity(log, knobs=(1000, 1001, 1003, 1008))


def timing(args, log):
    FI.load()
    rows = []
    seed_t = torch.tensor([1234], dtype=torch.int64, device=DEV)
    off_t = torch.tensor([0], dtype=torch.int64, device=DEV)
    Bs = [1, 16, 64, 256, 512] if not args.quick else [1, 64, 512]
    Vs = [32000, 128256, 151936] if not args.quick else [128256]
    for V in Vs:
        for B in Bs:
            lgs = make_inputs(B, V, "peaked")
            prs = [torch.softmax(x, -1) for x in lgs]
            bfs = [x.to(torch.bfloat16) for x in lgs]
            pt = torch.full((B,), 0.9, device=DEV)
            outs = [torch.empty(B, dtype=torch.int64, device=DEV) for _ in range(4)]
            for k in (50, 2048):
                kt = torch.full((B,), k, dtype=torch.int32, device=DEV)
                r = {"B": B, "V": V, "k": k, "floor_us": floor_us(B, V)}

                def t(cl, xs, fn, **kw):
                    return with_cluster(cl, lambda: graph_time([
                        (lambda i=i: fn(xs[i], kt, pt, seed=seed_t, offset=off_t, out=outs[i], **kw))
                        for i in range(4)]))

                r["filter_probs"] = t(1000, prs, S.top_k_top_p_sampling_from_probs)
                r["filter_probs_S1"] = t(1001, prs, S.top_k_top_p_sampling_from_probs)
                r["filter_probs_S2"] = t(1002, prs, S.top_k_top_p_sampling_from_probs)
                r["auto_probs"] = t(0, prs, S.top_k_top_p_sampling_from_probs)
                r["legacy_probs"] = t(999, prs, S.top_k_top_p_sampling_from_probs)
                r["filter_logits"] = t(1000, lgs, S.top_k_top_p_sampling_from_logits)
                r["legacy_logits"] = t(999, lgs, S.top_k_top_p_sampling_from_logits)
                r["filter_logits_bf16"] = t(1000, bfs, S.top_k_top_p_sampling_from_logits)
                r["legacy_logits_bf16"] = t(999, bfs, S.top_k_top_p_sampling_from_logits)
                r["filter_joint"] = t(1000, lgs, S.top_k_top_p_sampling_from_logits, filter_apply_order="joint")
                r["legacy_joint"] = t(999, lgs, S.top_k_top_p_sampling_from_logits, filter_apply_order="joint")
                if FI.ok:
                    if k <= 1024:
                        r["cake_probs"] = graph_time([
                            (lambda i=i: FI.cake.top_k_top_p_sampling_from_probs(
                                prs[i], kt, pt, top_k_max=k, philox_seed=1234, philox_offset=0)) for i in range(4)])
                    else:
                        r["fi_regular_probs"] = graph_time([
                            (lambda i=i: FI.fis.top_k_top_p_sampling_from_probs(prs[i], kt, pt, seed=1234, offset=0))
                            for i in range(4)])
                rows.append(r)
                log("time " + " ".join(f"{a}={b:.1f}" if isinstance(b, float) else f"{a}={b}" for a, b in r.items()))
            del lgs, prs, bfs
            torch.cuda.empty_cache()
    return rows


def sweep(log):
    rows = []
    seed_t = torch.tensor([1234], dtype=torch.int64, device=DEV)
    off_t = torch.tensor([0], dtype=torch.int64, device=DEV)
    for V, Bs in ((128256, (1, 16, 64, 128)), (32000, (1, 64)), (151936, (1, 64))):
        for B in Bs:
            prs = [torch.softmax(x, -1) for x in make_inputs(B, V, "peaked")]
            kt = torch.full((B,), 50, dtype=torch.int32, device=DEV)
            pt = torch.full((B,), 0.9, device=DEV)
            outs = [torch.empty(B, dtype=torch.int64, device=DEV) for _ in range(4)]
            r = {"B": B, "V": V, "auto": S._launch_config(B, V)["cluster"]}
            for s in (1, 2, 3, 4, 6, 8):
                r[f"S{s}"] = with_cluster(1000 + s, lambda: graph_time([
                    (lambda i=i: S.top_k_top_p_sampling_from_probs(prs[i], kt, pt, seed=seed_t, offset=off_t,
                                                                   out=outs[i])) for i in range(4)]))
            rows.append(r)
            log(f"sweep {r}")
            del prs
    return rows


def profile(log):
    """Phase times from a -DFIB_SAMPLING_PROFILE build (FIB_KERNELS_DIR pointing at it)."""
    from fib_runtime.kernels import loader
    mod = loader.load_family("sampling")
    if mod is None or not hasattr(mod, "prof_read"):
        log("profile: not a profiling build")
        return []
    return ab_profile(mod, log)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parts", default="identity,timing,sweep")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def log(s):
        print(s, flush=True)

    def save():
        (out / "sampling_filter_probe.json").write_text(json.dumps(res, indent=1))

    for part in args.parts.split(","):
        res[part] = {"identity": identity_checks, "timing": lambda lg: timing(args, lg), "sweep": sweep,
                     "profile": profile}[part](log)
        save()


if __name__ == "__main__":
    main()
