"""Turn a Solution into a callable inside a benchmark worker.

The dispatcher's solution loader (:func:`fib_runtime.solutions.load_solution`: python, triton,
cuda/cpp, built-ins; compiled once per content hash) does the work, so a solution is benchmarked
exactly as it will be dispatched. Any exception while loading/building is a ``COMPILE_ERROR`` for
the runner.

**Plan outside the timed region.** A loaded callable may carry ``fib_prepare``: a function of the
definition's inputs returning the callable to time (e.g. a FlashInfer wrapper after ``plan``).
The runner calls it once per workload, outside the timed region (see :func:`prepared`); a python
solution provides it as a module-level ``<entry>_prepare``.
"""

from __future__ import annotations

import sys
from typing import Callable, Dict

_CACHE: Dict[str, Callable] = {}


def load(solution, device: str = "cpu") -> Callable:
    """The callable of ``solution`` (cached per content hash in this process)."""
    key = solution.content_hash()
    fn = _CACHE.get(key)
    if fn is not None:
        return fn
    from fib_runtime.solutions import load_solution

    fn = load_solution(solution).fn
    if not hasattr(fn, "fib_prepare"):
        mod = sys.modules.get(getattr(fn, "__module__", "") or "")
        prep = getattr(mod, solution.spec.entry_function + "_prepare", None) if mod else None
        if callable(prep):
            fn = _with_prepare(fn, prep)
    _CACHE[key] = fn
    return fn


def _with_prepare(fn, prep):
    try:
        fn.fib_prepare = prep
        return fn
    except (AttributeError, TypeError):
        def run(*args):
            return fn(*args)
        run.fib_prepare = prep
        return run


def prepared(fn: Callable, args) -> Callable:
    """``fn.fib_prepare(*args)`` when the solution has a setup step, else ``fn``."""
    prep = getattr(fn, "fib_prepare", None)
    return prep(*args) if callable(prep) else fn
