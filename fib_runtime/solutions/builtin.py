"""Built-in solutions: the package's own kernels, as FlashInfer Trace Solutions.

``fib_runtime/kernels/builtin_table.py`` (owned by the kernel authors) lists
``BuiltinKernel(definition_prefix, callable_path, op_type, description, supports)`` entries.
Each entry applies to every definition whose name starts with ``definition_prefix`` (the longest
matching prefix wins); for such a definition it becomes a Solution::

    name      fib-runtime_<definition> (or fib-runtime_<callable>_<definition>, see solution_name)
    author    fib-runtime
    spec      language python, entry_point "fib_builtin.py::run",
              destination_passing_style False, target_hardware ["sm_80", "sm_89", "sm_90"]
    sources   [fib_builtin.py: "from <module> import <callable> as run"]

so it is benchmarked, traced and selected exactly like any other solution (``fib bench`` writes
its evaluation traces under author ``fib-runtime``). ``supports(inputs) -> bool`` is asked
once per call signature before a built-in is chosen. A missing or broken table means no
built-ins (reported by :func:`table_problem`), never an error.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, List, Optional, Tuple

from ..schema import Solution

log = logging.getLogger("fib_runtime.solutions")

AUTHOR = "fib-runtime"
_problem: Optional[str] = None


def entries() -> List[Any]:
    """The BuiltinKernel entries of ``fib_runtime.kernels.builtin_table`` ([] when absent)."""
    global _problem
    try:
        from ..kernels import builtin_table as bt  # type: ignore[attr-defined]
    except ImportError as e:
        _problem = f"no built-in table ({e})"
        return []
    except Exception as e:  # a broken table must not break dispatch
        _problem = f"built-in table failed to import: {type(e).__name__}: {e}"
        log.warning("fib-runtime: %s", _problem)
        return []
    for attr in ("BUILTINS", "TABLE", "ENTRIES", "KERNELS"):
        val = getattr(bt, attr, None)
        if isinstance(val, (list, tuple)):
            return [e for e in val if _is_entry(e)]
    return [v for v in vars(bt).values() if _is_entry(v)] or [
        e for v in vars(bt).values() if isinstance(v, (list, tuple)) for e in v if _is_entry(e)]


def _is_entry(e) -> bool:
    return hasattr(e, "definition_prefix") and hasattr(e, "callable_path")


def table_problem() -> Optional[str]:
    return _problem


def split_callable(path: str) -> Tuple[str, str]:
    """``"pkg.mod:func"`` or ``"pkg.mod.func"`` -> (module, attribute)."""
    if ":" in path:
        mod, attr = path.split(":", 1)
    else:
        mod, _, attr = path.rpartition(".")
    return mod, attr


def solution_name(entry, definition: str) -> str:
    """``fib-runtime_<definition>`` when the callable is named like the definition's op
    (``top_k_sampling_from_probs`` for ``top_k_sampling_from_probs_v128256``), else
    ``fib-runtime_<callable>_<definition>``."""
    func = split_callable(entry.callable_path)[1]
    if definition.startswith(func):
        return f"{AUTHOR}_{definition}"
    return f"{AUTHOR}_{func}_{definition}"


def to_solution(entry, definition: str) -> Solution:
    """The Solution object of built-in ``entry`` for ``definition`` (see module docstring)."""
    mod, attr = split_callable(entry.callable_path)
    return Solution.model_validate({
        "name": solution_name(entry, definition),
        "definition": definition,
        "author": AUTHOR,
        "description": getattr(entry, "description", "") or f"fib-runtime built-in {attr}",
        "spec": {"language": "python", "target_hardware": ["sm_80", "sm_89", "sm_90"],
                 "entry_point": "fib_builtin.py::run", "dependencies": [],
                 "destination_passing_style": False},
        "sources": [{"path": "fib_builtin.py", "content": f"from {mod} import {attr} as run\n"}],
    })


def for_definition(definition: str) -> List[Tuple[Solution, Callable[[tuple], bool]]]:
    """(Solution, supports) of every built-in whose prefix matches ``definition``."""
    out = []
    matching = [e for e in entries() if definition.startswith(e.definition_prefix)]
    if matching:  # the longest prefix wins (as builtin_table.find does)
        longest = max(len(e.definition_prefix) for e in matching)
        matching = [e for e in matching if len(e.definition_prefix) == longest]
    for e in matching:
        try:
            sol = to_solution(e, definition)
        except Exception as ex:  # pragma: no cover - malformed entry
            log.warning("fib-runtime: built-in %r skipped: %s", e, ex)
            continue
        sup = getattr(e, "supports", None)
        out.append((sol, sup if callable(sup) else (lambda inputs: True)))
    return out
