"""The dispatcher: route a call to the best known solution for its inputs, never break the caller.

Entry points (stable; the adapters and ``fib_runtime.apply`` call these)::

    from fib_runtime.dispatch import dispatch, register_definition, enable
    rt = enable("path/to/dataset")                # or FIB_ENABLE_APPLY=1 (enabled at the first call)
    register_definition(defn)                     # a Definition the dataset does not have
    out = dispatch("rmsnorm_h4096", (x, w), lambda: original(x, w))
    print(explain("rmsnorm_h4096", {"batch_size": 37}))
    stats()["dispatch"][("rmsnorm_h4096", "<solution>", "hit")]

``dispatch(definition_name, inputs, fallback)``: ``inputs`` is a tuple in the Definition's input
order, ``fallback`` a zero-argument callable that runs the original. When the dispatcher is not
enabled (``FIB_ENABLE_APPLY`` unset and no :func:`enable` call) it only calls ``fallback()``.

How a solution is chosen (signature, power-of-two buckets, nearest bucket, built-ins) is in
:mod:`fib_runtime.dispatch.table` and ``docs/dispatch.md``; the hot path, quarantine, strict
mode and reload in :mod:`fib_runtime.dispatch.runtime`; the decorator in
:mod:`fib_runtime.dispatch.apply`.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from .apply import apply
from .runtime import (Runtime, SolutionError, active, disable, dispatch, enable, enable_from_env,
                      register_definition, registered_definitions, reload)
from .table import bucket_of

__all__ = ["apply", "dispatch", "enable", "enable_from_env", "disable", "reload", "register_definition",
           "registered_definitions", "active", "stats", "explain", "Runtime", "SolutionError",
           "bucket_of"]


def stats() -> Dict[str, Any]:
    """In-process snapshot: runtime state and every counter (exact, no Prometheus lag).

    Keys: ``enabled``, ``hardware``, ``generation``, ``dataset``, ``strict``,
    ``solutions_loaded`` (names), ``quarantined`` ({name: reason}), ``load_errors``,
    ``dispatch`` ({(definition, solution, outcome): count}), ``quarantine_events``
    ({(definition, solution, reason): count}), ``reloads`` ({result: count}), ``metrics``
    (all of :func:`fib_runtime.metrics.stats`). Also flushes the counters to Prometheus.
    """
    from .. import metrics

    metrics.flush()
    m = metrics.stats()
    rt = active()
    return {
        "enabled": rt is not None,
        "hardware": rt.hardware if rt else None,
        "generation": rt.generation if rt else 0,
        "dataset": str(rt.dataset_path) if rt and rt.dataset_path else None,
        "strict": rt.strict if rt else None,
        "solutions_loaded": sorted(rt.loaded) if rt else [],
        "quarantined": dict(rt.quarantined) if rt else {},
        "load_errors": dict(rt.load_errors) if rt else {},
        "dispatch": dict(m["fib_dispatch_total"]),
        "quarantine_events": dict(m["fib_quarantine_total"]),
        "reloads": {k[0]: v for k, v in m["fib_table_reloads_total"].items()},
        "metrics": m,
    }


def explain(definition_name: str, axes: Dict[str, int], runtime: Optional[Runtime] = None) -> str:
    """Which solution a call with these var-axis values would get, and why (text)."""
    from ._explain import explain_text

    rt = runtime or active()
    if rt is None:
        rt = Runtime(warmup=False)
    return explain_text(rt, definition_name, axes)
