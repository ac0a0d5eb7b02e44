"""``apply``: the FlashInfer-Bench API, as a decorator or as a call.

Decorator: the resolver maps the call's arguments to a Definition name; the decorated
function is the fallback (the original implementation)::

    @apply(lambda A, B: f"gemm_n{B.shape[0]}_k{B.shape[1]}")
    def gemm_bf16(A, B):
        return torch.matmul(A, B)          # fallback

    @apply("rmsnorm_h4096")                # a fixed name works too
    def rmsnorm(hidden_states, weight):
        ...

Call::

    out = apply("rmsnorm_h4096", args=(x, w), fallback=lambda x, w: ref(x, w))
    out = apply(resolver, args=(A,), kwargs={"B": B}, fallback=torch.matmul)

The Definition's inputs are taken from the call: positional arguments first, then keyword
arguments by the Definition's input names (a parameter of the decorated function whose name
is not an input is ignored). The mapping from the function's parameters to the Definition's
inputs is computed once per (function, definition) with ``inspect`` at that time, never per
call. With no ``fallback`` in the call form, a miss runs the Definition's ``reference``.

Destination-passing and value-returning solutions are both handled by the dispatcher; the
caller always gets the outputs returned (one tensor, or a tuple in output order).

Cost per call (decorator, a hit): the resolver, a tuple of the arguments, the dispatcher's
lookup (see ``benchmarks/dispatch_overhead.py``).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

from . import runtime as _runtime
from .runtime import dispatch

Resolver = Union[str, Callable[..., str]]

_MISSING = object()


def apply(def_name_or_resolver: Resolver, args: Optional[Sequence[Any]] = None,
          kwargs: Optional[Dict[str, Any]] = None, fallback: Optional[Callable] = None):
    """Decorator (``args`` and ``kwargs`` omitted) or direct call (see module docstring)."""
    if args is None and kwargs is None:
        if fallback is not None:
            raise TypeError("apply(name, fallback=f) without args: use @apply(name) on f instead")
        return lambda fn: _decorate(def_name_or_resolver, fn)
    args = tuple(args or ())
    kwargs = dict(kwargs or {})
    name = def_name_or_resolver if isinstance(def_name_or_resolver, str) else \
        def_name_or_resolver(*args, **kwargs)
    inputs = _inputs_from_call(name, args, kwargs)
    if fallback is None:
        def run_fallback():
            return _reference(name)(*inputs)
    else:
        def run_fallback():
            return fallback(*args, **kwargs)
    if inputs is None:
        return run_fallback()
    return dispatch(name, inputs, run_fallback)


def _input_names(name: str) -> Optional[Tuple[str, ...]]:
    rt = _runtime._RT
    d = None
    if rt is not None:
        d = rt.definitions.get(name)
    if d is None:
        d = _runtime._REGISTERED.get(name)
    return tuple(d.inputs) if d is not None else None


def _inputs_from_call(name: str, args: tuple, kwargs: dict) -> Optional[tuple]:
    if not kwargs:
        return args
    names = _input_names(name)
    if names is None:
        return args + tuple(kwargs.values())
    rest = names[len(args):]
    if any(n not in kwargs for n in rest):
        return None  # cannot build the inputs: run the fallback
    return args + tuple(kwargs[n] for n in rest)


def _reference(name: str) -> Callable:
    from ..reference import compile_reference

    rt = _runtime._RT
    d = (rt.definitions.get(name) if rt is not None else None) or _runtime._REGISTERED.get(name)
    if d is None:
        raise LookupError(f"apply({name!r}): no fallback given and no definition to run the reference of")
    return compile_reference(d)


def _decorate(resolver: Resolver, fn: Callable) -> Callable:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    pnames = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    defaults = {p.name: p.default for p in params if p.default is not p.empty}
    plans: Dict[str, Tuple[Tuple[int, ...], bool]] = {}  # definition -> (param indices, identity)

    def plan_for(name: str):
        names = _input_names(name)
        if names is None:
            return None
        if all(n in pnames for n in names):
            return tuple(pnames.index(n) for n in names)
        if len(pnames) >= len(names):
            return tuple(range(len(names)))  # positional, in order
        return None

    def bind(name: str, a: tuple, kw: dict) -> Optional[tuple]:
        got = plans.get(name)
        if got is None:
            p = plan_for(name)
            if p is None:  # definition not known (yet): positional arguments as they are
                return a if not kw else None
            got = plans[name] = (p, p == tuple(range(len(p))))
        plan, identity = got
        if identity and not kw and len(a) == len(plan):
            return a
        vals = list(a) + [_MISSING] * (len(pnames) - len(a))
        for k, v in kw.items():
            if k in pnames:
                vals[pnames.index(k)] = v
        out = []
        for i in plan:
            v = vals[i] if i < len(vals) else _MISSING
            if v is _MISSING:
                v = defaults.get(pnames[i], _MISSING)
                if v is _MISSING:
                    return None
            out.append(v)
        return tuple(out)

    if isinstance(resolver, str):
        fixed = resolver

        @functools.wraps(fn)
        def wrapper(*a, **kw):
            x = bind(fixed, a, kw)
            if x is None:
                return fn(*a, **kw)
            return dispatch(fixed, x, lambda: fn(*a, **kw))
    else:
        @functools.wraps(fn)
        def wrapper(*a, **kw):
            try:
                name = resolver(*a, **kw)
                x = bind(name, a, kw)
            except Exception:  # a resolver that fails must not break the caller
                return fn(*a, **kw)
            if x is None:
                return fn(*a, **kw)
            return dispatch(name, x, lambda: fn(*a, **kw))

    wrapper.__fib_apply__ = resolver  # type: ignore[attr-defined]
    wrapper.__wrapped__ = fn
    return wrapper
