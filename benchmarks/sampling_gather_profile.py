#!/usr/bin/env python3
"""Where a k=2048 row's time goes in the cluster kernel, with and without the gathered tail
(row 0 / rank 0 phase timestamps of a `-DFIB_SAMPLING_PROFILE` build; `prof_read()`).

Phases (us since the kernel's entry on rank 0): keys loaded and delegate histogram (slot 1), the
first cluster barrier (2), the delegate select (3), the top-k radix passes (18-20), and then either
the gathered tail (23: lists written and the cluster barrier, 21: lists gathered on rank 0, 22: the
select finished, 9: reject_tail's token) or the cluster-wide rounds (11: span masses, 12-14: the
rounds' barriers, 15 / 16: the row's end). Slots a call did not reach keep an older call's time and
read as negative: shown as "-". Graph time per call of the same build beside it (the profile build's
timestamps cost a little).

    FIB_KERNELS_DIR=<profile build> python benchmarks/sampling_gather_profile.py [--out DIR]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from sampling import (graph_time, make_inputs, median_slots, prof_slots,  # noqa: E402
                      profile_module, topk_topp_case, write_profile)


SLOTS = {"loaded": 1, "sync_a": 2, "delegate": 3, "pass0": 18, "pass1": 19, "pass2": 20, "gather_sync": 23,
         "gathered": 21, "selected": 22, "tail_token": 9, "span_masses": 11, "round_a": 12, "round_b": 13,
         "round_c": 14, "end15": 15, "end16": 16, "sel_p0": 4, "sel_p1": 5, "sel_p2": 6}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()
    mod = profile_module()
    seed_t = torch.tensor([7], dtype=torch.int64, device="cuda")
    rows = []
    print(f"{'V':>7} {'B':>3} {'src':>6} {'hint':>5} {'us':>6}  " + " ".join(f"{n:>11}" for n in SLOTS))
    for V in (32000, 128256, 151936):
        for B in (1, 16):
            lgs = make_inputs(B, V, "peaked")
            for src in ("probs", "logits"):
                xs, fn, kt, pt = topk_topp_case(lgs, B, 2048, src)
                for hint in (None, 2048):
                    out = torch.empty(B, dtype=torch.int64, device="cuda")
                    us = graph_time([(lambda i=i: fn(xs[i], kt, pt, seed=seed_t, offset=i, out=out, min_top_k=hint))
                                     for i in range(4)])
                    slots = []
                    for i in range(4):  # one eager call per input, its timestamps
                        fn(xs[i], kt, pt, seed=seed_t, offset=i, out=out, min_top_k=hint)
                        vals = prof_slots(mod)
                        slots.append({n: vals[j] for n, j in SLOTS.items()})
                    med = median_slots(slots, SLOTS)
                    rows.append({"V": V, "B": B, "src": src, "hint": hint, "graph_us": us, "phases_us": med,
                                 "per_input": slots})
                    print(f"{V:>7} {B:>3} {src:>6} {str(hint):>5} {us:6.1f}  " +
                          " ".join(f"{(f'{med[n]:.2f}' if med[n] is not None else '-'):>11}" for n in SLOTS), flush=True)
    write_profile(args.out, "sampling_gather_profile", mod, rows)


if __name__ == "__main__":
    main()
