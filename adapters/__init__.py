"""Engine adapters: FlashInfer, vLLM and SGLang, behind one instrumentor contract.

Installed as ``fib_runtime.adapters`` (never import a bare ``adapters``).

* :mod:`fib_runtime.adapters.base` — the contract (:class:`~.base.Instrumentor`, target tables,
  idempotence, re-entrancy guard, never-break wrappers).
* :mod:`fib_runtime.adapters.flashinfer` — FlashInfer's sampling, cake sampling, norm, cascade
  and attention wrappers.
* :mod:`fib_runtime.adapters.vllm` — the ``vllm.general_plugins`` entry point ``register()``.
* :mod:`fib_runtime.adapters.sglang` — the ``sglang.srt.plugins`` entry point ``register()``,
  the ``fib`` sampling backend, and the ``.pth`` autoload hook.

What an adapter feeds is chosen by two variables (read once per process):

============================  =======  ==================================================
variable                      default  effect
============================  =======  ==================================================
``FIB_ENABLE_APPLY``          ``0``    dispatch intercepted calls through ``fib_runtime.dispatch``
``FIB_ENABLE_TRACING``        ``0``    record intercepted calls through ``fib_runtime.tracer``
============================  =======  ==================================================

With both off the engine plugins load (and write their per-process marker when
``FIB_PLUGIN_MARKER`` names a file) but patch nothing: installing fib-runtime alone never
changes an engine's behaviour.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Optional, Tuple

log = logging.getLogger("fib_runtime.adapters")

__all__ = ["runtime_hooks", "apply_enabled", "tracing_enabled", "write_marker"]

_TRUE = ("1", "true", "yes", "on")


def _flag(name: str, default: bool = False) -> bool:
    try:
        from fib_runtime import envs  # type: ignore

        v = getattr(envs, name, None)
        if v is not None:
            return bool(v() if callable(v) else v)
    except Exception:
        pass
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in _TRUE


def apply_enabled() -> bool:
    return _flag("FIB_ENABLE_APPLY")


def tracing_enabled() -> bool:
    return _flag("FIB_ENABLE_TRACING")


def runtime_hooks() -> Tuple[Optional[Callable], Optional[Callable], Optional[Callable]]:
    """``(dispatcher, recorder, registrar)`` as enabled by the environment (None where disabled
    or unavailable). The registrar makes generated Definitions known to both."""
    dispatcher = recorder = None
    regs = []
    if apply_enabled():
        try:
            from fib_runtime.dispatch import dispatch as dispatcher  # type: ignore
            from fib_runtime.dispatch import register_definition as reg_d  # type: ignore

            regs.append(reg_d)
            try:  # read the dataset and build solutions now, not during the first call
                from fib_runtime.dispatch.runtime import enable_from_env  # type: ignore

                enable_from_env()
            except Exception:
                log.debug("fib-runtime: dispatcher enable_from_env failed", exc_info=True)
        except Exception:
            log.warning("fib-runtime: FIB_ENABLE_APPLY=1 but the dispatcher is unavailable",
                        exc_info=True)
            dispatcher = None
    if tracing_enabled():
        try:
            from fib_runtime import tracer  # type: ignore

            recorder = tracer.recorder() if hasattr(tracer, "recorder") else tracer.record
            if recorder is not None and hasattr(tracer, "register_definition"):
                regs.append(tracer.register_definition)
        except Exception:
            log.warning("fib-runtime: FIB_ENABLE_TRACING=1 but the tracer is unavailable",
                        exc_info=True)
            recorder = None
    registrar = None
    if regs:
        def registrar(defn: dict, _regs=tuple(regs)) -> None:
            for r in _regs:
                r(defn)
    return dispatcher, recorder, registrar


def write_marker(engine: str, what: str = "register") -> None:
    """Append ``engine what pid=<pid> proc=<process name>`` to ``$FIB_PLUGIN_MARKER`` (if set).

    Tests use it to prove that a plugin really ran in every engine process (vLLM only logs a
    plugin that fails to load). One ``write`` of one line in append mode: lines never interleave.
    """
    path = os.environ.get("FIB_PLUGIN_MARKER")
    if not path:
        return
    try:
        import multiprocessing

        proc = multiprocessing.current_process().name
    except Exception:
        proc = "?"
    try:
        title = open(f"/proc/{os.getpid()}/comm").read().strip()
    except Exception:
        title = "?"
    line = f"{engine} {what} pid={os.getpid()} proc={proc} comm={title} apply={int(apply_enabled())} tracing={int(tracing_enabled())}\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except Exception:
        log.debug("fib-runtime: could not write marker %s", path, exc_info=True)
