"""Turn a Solution into a callable inside a benchmark worker.

The dispatcher's solution loader (``fib_runtime.solutions``: python, triton, cuda/cpp, built-in
kernels) is used when it is present; until then, and for python solutions it cannot load, a
minimal python-source loader here writes the sources into a cache folder keyed by the content
hash and imports the entry file (its folder on ``sys.path`` so sibling sources import).

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
        import fib_runtime.solutions as sols
    except Exception:
        return None
    for name in ("load_solution", "load", "build_solution", "build"):
        fn = getattr(sols, name, None)
        if callable(fn):
            return fn
    return None


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
    fn = None
    if solution.spec.language != "python" or os.environ.get("FIB_BENCH_DISPATCHER_LOADER") == "1":
        loader = _dispatcher_loader()
        if loader is None:
            raise RuntimeError(f"no loader for language {solution.spec.language!r} "
                               f"(fib_runtime.solutions is not available)")
        fn = _call_loader(loader, solution, device)
    else:
        fn = load_python_source(solution)
    _CACHE[key] = fn
    return fn


def _call_loader(loader, solution, device):
    try:
        obj = loader(solution, device=device)
    except TypeError:
        obj = loader(solution)
    for attr in ("fn", "callable", "run", "__call__"):
        if attr == "__call__" and callable(obj):
            return obj
        f = getattr(obj, attr, None)
        if callable(f):
            return f
    raise TypeError(f"loader returned {type(obj).__name__}, not a callable")


def prepared(fn: Callable, args) -> Callable:
    """``fn.fib_prepare(*args)`` when the solution has a setup step, else ``fn``."""
    prep = getattr(fn, "fib_prepare", None)
    return prep(*args) if callable(prep) else fn
