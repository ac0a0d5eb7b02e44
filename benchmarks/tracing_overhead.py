"""Per-call cost of the tracer on the hot path, against the bare call.

    python benchmarks/tracing_overhead.py [--calls 200000] [--out benchmarks/results/]

Scenarios (each one the adapter's shape: build the inputs dict, offer it to the tracer, call
the function; the function itself is a no-op so that only fib-runtime's cost is measured):

``bare``
    the function alone.
``off``
    ``tracer.record(defn, inputs)`` with tracing disabled (the adapter wrapper's worst case;
    with ``tracer.recorder()`` returning None the adapter skips even that).
``dedup_hit``
    tracing on, the call's signature already recorded: the steady state of a server. Target
    <= 5 us per call.
``rank_muted``
    tracing on in a rank that does not record (``ranks="0"`` on rank 1 after distributed init).
``recorded``
    tracing on, every call a new signature that is kept: the admission checks, host copies of
    the int tensors (``dump="ints"``), and the hand-off to the writer thread (which writes in
    the background; its cost is not on the caller's thread).

Reported: the median per-call time over many calls (batched timing for steady states, one
timer per call for ``recorded``), and the overhead over ``bare``. Results go to
``benchmarks/results/tracing_overhead_<date>.json`` with machine, versions and date.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _noop(probs, top_k):
    return None


def _batched(fn, calls: int, batch: int = 1000) -> float:
    """Median over batches of the per-call time of ``fn()`` in ns, minus the loop's own cost."""
    def loop(f, n):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            f()
        return time.perf_counter_ns() - t0

    empty = statistics.median(loop(lambda: None, batch) for _ in range(50)) / batch
    samples = [loop(fn, batch) / batch for _ in range(max(5, calls // batch))]
    return max(0.0, statistics.median(samples) - empty)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--recorded-calls", type=int, default=2_000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)

    import torch

    import fib_runtime
    import fib_runtime.tracer as tracer
    from fib_runtime.definitions import sampling
    from fib_runtime.tracer import Policy

    defn_dict = sampling.definition("top_k_sampling_from_probs", args.vocab)
    defn = tracer.register_definition(defn_dict)
    name = defn.name
    B = args.batch_size
    probs = torch.softmax(torch.randn(B, args.vocab), -1)
    top_k = torch.randint(1, 100, (B,), dtype=torch.int32)

    def bare():
        _noop(probs, top_k)

    def adapter_call():  # the adapter: inputs dict, record, call
        tracer.record(defn, {"probs": probs, "top_k": top_k})
        _noop(probs, top_k)

    def adapter_call_by_name():
        tracer.record(name, {"probs": probs, "top_k": top_k})
        _noop(probs, top_k)

    res = {}
    tracer.disable()
    res["bare"] = _batched(bare, args.calls)
    res["off"] = _batched(adapter_call, args.calls)

    root = Path(tempfile.mkdtemp(prefix="fib-trace-bench-"))
    tracer.enable(root, ranks="all", rate_limit=None, install_signal_handler=False)
    assert tracer.record(defn, {"probs": probs, "top_k": top_k})  # the first one is kept
    tracer.flush(10)
    res["dedup_hit"] = _batched(adapter_call, args.calls)
    res["dedup_hit_by_name"] = _batched(adapter_call_by_name, args.calls)
    dedup_drops = tracer.stats()["dropped"].get("dedup", 0)

    os.environ["RANK"] = "1"
    tracer.enable(root / "muted", ranks="0", rate_limit=None, install_signal_handler=False)
    tracer.get_tracer()._rank_final, tracer.get_tracer()._rank_ok, tracer.get_tracer().muted = True, False, True
    res["rank_muted"] = _batched(adapter_call, args.calls)
    del os.environ["RANK"]

    # every call a new, kept signature: batch sizes 1..N
    n = args.recorded_calls
    tracer.enable(root / "rec", ranks="all", rate_limit=None, queue_size=n + 1,
                  max_pending_bytes=1 << 34, install_signal_handler=False,
                  default_policy=Policy(keep_per_bucket=None, max_workloads=None))
    small = [(torch.empty(b, 8), torch.randint(1, 100, (b,), dtype=torch.int32)) for b in range(1, n + 1)]
    # probs is "random" (not copied): a small stand-in keeps memory low; only top_k is copied
    rdef = tracer.register_definition(sampling.definition("top_k_sampling_from_probs", 8))
    times = []
    for p, k in small:
        t0 = time.perf_counter_ns()
        tracer.record(rdef, {"probs": p, "top_k": k})
        _noop(p, k)
        times.append(time.perf_counter_ns() - t0)
    t0 = time.perf_counter()
    ok = tracer.flush(120)
    drain_s = time.perf_counter() - t0
    st = tracer.stats()
    res["recorded"] = statistics.median(times) - res["bare"]
    res["recorded_p90"] = sorted(times)[int(0.9 * len(times))] - res["bare"]
    tracer.disable()

    us = {k: round(v / 1000.0, 4) for k, v in res.items()}
    overhead = {k: round((res[k] - res["bare"]) / 1000.0, 4)
                for k in ("off", "dedup_hit", "dedup_hit_by_name", "rank_muted")}
    overhead["recorded"] = us["recorded"]
    overhead["recorded_p90"] = us["recorded_p90"]
    out = {
        "benchmark": "tracing_overhead",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "machine": platform.machine(),
                    "processor": platform.processor() or None, "cpu_count": os.cpu_count()},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "fib_runtime": fib_runtime.__version__},
        "params": {"calls": args.calls, "recorded_calls": n, "batch_size": B, "vocab": args.vocab,
                   "definition": name, "statistic": "median per call"},
        "per_call_us": us,
        "overhead_us": overhead,
        "target_us": 5.0,
        "steady_state_within_target": overhead["dedup_hit"] <= 5.0,
        "checks": {"dedup_drops_counted": dedup_drops, "recorded": st["records"].get(rdef.name, 0),
                   "recorded_expected": n, "flushed": ok, "writer_drain_s": round(drain_s, 3),
                   "bytes_written": st["bytes"]},
    }
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / f"tracing_overhead_{_dt.date.today().isoformat()}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    w = max(len(k) for k in us)
    for k, v in us.items():
        extra = f"  (+{overhead[k]:.3f} us)" if k in overhead and k not in ("recorded", "recorded_p90") else ""
        print(f"{k.ljust(w)}  {v:8.3f} us{extra}")
    print(f"-> {path}")
    return 0 if out["steady_state_within_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
