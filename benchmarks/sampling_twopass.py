#!/usr/bin/env python3
"""The two-pass top-k kernel (twopass.cuh, knob 3000 + S) beside the launch policy and FlashInfer's
cake sampler on the H200: top-k+top-p (k=50 unless stated, per-row top_k, top_p=0.9) from fp32
probs, fp32 logits (top_k_first) and joint, device time from CUDA graphs over 4 inputs (median of
3), plus token-identity checks of the two-pass kernel against the streaming kernel
(sampling_ab.identity_checks). JSON to --out/sampling_twopass<tag>_<gpu>.json (gpu: h200, h100, ...).

Usage: python benchmarks/sampling_twopass.py [--out DIR] [--quick] [--skip-identity]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# (B, V, k, kind, knobs): 0 = the launch policy, 3000 = the two-pass kernel with the automatic S,
# 3000 + S forced, 1000 + S the filter kernel
POINTS = []
for V in (32000, 128256, 151936):
    for B in (1, 16, 64, 128, 256, 512):
        knobs = [0, 3000]
        if B in (1, 16):
            knobs += [3004, 3008]
        if B == 64:
            knobs += [3001, 3002, 3004]
        if B == 128:
            knobs += [3001, 1001]
        POINTS.append((B, V, 50, "peaked", tuple(knobs)))
POINTS += [(B, 128256, 50, "flat", (0, 3000)) for B in (1, 64, 512)]
# bf16 logits ("_bf16": from-logits and joint from bf16, probs from the fp32 softmax)
POINTS += [(B, V, 50, "peaked_bf16", (0, 3000, 1000)) for B, V in ((64, 128256), (128, 151936), (64, 151936))]
POINTS += [(B, 128256, k, "peaked", (0, 3000)) for B, k in ((64, 64), (64, 65), (64, 100), (64, 128), (64, 2048),
                                                                 (256, 2048), (512, 2048), (512, 100))]
QUICK = [pt for pt in POINTS if pt[0] in (1, 64, 512) and pt[1] == 128256]
# build-against-build runs (--ab): the batches where the two-pass kernel can take the policy's place
# (4000: the two-pass kernel with two CTAs per SM, the policy from 256 rows; 1000: the filter kernel)
AB = [(B, V, 50, "peaked", (0, 3000) + ((4000, 1000) if B >= 256 else ())) for V in (32000, 128256, 151936)
      for B in (64, 128, 256, 512)] + [
    (B, 128256, k, "peaked", (0, 3000) + ((4000, 1000) if B >= 256 else ()))
    for B, k in ((64, 2048), (512, 2048), (64, 100), (64, 128), (64, 256), (512, 100))] + [
    (B, V, k, "flat", (0, 4000, 1000)) for B, V, k in ((256, 128256, 50), (512, 151936, 50), (512, 32000, 2048))] + [
    (512, V, 50, "peaked_bf16", (0, 4000, 1000)) for V in (32000, 128256)]
# large k (--largek): the rows with kTpSeedMaxK < k <= 2048 (the group maxima bound, or the
# histogram pass where FIB_TWOPASS_GROUP_MAX_K=0), the launch policy, and at B = 1 / 16 (the cluster
# kernel's batches) the two-pass kernel forced beside it
LARGEK = [(B, V, k, "peaked", (0,)) for V in (32000, 128256, 151936) for B in (64, 256, 512)
          for k in (256, 1024, 2048)] + [(B, V, 2048, "flat", (0,)) for V in (32000, 128256) for B in (64, 512)] + [
    # small batches (the policy: the cluster kernel) beside the two-pass kernel forced with 4 / 8 CTAs per row
    (B, 128256, 2048, "peaked", (0, 3004, 3008)) for B in (1, 16)]
# the large-k rows of one CTA per SM (--lk1: B = 64 and 128, the large-k instantiation's kernel for
# one CTA per SM; docs/sampling-journal.md, "The estimate's wait")
LK1 = [(B, V, k, kind, (0,)) for B in (64, 128) for V in (32000, 128256, 151936)
       for k, kind in ((1024, "peaked"), (2048, "peaked"), (2048, "flat"))]
# rows with 256 < k <= 1024 (--rejk), where FIB_SAMPLING_REJECT_MIN_K decides between the sorted tail
# and the rejection tail (the cluster kernel's gathered tail, the two-pass kernel's reject_tail)
REJK = [(B, V, k, "peaked", (0,)) for V in (32000, 128256) for B in (1, 16, 64, 256, 512) for k in (300, 512, 1024)] + [
    (B, 128256, k, "flat", (0,)) for B in (1, 64, 512) for k in (300, 1024)]  # (flat joint rows: radix vs candidates)
# rows without an effective top-p (--nop): top-k alone, and top_k_first with a per-row top_p of 1
# (vLLM's tensor where a request sets no top-p), 512 < k <= 2048, where FIB_SUMM_ROW_P (sampler.cuh)
# decides whether the listing's summary still applies
NOP = [(B, V, k, "peaked", (0,)) for V in (32000, 128256) for B in (1, 16, 64) for k in (600, 1024, 2048)] + [
    (B, 128256, k, "flat", (0,)) for B in (1, 16) for k in (1024, 2048)]
# the batches of 48-128 rows (--b64), where one CTA per SM leaves the SM's loads idle during a row's
# select, merge and draw: the policy beside the two-pass kernel with two CTAs per SM and 2-4 CTAs per
# row (4000 + S; 6000 + S its large-k instantiation, with --hint)
B64 = [(B, V, k, kind, (0,) + tuple((4000 if k <= 128 else 6000) + s for s in (2, 3, 4)))
       for B in (64, 128) for V in (32000, 128256, 151936) for k in (50, 2048) for kind in ("peaked", "flat")]
# profiling builds (-DFIB_SAMPLING_PROFILE): phase times of row 0 / rank 0, us since kernel entry
PROFILE = [(1, 128256, 50, 3004), (1, 128256, 50, 3008), (16, 128256, 50, 3004), (64, 128256, 50, 3002),
           (64, 128256, 50, 3001), (128, 128256, 50, 3001), (512, 128256, 50, 3001), (64, 32000, 50, 3002),
           (64, 128256, 2048, 3002), (64, 128256, 128, 3002), (512, 128256, 2048, 3001),
           (512, 32000, 2048, 4001), (256, 32000, 2048, 4001), (512, 128256, 2048, 4001), (512, 128256, 50, 4001),
           (64, 32000, 2048, 3001), (64, 128256, 50, 4004), (64, 128256, 2048, 6004), (64, 128256, 2048, 5002)]
PROF_NAMES = ["pass1", "candidates", "radix_path", "local_cut", "cluster_sync", "merged", "sorted", "end"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ab", action="store_true", help="only the AB points (no cake, no identity unless asked)")
    ap.add_argument("--tag", default="", help="suffix of the JSON file names")
    ap.add_argument("--largek", action="store_true", help="only the LARGEK points")
    ap.add_argument("--lk1", action="store_true", help="only the LK1 points (large k, one CTA per SM)")
    ap.add_argument("--rejk", action="store_true", help="only the REJK points (256 < k <= 1024)")
    ap.add_argument("--nop", action="store_true", help="only the NOP points (top-k alone; top_p = 1 per row)")
    ap.add_argument("--b64", action="store_true", help="only the B64 points (two CTAs per SM at 64-128 rows)")
    ap.add_argument("--skip-identity", action="store_true")
    ap.add_argument("--no-cake", action="store_true")
    ap.add_argument("--hint", action="store_true",
                    help="pass min_top_k=k (the policy then runs the two-pass kernel's large-k instantiation for k > 128)")
    args = ap.parse_args()

    import torch

    from sampling import FI, device_tag, graph_time, make_inputs, run_meta  # noqa: E402
    from sampling_ab import identity_checks, knob  # noqa: E402

    from fib_runtime.kernels import sampling as S

    def log(m):
        print(m, flush=True)

    if not args.no_cake:
        FI.load()
    dev = "cuda"
    seed_t = torch.tensor([1234], dtype=torch.int64, device=dev)
    off_t = torch.tensor([0], dtype=torch.int64, device=dev)
    res = {"meta": run_meta(), "timing": [], "identity": []}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from fib_runtime.kernels import loader

    mod = loader.load_family("sampling")
    if hasattr(mod, "prof_read"):
        res["profile"] = []
        for B, V, k, cl in PROFILE:
            for kind in ("peaked", "flat"):
                x = torch.softmax(make_inputs(B, V, kind, n=1)[0], -1)
                kt = torch.full((B,), k, dtype=torch.int32, device=dev)
                for _ in range(3):
                    knob(cl, lambda: S.top_k_top_p_sampling_from_probs(x, kt, 0.9, seed=1, offset=0))
                f = [int(v) for v in str(mod.prof_read()).split(",")]
                r = {"B": B, "V": V, "k": k, "knob": cl, "kind": kind}
                r.update({nm: round(f[i] / 1e3, 2) for i, nm in enumerate(PROF_NAMES)})
                # slots 12 / 13 / 14: seed_tau done, re-reading lanes counted, warp 0's appends done;
                # slot 10: the re-reading lanes (raw). Rows with the group maxima bound (k > 128):
                # 12 the bound, 14 the gather, 10 the slice's candidates; builds with speculative
                # candidates (FIB_TWOPASS_SPEC=1): 15 the estimate, 16 the first batch read again,
                # 11 the tokens at or above the estimate (raw; 0 where the row did not speculate)
                r.update({"seeded": round(f[20 + 12] / 1e3, 2), "counted": round(f[20 + 13] / 1e3, 2),
                          "appended_w0": round(f[20 + 14] / 1e3, 2), "reread_lanes": f[9],
                          "spec_est": round(f[20 + 15] / 1e3, 2), "spec_reread": round(f[20 + 16] / 1e3, 2),
                          "spec_count": f[10]})
                res["profile"].append(r)
                log("profile " + json.dumps(r))
        (out / f"sampling_twopass_profile{args.tag}_{device_tag()}.json").write_text(json.dumps(res, indent=1))
        return

    def save():
        (out / f"sampling_twopass{args.tag}_{device_tag()}.json").write_text(json.dumps(res, indent=1))

    for B, V, k, kind, knobs in (B64 if args.b64 else NOP if args.nop else REJK if args.rejk else LK1 if args.lk1 else LARGEK if args.largek else AB if args.ab else QUICK if args.quick else POINTS):
        lgs = make_inputs(B, V, kind.replace("_bf16", ""))
        prs = [torch.softmax(x, -1) for x in lgs]
        if kind.endswith("_bf16"):
            lgs = [x.to(torch.bfloat16) for x in lgs]
        kt = torch.full((B,), k, dtype=torch.int32, device=dev)
        pt = torch.full((B,), 0.9, device=dev)
        outs = [torch.empty(B, dtype=torch.int64, device=dev) for _ in range(4)]
        r = {"B": B, "V": V, "k": k, "kind": kind}
        hint = k if args.hint else None
        if args.nop:  # top-k alone and top_p = 1 per row; no cake (its top-k alone is not this call)
            p1 = torch.ones(B, device=dev)
            for cl in knobs:
                r[f"probs_{cl}"] = knob(cl, lambda: graph_time([(lambda i=i: S.top_k_sampling_from_probs(
                    prs[i], kt, seed=seed_t, offset=off_t, min_top_k=hint, out=outs[i])) for i in range(4)]))
                r[f"logits_{cl}"] = knob(cl, lambda: graph_time([(lambda i=i: S.top_k_sampling_from_logits(
                    lgs[i], kt, seed=seed_t, offset=off_t, min_top_k=hint, out=outs[i])) for i in range(4)]))
                r[f"p1logits_{cl}"] = knob(cl, lambda: graph_time([(lambda i=i: S.top_k_top_p_sampling_from_logits(
                    lgs[i], kt, p1, seed=seed_t, offset=off_t, min_top_k=hint, out=outs[i])) for i in range(4)]))
            res["timing"].append(r)
            log("time " + json.dumps({a: (round(b, 2) if isinstance(b, float) else b) for a, b in r.items()}))
            save()
            del lgs, prs
            torch.cuda.empty_cache()
            continue
        for cl in knobs:
            r[f"probs_{cl}"] = knob(cl, lambda: graph_time([(lambda i=i: S.top_k_top_p_sampling_from_probs(
                prs[i], kt, pt, seed=seed_t, offset=off_t, min_top_k=hint, out=outs[i])) for i in range(4)]))
            if cl in (0, 3000, 4000) or kind.endswith("_bf16") or args.b64:
                r[f"logits_{cl}"] = knob(cl, lambda: graph_time([(lambda i=i: S.top_k_top_p_sampling_from_logits(
                    lgs[i], kt, pt, seed=seed_t, offset=off_t, min_top_k=hint, out=outs[i])) for i in range(4)]))
                r[f"joint_{cl}"] = knob(cl, lambda: graph_time([(lambda i=i: S.top_k_top_p_sampling_from_logits(
                    lgs[i], kt, pt, filter_apply_order="joint", seed=seed_t, offset=off_t, min_top_k=hint,
                    out=outs[i]))
                    for i in range(4)]))
                r[f"used_{cl}"] = knob(cl, lambda: S._launch_config(B, V, 0, cl))
        if not args.no_cake and FI.ok and k <= 1024:
            r["cake"] = graph_time([(lambda i=i: FI.cake.top_k_top_p_sampling_from_probs(
                prs[i], kt, pt, top_k_max=k, philox_seed=1234, philox_offset=0)) for i in range(4)])
        res["timing"].append(r)
        log("time " + json.dumps({a: (round(b, 2) if isinstance(b, float) else b) for a, b in r.items()}))
        save()
        del lgs, prs
        torch.cuda.empty_cache()
    if not args.skip_identity:
        res["identity"] = identity_checks(log, knobs=(3000, 3001, 3002, 3003, 3008, 4000, 4002))
        save()
    # table: every knob's time per source (probs / logits / joint), cake beside the policy from probs
    print("\n| B | V | k | kind | probs: knob us | cake | policy/cake | logits: knob us | joint: knob us |")
    print("|---:|---:|---:|---|---|---:|---:|---|---|")
    for r in res["timing"]:
        c = r.get("cake")
        cols = [", ".join(f"{a[len(src) + 1:]}: {b:.1f}" for a, b in r.items() if a.startswith(src + "_")
                          and not a.startswith("used_")) for src in ("probs", "logits", "p1logits" if args.nop else "joint")]
        cake = f"{c:.1f} | {r['probs_0'] / c:.2f}" if c else "– | –"
        print(f"| {r['B']} | {r['V']} | {r['k']} | {r['kind']} | {cols[0]} | {cake} | {cols[1]} | {cols[2]} |")


if __name__ == "__main__":
    main()
