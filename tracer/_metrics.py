"""Shim between the tracer and ``fib_runtime.metrics`` (the only prometheus importer).

The tracer never touches metrics on the hot path: it bumps plain ints and the writer thread (and
every :func:`fib_runtime.tracer.stats` / flush) pushes the deltas here. Until the dispatcher
owner's ``fib_runtime/metrics.py`` provides the three tracer counters, the values land in the
in-process dict :data:`COUNTERS` (delete this fallback once it does).

Counters: ``fib_trace_records_total{definition}``, ``fib_trace_dropped_total{reason}``,
``fib_trace_bytes_total``.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Optional

#: fallback store: ``("records", definition)``, ``("dropped", reason)``, ``("bytes", "")``.
COUNTERS: Counter = Counter()
_LOCK = threading.Lock()
_BACKEND: Optional[object] = None
_RESOLVED = False


def _backend():
    """``fib_runtime.metrics`` when it offers the tracer's functions, else None (cached)."""
    global _BACKEND, _RESOLVED
    if not _RESOLVED:
        _RESOLVED = True
        try:
            from fib_runtime import metrics as m  # type: ignore[attr-defined]

            if all(hasattr(m, f) for f in ("trace_recorded", "trace_dropped", "trace_bytes")):
                _BACKEND = m
        except Exception:
            _BACKEND = None
    return _BACKEND


def records(definition: str, n: int = 1) -> None:
    m = _backend()
    if m is not None:
        m.trace_recorded(definition, n)
    else:
        with _LOCK:
            COUNTERS[("records", definition)] += n


def dropped(reason: str, n: int = 1) -> None:
    m = _backend()
    if m is not None:
        m.trace_dropped(reason, n)
    else:
        with _LOCK:
            COUNTERS[("dropped", reason)] += n


def bytes_written(n: int) -> None:
    m = _backend()
    if m is not None:
        m.trace_bytes(n)
    else:
        with _LOCK:
            COUNTERS[("bytes", "")] += n
