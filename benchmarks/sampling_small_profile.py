#!/usr/bin/env python3
"""Where a k=50 row's time goes at small batches (the cluster kernel's candidate path, and the
two-pass kernel where the policy picks it), beside cake in the same run.

Row 0 / rank 0 phase timestamps of a `-DFIB_SAMPLING_PROFILE` build (`prof_read()`), in us since
the kernel's entry. Cluster kernel slots: 24 the per-row parameters read (before the first block
barrier), 25 the TMA slice landed (thread 0's wait), 26 thread 0's keys converted, 27 the block
barrier after the delegate histogram, 1 the coarse sums, 2 the first cluster barrier, 3 the
delegate select (the bound L), 4 the candidate listing, 5 its cluster barrier, 6 the lists gathered
on rank 0, 7 sorted, 8 drawn; rows that exchange by st.async (sampler.cuh, XP: 2-8 CTAs, k <= 256)
record 1 before the delegates are sent, 2 once they are in and summed, 3, 6 this rank's list padded,
7 ranked, 8 merged and drawn, and per CTA the events 0 entry, 1 the other ranks' delegates in, 2
the list done, 3 sent (rank r > 0) or drawn (rank 0). Two-pass kernel slots are printed raw (see
twopass.cuh; 20 rank 0's own list ranked, 21 the other lists in, 22 past the block barrier; per
CTA: 0 entry, 1 pass end, 2 candidates, 3 sent or drawn). Every kernel's draw on at most 64
candidates (finish_sorted64, warp 0): 28 entry, 29 weights scanned, 30 nucleus and kept total, 31
the token stored. The cluster kernel's fp32 load, the slowest warp of row 0 / rank 0: w32 its cycles
in the TMA wait, w33 past it, w34 its cycles converting to keys (or, for the listing rows, taking the
vector maxima), w35 done (us since the entry). Every slot a call reached is kept (slots it did not
reach keep an older call's value; those read as negative or beyond the graph time and are dropped).

    FIB_KERNELS_DIR=<profile build> python benchmarks/sampling_small_profile.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from sampling import (FI, device_tag, graph_time, make_inputs, prof_slots,  # noqa: E402
                      profile_module, run_meta, topk_topp_case)


ORDER = [24, 25, 26, 27, 1, 2, 3, 4, 5, 20, 21, 22, 6, 7, 28, 29, 30, 31, 8, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19, 23]


# the per-warp maxima of row 0 / rank 0 (prof_read's fields 52-59, builds that have them): the cluster
# kernel's fp32 load, "w32" the slowest warp's cycles in the TMA wait, "w33" when it got past (us since
# the entry), "w34" the slowest warp's cycles in the conversion to keys, "w35" when the last warp ended it
WMAX = ["w32", "w33", "w34", "w35"]


def warp_maxima(mod):
    """{"w32": cycles, "w33": us, "w34": cycles, "w35": us} of the last call (prof_read clears them once
    read), {} where unset (the kernel did not run that load) or not built."""
    v = [int(x) for x in str(mod.prof_read()).split(",")]
    if len(v) < 56 or v[52 + 3] <= 0:
        return {}
    return {"w32": float(v[52]), "w33": v[53] / 1000.0, "w34": float(v[54]), "w35": v[55] / 1000.0}


def cta_summary(text, B):
    """prof_cta_read's per-CTA events (the module docstring's; ns since the first entry, -1 unset) -> {rank: {event: (median us, max us)}} over the rows, ranks that ran only."""
    v = [int(x) for x in str(text).split(",")]
    out = {}
    for rk in range(8):
        ev = {}
        for e in range(4):
            xs = sorted(v[(r * 8 + rk) * 4 + e] / 1000.0 for r in range(min(B, 1024)) if v[(r * 8 + rk) * 4 + e] >= 0)
            if xs:
                ev[e] = (xs[len(xs) // 2], xs[-1])
        if ev:
            out[rk] = ev
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--k", type=int, default=50)
    args = ap.parse_args()
    mod = profile_module()
    FI.load()
    seed_t = torch.tensor([7], dtype=torch.int64, device="cuda")
    rows = []
    k = args.k
    for V in (32000, 128256, 151936):
        for B in (1, 16, 64):
            for kind in ("peaked", "flat"):
                lgs = make_inputs(B, V, kind)
                for src in ("probs", "logits"):
                    if src == "logits" and kind == "flat":
                        continue
                    xs, fn, kt, pt = topk_topp_case(lgs, B, k, src)
                    out = torch.empty(B, dtype=torch.int64, device="cuda")
                    us = graph_time([(lambda i=i: fn(xs[i], kt, pt, seed=seed_t, offset=i, out=out, min_top_k=k))
                                     for i in range(4)])
                    cake_us = None
                    if src == "probs" and FI.ok:
                        cake_us = graph_time([(lambda i=i: FI.cake.top_k_top_p_sampling_from_probs(
                            xs[i], kt, pt, top_k_max=k)) for i in range(4)])
                    per, ctas = [], []
                    if hasattr(mod, "prof_cta_read"):
                        mod.prof_cta_read(B)  # (clears what the timed calls left)
                    for i in range(4):  # one eager call per input, its timestamps
                        fn(xs[i], kt, pt, seed=seed_t, offset=i, out=out, min_top_k=k)
                        wx = warp_maxima(mod)  # (first: prof_read clears them once read)
                        vals = prof_slots(mod)
                        per.append({s: vals[s] for s in range(1, 32) if vals[s] is not None and vals[s] < 200.0})
                        per[-1].update(wx)
                        if hasattr(mod, "prof_cta_read"):
                            ctas.append(cta_summary(mod.prof_cta_read(B), B))
                    med = {}
                    for s in ORDER + WMAX:
                        vs = sorted(p[s] for p in per if s in p)
                        if len(vs) >= 3:
                            med[s] = vs[len(vs) // 2]
                    rows.append({"V": V, "B": B, "kind": kind, "src": src, "k": k, "graph_us": us,
                                 "cake_us": cake_us, "slots_us": med, "per_input": per, "cta": ctas})
                    print(f"{V:>7} {B:>3} {kind:>6} {src:>6} ours {us:6.2f} cake "
                          f"{(f'{cake_us:6.2f}' if cake_us else '     -')} | " +
                          " ".join(f"{s}:{v:.2f}" if isinstance(s, int) or s in ("w33", "w35") else f"{s}:{v:.0f}"
                                   for s, v in med.items()), flush=True)
                    for c in ctas[1:2]:  # (under its row: input 1's; input 0 is the first eager call)
                        if c:
                            print("      per-CTA (us since the first entry; median / max over rows): " +
                                  " ".join(f"r{rk}:" + ",".join(f"e{e}={v[0]:.2f}/{v[1]:.2f}" for e, v in ev.items())
                                           for rk, ev in c.items()), flush=True)
    meta = run_meta()
    meta["build_config"] = str(mod.build_config())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"sampling_small_profile_{device_tag(meta['device'])}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
