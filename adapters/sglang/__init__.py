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
``FIB_ENABLE_APPLY=1`` / ``FIB_ENABLE_TRACING=1`` it also patches the targets of
:mod:`.targets` (SGLang's sampler, renorm, norm and attention-backend call sites) and the
FlashInfer adapter; with neither, nothing else is patched. Re-entrant and never raises.
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
        from fib_runtime.adapters.base import Dependency, Instrumentor, Target  # noqa: F401

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


def register() -> None:
    """The ``sglang.srt.plugins`` entry point (and the autoload hook's). Re-entrant, never raises."""
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
        from fib_runtime.adapters import apply_enabled, runtime_hooks, tracing_enabled, write_marker

        write_marker("sglang", "register")
        if not (apply_enabled() or tracing_enabled()):
            write_marker("sglang", f"backend={int(backend_ok)} patched=0")
            return
        dispatcher, recorder, registrar = runtime_hooks()
        rep = instrumentor().instrument(dispatcher, recorder, registrar=registrar)
        from fib_runtime.adapters.flashinfer import FlashInferInstrumentor

        rep_fi = FlashInferInstrumentor().instrument(dispatcher, recorder, registrar=registrar)
        write_marker("sglang", f"backend={int(backend_ok)} patched={len(rep.patched)} "
                               f"deferred={len(rep.deferred)} missing={len(rep.missing)} "
                               f"flashinfer_patched={len(rep_fi.patched)}")
        log.info("fib-runtime: SGLang plugin active: %d patched, %d deferred, %d missing (%s)",
                 len(rep.patched), len(rep.deferred), len(rep.missing), ", ".join(rep.missing))
    except Exception:
        log.warning("fib-runtime: SGLang plugin registration failed; SGLang runs unpatched",
                    exc_info=True)
