"""``fib bench``: evaluate solutions on a dataset's workloads and append evaluation traces.

    fib bench DATASET [--definitions NAME|GLOB ...] [--solutions NAME|GLOB ...] [--authors A ...]
              [--devices auto|cuda:0,cuda:1|cpu*2] [--timeout S] [--baseline auto|on|off]
              [--reference] [--builtin] [--force] [--warmup N] [--iterations N] [--trials N]
              [--graphs auto|on|off] [--no-l2-flush] [--tolerance PATTERN:atol=X,rtol=Y | FILE.json]
              [--tvd-bound 0.2] [--tvd-samples N] [--support-trials N] [--inline] [--dry-run] [--max-workloads N] [--max-wall S] [--summary-json PATH] [--json]

Resumable: (definition, workload, solution) triples that already have an evaluation trace are
skipped (``--force`` re-runs them). One worker process per device; a solution that crashes or
runs past ``--timeout`` is recorded as RUNTIME_ERROR / TIMEOUT and the run goes on. Exit status
0 when the run completed (whatever the statuses), 1 on a usage or dataset error.
"""

from __future__ import annotations

import sys

from ..errors import FibError
from .main import add_json_flag, emit_json, table


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmark solutions on recorded workloads (evaluation traces)",
                              description="Evaluate every (definition, workload, solution) not yet evaluated.")
    p.add_argument("dataset", help="dataset root")
    p.add_argument("--definitions", nargs="+", metavar="NAME", help="definition names or globs")
    p.add_argument("--solutions", nargs="+", metavar="NAME", help="solution names or globs")
    p.add_argument("--authors", nargs="+", metavar="AUTHOR", help="only solutions of these authors")
    p.add_argument("--devices", default="auto",
                   help="auto (every visible GPU, else cpu:0), a list like cuda:0,cuda:1, or cpu*2")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per solution and workload (default 120)")
    p.add_argument("--prepare-timeout", type=float, default=600.0, help="seconds for inputs + reference of a workload")
    p.add_argument("--baseline", choices=("auto", "on", "off"), default="auto",
                   help="run the FlashInfer API of each definition's fi_api tag as author 'baseline' "
                        "(auto: when FlashInfer is importable and devices are GPUs)")
    p.add_argument("--reference", action="store_true", help="also run each definition's reference as a solution")
    p.add_argument("--builtin", action="store_true", help="also run fib-runtime's built-in kernels")
    p.add_argument("--force", action="store_true", help="re-evaluate triples that already have traces")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--graphs", choices=("auto", "on", "off"), default="auto",
                   help="CUDA graphs for short calls (auto: under 50 us)")
    p.add_argument("--no-l2-flush", action="store_true")
    p.add_argument("--tolerance", action="append", metavar="SPEC",
                   help="PATTERN:atol=X,rtol=Y[,mismatch=Z] or a JSON file {pattern: {...}}; repeatable")
    p.add_argument("--tvd-bound", type=float, default=0.2, help="sampling: max TV distance (default 0.2)")
    p.add_argument("--tvd-samples", type=int, default=100_000, help="sampling: samples per row for the TVD")
    p.add_argument("--support-trials", type=int, default=100, help="sampling: calls checked against the support")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--inline", action="store_true", help="no worker processes (debugging; no timeouts)")
    p.add_argument("--dry-run", action="store_true", help="only plan: print how many evaluations would run")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--summary-json", metavar="PATH", help="also write the run summary as JSON to PATH")
    p.add_argument("--max-workloads", type=int, metavar="N",
                   help="per definition, at most N workloads, spread evenly over the signatures")
    p.add_argument("--max-wall", type=float, metavar="S",
                   help="start no evaluation after S seconds (in-flight ones finish; rerun to resume)")
    add_json_flag(p)
    p.set_defaults(func=cmd_bench)


def config_from_args(args):
    from ..bench.config import BenchConfig, SamplingConfig, parse_tolerance_args

    try:
        tol = parse_tolerance_args(args.tolerance)
    except (ValueError, OSError) as e:
        raise FibError(str(e)) from None
    return BenchConfig(
        timeout_s=args.timeout, prepare_timeout_s=args.prepare_timeout, warmup=args.warmup,
        iterations=args.iterations, trials=args.trials, l2_flush=not args.no_l2_flush, graphs=args.graphs,
        seed=args.seed, tolerances=tol,
        sampling=SamplingConfig(support_trials=args.support_trials, tvd_bound=args.tvd_bound,
                                tvd_samples=args.tvd_samples))


def cmd_bench(args) -> int:
    from ..bench.runner import run_bench
    from ..store import Dataset

    import signal

    def _term(signum, frame):  # `timeout` sends SIGTERM: stop the workers on the way out
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, _term)
    except ValueError:  # not the main thread
        pass
    cfg = config_from_args(args)
    ds = Dataset.open(args.dataset)
    summary = run_bench(ds, definitions=args.definitions, solutions=args.solutions, authors=args.authors,
                        devices=args.devices, cfg=cfg, baseline=args.baseline, reference=args.reference,
                        builtin=args.builtin, force=args.force, progress=not args.no_progress and not args.json,
                        inline=args.inline, dry_run=args.dry_run, max_wall_s=args.max_wall,
                        max_workloads=args.max_workloads)
    if args.summary_json:
        import json
        from pathlib import Path

        Path(args.summary_json).write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    if args.json:
        emit_json(summary.to_dict())
        return 0
    print(f"planned {summary.planned} evaluation(s), {summary.already_done} already done (resumed), "
          f"{summary.evaluated} evaluated on {', '.join(summary.devices)} in {summary.wall_s:.1f} s"
          + (f", {summary.respawns} worker respawn(s)" if summary.respawns else "")
          + (f", {summary.not_started} not started (wall-clock limit)" if summary.not_started else ""))
    if summary.counts:
        print(table(sorted(summary.counts.items()), ["status", "count"]))
    if len(summary.by_device) > 1:
        print(table(sorted(summary.by_device.items()), ["device", "evaluations"]))
    for s in summary.skipped:
        print(f"fib: warning: skipped: {s}", file=sys.stderr)
    return 0
