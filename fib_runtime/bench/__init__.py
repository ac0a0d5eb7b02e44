"""Benchmark runner and reports (``fib bench``, ``fib report``).

    from fib_runtime.bench import run_bench, BenchConfig, build_report
    s = run_bench("dataset/", devices="auto", cfg=BenchConfig(timeout_s=60), reference=True)
    print(s.counts)                          # statuses of what this run evaluated
    build_report("dataset/", out="report/")  # leaderboards, fast_p PNGs, HTML, dispatch table

Modules: :mod:`.runner` (planning, resume, trace writing), :mod:`.pool` and :mod:`.worker`
(isolated worker per device), :mod:`.evaluate` (one evaluation), :mod:`.correctness` (default
evaluator, guards), :mod:`.sampling_eval` (statistical evaluator), :mod:`.timing`,
:mod:`.extras` (FlashInfer baseline, reference and built-in solutions), :mod:`.report`.
"""

from .config import BenchConfig, SamplingConfig, Tolerance
from .runner import BenchSummary, parse_devices, plan, run_bench

__all__ = ["BenchConfig", "SamplingConfig", "Tolerance", "BenchSummary", "run_bench", "plan",
           "parse_devices", "build_report"]


def build_report(*args, **kwargs):
    from .report import build_report as _b

    return _b(*args, **kwargs)
