"""The wrapper every adapter installs (:func:`make_wrapper`), the :class:`Call` it dispatches, the
interception counters (:data:`STATS`) and the re-entrancy guard.

Never break the engine: any failure in our own bookkeeping (binding arguments, recording,
metrics, the dispatcher itself) runs the original with the original arguments, and exceptions of
the original itself propagate unchanged (never run twice). A contextvar depth counter makes nested
intercepted calls (FlashInfer's ``top_k_top_p_sampling_from_logits`` calling
``top_p_sampling_from_probs``) go straight to the original: dispatched and counted once.
:mod:`fib_runtime.adapters.base` re-exports every name here.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import threading
from typing import Any, Callable, Optional

import wrapt

log = logging.getLogger("fib_runtime.adapters")

try:  # wrapt 2.x: FunctionWrapper is a BaseObjectProxy but not an ObjectProxy
    _PROXY_TYPES: tuple = (wrapt.BaseObjectProxy,)  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - wrapt 1.x
    _PROXY_TYPES = (wrapt.ObjectProxy,)

#: depth of intercepted calls in this context (thread / task); > 0 means "inside one of ours".
_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("fib_adapter_depth", default=0)



def _identity(out: Any) -> Any:
    return out


class Call:
    """An intercepted call, bound to a definition: what :func:`make_wrapper` dispatches.

    ``adapt(outputs)`` turns a solution's outputs (the Definition's outputs, value-returning) into
    what the caller of the original expects (dtype casts, in-place writes, tuples).
    ``definition_factory()`` builds the Definition dict (called once per name, for the registrar).
    A plain ``__slots__`` class: built on every intercepted call.
    """

    __slots__ = ("definition", "inputs", "names", "adapt", "definition_factory")

    def __init__(self, definition: str, inputs: tuple, names: tuple,
                 adapt: Callable[[Any], Any] = _identity,
                 definition_factory: Optional[Callable[[], Any]] = None) -> None:
        self.definition = definition
        self.inputs = inputs
        self.names = names
        self.adapt = adapt
        self.definition_factory = definition_factory

    def inputs_dict(self) -> dict:
        return dict(zip(self.names, self.inputs))

    def __repr__(self) -> str:
        return f"Call({self.definition!r}, names={self.names!r})"


#: an op spec's ``bind(instance, args, kwargs) -> Call | None`` (None = not ours: run original)
Binder = Callable[[Any, tuple, dict], Optional[Call]]


class _Stats:
    """Counters ``(op, what) -> n``. The hot path bumps an ``itertools.count`` (``next(c)``: one
    C call, atomic under the GIL, no lock); reads parse the counts (slow path only)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counters: dict[tuple[str, str], Any] = {}

    def bump(self, op: str, what: str) -> None:
        c = self.counters.get((op, what))
        if c is None:
            with self.lock:
                c = self.counters.setdefault((op, what), itertools.count())
        next(c)

    def snapshot(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for (op, what), c in list(self.counters.items()):
            n = c.__reduce__()[1][0]  # the next value = how many times next() ran
            if n:
                out.setdefault(op, {})[what] = n
        return out

    def reset(self) -> None:
        with self.lock:
            self.counters.clear()


#: process-wide interception counters, by op: calls, dispatched, recorded, unbound, error_*...
STATS = _Stats()
_warned: set = set()


def _warn_once(key: str, msg: str, *a: Any) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(msg, *a, exc_info=True)


def strict_mode() -> bool:
    """True when bookkeeping/dispatch errors must propagate (tests, benchmarks): ``FIB_STRICT``."""
    try:
        from fib_runtime import envs  # type: ignore

        v = getattr(envs, "FIB_STRICT", None)
        if v is not None:
            return bool(v() if callable(v) else v)
    except Exception:
        pass
    import os

    return os.environ.get("FIB_STRICT", "0").lower() in ("1", "true", "yes")


def make_wrapper(
    op: str,
    bind: Binder,
    dispatcher: Optional[Callable[[str, tuple, Callable], Any]],
    recorder: Optional[Callable[[Any, Any], Any]],
    *,
    registrar: Optional[Callable[[dict], Any]] = None,
    transparent: bool = False,
    observe: Optional[Callable[[Any, tuple, dict, Any], Any]] = None,
) -> Callable:
    """Build the wrapt wrapper ``wrapper(wrapped, instance, args, kwargs)`` of one op.

    Args:
        op: the op key (for counters and logs).
        bind: maps a call to a :class:`Call`, or None when this call is not ours to dispatch
            (e.g. a seeded request, an ``indices=`` argument): the original then runs unchanged.
        dispatcher: ``dispatch(definition_name, inputs, fallback)``, or None (no dispatch).
        recorder: ``record(definition_name, inputs_tuple)``, or None (no tracing). The tuple is
            in the Definition's input order (the tracer accepts a name, a dict or a Definition,
            and a tuple or a dict of inputs).
        registrar: called once per definition name seen by this op, with the generated
            Definition dict (so the dispatcher and the tracer know definitions the dataset lacks
            at this vocab / hidden size). Names without a generator are not registered.

        transparent: count the call and run the original *without* taking the re-entrancy depth,
            so that the patched method it calls (``forward`` -> ``self.run``) is the one dispatched.
        observe: ``observe(instance, args, kwargs, result)`` after the original, which always runs
            and returns unchanged (an engine's host-side facts for later dispatched calls, e.g.
            the smallest top_k of a batch); its errors are counted (``error_observe``), never
            raised outside strict mode. ``bind`` is not used then.

    The original runs with the caller's original arguments whenever anything of ours fails, and
    exceptions raised by the original itself propagate unchanged (never run twice).
    """

    if observe is not None:
        def observer(wrapped, instance, args, kwargs):
            out = wrapped(*args, **kwargs)
            try:
                observe(instance, args, kwargs, out)
            except Exception:
                STATS.bump(op, "error_observe")
                if strict_mode():
                    raise
                _warn_once(("observe", op), "fib-runtime: observing %s failed", op)
            return out

        observer._fib_op = op  # type: ignore[attr-defined]
        return observer

    if transparent:
        def passthrough(wrapped, instance, args, kwargs):
            if not _DEPTH.get():
                STATS.bump(op, "calls")
            return wrapped(*args, **kwargs)

        passthrough._fib_op = op  # type: ignore[attr-defined]
        return passthrough

    seen: set = set()

    def wrapper(wrapped, instance, args, kwargs):
        if _DEPTH.get():
            return wrapped(*args, **kwargs)
        token = _DEPTH.set(1)
        try:
            STATS.bump(op, "calls")
            try:
                call = bind(instance, args, kwargs)
            except Exception:
                STATS.bump(op, "error_bind")
                if strict_mode():
                    raise
                _warn_once(("bind", op), "fib-runtime: binding %s failed; original runs", op)
                call = None
            if call is None:
                STATS.bump(op, "unbound")
                return wrapped(*args, **kwargs)
            if call.definition not in seen:
                seen.add(call.definition)
                if registrar is not None and call.definition_factory is not None:
                    try:
                        d = call.definition_factory()
                        if isinstance(d, dict):
                            registrar(d)
                    except Exception:
                        STATS.bump(op, "error_register")
                        if strict_mode():
                            raise
                        _warn_once(("reg", op), "fib-runtime: registering %s failed", call.definition)
            if recorder is not None:
                try:
                    if recorder(call.definition, call.inputs):
                        STATS.bump(op, "recorded")
                except Exception:
                    STATS.bump(op, "error_record")
                    if strict_mode():
                        raise
                    _warn_once(("rec", op), "fib-runtime: recording %s failed", op)
            if dispatcher is None:
                return wrapped(*args, **kwargs)
            ran = [False]

            def fallback(*_a, **_k):
                ran[0] = True
                return wrapped(*args, **kwargs)

            try:
                out = dispatcher(call.definition, call.inputs, fallback)
            except Exception:
                if ran[0]:
                    raise  # the original itself raised: propagate, never run it twice
                STATS.bump(op, "error_dispatch")
                if strict_mode():
                    raise
                _warn_once(("disp", op), "fib-runtime: dispatch of %s failed; original runs", op)
                return wrapped(*args, **kwargs)
            if ran[0]:
                STATS.bump(op, "fallback")
                return out
            try:
                res = call.adapt(out)
            except Exception:
                STATS.bump(op, "error_adapt")
                if strict_mode():
                    raise
                _warn_once(("adapt", op), "fib-runtime: output of %s unusable; original runs", op)
                return wrapped(*args, **kwargs)
            STATS.bump(op, "dispatched")
            return res
        finally:
            _DEPTH.reset(token)

    wrapper._fib_op = op  # type: ignore[attr-defined]
    return wrapper


class originals_only:
    """Context manager: inside it, every intercepted call runs the original (no dispatch, no
    recording, no counting), as if nested in one of ours. For references in tests/benchmarks."""

    def __enter__(self):
        self._token = _DEPTH.set(_DEPTH.get() + 1)
        return self

    def __exit__(self, *exc):
        _DEPTH.reset(self._token)
        return False


def note_min_top_k(top_k: Any, smallest: Any) -> None:
    """For adapters: the smallest entry of a per-row ``top_k`` tensor, known on the host (a
    broadcast scalar, an engine's host copy of the batch), noted on that tensor for fib's sampling
    kernels (``fib_runtime.kernels.sampling.note_min_top_k``) where it picks a kernel (above
    ``LARGE_K_ABOVE``). A solution from elsewhere ignores the note."""
    global _sampling
    if _sampling is None:  # (imported on first use: the adapters load before the kernels matter)
        from fib_runtime.kernels import sampling

        _sampling = sampling
    m = int(smallest)
    if m > _sampling.LARGE_K_ABOVE and isinstance(top_k, _sampling.torch.Tensor) and top_k.dim() == 1:
        _sampling.note_min_top_k(top_k, m)


_sampling: Any = None


def in_intercepted_call() -> bool:
    """True while an intercepted call of this context is running (the re-entrancy guard)."""
    return _DEPTH.get() > 0


def is_fib_wrapper(obj: Any) -> bool:
    """True for a wrapt wrapper built by :func:`make_wrapper`."""
    return isinstance(obj, _PROXY_TYPES) and hasattr(getattr(obj, "_self_wrapper", None), "_fib_op")
