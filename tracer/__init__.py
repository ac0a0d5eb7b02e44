"""fib-runtime's tracer: record the calls an engine really makes as FlashInfer Trace workloads.

The adapters call :func:`record` on the same interception points as the dispatcher; what the
tracer keeps lands in a dataset that ``fib bench`` replays::

    import fib_runtime.tracer as tracer

    tracer.enable("/data/trace", definitions=["rmsnorm_h*"], policies={"rmsnorm_h4096": "all"})
    tracer.register_definition(defn)        # a Definition or its dict (adapters build them at run time)
    tracer.record(defn, {"hidden_states": x, "weight": w})   # or a tuple in the definition's order
    tracer.record("rmsnorm_h4096", (x, w))  # by name, once registered (or present in the dataset)
    tracer.stats()  # {'records': {...}, 'dropped': {'dedup': 41, ...}, 'bytes': 1234, ...}
    tracer.disable()                        # flushes

or with no code: ``FIB_ENABLE_TRACING=1 FIB_TRACE_PATH=/data/trace`` (default
``FIB_DATASET_PATH``); tracing then starts at the first :func:`record` call. The other
``FIB_TRACE_*`` variables are listed in :mod:`fib_runtime.tracer.config`.

What is written, per kept call: one line of ``workloads/<op_type>/<definition>.jsonl`` (a
workload-only trace: var-axis values, one data source per input, a fresh uuid4) and, when the
dump policy stores tensors, one ``blob/workloads/<op_type>/<definition>/<definition>_<uuid>.safetensors``.
Storage follows the public dataset: var axes always; integer/bool tensors in the blob; float
activations ``random``; Python scalars ``scalar`` (policies in :class:`Policy`).

Side effects and costs:

* :func:`record` never raises and never synchronises a CUDA stream. A call whose signature is
  already decided costs about 1 us; a kept call also pays host copies of the dumped tensors
  (pinned, non-blocking). Nothing is recorded during CUDA-graph capture or ``torch.compile``
  tracing (counted as ``cuda_graph_capture`` / ``compiling``).
* A daemon writer thread starts at the first kept call. Entries are flushed at :func:`disable`,
  :func:`flush`, normal interpreter exit (``atexit``; in ``multiprocessing`` fork children,
  which skip ``atexit``, a multiprocessing finalizer) and SIGTERM (a handler installed from the
  main thread only, chaining the previous one; an engine that installs its own SIGTERM handler
  later replaces it, and then only ``atexit`` flushes). After ``fork`` the child drops the
  parent's queue and starts its own writer when it needs one.
* By default one rank per tensor-parallel group records: TP rank 0 when vLLM / SGLang (already
  imported) report it, else global rank 0 -- ``torch.distributed`` once initialised, else
  ``RANK`` / ``LOCAL_RANK`` (``ranks=``, ``FIB_TRACE_RANKS``: ``all``, ``local0``, ``every:N``...).
* Counters: ``fib_trace_records_total{definition}``, ``fib_trace_dropped_total{reason}``,
  ``fib_trace_bytes_total`` (pushed by the writer thread, never on the hot path).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from typing import Any, Dict, Optional, Union

from fib_runtime.schema import Definition, parse

from .config import Policy, TraceConfig, build_config, export_to_env, tracing_requested
from .runtime import REASONS, Tracer, bucket_of

__all__ = [
    "enable", "disable", "record", "register_definition", "flush", "stats", "is_enabled",
    "get_tracer", "recorder", "Policy", "TraceConfig", "Tracer", "REASONS", "bucket_of",
]

log = logging.getLogger("fib_runtime.tracer")

_TRACER: Optional[Tracer] = None
_ENV_CHECKED = False
_REGISTRY: Dict[str, Definition] = {}
_LOCK = threading.RLock()
_PREV_SIGTERM: Any = None
_SIGTERM_INSTALLED = False
_ATEXIT_INSTALLED = False
_FORK_INSTALLED = False


# ---- hot path ----------------------------------------------------------------------------------

def record(definition: Union[Definition, dict, str], inputs: Union[dict, tuple, list]) -> bool:
    """Offer one intercepted call to the tracer; True when it was kept (queued for writing).

    Args:
        definition: the Definition, its dict, or the name of a registered definition (or one in
            the dataset's ``definitions/``).
        inputs: ``{input name: tensor or Python value}``, or a tuple in the definition's input
            order. Tensors may live on any device; they are read only when the call is kept.

    Never raises and costs one global read when tracing is off. With ``FIB_ENABLE_TRACING=1``
    the first call enables tracing from the environment.
    """
    t = _TRACER
    if t is not None:
        return t.record(definition, inputs)
    if not _ENV_CHECKED:
        _enable_from_env()
        t = _TRACER
        if t is not None:
            return t.record(definition, inputs)
    return False


def recorder():
    """The function adapters should call per intercepted call, or None when tracing is off
    (checks ``FIB_ENABLE_TRACING`` once). Passing None to an adapter skips the call entirely."""
    if _TRACER is None and not _ENV_CHECKED:
        _enable_from_env()
    return record if _TRACER is not None else None


def register_definition(defn: Union[Definition, dict]) -> Definition:
    """Make ``defn`` resolvable by name in :func:`record` (adapters generate definitions at run
    time, for any vocab or hidden size). Returns the parsed Definition; a repeat is cheap."""
    if not isinstance(defn, Definition):
        name = defn.get("name") if isinstance(defn, dict) else None
        if name is not None and name in _REGISTRY:
            return _REGISTRY[name]
        defn = parse(Definition, defn)
    _REGISTRY.setdefault(defn.name, defn)
    t = _TRACER
    if t is not None:
        t.forget(defn.name)
    return _REGISTRY[defn.name]


# ---- lifecycle ---------------------------------------------------------------------------------

def enable(dataset_path: Optional[Union[str, os.PathLike]] = None, definitions=None, policies=None,
           **options) -> Tracer:
    """Start tracing in this process (replacing a previous tracer, which is flushed first).

    Args:
        dataset_path: dataset root; default ``FIB_TRACE_PATH``, then ``FIB_DATASET_PATH``. The
            layout folders are created when missing.
        definitions: names or globs (or Definitions) to trace; None traces every definition.
        policies: ``{name or glob: Policy | "ints" | "all" | "none" | [input names] | dict}``.
        **options: any :class:`TraceConfig` field (``default_policy``, ``rate_limit``, ``burst``,
            ``max_bytes``, ``queue_size``, ``max_pending_bytes``, ``ranks``,
            ``write_definitions``, ``install_signal_handler``, ``flush_timeout``, ``export_env``); unset ones
            come from ``FIB_TRACE_*``, then the defaults.

    Returns the :class:`Tracer` (its ``stats()``, ``flush()`` work as the module functions).
    """
    global _TRACER, _ENV_CHECKED
    cfg = build_config(dataset_path, definitions, policies, **options)
    with _LOCK:
        _ENV_CHECKED = True
        old = _TRACER
        _TRACER = None
        if old is not None:
            old.stop()
        for sub in ("workloads", "blob", "definitions"):
            os.makedirs(os.path.join(cfg.dataset_path, sub), exist_ok=True)
        t = Tracer(cfg, _REGISTRY)
        _install_hooks(cfg, t)
        if cfg.export_env:
            export_to_env(cfg)
        _TRACER = t
    return t


def disable(timeout: Optional[float] = None) -> bool:
    """Stop tracing: flush what is queued (True when everything was written), stop the writer,
    restore the SIGTERM handler we replaced. The environment is not read again afterwards."""
    global _TRACER, _ENV_CHECKED
    with _LOCK:
        _ENV_CHECKED = True
        t, _TRACER = _TRACER, None
        _uninstall_sigterm()
    return t.stop(timeout) if t is not None else True


def flush(timeout: Optional[float] = None) -> bool:
    """Wait until every kept call is on disk (True) or ``timeout`` seconds pass (False)."""
    t = _TRACER
    return t.flush(timeout) if t is not None else True


def stats() -> Dict[str, Any]:
    """In-process snapshot: records per definition, drops per reason, bytes written, pending."""
    t = _TRACER
    if t is None:
        return {"enabled": False, "records": {}, "dropped": {}, "bytes": 0, "pending": 0}
    return t.stats()


def is_enabled() -> bool:
    return _TRACER is not None


def get_tracer() -> Optional[Tracer]:
    return _TRACER


def _enable_from_env() -> None:
    global _ENV_CHECKED
    with _LOCK:
        if _ENV_CHECKED:
            return
        _ENV_CHECKED = True
        if not tracing_requested():
            return
        try:
            enable()
        except Exception:  # a bad FIB_TRACE_* value must not break the engine
            log.warning("fib-runtime: FIB_ENABLE_TRACING=1 but tracing could not start", exc_info=True)


# ---- exit, SIGTERM, fork -----------------------------------------------------------------------

def _at_exit() -> None:
    t = _TRACER
    if t is not None:
        try:
            t.stop()
        except Exception:
            pass


def _on_sigterm(signum, frame) -> None:
    t = _TRACER
    if t is not None:
        try:
            t.flush()
        except Exception:
            pass
    prev = _PREV_SIGTERM
    if callable(prev):
        prev(signum, frame)
    elif prev == signal.SIG_IGN:
        return
    else:  # SIG_DFL (or a handler not installed from Python): die of the signal as before
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _mp_child(t: Tracer) -> None:
    """In a ``multiprocessing`` fork child: it ends with ``os._exit`` (no ``atexit``), so flush
    from a multiprocessing finalizer, which its exit path does run."""
    import multiprocessing.util as mpu

    mpu.Finalize(None, _at_exit, exitpriority=100)


def _install_hooks(cfg: TraceConfig, t: Tracer) -> None:
    global _ATEXIT_INSTALLED, _SIGTERM_INSTALLED, _PREV_SIGTERM, _FORK_INSTALLED
    if not _ATEXIT_INSTALLED:
        atexit.register(_at_exit)
        _ATEXIT_INSTALLED = True
    try:
        import multiprocessing.util as mpu

        mpu.register_after_fork(t, _mp_child)
    except Exception:  # pragma: no cover - multiprocessing always importable on CPython
        pass
    if not _FORK_INSTALLED and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                            after_in_child=_after_fork_child)
        _FORK_INSTALLED = True
    if (cfg.install_signal_handler and not _SIGTERM_INSTALLED
            and threading.current_thread() is threading.main_thread()):
        try:
            _PREV_SIGTERM = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, _on_sigterm)
            _SIGTERM_INSTALLED = True
        except (ValueError, OSError):  # not the main interpreter / thread
            pass


def _uninstall_sigterm() -> None:
    global _SIGTERM_INSTALLED, _PREV_SIGTERM
    if not _SIGTERM_INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, _PREV_SIGTERM if _PREV_SIGTERM is not None else signal.SIG_DFL)
    except (ValueError, OSError):
        return
    _SIGTERM_INSTALLED = False
    _PREV_SIGTERM = None


_FORK_HELD: Optional[Tracer] = None


def _before_fork() -> None:
    global _FORK_HELD
    t = _TRACER
    if t is not None:
        t.before_fork()
        _FORK_HELD = t


def _after_fork_parent() -> None:
    global _FORK_HELD
    t, _FORK_HELD = _FORK_HELD, None
    if t is not None:
        t.after_fork_parent()


def _after_fork_child() -> None:
    global _FORK_HELD
    t, _FORK_HELD = _FORK_HELD, None
    if t is not None:
        t.after_fork_child()
