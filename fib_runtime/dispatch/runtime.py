"""The dispatcher runtime: hot path, lifecycle, module state.

Hot path (:func:`dispatch`), per call, when enabled::

    entry = _ENTRIES[definition_name]     # dict lookup -> the definition's generated function
    return entry(inputs, fallback)        # key inlined, cache lookup, packed decision run inline

The entry and the decisions are generated code (:mod:`.codegen`; no ``inspect``, no pydantic,
no lock): the key is the ``shape`` of each input that carries a var axis, the ``dtype`` of
every required tensor input and ``is_cuda`` of the first one. Anything new (a first call per
key, inputs the key cannot read) takes the slow path (:mod:`.decide`): under a lock, validate
the inputs against the Definition, compute the signature, select (:mod:`.table`), cache the
decision. During CUDA-graph capture the slow path never decides: it falls back, counted
``fallback_capture`` (capture is checked there only, and only when CUDA is initialised).

A hit compares each output's ``shape`` and ``dtype`` with values precomputed for the key
(metadata only: no sync). A solution that raises or returns the wrong number/shape/dtype of
outputs is quarantined for the process, counted, logged once, and the caller's fallback runs;
strict mode re-raises. Counting is an ``itertools.count`` bump (:mod:`fib_runtime.metrics`).

Reload (:mod:`.loading`): a daemon thread polls the dataset's definitions/, solutions/ and
traces/ (mtime and size) every ``FIB_RELOAD_INTERVAL`` s, builds and loads a new table off the
hot path, re-decides the keys already seen, then swaps the entries in with one assignment.
``fork`` children restart the thread (``os.register_at_fork``).

:class:`Runtime` = :class:`~.loading.LoadingMixin` (dataset, table, solutions, reload) +
:class:`~.decide.DecideMixin` (decisions, selection, quarantine) + the state set up here.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional

from .. import metrics
from ..errors import FibError
from .decide import DecideMixin
from .loading import LoadingMixin
from .table import Table

log = logging.getLogger("fib_runtime.dispatch")

__all__ = ["dispatch", "enable", "enable_from_env", "disable", "reload", "active", "register_definition",
           "SolutionError", "Runtime", "registered_definitions"]


class SolutionError(FibError):
    """Strict mode: a chosen solution failed to load, raised, or returned bad outputs."""


# ---- module state (read by the hot path) ----------------------------------------------------
_ON = False               # a runtime is enabled
_ENV_DONE = False         # FIB_ENABLE_APPLY was looked at (first call) or enable/disable called
_RT: Optional["Runtime"] = None
_ENTRIES: Dict[str, Callable] = {}   # name -> generated entry function; replaced on reload
_STATE_LOCK = threading.RLock()
_REGISTERED: Dict[str, Any] = {}     # definitions given by register_definition (survive reloads)
_REGISTERED_RAW: Dict[str, dict] = {}


def dispatch(definition_name, inputs, fallback):
    """Run the best solution of ``definition_name`` for ``inputs``, or ``fallback()``.

    Args:
        definition_name: a FlashInfer Trace Definition name (``"rmsnorm_h4096"``).
        inputs: tuple of the Definition's inputs, in its input order.
        fallback: zero-argument callable running the original implementation.

    Returns what the solution returns (one tensor, or a tuple in the Definition's output
    order), or what ``fallback()`` returns. Never raises on account of a solution unless
    strict mode is on; exceptions from ``fallback()`` itself propagate.
    """
    if _ON:
        try:
            e = _ENTRIES[definition_name]
        except KeyError:
            return _slow(definition_name, inputs, fallback)
        return e(inputs, fallback)
    if _ENV_DONE:
        return fallback()
    return _first_call(definition_name, inputs, fallback)


def _first_call(definition_name, inputs, fallback):
    global _ENV_DONE
    with _STATE_LOCK:
        if not _ENV_DONE:
            _ENV_DONE = True
            from .. import envs

            if envs.FIB_ENABLE_APPLY and _RT is None:
                try:
                    enable()
                except Exception:
                    log.exception("fib-runtime: FIB_ENABLE_APPLY=1 but the dispatcher failed to "
                                  "start; every call runs the original")
    return dispatch(definition_name, inputs, fallback)


def _slow(definition_name, inputs, fallback):
    rt = _RT
    if rt is None or not _ON:
        return fallback()
    try:
        d = rt._decide(definition_name, inputs)
    except SolutionError:
        raise
    except Exception as e:  # our own bookkeeping failed: never break the caller
        if rt.strict:
            raise
        rt._log_once(("decide", definition_name, type(e).__name__),
                     "fib-runtime: dispatch of %s failed (%s: %s); running the original",
                     definition_name, type(e).__name__, e)
        metrics.counter("fib_dispatch_total", definition_name, "none", "fallback_error").inc()
        return fallback()
    return d(inputs, fallback)


def enable_from_env() -> Optional["Runtime"]:
    """Enable from the environment now if ``FIB_ENABLE_APPLY=1`` (idempotent; never raises).

    Engine plugins call this at registration so that the dataset is read and solutions are
    built before the first intercepted call, not during it. Returns the active runtime or None.
    """
    global _ENV_DONE
    with _STATE_LOCK:
        if _RT is not None:
            return _RT
        from .. import envs

        _ENV_DONE = True
        if not envs.FIB_ENABLE_APPLY:
            return None
        try:
            return enable()
        except Exception:
            log.exception("fib-runtime: FIB_ENABLE_APPLY=1 but the dispatcher failed to start; "
                          "every call runs the original")
            return None


def active() -> Optional["Runtime"]:
    """The enabled runtime, or None."""
    return _RT


def register_definition(defn) -> None:
    """Make a Definition (object or dict) known for names the dataset does not have.

    Registered definitions survive reloads. Built-in solutions matching the name are loaded
    now (in the caller's thread), so that they are ready before the first call.
    """
    from ..schema import Definition

    if isinstance(defn, dict):
        name = defn.get("name")
        if name in _REGISTERED_RAW and _REGISTERED_RAW[name] == defn:
            return  # already known, same content: no validation again
        raw = defn
        defn = Definition.model_validate(defn)
        _REGISTERED_RAW[defn.name] = raw
    with _STATE_LOCK:
        old = _REGISTERED.get(defn.name)
        _REGISTERED[defn.name] = defn
        rt = _RT
    if rt is not None and (old is None or old != defn):
        rt._add_definition(defn)


def registered_definitions() -> Dict[str, Any]:
    return dict(_REGISTERED)


# ---- per-definition entries and generated code -------------------------------------------------# ---- the runtime ----------------------------------------------------------------------------------
class Runtime(LoadingMixin, DecideMixin):
    """One enabled dispatcher (see :func:`enable`). Use as a context manager to disable on exit."""

    def __init__(self, dataset_path=None, *, hardware=None, strict=None, allow_definitions=None,
                 deny_definitions=None, allow_solutions=None, deny_solutions=None, builtins=None,
                 reload_interval=None, cache_dir=None, warmup=None, max_distance=None):
        from .. import envs
        from .hardware import detect_hardware, normalize_hardware

        self.dataset_path = self._resolve_dataset(dataset_path)
        hw = hardware if hardware is not None else envs.FIB_HARDWARE
        self.hardware = "*" if hw == "*" else (normalize_hardware(hw) if hw else detect_hardware())
        self.strict = bool(envs.FIB_STRICT if strict is None else strict)
        self.allow_definitions = tuple(envs.FIB_ALLOW_DEFINITIONS if allow_definitions is None else allow_definitions)
        self.deny_definitions = tuple(envs.FIB_DENY_DEFINITIONS if deny_definitions is None else deny_definitions)
        self.allow_solutions = tuple(envs.FIB_ALLOW_SOLUTIONS if allow_solutions is None else allow_solutions)
        self.deny_solutions = tuple(envs.FIB_DENY_SOLUTIONS if deny_solutions is None else deny_solutions)
        self.builtins = (envs.FIB_BUILTINS if builtins is None else builtins) or "default"
        if self.builtins not in ("default", "traced", "off"):
            self.builtins = "default"
        self.reload_interval = float(envs.FIB_RELOAD_INTERVAL if reload_interval is None else reload_interval)
        self.cache_dir = cache_dir or envs.FIB_CACHE_PATH
        self.warmup = bool(envs.FIB_WARMUP if warmup is None else warmup)
        self.max_distance = int(envs.FIB_BUCKET_MAX_DISTANCE if max_distance is None else max_distance)
        self.lock = threading.RLock()
        self.generation = 0
        self.quarantined: Dict[str, str] = {}       # solution name -> reason (process lifetime)
        self._quarantined_hash: Dict[str, str] = {}  # name -> content hash it was quarantined with
        self.loaded: Dict[str, Any] = {}             # solution name -> solutions.Loaded
        self.load_errors: Dict[str, str] = {}
        self.solutions: Dict[str, Any] = {}          # name -> Solution (dataset + built-ins)
        self.builtin_supports: Dict[str, Callable] = {}
        self.builtin_by_def: Dict[str, List[str]] = {}
        self.definitions: Dict[str, Any] = {}
        self.table = Table(self.hardware, {})
        self.dataset = None
        self.dataset_problems: List[Any] = []
        self._fingerprint = None
        self._logged: set = set()
        self._stop = threading.Event()
        self._kick = threading.Event()  # set: the poller rebuilds the table now
        self._thread: Optional[threading.Thread] = None
        self.assume_loadable = False  # fib explain: a solution in the dataset counts as loadable
        self._build(first=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if _RT is self:
            disable()
        return False

def _capturing() -> bool:
    """True during CUDA-graph capture on the current stream (False without initialised CUDA)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        if not torch.cuda.is_initialized():
            return False
        return bool(torch.cuda.is_current_stream_capturing())
    except Exception:
        return False


# ---- lifecycle ------------------------------------------------------------------------------------
def enable(dataset_path=None, **kw) -> Runtime:
    """Enable the dispatcher; returns the :class:`Runtime` (a context manager).

    Args:
        dataset_path: dataset root (default ``FIB_DATASET_PATH``, else the embedded dataset).
        hardware: hardware class for trace selection (default ``FIB_HARDWARE`` or detected;
            ``"*"`` = any).
        strict: re-raise solution failures (default ``FIB_STRICT``).
        allow_definitions, deny_definitions, allow_solutions, deny_solutions: fnmatch lists
            (defaults from ``FIB_ALLOW_*`` / ``FIB_DENY_*``).
        builtins: ``"default"``, ``"traced"`` or ``"off"`` (default ``FIB_BUILTINS``).
        reload_interval: seconds between dataset polls (``FIB_RELOAD_INTERVAL``; 0 = no polling).
        cache_dir: build cache (``FIB_CACHE_PATH``).
        warmup: build/load candidate solutions now (``FIB_WARMUP``, default on).
        max_distance: bucket distance cap (``FIB_BUCKET_MAX_DISTANCE``).

    Side effects: reads the dataset, imports/compiles solutions (their code runs), may
    initialise CUDA (hardware detection), starts one daemon thread. Replaces a runtime enabled
    before.
    """
    global _RT, _ON, _ENV_DONE, _ENTRIES
    rt = Runtime(dataset_path, **kw)
    with _STATE_LOCK:
        old = _RT
        _ON = False
        _RT = rt
        _ENTRIES = {}
        _ENV_DONE = True
        _ON = True
    if old is not None:
        old.stop()
    rt.start()
    _register_atexit()
    return rt


_ATEXIT = False


def _register_atexit() -> None:
    global _ATEXIT
    if not _ATEXIT:
        import atexit

        atexit.register(metrics.flush)  # multiprocess mode: the last counts reach the mmap files
        _ATEXIT = True


def disable() -> None:
    """Disable the dispatcher: every call runs its fallback. Flushes metrics."""
    global _RT, _ON, _ENV_DONE, _ENTRIES
    with _STATE_LOCK:
        rt = _RT
        _ON = False
        _RT = None
        _ENTRIES = {}
        _ENV_DONE = True
    if rt is not None:
        rt.stop()
    metrics.flush()


def reload() -> bool:
    """Re-read the dataset of the enabled runtime now; True when a new table was swapped in."""
    rt = _RT
    return rt.reload(force=True) if rt is not None else False


def _after_fork_in_child() -> None:
    global _STATE_LOCK
    _STATE_LOCK = threading.RLock()
    rt = _RT
    if rt is not None:
        rt.lock = threading.RLock()
        rt._thread = None
        try:
            rt.start()
        except Exception:  # pragma: no cover
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
