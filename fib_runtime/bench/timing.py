"""Latency of a callable: CUDA events on the GPU, a monotonic clock on the CPU.

    ms, how = time_callable(fn, args, device="cuda:0", cfg=cfg)   # median milliseconds

GPU (``device`` starting with ``cuda``), following the workplace's method:

- ``warmup`` untimed calls first (module load, JIT, handle creation, allocator growth); a callable
  so slow that ``trials x iterations`` calls would exceed ``time_budget_s`` gets fewer warm-up and
  timed calls (at least 3 timed);
- each timed call is bracketed by CUDA events, and the L2 cache is flushed before it by writing
  a buffer twice the L2 size (``l2_flush``), so a call never reads inputs left in cache by the
  previous one; ``trials`` x ``iterations`` calls, the median is reported;
- calls shorter than ``graph_threshold_ms`` are dominated by launch gaps: with
  ``graphs="auto"`` (or ``"on"``) ``graph_calls`` calls are captured in one CUDA graph and its
  replays are timed (per call = replay / graph_calls, median over trials). Capture failures
  (a solution that syncs, allocates in a forbidden way, or uses the host) fall back to the eager
  number. ``how`` says which method produced the number.
- plan/setup stays outside: callers pass the already prepared callable (see ``runner``).

CPU: ``time.perf_counter_ns`` (monotonic) around each call, same warm-up and median.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence, Tuple

from .config import BenchConfig

_FLUSH = {}


def _l2_buffer(device):
    import torch

    buf = _FLUSH.get(str(device))
    if buf is None:
        try:
            l2 = torch.cuda.get_device_properties(device).L2_cache_size
        except Exception:
            l2 = 64 << 20
        buf = torch.empty(max(2 * int(l2), 8 << 20) // 4, dtype=torch.int32, device=device)
        _FLUSH[str(device)] = buf
    return buf


def time_callable(fn: Callable, args: Sequence[Any], device: str, cfg: BenchConfig) -> Tuple[float, str]:
    if device.startswith("cuda"):
        return _time_cuda(fn, args, device, cfg)
    return _time_cpu(fn, args, cfg), "cpu-monotonic"


def _calls(first_s: float, cfg: BenchConfig) -> int:
    """Timed calls: trials x iterations, fewer when one call would blow the time budget."""
    n = max(1, cfg.trials * cfg.iterations)
    if first_s > 0 and first_s * n > cfg.time_budget_s:
        n = max(3, int(cfg.time_budget_s / first_s))
    return n


def _time_cpu(fn, args, cfg: BenchConfig) -> float:
    t0 = time.perf_counter()
    fn(*args)
    first = time.perf_counter() - t0
    for _ in range(cfg.warmup - 1 if first * cfg.warmup < cfg.time_budget_s else 0):
        fn(*args)
    samples = []
    for _ in range(_calls(first, cfg)):
        t0 = time.perf_counter_ns()
        fn(*args)
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(samples)


def _time_cuda(fn, args, device, cfg: BenchConfig) -> Tuple[float, str]:
    import torch

    dev = torch.device(device)
    stream = torch.cuda.current_stream(dev)
    fn(*args)
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize(dev)
    first = time.perf_counter() - t0
    for _ in range(cfg.warmup - 2 if first * cfg.warmup < cfg.time_budget_s else 0):
        fn(*args)
    torch.cuda.synchronize(dev)
    flush = _l2_buffer(dev) if cfg.l2_flush else None
    n = _calls(first, cfg)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        if flush is not None:
            flush.zero_()
        starts[i].record(stream)
        fn(*args)
        ends[i].record(stream)
    torch.cuda.synchronize(dev)
    eager = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))
    how = "cuda-events" + ("+l2flush" if flush is not None else "")
    if cfg.graphs == "on" or (cfg.graphs == "auto" and eager < cfg.graph_threshold_ms):
        g = _time_graph(fn, args, dev, cfg)
        if g is not None:
            return g, f"cuda-graph x{cfg.graph_calls}"
        how += " (graph capture failed)"
    return eager, how


def _time_graph(fn, args, dev, cfg: BenchConfig):
    import torch

    try:
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):  # warm up on the capture stream
            for _ in range(2):
                fn(*args)
        torch.cuda.current_stream(dev).wait_stream(side)
        torch.cuda.synchronize(dev)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(cfg.graph_calls):
                fn(*args)
        torch.cuda.synchronize(dev)
        graph.replay()
        torch.cuda.synchronize(dev)
        times = []
        stream = torch.cuda.current_stream(dev)
        flush = _l2_buffer(dev) if cfg.l2_flush else None
        for _ in range(max(3, cfg.trials)):
            if flush is not None:
                flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(stream)
            graph.replay()
            e.record(stream)
            torch.cuda.synchronize(dev)
            times.append(s.elapsed_time(e) / cfg.graph_calls)
        del graph
        return statistics.median(times)
    except Exception:
        try:
            torch.cuda.synchronize(dev)
        except Exception:
            pass
        return None
