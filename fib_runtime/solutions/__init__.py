"""Load FlashInfer Trace solutions into callables, once per content hash.

    from fib_runtime.solutions import load_solution
    loaded = load_solution(solution)           # SolutionLoadError if it cannot be built/imported
    loaded.fn(*inputs)                         # value-returning, or fn(*inputs, *outputs) when loaded.dps

By language (``solution.spec.language``):

- ``python``: sources are written to ``$FIB_CACHE_PATH/python/<hash>/`` and imported as a private
  package (``_fib_sol_<hash>``), so sibling files import each other by relative or absolute
  name and ``inspect.getsource`` works. An unwritable cache falls back to in-memory modules.
- ``triton``: the same, after checking that ``triton`` imports.
- ``cuda`` / ``cpp``: compiled once per content hash into ``$FIB_CACHE_PATH/<language>/<hash>/``
  under a file lock (concurrent processes wait for one build, then load the same ``.so``).
  ``binding`` ``tvm-ffi`` (the default) builds with ``tvm_ffi.cpp.build`` and exports the entry
  function with ``TVM_FFI_DLL_EXPORT_TYPED_FUNC``; ``torch`` uses
  ``torch.utils.cpp_extension.load``. Value-returning tvm-ffi results are turned into torch
  tensors with DLPack.
- ``tilelang`` and FlashInfer's extra languages: not supported (a load error).

Loading **executes the solution's code** (imports, compiles): only load datasets you trust.
In-process results are cached by ``content_hash()``: a second ``load_solution`` of the same
content returns the same object; a failed load is remembered too and re-raises its error
without retrying. Built-in solutions (the package's own kernels) come from
:mod:`fib_runtime.solutions.builtin`.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional

from ..errors import FibError

__all__ = ["Loaded", "SolutionLoadError", "load_solution", "cache_root", "forget"]


class SolutionLoadError(FibError):
    """A solution could not be built or imported (message says why)."""


@dataclass(frozen=True)
class Loaded:
    """A loaded solution: the callable and how to call it."""

    solution: object  # fib_runtime.schema.Solution
    fn: Callable
    dps: bool
    language: str
    seconds: float  # time the build/load took (0 when served from the in-process cache)
    artifact: str = ""  # path of the built library / source folder, when there is one


_DONE: Dict[str, object] = {}  # content hash -> Loaded | SolutionLoadError
_LOCKS: Dict[str, threading.Lock] = {}
_GLOBAL = threading.Lock()


def cache_root(cache_dir: Optional[str] = None) -> Path:
    from .. import envs

    return Path(cache_dir or envs.FIB_CACHE_PATH).expanduser()


def forget() -> None:
    """Drop the in-process cache (tests)."""
    with _GLOBAL:
        _DONE.clear()
        _LOCKS.clear()


def load_solution(solution, cache_dir: Optional[str] = None) -> Loaded:
    """Build (if needed) and load ``solution``; cached per content hash. Raises SolutionLoadError."""
    h = solution.content_hash()
    done = _DONE.get(h)
    if done is None:
        with _GLOBAL:
            lock = _LOCKS.setdefault(h, threading.Lock())
        with lock:  # one build per hash in this process; the file lock covers other processes
            done = _DONE.get(h)
            if done is None:
                t0 = time.perf_counter()
                try:
                    fn, artifact = _load(solution, h, cache_root(cache_dir))
                    done = Loaded(solution, fn, bool(solution.spec.destination_passing_style),
                                  solution.spec.language, time.perf_counter() - t0, artifact)
                except SolutionLoadError as e:
                    done = e
                except Exception as e:  # dataset code: anything can happen while importing
                    done = SolutionLoadError(f"solution {solution.name!r}: {type(e).__name__}: {e}")
                    done.__cause__ = e
                _DONE[h] = done
                if isinstance(done, Loaded):
                    return done
    if isinstance(done, SolutionLoadError):
        raise done
    return done if done.seconds == 0 else Loaded(done.solution, done.fn, done.dps, done.language, 0.0,
                                                 done.artifact)


def _load(solution, h: str, root: Path):
    lang = solution.spec.language
    if lang in ("python", "triton"):
        if lang == "triton":
            try:
                import triton  # noqa: F401
            except Exception as e:
                raise SolutionLoadError(f"solution {solution.name!r}: triton is not importable ({e})")
        return _load_python(solution, h, root)
    if lang in ("cuda", "cpp"):
        from .compiled import load_compiled

        return load_compiled(solution, h, root)
    raise SolutionLoadError(f"solution {solution.name!r}: language {lang!r} is not supported")


def _write_sources(solution, folder: Path) -> None:
    from ..fileio import atomic_write_text

    for s in solution.sources:
        p = folder / s.path
        if not p.exists() or p.read_text(encoding="utf-8") != s.content:
            atomic_write_text(p, s.content)


def _load_python(solution, h: str, root: Path):
    pkg_name = f"_fib_sol_{h[:16]}"
    entry = solution.spec.entry_file
    if not entry.endswith(".py"):
        raise SolutionLoadError(f"solution {solution.name!r}: python entry file must end in .py: {entry!r}")
    folder = root / solution.spec.language / h
    try:
        from filelock import FileLock

        folder.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder) + ".lock"):
            _write_sources(solution, folder)
        on_disk = True
    except OSError:
        on_disk = False
    mod_rel = entry[:-3].replace("\\", "/").replace("/", ".")
    pkg = sys.modules.get(pkg_name)
    if pkg is None:
        pkg = types.ModuleType(pkg_name)
        pkg.__path__ = [str(folder)] if on_disk else []
        sys.modules[pkg_name] = pkg
    if on_disk:
        sys.path.insert(0, str(folder))  # absolute imports of sibling files
        try:
            mod = importlib.import_module(f"{pkg_name}.{mod_rel}")
        finally:
            try:
                sys.path.remove(str(folder))
            except ValueError:
                pass
    else:
        mod = _exec_in_memory(solution, pkg_name, mod_rel)
    fn = getattr(mod, solution.spec.entry_function, None)
    if not callable(fn):
        raise SolutionLoadError(f"solution {solution.name!r}: {entry} has no callable "
                                f"{solution.spec.entry_function!r}")
    return fn, str(folder) if on_disk else ""


def _exec_in_memory(solution, pkg_name: str, mod_rel: str):
    import linecache

    src = {s.path: s.content for s in solution.sources}[solution.spec.entry_file]
    name = f"{pkg_name}.{mod_rel}"
    mod = types.ModuleType(name)
    fname = f"<fib solution {solution.name}/{solution.spec.entry_file}>"
    mod.__file__ = fname
    mod.__package__ = pkg_name
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    sys.modules[name] = mod
    exec(compile(src, fname, "exec"), mod.__dict__)
    return mod
