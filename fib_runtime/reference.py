"""Compile a Definition's ``reference`` source into a callable.

The reference is dataset code: compiling it executes it (imports included). Only load datasets
you trust, as you would any Python package. Compiled references are cached per source text.

    run = compile_reference(definition)
    outputs = run(*inputs)          # a tensor, or a tuple of tensors in ``outputs`` order
"""

from __future__ import annotations

import hashlib
import threading
import types
from typing import Callable, Dict

from .errors import SchemaError
from .schema import Definition

_CACHE: Dict[str, Callable] = {}
_LOCK = threading.Lock()


def compile_reference(definition: Definition) -> Callable:
    if definition.reference is None:  # FlashInfer-dialect definitions may have none
        raise SchemaError(f"definition {definition.name} has no reference")
    key = hashlib.sha1(definition.reference.encode()).hexdigest()
    fn = _CACHE.get(key)
    if fn is not None:
        return fn
    with _LOCK:
        fn = _CACHE.get(key)
        if fn is None:
            mod = types.ModuleType(f"fib_reference_{definition.name}")
            mod.__file__ = f"<reference of {definition.name}>"
            try:
                code = compile(definition.reference, mod.__file__, "exec")
                exec(code, mod.__dict__)
            except Exception as e:  # dataset code: report, do not crash the caller's process
                raise SchemaError(f"reference of {definition.name}: failed to load: "
                                  f"{type(e).__name__}: {e}") from e
            fn = mod.__dict__.get(definition.reference_entry)
            if not callable(fn):
                raise SchemaError(f"reference of {definition.name}: no callable {definition.reference_entry!r}")
            _CACHE[key] = fn
    return fn


def outputs_tuple(definition: Definition, result) -> tuple:
    """Normalise a reference/solution return value into a tuple in ``outputs`` order."""
    if isinstance(result, dict):
        return tuple(result[k] for k in definition.outputs)
    if isinstance(result, (tuple, list)):
        return tuple(result)
    return (result,)
