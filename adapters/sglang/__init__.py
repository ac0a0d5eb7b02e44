"""SGLang adapter: the ``sglang.srt.plugins`` entry point, the ``fib`` sampling backend, and the
``.pth`` autoload for SGLang versions without plugins.

Activation (no code change in SGLang):

* SGLang ≥ 0.5.x with plugins: installing fib-runtime registers the entry point
  ``fib_runtime = fib_runtime.adapters.sglang:register``; SGLang calls :func:`register` in the
  main process, every scheduler (one per TP×PP rank), the DP controller and the detokenizer.
  ``SGLANG_PLUGINS`` is SGLang's allow-list.
* Older SGLang (or as a safety net): ``FIB_ENABLE_APPLY=1`` (or ``FIB_ENABLE_TRACING=1``) with
  the ``fib_runtime_autoload.pth`` hook installed in site-packages (``python -m
  fib_runtime.adapters.sglang.install_pth``); see :mod:`._autoload`.

:func:`register` always registers ``--sampling-backend fib`` (:mod:`.backend`). With
``FIB_ENABLE_APPLY=1`` / ``FIB_ENABLE_TRACING=1`` it arms ``create_sampler``: the process that
builds a sampler (each scheduler's ``ModelRunner``) then patches the targets of :mod:`.targets`
(SGLang's sampler, renorm, norm and attention-backend call sites) and the FlashInfer adapter
(:func:`activate`); the main process never starts the dispatcher. With neither variable,
nothing else is patched. Re-entrant and never raises.
``FIB_PLUGIN_MARKER=file`` appends one line per process (tests).

Example::

    FIB_ENABLE_APPLY=1 FIB_DATASET_PATH=/data/fib python -m sglang.launch_server \\
        --model-path ... --sampling-backend fib --enable-metrics

This module stays import-light (no torch): the ``.pth`` hook imports it in every process.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Optional, Sequence

log = logging.getLogger("fib_runtime.adapters.sglang")

__all__ = ["register", "SGLangInstrumentor", "instrumentor"]

_LOCK = threading.Lock()
_DONE_PID: Optional[int] = None
_BACKEND_PID: Optional[int] = None
_CLS: Any = None


def _instrumentor_class():
    global _CLS
    if _CLS is None:
        from fib_runtime.adapters.base import Dependency, Instrumentor

        from . import ops
        from .targets import TARGETS

        class SGLangInstrumentor(Instrumentor):
            name = "sglang"
            alias_scopes = ("sglang", "sgl_kernel")

            def dependencies(self) -> Sequence[Dependency]:
                return (Dependency("sglang", ("sglang",), min="0.4", max="0.7"),)

            def targets(self):
                return TARGETS

            def spec(self, op: str) -> Any:
                return ops.SPECS[op]

        _CLS = SGLangInstrumentor
    return _CLS


def instrumentor():
    """The SGLang instrumentor singleton."""
    return _instrumentor_class()()


def __getattr__(name: str) -> Any:
    if name == "SGLangInstrumentor":
        return _instrumentor_class()
    raise AttributeError(name)


_ACTIVE_PID: Optional[int] = None
_TRIGGER_CLS: Any = None


def activate():
    """Patch SGLang's targets and FlashInfer now, with the dispatcher/recorder the environment
    enables; once per process. Returns the SGLang instrumentor's report (None when disabled).

    :func:`register` does not call it directly: it arms ``create_sampler`` (called by each
    scheduler's ``ModelRunner``) to call it, so that the dispatcher, its metrics and
    ``prometheus_client`` start only in scheduler processes, after SGLang has set
    ``PROMETHEUS_MULTIPROC_DIR`` -- never in the main process, where importing the client early
    would take SGLang's own main-process metrics off ``/metrics``."""
    global _ACTIVE_PID
    from fib_runtime.adapters import apply_enabled, runtime_hooks, tracing_enabled, write_marker

    with _LOCK:
        if _ACTIVE_PID == os.getpid():
            return instrumentor().last_report
        _ACTIVE_PID = os.getpid()
    if not (apply_enabled() or tracing_enabled()):
        return None
    dispatcher, recorder, registrar = runtime_hooks()
    rep = instrumentor().instrument(dispatcher, recorder, registrar=registrar)
    from fib_runtime.adapters.flashinfer import FlashInferInstrumentor

    rep_fi = FlashInferInstrumentor().instrument(dispatcher, recorder, registrar=registrar)
    write_marker("sglang", f"activated patched={len(rep.patched)} deferred={len(rep.deferred)} "
                           f"missing={len(rep.missing)} flashinfer_patched={len(rep_fi.patched)}")
    log.info("fib-runtime: SGLang adapter active: %d patched, %d deferred, %d missing (%s)",
             len(rep.patched), len(rep.deferred), len(rep.missing), ", ".join(rep.missing))
    return rep


def _activate_then_call(wrapped, instance, args, kwargs):
    try:
        activate()
    except Exception:
        log.warning("fib-runtime: SGLang activation failed; SGLang runs unpatched", exc_info=True)
    return wrapped(*args, **kwargs)


_activate_then_call._fib_op = "sglang_activate"  # type: ignore[attr-defined]


def _trigger():
    """Instrumentor whose one target, ``create_sampler`` (and its ``from ... import`` copies in
    ``model_runner`` etc.), calls :func:`activate` before building the sampler."""
    global _TRIGGER_CLS
    if _TRIGGER_CLS is None:
        from fib_runtime.adapters.base import Instrumentor, Target

        from .targets import SAMPLER

        class SGLangTrigger(Instrumentor):
            name = "sglang-trigger"
            alias_scopes = ("sglang",)

            def targets(self):
                return (Target(SAMPLER, "create_sampler", "sglang_activate"),)

            def wrapper_for(self, target):
                return _activate_then_call

        _TRIGGER_CLS = SGLangTrigger
    return _TRIGGER_CLS()


def register() -> None:
    """The ``sglang.srt.plugins`` entry point (and the autoload hook's). Re-entrant, never raises.

    Registers ``--sampling-backend fib``; with FIB_ENABLE_APPLY / FIB_ENABLE_TRACING on, arms
    ``create_sampler`` to :func:`activate` the adapter in the process that builds a sampler (an
    SGLang without ``create_sampler`` is activated at once)."""
    global _DONE_PID, _BACKEND_PID
    try:
        from .backend import register_backend

        pid = os.getpid()
        with _LOCK:
            first = _DONE_PID != pid
            _DONE_PID = pid
        backend_ok = _BACKEND_PID == pid
        if not backend_ok:  # retried on a later call if SGLang's sampler was not ready
            backend_ok = register_backend()
            if backend_ok:
                _BACKEND_PID = pid
        if not first:
            return
        from fib_runtime.adapters import apply_enabled, tracing_enabled, write_marker

        write_marker("sglang", f"register backend={int(backend_ok)}")
        if not (apply_enabled() or tracing_enabled()):
            return
        trig = _trigger()
        rep = trig.instrument(None, None, check_dependencies=False) if not trig.is_instrumented else None
        if rep is not None and rep.missing:  # no create_sampler: an older SGLang
            activate()
    except Exception:
        log.warning("fib-runtime: SGLang plugin registration failed; SGLang runs unpatched",
                    exc_info=True)
