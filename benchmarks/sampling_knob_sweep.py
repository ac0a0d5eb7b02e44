#!/usr/bin/env python3
"""Top-k + top-p sampling by kernel knob (FIB_SAMPLING_CLUSTER values, fib_runtime/envs.py) at the
points given, from probs and from logits, with min_top_k = k (as the grid), CUDA-graph device time
(4 inputs, median of 3), and the token of each knob against the policy's (knob 0): the kernels
draw the same token for the same inputs, seed and offset, except where a kernel samples by
rejection (then only the support is checked).

    python benchmarks/sampling_knob_sweep.py --points 1,151936,2048,peaked 1,128256,2048,flat \\
        --knobs 0,4,8,16,3004,3008,5004,5008 [--out DIR --tag _x]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", nargs="+", required=True, help="B,V,k,peaked|flat")
    ap.add_argument("--knobs", required=True, help="comma-separated knobs; 0 is the policy")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--tag", default="")
    args = ap.parse_args()

    import torch

    from sampling import device_tag, graph_time, make_inputs, run_meta
    from sampling_ab import knob

    from fib_runtime.kernels import sampling as S

    knobs = [int(x) for x in args.knobs.split(",")]
    dev = "cuda"
    seed_t = torch.tensor([1234], dtype=torch.int64, device=dev)
    off_t = torch.tensor([0], dtype=torch.int64, device=dev)
    res = {"meta": run_meta(), "knobs": knobs, "timing": []}
    for pt in args.points:
        B, V, k, kind = pt.split(",")
        B, V, k = int(B), int(V), int(k)
        lgs = make_inputs(B, V, kind)
        prs = [torch.softmax(x, -1) for x in lgs]
        kt = torch.full((B,), k, dtype=torch.int32, device=dev)
        tp = torch.full((B,), 0.9, device=dev)
        outs = [torch.empty(B, dtype=torch.int64, device=dev) for _ in range(4)]
        topk = prs[0].topk(min(k, V), -1).indices
        r = {"B": B, "V": V, "k": k, "kind": kind}
        ref = {}
        for cl in knobs:
            for src, xs, fn in (("probs", prs, S.top_k_top_p_sampling_from_probs),
                                ("logits", lgs, S.top_k_top_p_sampling_from_logits)):
                try:
                    r[f"{src}_{cl}"] = knob(cl, lambda: graph_time([(lambda i=i: fn(
                        xs[i], kt, tp, seed=seed_t, offset=off_t, min_top_k=k, out=outs[i])) for i in range(4)]))
                    tok = knob(cl, lambda: fn(xs[0], kt, tp, seed=7, offset=3, min_top_k=k))
                    r[f"{src}_{cl}_in_top_k"] = bool((tok[:, None] == topk).any(-1).all())
                    if cl == 0:
                        ref[src] = tok
                    else:
                        r[f"{src}_{cl}_same_token"] = bool(torch.equal(tok, ref[src]))
                except Exception as e:  # noqa: BLE001 (a knob this shape does not take)
                    r[f"{src}_{cl}_error"] = str(e)[:200]
            r[f"used_{cl}"] = knob(cl, lambda: S._launch_config(B, V, 0, cl))
        res["timing"].append(r)
        print(f"B={B} V={V} k={k} {kind}: " + ", ".join(
            f"{cl}: {r.get(f'probs_{cl}', float('nan')):.1f}/{r.get(f'logits_{cl}', float('nan')):.1f}"
            + ("" if r.get(f"probs_{cl}_in_top_k", True) and r.get(f"logits_{cl}_in_top_k", True) else " OUTSIDE")
            for cl in knobs) + "  (probs/logits us)", flush=True)
        del lgs, prs
        torch.cuda.empty_cache()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"sampling_knob_sweep{args.tag}_{device_tag()}.json"
    path.write_text(json.dumps(res, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
