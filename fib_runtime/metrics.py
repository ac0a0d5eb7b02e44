"""fib-runtime's metrics: the only module that imports ``prometheus_client`` (lazily).

Every metric is declared once, here, with fixed low-cardinality labels (never shapes)::

    fib_dispatch_total{definition, solution, outcome}   counter  hit | fallback_miss | fallback_error
                                                                 | fallback_capture | fallback_mismatch
                                                                 | quarantined
    fib_quarantine_total{definition, solution, reason}  counter  load_error | raised | bad_output
    fib_solutions_loaded{language}                      gauge    solutions loaded in this process
    fib_solution_build_seconds{language}                histogram build/load time of one solution
    fib_table_reloads_total{result}                     counter  swapped | unchanged | error
    fib_table_generation                                gauge    generation of the live dispatch table
    fib_trace_records_total{definition}                 counter  (the tracer's)
    fib_trace_dropped_total{reason}                     counter  (the tracer's)
    fib_trace_bytes_total                               counter  (the tracer's)

**Two layers.** Hot paths never touch ``prometheus_client`` (an ``inc()`` there takes a lock,
~0.3 µs, and ~1 µs with mmap files). They bump an in-process counter instead
(:func:`counter` returns an object whose ``inc`` is ``next`` of an ``itertools.count``: one
C call, atomic under the GIL). :func:`flush` moves the deltas into the Prometheus objects; the
dispatcher's background thread calls it every ``FIB_RELOAD_INTERVAL`` seconds (2 s by default),
at exit, and :func:`stats` / ``fib metrics serve`` call it too. Prometheus therefore lags by at
most one interval; :func:`stats` never lags.

**Multiprocess mode.** ``prometheus_client`` is imported at the first :func:`flush`, after the
host (vLLM, SGLang) has set ``PROMETHEUS_MULTIPROC_DIR``, so values go to the per-process mmap
files the host's ``/metrics`` aggregates. Gauges use ``multiprocess_mode="livemax"``. No
collector or server is started here; ``fib metrics serve`` is for processes without one.

Usage (libraries)::

    from fib_runtime import metrics
    hits = metrics.counter("fib_dispatch_total", "rmsnorm_h4096", "sol_a", "hit")
    hits.inc()                                     # hot path
    metrics.add("fib_trace_bytes_total", 4096)     # slow path, any amount
    metrics.stats()["fib_dispatch_total"][("rmsnorm_h4096", "sol_a", "hit")]

Tests inject a registry with ``metrics.configure(registry=CollectorRegistry())`` and undo
everything with :func:`reset`.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["counter", "add", "set_gauge", "observe", "flush", "stats", "configure", "reset",
           "SPECS", "inc_trace_records", "inc_trace_dropped", "inc_trace_bytes"]

#: name -> (kind, help, label names, extra kwargs). The single declaration of every metric.
SPECS: Dict[str, Tuple[str, str, Tuple[str, ...], Dict[str, Any]]] = {
    "fib_dispatch_total": ("counter", "Dispatched calls by definition, solution and outcome.",
                           ("definition", "solution", "outcome"), {}),
    "fib_quarantine_total": ("counter", "Solutions quarantined for the process, by reason.",
                             ("definition", "solution", "reason"), {}),
    "fib_solutions_loaded": ("gauge", "Solutions loaded (built, imported) in this process.",
                             ("language",), {"multiprocess_mode": "livemax"}),
    "fib_solution_build_seconds": ("histogram", "Seconds to build or load one solution.",
                                   ("language",),
                                   {"buckets": (0.001, 0.01, 0.1, 0.5, 1, 5, 15, 60, 300, float("inf"))}),
    "fib_table_reloads_total": ("counter", "Dispatch-table reload attempts by result.", ("result",), {}),
    "fib_table_generation": ("gauge", "Generation of the live dispatch table.", (),
                             {"multiprocess_mode": "livemax"}),
    "fib_trace_records_total": ("counter", "Workloads recorded by the tracer.", ("definition",), {}),
    "fib_trace_dropped_total": ("counter", "Workloads the tracer dropped, by reason.", ("reason",), {}),
    "fib_trace_bytes_total": ("counter", "Bytes the tracer wrote.", (), {}),
}

_LOCK = threading.RLock()


class Counter:
    """An in-process counter cell. ``inc()`` (no argument) is the hot-path increment."""

    __slots__ = ("inc", "_count", "_extra", "flushed")

    def __init__(self) -> None:
        self._count = itertools.count()
        self.inc = self._count.__next__  # one C call; atomic under the GIL
        self._extra = 0.0                # amounts added through add()
        self.flushed = 0.0

    @property
    def value(self) -> float:
        # repr is "count(N)"; N = number of next() calls so far (no pickling API needed)
        return int(repr(self._count)[6:-1]) + self._extra


_COUNTERS: Dict[Tuple[str, Tuple[str, ...]], Counter] = {}
_GAUGES: Dict[Tuple[str, Tuple[str, ...]], float] = {}
_PENDING: List[Tuple[str, Tuple[str, ...], float]] = []  # histogram observations not yet flushed
_HIST: Dict[Tuple[str, Tuple[str, ...]], List[float]] = {}  # count, sum (for stats)
_PROM: Dict[str, Any] = {}
_REGISTRY: Any = None  # None: prometheus_client.REGISTRY
_DISABLED = False


def counter(name: str, *labels: str) -> Counter:
    """The counter cell for ``name`` and label values (created on first use)."""
    key = (name, tuple(str(v) for v in labels))
    c = _COUNTERS.get(key)
    if c is None:
        with _LOCK:
            c = _COUNTERS.get(key)
            if c is None:
                _check(name, "counter", key[1])
                c = _COUNTERS[key] = Counter()
    return c


def add(name: str, amount: float = 1, *labels: str) -> None:
    """Add ``amount`` (>= 0) to a counter. Takes a lock: not for per-call hot paths."""
    if amount < 0:
        raise ValueError("counters only go up")
    c = counter(name, *labels)
    with _LOCK:
        c._extra += amount


def set_gauge(name: str, value: float, *labels: str) -> None:
    key = (name, tuple(str(v) for v in labels))
    with _LOCK:
        _check(name, "gauge", key[1])
        _GAUGES[key] = float(value)


def observe(name: str, value: float, *labels: str) -> None:
    key = (name, tuple(str(v) for v in labels))
    with _LOCK:
        _check(name, "histogram", key[1])
        _PENDING.append((name, key[1], float(value)))
        h = _HIST.setdefault(key, [0, 0.0])
        h[0] += 1
        h[1] += float(value)


# tracer helpers (names fixed here so there is one metrics module)
def inc_trace_records(definition: str, n: int = 1) -> None:
    add("fib_trace_records_total", n, definition)


def inc_trace_dropped(reason: str, n: int = 1) -> None:
    add("fib_trace_dropped_total", n, reason)


def inc_trace_bytes(n: int) -> None:
    add("fib_trace_bytes_total", n)


def _check(name: str, kind: str, labels: Tuple[str, ...]) -> None:
    spec = SPECS.get(name)
    if spec is None or spec[0] != kind or len(spec[2]) != len(labels):
        raise ValueError(f"metric {name!r}: not a declared {kind} with labels "
                         f"{spec[2] if spec else '?'} (got {labels})")


# ---- Prometheus ---------------------------------------------------------------------------
def configure(registry: Any = None, enabled: Optional[bool] = None) -> None:
    """Choose the Prometheus registry (default: the global one) before the first flush.

    Existing Prometheus objects are dropped (and unregistered from the previous registry); the
    in-process counters are kept and re-flushed in full into the new objects.
    """
    global _REGISTRY, _DISABLED
    with _LOCK:
        _drop_prom()
        _REGISTRY = registry
        if enabled is not None:
            _DISABLED = not enabled
        for c in _COUNTERS.values():
            c.flushed = 0.0


def _drop_prom() -> None:
    reg = _REGISTRY
    if _PROM:
        if reg is None:
            from prometheus_client import REGISTRY as reg  # noqa: N811
        for m in _PROM.values():
            try:
                reg.unregister(m)
            except Exception:
                pass
    _PROM.clear()


def _prom() -> Optional[Dict[str, Any]]:
    if _DISABLED:
        return None
    if _PROM:
        return _PROM
    from . import envs

    if not envs.FIB_METRICS:
        return None
    try:
        import prometheus_client as pc
    except Exception:  # pragma: no cover - prometheus-client is a dependency
        return None
    kinds = {"counter": pc.Counter, "gauge": pc.Gauge, "histogram": pc.Histogram}
    kw_reg = {} if _REGISTRY is None else {"registry": _REGISTRY}
    made = {}
    for name, (kind, doc, labels, extra) in SPECS.items():
        cls = kinds[kind]
        base = name[:-6] if kind == "counter" and name.endswith("_total") else name
        try:
            made[name] = cls(base, doc, labelnames=labels, **extra, **kw_reg)
        except ValueError:  # already registered (a second configure on one registry): reuse it
            reg = _REGISTRY or pc.REGISTRY
            existing = getattr(reg, "_names_to_collectors", {}).get(name) or \
                getattr(reg, "_names_to_collectors", {}).get(base)
            if existing is None:
                raise
            made[name] = existing
    _PROM.update(made)
    return _PROM


def flush() -> bool:
    """Push in-process deltas into Prometheus. Returns False when Prometheus is off. Never raises."""
    try:
        with _LOCK:
            prom = _prom()
            if prom is None:
                return False
            for (name, labels), c in list(_COUNTERS.items()):
                v = c.value
                d = v - c.flushed
                if d > 0:
                    m = prom[name]
                    (m.labels(*labels) if labels else m).inc(d)
                    c.flushed = v
            for (name, labels), v in _GAUGES.items():
                m = prom[name]
                (m.labels(*labels) if labels else m).set(v)
            pending = _PENDING[:]
            del _PENDING[:]
            for name, labels, v in pending:
                m = prom[name]
                (m.labels(*labels) if labels else m).observe(v)
        return True
    except Exception:  # metrics must never break the caller
        import logging

        logging.getLogger("fib_runtime.metrics").warning("metrics flush failed", exc_info=True)
        return False


def stats() -> Dict[str, Dict[Tuple[str, ...], float]]:
    """Snapshot of every metric in this process: ``{name: {label values: value}}``.

    Counters are exact (no flush lag); histograms give ``(count, sum)``.
    """
    out: Dict[str, Dict[Tuple[str, ...], Any]] = {n: {} for n in SPECS}
    with _LOCK:
        for (name, labels), c in _COUNTERS.items():
            v = c.value
            if v:
                out[name][labels] = int(v) if float(v).is_integer() else v
        for (name, labels), v in _GAUGES.items():
            out[name][labels] = v
        for (name, labels), (n, s) in _HIST.items():
            out[name][labels] = (n, s)
    return out


def reset() -> None:
    """Forget every value and Prometheus object (tests). Cells handed out earlier go stale."""
    global _REGISTRY, _DISABLED
    with _LOCK:
        _drop_prom()
        _COUNTERS.clear()
        _GAUGES.clear()
        _HIST.clear()
        del _PENDING[:]
        _REGISTRY = None
        _DISABLED = False


def _after_fork_in_child() -> None:
    # The child inherited the parent's counts: count only its own from here on.
    global _LOCK
    _LOCK = threading.RLock()
    for c in _COUNTERS.values():
        c.flushed = c.value
    del _PENDING[:]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
