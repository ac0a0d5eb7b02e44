#!/usr/bin/env python3
"""How top-k+top-p time grows with k where the rows fill the GPU (issue 5's joint points): ours
(the launch policy, and the resident cluster kernel with one CTA per row) vs FlashInfer's regular
joint path, from logits, V=32000 and 128256, B=256/512, peaked and flat rows, top_p=0.9. Device
time from CUDA graphs (4 inputs, median of 3), and for joint rows the nucleus size (tokens of the
whole row's top_p mass) that decides how far a select has to go. JSON to --out.

Usage: python benchmarks/sampling_k_probe.py [--out DIR] [--ks 64,128,...]
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from sampling import FI, graph_time, make_inputs  # noqa: E402
from sampling_ab import knob  # noqa: E402


def nucleus_sizes(lg, p=0.9):
    q = torch.softmax(lg.double(), -1).sort(-1, descending=True).values.cumsum(-1)
    return ((q < p).sum(-1) + 1).float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument("--ks", default="64,128,256,512,1024,2048")
    ap.add_argument("--points", default="256x32000,512x32000,256x128256")
    args = ap.parse_args()
    from fib_runtime.kernels import sampling as S

    FI.load()
    ks = [int(x) for x in args.ks.split(",")]
    rows = []
    for pt in args.points.split(","):
        B, V = (int(x) for x in pt.split("x"))
        for kind in ("peaked", "flat"):
            lgs = make_inputs(B, V, kind)
            ns = nucleus_sizes(lgs[0])
            p = torch.full((B,), 0.9, device="cuda")
            for k in ks:
                kt = torch.full((B,), k, dtype=torch.int32, device="cuda")
                r = {"B": B, "V": V, "kind": kind, "k": k, "nucleus_max": ns.max().item(),
                     "nucleus_median": ns.median().item()}
                for order in ("top_k_first", "joint"):
                    for name, cl in (("ours", 0), ("cluster1", 1)):
                        calls = [lambda x=x, o=order: S.top_k_top_p_sampling_from_logits(
                            x, kt, p, filter_apply_order=o, seed=1, offset=0) for x in lgs]
                        r[f"{name}_{order}"] = knob(cl, lambda: graph_time(calls))
                    if FI.ok:
                        calls = [lambda x=x, o=order: FI.fis.top_k_top_p_sampling_from_logits(
                            x, kt, p, filter_apply_order=o, seed=1234, offset=0) for x in lgs]
                        r[f"fi_{order}"] = graph_time(calls)
                print(json.dumps({a: (round(b, 1) if isinstance(b, float) else b) for a, b in r.items()}), flush=True)
                rows.append(r)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "fi_error": FI.err}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sampling_k_probe_h200.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
