"""Added cost per call of fib-runtime's dispatcher, and of FlashInfer 0.7.2's trace_apply, same run.

What is measured (CPU, small tensors, so the numbers are the Python-side overhead only):

- **hit**: ``dispatch("rmsnorm_h4096", (x, w), fallback)`` when the table picks a python solution,
  against calling that solution directly (``sol(x, w)``). The dispatched side includes what a
  caller pays: building the inputs tuple and the fallback closure.
- **miss**: the same definition at a signature with no usable solution (a cached fallback
  decision), against calling the fallback directly.
- **apply hit**: the ``@apply("rmsnorm_h4096")`` decorator (argument binding included).
- **trace_apply hit / miss**: ``flashinfer.norm.rmsnorm`` wrapped by
  ``flashinfer.trace_apply.enable_apply({"rmsnorm_h4096": sol})``; a hit calls the same kind of
  solution (keyword-called, as trace_apply calls python solutions), a miss is a call at hidden
  size 2048 (``rmsnorm_h2048`` not registered). The wrapped original is a stub with
  ``flashinfer.norm.rmsnorm``'s signature, so neither side runs a kernel.
  ``torch.cuda.is_current_stream_capturing`` raises in a CPU-only torch; it is replaced by
  ``lambda: False`` (trace_apply calls it only before its per-name decision is cached).

Method: per measurement, ``--calls`` calls (default 200 000, at least 100 000) in blocks of
``--block`` calls; the baseline block and the measured block alternate, so drift hits both.
Per-call time of a block = block time / block size; the table reports the median over blocks
of each side and of the paired difference (the *added* cost), and the ratio
trace_apply-added / fib-added.

    python benchmarks/dispatch_overhead.py [--calls N] [--block B] [--out benchmarks/results/x.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RMSNORM = {
    "name": "rmsnorm_h4096", "op_type": "rmsnorm",
    "axes": {"batch_size": {"type": "var"}, "hidden_size": {"type": "const", "value": 4096}},
    "inputs": {"hidden_states": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"},
               "weight": {"shape": ["hidden_size"], "dtype": "bfloat16"}},
    "outputs": {"output": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"}},
    "reference": ("import torch\n\ndef run(hidden_states, weight):\n"
                  "    x = hidden_states.float()\n"
                  "    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)\n"
                  "    return (y * weight.float()).to(hidden_states.dtype)\n"),
}
# The "kernel": returns its input (right shape and dtype), so only dispatch overhead is timed.
SOLUTION_SRC = "def run(hidden_states, weight):\n    return hidden_states\n"


def make_dataset(root: Path) -> Path:
    (root / "definitions" / "rmsnorm").mkdir(parents=True)
    (root / "definitions" / "rmsnorm" / "rmsnorm_h4096.json").write_text(json.dumps(RMSNORM))
    sol = {"name": "bench_identity", "definition": "rmsnorm_h4096", "author": "bench",
           "spec": {"language": "python", "target_hardware": ["CPU"], "entry_point": "k.py::run",
                    "dependencies": [], "destination_passing_style": False},
           "sources": [{"path": "k.py", "content": SOLUTION_SRC}]}
    p = root / "solutions" / "bench" / "rmsnorm" / "rmsnorm_h4096" / "bench_identity.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(sol))
    row = {"definition": "rmsnorm_h4096", "solution": "bench_identity",
           "workload": {"axes": {"batch_size": 8}, "uuid": "bench-8",
                        "inputs": {"hidden_states": {"type": "random"}, "weight": {"type": "random"}}},
           "evaluation": {"status": "PASSED", "environment": {"hardware": "cpu", "libs": {}},
                          "timestamp": "2026-12-01T00:00:00", "log": "",
                          "correctness": {"max_relative_error": 0, "max_absolute_error": 0},
                          "performance": {"latency_ms": 0.01, "reference_latency_ms": 0.02,
                                          "speedup_factor": 2.0}}}
    p = root / "traces" / "bench" / "rmsnorm" / "rmsnorm_h4096.jsonl"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(row) + "\n")
    return root


def measure(baseline, measured, calls: int, block: int):
    """Alternate blocks of ``baseline`` and ``measured``; per-call medians in ns."""
    clock = time.perf_counter_ns
    rng = range(block)
    for _ in range(2000):  # warm caches and decisions
        baseline()
        measured()
    base, meas, diff = [], [], []
    for _ in range(max(1, calls // block)):
        t0 = clock()
        for _ in rng:
            baseline()
        t1 = clock()
        for _ in rng:
            measured()
        t2 = clock()
        b, m = (t1 - t0) / block, (t2 - t1) / block
        base.append(b)
        meas.append(m)
        diff.append(m - b)
    return {"baseline_ns": statistics.median(base), "measured_ns": statistics.median(meas),
            "added_ns": statistics.median(diff), "calls": len(diff) * block}


def run_fib(calls, block, tmp: Path):
    import torch

    from fib_runtime import metrics
    from fib_runtime.dispatch import apply, dispatch, enable, stats

    os.environ["FIB_CACHE_PATH"] = str(tmp / "cache")
    metrics.configure(enabled=False)  # Prometheus flushing is off the hot path anyway
    rt = enable(make_dataset(tmp / "ds"), hardware="CPU", reload_interval=0, builtins="off",
                max_distance=1)
    sol = rt.loaded["bench_identity"].fn
    x, w = torch.randn(8, 4096, dtype=torch.bfloat16), torch.randn(4096, dtype=torch.bfloat16)
    xm = torch.randn(4096, 4096, dtype=torch.bfloat16)  # batch 4096: no usable bucket -> miss

    def fallback(hidden_states, weight):
        return hidden_states

    @apply("rmsnorm_h4096")
    def rmsnorm(hidden_states, weight):
        return hidden_states

    out = {}
    out["hit"] = measure(lambda: sol(x, w),
                         lambda: dispatch("rmsnorm_h4096", (x, w), lambda: fallback(x, w)), calls, block)
    out["miss"] = measure(lambda: fallback(xm, w),
                          lambda: dispatch("rmsnorm_h4096", (xm, w), lambda: fallback(xm, w)), calls, block)
    out["apply_hit"] = measure(lambda: sol(x, w), lambda: rmsnorm(x, w), calls, block)
    s = stats()["dispatch"]
    assert s.get(("rmsnorm_h4096", "bench_identity", "hit"), 0) >= calls, s
    assert s.get(("rmsnorm_h4096", "none", "fallback_miss"), 0) >= calls, s
    out["counters"] = {"/".join(k): v for k, v in s.items()}
    return out


def run_trace_apply(calls, block):
    import torch

    try:
        import flashinfer
        import flashinfer.norm
        from flashinfer.trace_apply import apply as ta
    except Exception as e:  # pragma: no cover - reported in the JSON
        return {"error": f"flashinfer not importable: {type(e).__name__}: {e}"}
    torch.cuda.is_current_stream_capturing = lambda: False  # CPU torch raises here (see docstring)

    def stub(input, weight, eps=1e-6, out=None, enable_pdl=None):  # flashinfer.norm.rmsnorm's signature
        return input

    def sol(hidden_states, weight):  # trace_apply calls python solutions by keyword
        return hidden_states

    flashinfer.norm.rmsnorm = stub
    n = ta.enable_apply({"rmsnorm_h4096": sol})
    f = flashinfer.norm.rmsnorm
    x, w = torch.randn(8, 4096, dtype=torch.bfloat16), torch.randn(4096, dtype=torch.bfloat16)
    x2, w2 = torch.randn(8, 2048, dtype=torch.bfloat16), torch.randn(2048, dtype=torch.bfloat16)
    out = {"wrapped_attributes": n}
    out["hit"] = measure(lambda: sol(hidden_states=x, weight=w), lambda: f(x, w), calls, block)
    out["miss"] = measure(lambda: stub(x2, w2), lambda: f(x2, w2), calls, block)
    st = ta.stats_snapshot().get("flashinfer.norm.rmsnorm", {})
    assert st.get("hit", 0) >= calls and st.get("fallback_no_candidate", 0) >= calls, st
    out["counters"] = st
    out["version"] = flashinfer.__version__
    ta.disable_apply()
    return out


def machine():
    cpu = platform.processor() or ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "platform": platform.platform()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--block", type=int, default=100)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "dispatch_overhead.json"))
    args = ap.parse_args(argv)
    if args.calls < 100_000:
        ap.error("--calls must be at least 100000")
    tmp = Path(tempfile.mkdtemp(prefix="fib-bench-"))
    fib = run_fib(args.calls, args.block, tmp)
    ta = run_trace_apply(args.calls, args.block)
    rows = [("fib hit", fib["hit"]), ("fib miss", fib["miss"]), ("fib @apply hit", fib["apply_hit"])]
    if "error" not in ta:
        rows += [("trace_apply hit", ta["hit"]), ("trace_apply miss", ta["miss"])]
    print(f"{'case':18s} {'baseline ns':>12s} {'measured ns':>12s} {'added ns':>10s}")
    for name, r in rows:
        print(f"{name:18s} {r['baseline_ns']:12.0f} {r['measured_ns']:12.0f} {r['added_ns']:10.0f}")
    ratios = {}
    if "error" not in ta:
        ratios = {"hit": ta["hit"]["added_ns"] / max(fib["hit"]["added_ns"], 1e-9),
                  "miss": ta["miss"]["added_ns"] / max(fib["miss"]["added_ns"], 1e-9)}
        print(f"\ntrace_apply added / fib added:  hit {ratios['hit']:.1f}x   miss {ratios['miss']:.1f}x")
    else:
        print(f"\ntrace_apply: {ta['error']}")
    import importlib.metadata as md

    import fib_runtime

    result = {
        "benchmark": "dispatch_overhead",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": {"fib_runtime": fib_runtime.__version__, "flashinfer": ta.get("version"),
                     "prometheus_client": md.version("prometheus-client"),
                     "apache_tvm_ffi": md.version("apache-tvm-ffi")},
        "method": {"calls": args.calls, "block": args.block,
                   "statistic": "median over blocks of per-call ns; added = median of paired "
                                "(measured - baseline) block differences"},
        "fib": fib, "trace_apply": ta, "ratio_trace_apply_over_fib": ratios,
        "targets": {"fib_hit_added_ns_max": 1000, "ratio_min": 10},
        "meets_targets": bool(ratios) and fib["hit"]["added_ns"] <= 1000
        and ratios["hit"] >= 10 and ratios["miss"] >= 10,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
