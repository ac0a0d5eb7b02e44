#!/usr/bin/env python3
"""Where a large-k row's time goes in the two-pass kernel's large-k instantiation (the rows of
48-255 with min_top_k = k > 128: speculative candidates, the merge into rank 0, reject_tail), from
the row 0 / rank 0 phase timestamps of a `-DFIB_SAMPLING_PROFILE` build (`prof_read()`) and every
CTA's entry / pass end / candidates / exit (`prof_cta_read()`).

Phases (us since rank 0's entry): the estimate from the sample (slot 15), the pass's end (16), the
candidates counted (1, 2), the radix path (3: only where the estimate failed), the local cut (4),
the cluster's start wait (5), the merged exact top k on rank 0 (6), reject_tail's weights and scan
(12), its first round's candidates (13) and check (14), the token (8). Slots a call did not reach
read as negative: "-". Per CTA: median and max over the rows of each rank's events (0 entry, 1 pass
end, 2 candidates, 3 exit), us since the earliest entry. Graph time of the same build beside it.

    FIB_KERNELS_DIR=<profile build> python benchmarks/sampling_twopass_lk_profile.py [--out DIR]
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

from sampling import (graph_time, make_inputs, median_slots, prof_slots,  # noqa: E402
                      profile_module, topk_topp_case, write_profile)
from sampling_small_profile import cta_summary  # noqa: E402


SLOTS = {"estimate": 15, "pass_end": 16, "pass1": 1, "candidates": 2, "radix": 3, "cut": 4, "cl_wait": 5,
         "merged": 6, "rt_weights": 12, "rt_round0": 13, "rt_check": 14, "token": 8}
# builds with -DFIB_TWOPASS_DIAG_TWICE=1 too: the merge's select (one non-inlined copy) and
# reject_tail each run twice before their own calls (the second warm), timed
DIAG_SLOTS = {"sel1_start": 17, "sel1_end": 18, "sel2_end": 19, "rt1_start": 23, "rt1_end": 24, "rt2_end": 26}
# (B=64 V=32000 is the cluster kernel's: benchmarks/sampling_gather_profile.py)
# (k = 129 and 256 beside 2048 at B=64: the same pass with ~0.2x / ~0.3x the speculative candidates)
POINTS = [(64, 128256, 2048), (64, 151936, 2048), (64, 128256, 1024), (64, 128256, 256), (64, 128256, 129),
          (128, 128256, 2048), (256, 128256, 2048)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()
    mod = profile_module()
    diag = "diag_twice=1" in str(mod.build_config())
    slot_names = dict(SLOTS, **DIAG_SLOTS) if diag else SLOTS
    points = POINTS
    if os.environ.get("LKPROF_POINTS"):  # "B,V,k B,V,k ..."
        points = [tuple(int(x) for x in pt.split(",")) for pt in os.environ["LKPROF_POINTS"].split()]
    seed_t = torch.tensor([7], dtype=torch.int64, device="cuda")
    rows = []
    print(f"{'B':>3} {'V':>7} {'k':>5} {'src':>6} {'kind':>6} {'us':>6} {'cand':>5}  "
          + " ".join(f"{n:>10}" for n in slot_names))
    for B, V, k in points:
        for kind in ("peaked", "flat"):
            lgs = make_inputs(B, V, kind)
            for src in ("probs", "logits"):
                xs, fn, kt, pt = topk_topp_case(lgs, B, k, src)
                out = torch.empty(B, dtype=torch.int64, device="cuda")
                us = graph_time([(lambda i=i: fn(xs[i], kt, pt, seed=seed_t, offset=i, out=out, min_top_k=k))
                                 for i in range(4)])
                slots, ctas, cands = [], [], []
                for i in range(4):
                    if hasattr(mod, "prof_cta_read"):
                        mod.prof_cta_read(B)
                    fn(xs[i], kt, pt, seed=seed_t, offset=i, out=out, min_top_k=k)
                    raw = [int(v) for v in str(mod.prof_read()).split(",")]
                    cands.append(raw[10])  # slot 11: the speculative candidates of row 0 / rank 0
                    vals = prof_slots(mod, raw)
                    slots.append({n: vals[j] for n, j in slot_names.items()})
                    if hasattr(mod, "prof_cta_read"):
                        ctas.append(cta_summary(mod.prof_cta_read(B), B))
                med = median_slots(slots, slot_names)
                rows.append({"B": B, "V": V, "k": k, "kind": kind, "src": src, "graph_us": us, "phases_us": med,
                             "spec_candidates": cands, "per_input": slots, "ctas": ctas})
                print(f"{B:>3} {V:>7} {k:>5} {src:>6} {kind:>6} {us:6.1f} {cands[0]:>5}  " +
                      " ".join(f"{(f'{med[n]:.2f}' if med[n] is not None else '-'):>10}" for n in slot_names), flush=True)
                if ctas:
                    print("      ctas (rank: event: median/max us): " + json.dumps(ctas[0]), flush=True)
    write_profile(args.out, "sampling_twopass_lk_profile", mod, rows)


if __name__ == "__main__":
    main()
