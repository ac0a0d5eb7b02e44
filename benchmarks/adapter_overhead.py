"""Host cost the adapters add per intercepted call (CPU, no kernels): median ns per call.

    python benchmarks/adapter_overhead.py [--n 20000] [--out benchmarks/results]

Measures, on a no-op "original" with FlashInfer's signature (so only Python work is timed):
- bare: the original called directly;
- wrapped, not ours: the binder returns None (e.g. a ``generator=`` argument): guard + bind + call;
- wrapped, dispatched: binder builds the Call, a pass-through dispatcher calls the fallback;
- wrapped, nested: inside another intercepted call (the re-entrancy guard's fast path);
- the vLLM sampler binder (k given, p None: one ``torch.full`` for the missing p).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import wrapt

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fib_runtime.adapters import base  # noqa: E402
from fib_runtime.adapters.flashinfer import ops as fi_ops  # noqa: E402
from fib_runtime.adapters.vllm import ops as vl_ops  # noqa: E402


def original(probs, top_k, top_p, indices=None, filter_apply_order="top_k_first", deterministic=True,
             generator=None, check_nan=False, seed=None, offset=None, return_valid=False):
    return probs


def sampler_forward(self, logits, generators, k, p):
    return logits, None


def passthrough(name, inputs, fallback):
    return fallback()


def bench(fn, n, repeats=5):
    per = []
    for _ in range(repeats):
        t = time.perf_counter_ns()
        for _ in range(n):
            fn()
        per.append((time.perf_counter_ns() - t) / n)
    return statistics.median(per)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "benchmarks" / "results"))
    a = ap.parse_args()
    probs = torch.rand(8, 1000)
    k = torch.full((8,), 50, dtype=torch.int32)
    p = torch.full((8,), 0.9)
    spec = fi_ops.SPECS["top_k_top_p_sampling_from_probs"]
    w_disp = wrapt.FunctionWrapper(original, base.make_wrapper("b1", spec.bind, passthrough, None))
    w_none = wrapt.FunctionWrapper(original, base.make_wrapper("b2", spec.bind, passthrough, None))
    g = torch.Generator()
    vspec = vl_ops.SPECS["vllm_topk_topp_sample"]
    v_disp = wrapt.FunctionWrapper(sampler_forward, base.make_wrapper("b3", vspec.bind, passthrough, None))
    inst = type("S", (), {"logprobs_mode": "raw_logprobs", "use_fp64_gumbel": False})()
    res = {
        "bare_ns": bench(lambda: original(probs, k, p), a.n),
        "wrapped_dispatched_ns": bench(lambda: w_disp(probs, k, p), a.n),
        "wrapped_not_ours_ns": bench(lambda: w_none(probs, k, p, generator=g), a.n),
        "bind_only_ns": bench(lambda: spec.bind(None, (probs, k, p), {}), a.n),
        "vllm_sampler_dispatched_ns": bench(lambda: v_disp(inst, probs, {}, k, None), a.n),
        "vllm_bare_ns": bench(lambda: sampler_forward(inst, probs, {}, k, None), a.n),
    }
    with base.originals_only():
        res["wrapped_nested_ns"] = bench(lambda: w_disp(probs, k, p), a.n)
    res = {k2: round(v, 1) for k2, v in res.items()}
    res["added_dispatched_ns"] = round(res["wrapped_dispatched_ns"] - res["bare_ns"], 1)
    res["added_nested_ns"] = round(res["wrapped_nested_ns"] - res["bare_ns"], 1)
    res["machine"] = {"python": sys.version.split()[0], "torch": torch.__version__, "wrapt": wrapt.__version__,
                      "cpus": os.cpu_count()}
    for k2, v in res.items():
        print(f"{k2:30s} {v}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "adapter_overhead_cpu.json").write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
