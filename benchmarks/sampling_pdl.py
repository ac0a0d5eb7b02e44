#!/usr/bin/env python3
"""What programmatic dependent launch (FIB_SAMPLING_PDL) buys where the kernel ahead is not ours.

The grid (benchmarks/sampling.py) times four calls back to back in one CUDA graph, so with PDL each
call's CTAs become resident while the call ahead drains: that call is ours and lets it launch as
soon as it starts. In an engine the kernel ahead is the engine's (a softmax, a temperature scale),
which does not trigger early: the sampler then launches as those CTAs exit. This times, per point,
a graph of four (torch kernel ahead -> our call) chains, the torch kernels alone, and our calls back
to back; from probs also cake behind the same softmax. Run it once with FIB_SAMPLING_PDL=0 and once
without (the library reads the switch once per process), then --compare the two JSON files.

    python benchmarks/sampling_pdl.py --tag _on  [--out DIR]
    FIB_SAMPLING_PDL=0 python benchmarks/sampling_pdl.py --tag _off [--out DIR]
    python benchmarks/sampling_pdl.py --compare DIR/sampling_pdl_on_h100.json DIR/sampling_pdl_off_h100.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

POINTS = [(B, V, k) for V in (32000, 128256) for B in (1, 16, 64, 256, 512) for k in (50, 2048)]
# --knobs: the kernels (FIB_SAMPLING_CLUSTER knobs, fib_runtime/envs.py) behind the softmax and back to
# back, from probs at k=50, where a just-written input can sit in L2 (B=64 V=128256: 33 MB)
KNOB_POINTS = [(64, 128256, 50), (64, 151936, 50), (64, 32000, 50), (128, 128256, 50), (16, 128256, 50)]
KNOBS = (0, 2, 4, 8, 1002, 1004, 3001, 3002, 3004, 4002, 4004)


def compare(on_path: str, off_path: str) -> None:
    on, off = (json.loads(Path(p).read_text()) for p in (on_path, off_path))
    print(f"on: {on['meta'].get('env')}  off: {off['meta'].get('env')}  ({on['meta']['device']})")
    print("| B | V | k | src | ours in the chain: on / off us | ratio | back to back: on / off | ratio | cake in the chain |")
    print("|---:|---:|---:|---|---|---:|---|---:|---:|")
    for a, b in zip(on["timing"], off["timing"]):
        assert (a["B"], a["V"], a["k"], a["src"]) == (b["B"], b["V"], b["k"], b["src"])
        ca, cb = a["chain"] - a["ahead"], b["chain"] - b["ahead"]
        cake = a.get("cake_chain")
        print(f"| {a['B']} | {a['V']} | {a['k']} | {a['src']} | {ca:.1f} / {cb:.1f} | {ca / cb:.3f} | "
              f"{a['b2b']:.1f} / {b['b2b']:.1f} | {a['b2b'] / b['b2b']:.3f} | "
              + (f"{cake - a['ahead']:.1f} |" if cake else "– |"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--tag", default="")
    ap.add_argument("--no-cake", action="store_true")
    ap.add_argument("--compare", nargs=2, metavar=("ON", "OFF"))
    ap.add_argument("--knobs", action="store_true", help="KNOB_POINTS by kernel knob, chain and back to back")
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
        return

    import torch

    from sampling import FI, device_tag, graph_time, make_inputs, run_meta

    from fib_runtime.kernels import sampling as S

    if not args.no_cake:
        FI.load()
    dev = "cuda"
    seed_t = torch.tensor([1234], dtype=torch.int64, device=dev)
    off_t = torch.tensor([0], dtype=torch.int64, device=dev)
    res = {"meta": run_meta(), "timing": []}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.knobs:
        from sampling_ab import knob

        for B, V, k in KNOB_POINTS:
            lgs = make_inputs(B, V, "peaked")
            prs = [torch.softmax(x, -1) for x in lgs]
            kt = torch.full((B,), k, dtype=torch.int32, device=dev)
            pt = torch.full((B,), 0.9, device=dev)
            outs = [torch.empty(B, dtype=torch.int64, device=dev) for _ in range(4)]
            r = {"B": B, "V": V, "k": k, "src": "probs", "ahead": graph_time([(lambda i=i: torch.softmax(lgs[i], -1))
                                                                            for i in range(4)])}
            for cl in KNOBS:
                try:
                    r[f"chain_{cl}"] = knob(cl, lambda: graph_time([(lambda i=i: S.top_k_top_p_sampling_from_probs(
                        torch.softmax(lgs[i], -1), kt, pt, seed=seed_t, offset=off_t, out=outs[i])) for i in range(4)]))
                    r[f"b2b_{cl}"] = knob(cl, lambda: graph_time([(lambda i=i: S.top_k_top_p_sampling_from_probs(
                        prs[i], kt, pt, seed=seed_t, offset=off_t, out=outs[i])) for i in range(4)]))
                except Exception as e:  # noqa: BLE001 (a knob this shape does not take)
                    r[f"error_{cl}"] = str(e)[:200]
            if not args.no_cake and FI.ok:
                r["cake_chain"] = graph_time([(lambda i=i: FI.cake.top_k_top_p_sampling_from_probs(
                    torch.softmax(lgs[i], -1), kt, pt, top_k_max=k, philox_seed=1234, philox_offset=0)) for i in range(4)])
                r["cake_b2b"] = graph_time([(lambda i=i: FI.cake.top_k_top_p_sampling_from_probs(
                    prs[i], kt, pt, top_k_max=k, philox_seed=1234, philox_offset=0)) for i in range(4)])
            res["timing"].append(r)
            a0 = r["ahead"]
            print(f"B={B} V={V} k={k} softmax {a0:.1f} us; in the chain (minus the softmax) / back to back:", flush=True)
            for cl in KNOBS + ("cake",):
                c, b = r.get(f"chain_{cl}", r.get(f"{cl}_chain")), r.get(f"b2b_{cl}", r.get(f"{cl}_b2b"))
                if c is not None:
                    print(f"  {cl}: {c - a0:.1f} / {b:.1f}", flush=True)
            del lgs, prs
            torch.cuda.empty_cache()
        path = out / f"sampling_pdl_knobs{args.tag}_{device_tag()}.json"
        path.write_text(json.dumps(res, indent=1))
        print(f"wrote {path}")
        return
    for B, V, k in POINTS:
        lgs = make_inputs(B, V, "peaked")
        kt = torch.full((B,), k, dtype=torch.int32, device=dev)
        pt = torch.full((B,), 0.9, device=dev)
        outs = [torch.empty(B, dtype=torch.int64, device=dev) for _ in range(4)]
        for src in ("probs", "logits"):
            if src == "probs":  # the kernel ahead: the softmax that makes the probs
                ahead = [(lambda i=i: torch.softmax(lgs[i], -1)) for i in range(4)]
                ours = S.top_k_top_p_sampling_from_probs
            else:  # a temperature scale
                ahead = [(lambda i=i: lgs[i] * 1.0) for i in range(4)]
                ours = S.top_k_top_p_sampling_from_logits
            srcs = [a() for a in ahead]
            r = {"B": B, "V": V, "k": k, "src": src}
            r["ahead"] = graph_time(ahead)
            r["chain"] = graph_time([(lambda i=i: ours(ahead[i](), kt, pt, seed=seed_t, offset=off_t, min_top_k=k,
                                                         out=outs[i])) for i in range(4)])
            r["b2b"] = graph_time([(lambda i=i: ours(srcs[i], kt, pt, seed=seed_t, offset=off_t, min_top_k=k,
                                                       out=outs[i])) for i in range(4)])
            if src == "probs" and not args.no_cake and FI.ok and k <= 1024:
                r["cake_chain"] = graph_time([(lambda i=i: FI.cake.top_k_top_p_sampling_from_probs(
                    ahead[i](), kt, pt, top_k_max=k, philox_seed=1234, philox_offset=0)) for i in range(4)])
            res["timing"].append(r)
            print("time " + json.dumps({a: (round(b, 2) if isinstance(b, float) else b) for a, b in r.items()}), flush=True)
            del srcs
        del lgs
        torch.cuda.empty_cache()
    path = out / f"sampling_pdl{args.tag}_{device_tag()}.json"
    path.write_text(json.dumps(res, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
