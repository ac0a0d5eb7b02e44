"""Turn a Solution into a callable inside a benchmark worker.

The dispatcher's solution loader (:func:`fib_runtime.solutions.load_solution`: python, triton,
cuda/cpp) does the work. A minimal python-source loader here (sources in a cache folder keyed by
the content hash, entry file imported from it) is the fallback when that package cannot be
imported, or when ``FIB_BENCH_OWN_LOADER=1``.

Any exception while loading/building is a ``COMPILE_ERROR`` for the runner.

**Plan outside the timed region.** A loaded callable may carry ``fib_prepare``: a function of the
definition's inputs returning the callable to time (e.g. a FlashInfer wrapper after ``plan``).
The runner calls it once per workload, outside the timed region (see :func:`prepared`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Optional

_CACHE: Dict[str, Callable] = {}


def cache_dir() -> Path:
    base = os.environ.get("FIB_CACHE_PATH") or os.path.join(tempfile.gettempdir(), "fib-cache")
    return Path(base) / "bench-python"


def _dispatcher_loader() -> Optional[Callable]:
    try:
        from fib_runtime.solutions import load_solution
    except Exception:
        return None
    return load_solution


def load_python_source(solution) -> Callable:
    """Import a python solution from its sources and return its entry function."""
    h = solution.content_hash()
    root = cache_dir() / h
    for src in solution.sources:
        p = root / src.path
        if not p.exists() or p.read_text(encoding="utf-8") != src.content:
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
            tmp.write_text(src.content, encoding="utf-8")
            os.replace(tmp, p)
    entry = root / solution.spec.entry_file
    modname = f"fib_bench_sol_{h[:16]}"
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    spec = importlib.util.spec_from_file_location(modname, entry)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    fn = getattr(mod, solution.spec.entry_function, None)
    if not callable(fn):
        raise AttributeError(f"{solution.spec.entry_file} defines no callable {solution.spec.entry_function!r}")
    prep = getattr(mod, solution.spec.entry_function + "_prepare", None)
    if callable(prep) and not hasattr(fn, "fib_prepare"):
        try:
            fn.fib_prepare = prep
        except AttributeError:
            pass
    return fn


def load(solution, device: str = "cpu") -> Callable:
    """The callable of ``solution`` (cached per content hash in this process)."""
    key = solution.content_hash()
    fn = _CACHE.get(key)
    if fn is not None:
        return fn
    loader = None if os.environ.get("FIB_BENCH_OWN_LOADER") == "1" else _dispatcher_loader()
    if loader is not None:
        fn = loader(solution).fn
        if not hasattr(fn, "fib_prepare"):
            mod = sys.modules.get(getattr(fn, "__module__", "") or "")
            prep = getattr(mod, solution.spec.entry_function + "_prepare", None) if mod else None
            if callable(prep):
                fn = _with_prepare(fn, prep)
    elif solution.spec.language == "python":
        fn = load_python_source(solution)
    else:
        raise RuntimeError(f"no loader for language {solution.spec.language!r} "
                           f"(fib_runtime.solutions is not available)")
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
