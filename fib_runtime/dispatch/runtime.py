"""The dispatcher runtime: hot path, per-key decisions, quarantine, strict mode, hot reload.

Hot path (:func:`dispatch`), per call, when enabled::

    entry = _ENTRIES[definition_name]          # dict lookup
    decision = entry.cache[entry.key(inputs)]  # generated key function + dict lookup
    return decision(inputs, fallback)          # generated closure: call + output metadata check

``entry.key`` is generated per definition (no ``inspect``, no pydantic): the ``shape`` of each
input tensor that carries a var axis (so rank and const dims are part of the key), the
``dtype`` of every required tensor input and ``is_cuda`` of the first one. Anything new (a
first call per key, a key function that raises) takes the slow path: under a lock, it validates
the inputs against the Definition, computes the signature, selects a solution
(:mod:`.table`), builds the decision closure and caches it. During CUDA-graph capture the
slow path never decides: it falls back, counted ``fallback_capture`` (capture is checked there
only, and only when CUDA is initialised).

A decision closure for a hit calls the solution and compares each output's ``shape`` and
``dtype`` with the values precomputed for the key (metadata only: no sync). Destination-passing
solutions get outputs allocated with ``torch.empty`` (the allocation the original would make).
A solution that raises or returns the wrong number/shape/dtype of outputs is quarantined for
the process, counted, logged once, and the caller's fallback runs; strict mode re-raises.
Counting is an ``itertools.count`` bump (:mod:`fib_runtime.metrics`).

Reload: a daemon thread polls the dataset's definitions/, solutions/ and traces/ (mtime and size)
every ``FIB_RELOAD_INTERVAL`` s, builds and loads a new table off the hot path, then swaps it in
with one assignment; decisions are remade lazily against the new table. ``fork`` children
restart the thread (``os.register_at_fork``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .. import metrics
from ..errors import FibError
from .table import DefTable, Selection, Table, build_table, bucket_of, empty_def_table, matches

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


# ---- per-definition entries and generated code -------------------------------------------------
class _Entry:
    """Metadata of one definition's entry; ``call`` is the generated hot-path function."""

    __slots__ = ("name", "definition", "key", "cache", "meta", "table", "tensor_idx", "axis_src", "call")

    def __init__(self, name, definition, key_parts, table: DefTable, tensor_idx=(), axis_src=()):
        self.name = name
        self.definition = definition
        self.cache: Dict[Any, tuple] = {}      # key -> packed decision (see _ENTRY_TEMPLATE)
        self.meta: Dict[Any, Callable] = {}    # key -> decision closure (with fib_* attributes)
        self.table = table
        self.tensor_idx = tensor_idx   # indices of required tensor inputs
        self.axis_src = axis_src       # per var axis: (input index, dim)
        self.key, self.call = _generate_entry(name, key_parts, self.cache)
        self.call.entry = self


def _key_parts(defn) -> Tuple[List[str], Tuple[int, ...], Tuple[Tuple[int, int], ...]]:
    """The key expression of ``defn`` (see module docstring), as code fragments over ``x``."""
    names = list(defn.inputs)
    tensor_idx = tuple(i for i, n in enumerate(names)
                       if defn.inputs[n].shape is not None and not getattr(defn.inputs[n], "optional", False))
    src = defn.axis_sources
    axis_src = tuple((names.index(src[a][0]), src[a][1]) for a in defn.var_axes)
    shape_idx = sorted({i for i, _ in axis_src})
    parts = [f"x[{i}].shape" for i in shape_idx] + [f"x[{i}].dtype" for i in tensor_idx]
    if tensor_idx:
        parts.append(f"x[{tensor_idx[0]}].is_cuda")
    return parts, tensor_idx, axis_src


# A cached decision is packed as (fn, shape, dtype, inc, bad, general):
#   general set          -> general(x, fb)   (DPS, several outputs, scalar outputs)
#   fn None              -> a fallback decision: inc(); fb()
#   else                 -> a value-returning single-output hit, inlined here (one frame less)
_ENTRY_TEMPLATE = """
def make(cache, slow, name):
    def key(x):
        return {key}

    def entry(x, fb):
        try:
            fn, s0, d0, inc, bad, gen = cache[{key}]
        except Exception:
            return slow(name, x, fb)
        if gen is not None:
            return gen(x, fb)
        if fn is None:
            inc()
            return fb()
        try:
            r = fn(*x)
        except Exception as e:
            return bad(x, fb, e, None)
        try:
            if r.shape == s0 and r.dtype is d0:
                inc()
                return r
        except AttributeError:
            pass
        return bad(x, fb, None, r)
    return key, entry
"""


def _generate_entry(name: str, parts: List[str], cache: Dict[Any, Callable]):
    """Generate ``key(x)`` and the hot-path ``entry(x, fb)`` with the key expression inlined."""
    if not parts:
        expr = "None"
    else:
        # x[i] read once per input: bind it to a local (a0, a1...) in the expression
        used = sorted({int(p[2:p.index("]")]) for p in parts})
        expr = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
        for i in used:
            expr = expr.replace(f"x[{i}].", f"a{i}.")
        first = used[0]
        expr = expr.replace(f"a{first}.", f"(a{first} := x[{first}]).", 1)
        for i in used[1:]:
            expr = expr.replace(f"a{i}.", f"(a{i} := x[{i}]).", 1)
    code = _ENTRY_TEMPLATE.format(key=expr)
    ns: Dict[str, Any] = {}
    exec(compile(code, f"<fib entry {name}>", "exec"), ns)
    return ns["make"](cache, _slow, name)


_HIT_TEMPLATE = """
def make(fn, inc, bad{params}):
    def hit(x, fb):
{alloc}        try:
            r = fn(*x{outs})
        except Exception as e:
            return bad(x, fb, e, None)
{check}
    return hit
"""


def _make_hit(fn, dps: bool, specs: List[Tuple[Any, Any]], inc, bad, dev_idx: int):
    """Closure for a hit. ``specs``: per output (torch.Size or None, torch.dtype or None)."""
    n = len(specs)
    params, alloc, outs = [], "", ""
    env: Dict[str, Any] = {}
    for i, (shp, dt) in enumerate(specs):
        params += [f"s{i}", f"d{i}"]
        env[f"s{i}"], env[f"d{i}"] = shp, dt
    if dps:
        import torch

        env["empty"] = torch.empty
        params.append("empty")
        for i in range(n):
            alloc += f"        o{i} = empty(s{i}, dtype=d{i}, device=x[{dev_idx}].device)\n"
        outs = "".join(f", o{i}" for i in range(n))
        ret = "o0" if n == 1 else "(" + ", ".join(f"o{i}" for i in range(n)) + ")"
        check = f"        inc()\n        return {ret}\n"
    elif n == 1:
        conds = _conds("r", specs[0], 0)
        check = (f"        try:\n"
                 f"            if {conds}:\n"
                 f"                inc()\n"
                 f"                return r\n"
                 f"        except AttributeError:\n"
                 f"            if type(r) in (tuple, list) and len(r) == 1:\n"
                 f"                r = r[0]\n"
                 f"                if {_conds('r', specs[0], 0, safe=True)}:\n"
                 f"                    inc()\n"
                 f"                    return r\n"
                 f"        return bad(x, fb, None, r)\n")
    else:
        conds = " and ".join(_conds(f"r[{i}]", s, i) for i, s in enumerate(specs))
        check = (f"        try:\n"
                 f"            if (type(r) is tuple or type(r) is list) and len(r) == {n} and {conds}:\n"
                 f"                inc()\n"
                 f"                return r\n"
                 f"        except Exception:\n"
                 f"            pass\n"
                 f"        return bad(x, fb, None, r)\n")
    code = _HIT_TEMPLATE.format(params="".join(", " + p for p in params), alloc=alloc,
                                outs=outs, check=check)
    ns: Dict[str, Any] = {}
    exec(compile(code, "<fib decision>", "exec"), ns)
    return ns["make"](fn, inc, bad, *[env[p] for p in params])


def _conds(r: str, spec, i: int, safe: bool = False) -> str:
    shp, dt = spec
    c = []
    if shp is not None:
        c.append(f"getattr({r}, 'shape', None) == s{i}" if safe else f"{r}.shape == s{i}")
    if dt is not None:
        c.append(f"getattr({r}, 'dtype', None) is d{i}" if safe else f"{r}.dtype is d{i}")
    if not c:
        c.append(f"{r} is not None")
    return " and ".join(c)


def _make_fallback(inc):
    def fallback_decision(x, fb):
        inc()
        return fb()

    fallback_decision.fib_pack = (None, None, None, inc, None, None)
    return fallback_decision


def _pack(d) -> tuple:
    p = getattr(d, "fib_pack", None)
    return p if p is not None else (None, None, None, None, None, d)


# ---- the runtime ----------------------------------------------------------------------------------
class Runtime:
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
        self._thread: Optional[threading.Thread] = None
        self.assume_loadable = False  # fib explain: a solution in the dataset counts as loadable
        self._build(first=True)

    # ---- construction / reload ----------------------------------------------------------------
    @staticmethod
    def _resolve_dataset(path) -> Optional[Path]:
        try:
            from ..default_dataset import resolve_dataset_path

            p = resolve_dataset_path(path)
        except Exception:
            from .. import envs

            p = path or envs.FIB_DATASET_PATH
            p = Path(p).expanduser() if p else None
        return Path(p) if p else None

    def definition_ok(self, name: str) -> bool:
        return matches(name, self.allow_definitions, self.deny_definitions)

    def solution_ok(self, name: str) -> bool:
        return matches(name, self.allow_solutions, self.deny_solutions)

    def _open_dataset(self):
        if self.dataset_path is None or not self.dataset_path.is_dir():
            return None
        from ..store import Dataset

        extra = registered_definitions()

        class _DispatchDataset(Dataset):  # registered definitions count as dataset definitions
            def _load_definitions(self):  # so their traces are kept
                super()._load_definitions()
                for n, d in extra.items():
                    self.definitions.setdefault(n, d)

        return _DispatchDataset(self.dataset_path, check_blobs=False)

    def _build(self, first: bool = False) -> bool:
        """(Re)read the dataset, build and load a new table, swap it in. Returns True if swapped."""
        t0 = time.perf_counter()
        fp = self._scan()
        ds = self._open_dataset()
        defs = dict(registered_definitions())
        sols: Dict[str, Any] = {}
        if ds is not None:
            defs.update(ds.definitions)
            sols.update(ds.solutions)
            table = build_table(ds, self.hardware, self.solution_ok, self.definition_ok,
                                generation=self.generation + 1)
        else:
            table = Table(self.hardware, {}, generation=self.generation + 1)
        builtin_sup, builtin_by_def = {}, {}
        if self.builtins != "off":
            from ..solutions import builtin

            for name in defs:
                for sol, sup in builtin.for_definition(name):
                    sols.setdefault(sol.name, sol)
                    builtin_sup[sol.name] = sup
                    builtin_by_def.setdefault(name, []).append(sol.name)
        loaded = self._load_candidates(table, sols, builtin_by_def, defs)
        with self.lock:
            self.dataset = ds
            self.dataset_problems = list(ds.problems) if ds is not None else []
            self.definitions = defs
            self.solutions = sols
            self.builtin_supports = builtin_sup
            self.builtin_by_def = builtin_by_def
            self.loaded.update(loaded)
            self.table = table
            self.generation = table.generation
            self._fingerprint = fp
            self._swap_entries()
        metrics.set_gauge("fib_table_generation", self.generation)
        self._gauge_loaded()
        if not first:
            metrics.counter("fib_table_reloads_total", "swapped").inc()
        log.info("fib-runtime: dispatch table generation %d (%s, hardware %s): %d definitions, "
                 "%d solutions loaded, %.3f s", self.generation, self.dataset_path, self.hardware,
                 len(table.defs), len(self.loaded), time.perf_counter() - t0)
        return True

    def _swap_entries(self) -> None:
        """Install fresh entries for the new table, re-deciding every key already seen.

        Keys whose inputs were validated before keep a decision (made from the stored
        signature, without the inputs), so calls after a reload take no slow path and CUDA-graph
        capture right after a reload still finds its decisions.
        """
        global _ENTRIES
        if _RT is not self:
            return
        fresh: Dict[str, Callable] = {}
        for name, f in list(_ENTRIES.items()):
            old = f.entry
            e = self._make_entry(name)
            if e.definition is None or old.definition is None or e.definition != old.definition:
                continue
            for k, d in list(old.meta.items()):
                sig = getattr(d, "fib_sig", None)
                if sig is None:
                    continue
                try:
                    nd = self._decision_for(e, sig, d.fib_axes, None, dict(d.fib_supports))
                except Exception:  # pragma: no cover - left to the slow path
                    continue
                e.meta[k] = nd
                e.cache[k] = _pack(nd)
            fresh[name] = e.call
        _ENTRIES = fresh

    def _load_candidates(self, table: Table, sols, builtin_by_def, defs) -> Dict[str, Any]:
        """Build/load every solution that can win (and the built-ins), ahead of any call."""
        names: List[str] = []
        for name, dt in table.defs.items():
            names += sorted(dt.solutions)
        for name, bs in builtin_by_def.items():
            if self.definition_ok(name):
                names += bs
        if not self.warmup:
            return {}
        out: Dict[str, Any] = {}
        for n in dict.fromkeys(names):
            if n in sols and self.solution_ok(n):
                got = self._load_one(sols[n])
                if got is not None:
                    out[n] = got
        return out

    def _load_one(self, sol):
        from ..solutions import SolutionLoadError, load_solution

        old = self.loaded.get(sol.name)
        if old is not None and old.solution.content_hash() == sol.content_hash():
            return old
        q = self._quarantined_hash.get(sol.name)
        if q is not None and q == sol.content_hash():
            return None
        if q is not None:  # new content under a quarantined name: give it its chance
            self.quarantined.pop(sol.name, None)
            self._quarantined_hash.pop(sol.name, None)
        try:
            got = load_solution(sol, self.cache_dir)
        except SolutionLoadError as e:
            self.load_errors[sol.name] = str(e)
            self._quarantine(sol.definition, sol.name, "load_error", e, content_hash=sol.content_hash())
            if self.strict:
                raise SolutionError(str(e)) from e
            return None
        if got.seconds:
            metrics.observe("fib_solution_build_seconds", got.seconds, got.language)
        self.load_errors.pop(sol.name, None)
        return got

    def _gauge_loaded(self) -> None:
        per: Dict[str, int] = {}
        for ld in self.loaded.values():
            per[ld.language] = per.get(ld.language, 0) + 1
        for lang in set(per) | {"python"}:
            metrics.set_gauge("fib_solutions_loaded", per.get(lang, 0), lang)

    def _add_definition(self, defn) -> None:
        with self.lock:
            self.definitions[defn.name] = defn
            if self.builtins != "off" and self.definition_ok(defn.name):
                from ..solutions import builtin

                for sol, sup in builtin.for_definition(defn.name):
                    self.solutions.setdefault(sol.name, sol)
                    self.builtin_supports[sol.name] = sup
                    self.builtin_by_def.setdefault(defn.name, [])
                    if sol.name not in self.builtin_by_def[defn.name]:
                        self.builtin_by_def[defn.name].append(sol.name)
                    if self.solution_ok(sol.name):
                        got = self._load_one(sol)
                        if got is not None:
                            self.loaded[sol.name] = got
                self._gauge_loaded()
            f = _ENTRIES.get(defn.name)
            if f is not None and f.entry.definition is None:
                del _ENTRIES[defn.name]

    def _scan(self):
        """Fingerprint of the files that change selection: (path, mtime_ns, size) of each."""
        root = self.dataset_path
        if root is None or not root.is_dir():
            return None
        out = []
        for sub in ("definitions", "solutions", "traces"):
            base = root / sub
            if not base.is_dir():
                continue
            for dirpath, _dirs, files in os.walk(base):
                for f in files:
                    if f.endswith((".json", ".jsonl")):
                        p = os.path.join(dirpath, f)
                        try:
                            st = os.stat(p)
                        except OSError:
                            continue
                        out.append((p, st.st_mtime_ns, st.st_size))
        out.sort()
        return tuple(out)

    def reload(self, force: bool = True) -> bool:
        """Re-read the dataset now. ``force=False`` only when files changed. True if swapped."""
        if not force and self._scan() == self._fingerprint:
            return False
        try:
            return self._build()
        except Exception as e:
            metrics.counter("fib_table_reloads_total", "error").inc()
            log.warning("fib-runtime: reload failed, keeping table generation %d: %s: %s",
                        self.generation, type(e).__name__, e)
            if self.strict:
                raise
            return False

    # ---- background thread ------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop = threading.Event()
        t = threading.Thread(target=self._poll, name="fib-runtime-poller", daemon=True)
        self._thread = t
        t.start()

    def stop(self) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)
        self._thread = None

    def _poll(self) -> None:
        period = self.reload_interval if self.reload_interval > 0 else 2.0
        stop = self._stop
        while not stop.wait(period):
            try:
                if self.reload_interval > 0 and self._scan() != self._fingerprint:
                    self.reload(force=True)
            except Exception:  # pragma: no cover - never let the poller die
                log.debug("fib-runtime: poller error", exc_info=True)
            metrics.flush()

    # ---- decisions ----------------------------------------------------------------------------
    def _entry(self, name: str) -> "_Entry":
        f = _ENTRIES.get(name)
        if f is not None:
            return f.entry
        e = self._make_entry(name)
        _ENTRIES[name] = e.call
        return e

    def _make_entry(self, name: str) -> "_Entry":
        defn = self.definitions.get(name)
        if defn is None:
            defn = self._generate(name)
        if defn is None or not self.definition_ok(name):
            return _Entry(name, None, [], empty_def_table(name, ()))
        parts, tidx, asrc = _key_parts(defn)
        tab = self.table.get(name) or empty_def_table(name, defn.var_axes)
        return _Entry(name, defn, parts, tab, tidx, asrc)

    def _generate(self, name: str):
        try:
            from ..definitions import generate

            raw = generate(name)
        except Exception:
            raw = None
        if raw is None:
            return None
        from ..schema import Definition

        try:
            defn = Definition.model_validate(raw)
        except Exception as e:
            self._log_once(("gen", name), "fib-runtime: generated definition %s is invalid: %s", name, e)
            return None
        with _STATE_LOCK:
            _REGISTERED.setdefault(name, defn)
        self._add_definition(defn)
        return defn

    def _decide(self, name: str, inputs) -> Callable:
        with self.lock:
            e = self._entry(name)
            try:
                k = e.key(inputs)
            except Exception as ex:  # inputs do not fit the definition at all
                why = f"inputs do not fit the definition ({type(ex).__name__}: {ex})"
                return self._fallback_decision(e, "fallback_mismatch", why)
            d = e.meta.get(k)
            if d is not None and k in e.cache:
                return d
            if _capturing():
                inc = metrics.counter("fib_dispatch_total", name, "none", "fallback_capture").inc
                return _make_fallback(inc)
            d = self._new_decision(e, k, inputs)
            e.meta[k] = d
            e.cache[k] = _pack(d)
            return d

    def _fallback_decision(self, e: _Entry, outcome: str, why: str):
        inc = metrics.counter("fib_dispatch_total", e.name, "none", outcome).inc
        d = _make_fallback(inc)
        d.fib_solution = None
        d.fib_why = why
        return d

    def signature_of(self, e: _Entry, inputs) -> Tuple[Tuple[int, ...], Dict[str, int]]:
        """Validate ``inputs`` against the definition; return (signature, var-axis values)."""
        from ..inputs import dtype_name

        defn = e.definition
        if len(inputs) != len(defn.inputs):
            raise ValueError(f"{len(inputs)} inputs, definition has {len(defn.inputs)}")
        shapes = {}
        for (iname, spec), x in zip(defn.inputs.items(), inputs):
            if spec.shape is None or x is None:
                continue
            shp = tuple(x.shape)
            shapes[iname] = shp
            if spec.dtype not in ("unknown",) and dtype_name(x.dtype) != spec.dtype:
                raise ValueError(f"input {iname!r} is {dtype_name(x.dtype)}, definition says {spec.dtype}")
        axes = defn.axes_values(shapes)
        for iname, shp in shapes.items():
            spec = defn.inputs[iname].shape
            for ax, n in zip(spec, shp):
                cv = defn.const_axes.get(ax)
                if cv is not None and cv != n:
                    raise ValueError(f"input {iname!r}: const axis {ax}={cv}, got {n}")
        sig = tuple(int(axes[a]) for a in defn.var_axes)
        return sig, axes

    def usable(self, name: str) -> Optional[str]:
        """None when solution ``name`` can run here, else why not."""
        if name in self.quarantined:
            return f"quarantined ({self.quarantined[name]})"
        if not self.solution_ok(name):
            return "denied by allow/deny lists"
        if name not in self.solutions:
            return "solution not in the dataset"
        if name not in self.loaded:
            err = self.load_errors.get(name)
            if self.assume_loadable and not err:
                return None
            return f"failed to load: {err}" if err else "not loaded (run `fib warmup` or enable with warmup)"
        return None

    def select(self, name: str, sig: Tuple[int, ...], inputs=None,
               supports_memo: Optional[Dict[str, bool]] = None) -> Selection:
        """Selection for ``sig`` (traced winners, then built-ins); see :mod:`.table`."""
        tab = self.table.get(name) or empty_def_table(name, self.definitions[name].var_axes
                                                      if name in self.definitions else ())
        sel = tab.select(sig, self.usable, self.max_distance)
        if sel.solution is not None or self.builtins != "default":
            return sel
        skipped = list(sel.skipped)
        for bname in self.builtin_by_def.get(name, ()):
            why = self.usable(bname)
            if why is None and tab.is_tainted(bname, sig):
                why = "failed in this bucket"
            if why is None and supports_memo is not None and bname in supports_memo:
                if not supports_memo[bname]:
                    why = "supports(inputs) is False"
            elif why is None and inputs is not None:
                try:
                    ok = bool(self.builtin_supports[bname](inputs))
                except Exception as ex:
                    ok, why = False, f"supports(inputs) raised {type(ex).__name__}"
                if supports_memo is not None:
                    supports_memo[bname] = ok
                if not ok and why is None:
                    why = "supports(inputs) is False"
            if why:
                skipped.append((bname, why))
                continue
            return Selection(bname, "builtin", "built-in solution (no traced winner; FIB_BUILTINS=default)"
                             + ("" if inputs is not None else ", if supports(inputs)"), tuple(skipped))
        return Selection(None, "miss", sel.detail, tuple(skipped))

    def _new_decision(self, e: _Entry, k, inputs) -> Callable:
        if e.definition is None:
            why = "unknown definition" if self.definition_ok(e.name) else "definition denied"
            return self._fallback_decision(e, "fallback_miss", why)
        try:
            sig, axes = self.signature_of(e, inputs)
        except Exception as ex:
            self._log_once(("mismatch", e.name, str(ex)), "fib-runtime: %s: %s; running the original",
                           e.name, ex)
            return self._fallback_decision(e, "fallback_mismatch", str(ex))
        return self._decision_for(e, sig, axes, inputs, {})

    def _decision_for(self, e: _Entry, sig, axes, inputs, memo: Dict[str, bool]) -> Callable:
        """Decision for validated inputs with signature ``sig`` (``inputs`` may be None: then
        built-in ``supports`` answers come from ``memo``)."""
        sel = self.select(e.name, sig, inputs, memo)
        if sel.solution is None:
            quarantined = any(w.startswith("quarantined") for _, w in sel.skipped)
            d = self._fallback_decision(e, "quarantined" if quarantined else "fallback_miss", sel.detail)
        else:
            d = self._hit_decision(e, sel, axes, inputs)
        d.fib_selection = sel
        d.fib_sig, d.fib_axes, d.fib_supports = sig, axes, memo
        return d

    def _hit_decision(self, e: _Entry, sel: Selection, axes, inputs) -> Callable:
        from ..inputs import torch_dtype

        import torch

        defn = e.definition
        ld = self.loaded[sel.solution]
        specs = []
        for oname, spec in defn.outputs.items():
            shp = defn.shape_of(oname, axes)
            try:
                dt = torch_dtype(spec.dtype)
            except Exception:
                dt = None
            if ld.dps and (shp is None or dt is None):
                return self._fallback_decision(e, "fallback_mismatch",
                                               f"DPS solution but output {oname!r} has no shape/dtype")
            specs.append((torch.Size(shp) if shp is not None else None, dt))
        dev_idx = e.tensor_idx[0] if e.tensor_idx else 0
        inc = metrics.counter("fib_dispatch_total", e.name, sel.solution, "hit").inc
        sol_name = sel.solution

        def bad(x, fb, exc, result, _name=sol_name, _e=e):
            if (exc is None and len(specs) == 1 and type(result) in (tuple, list) and len(result) == 1
                    and _fits(result[0], specs[0])):
                inc()  # a 1-tuple for a single output: accepted, unwrapped
                return result[0]
            return self._on_bad(_e, _name, x, fb, exc, result, specs)

        d = _make_hit(ld.fn, ld.dps, specs, inc, bad, dev_idx)
        if not ld.dps and len(specs) == 1 and specs[0][0] is not None and specs[0][1] is not None:
            d.fib_pack = (ld.fn, specs[0][0], specs[0][1], inc, bad, None)
        d.fib_solution = sol_name
        d.fib_selection = sel
        return d

    # ---- failures -------------------------------------------------------------------------------
    def _on_bad(self, e: _Entry, name: str, x, fb, exc, result, specs):
        if exc is not None:
            reason, msg = "raised", f"{type(exc).__name__}: {exc}"
        else:
            reason, msg = "bad_output", _describe_bad(result, specs)
        self._quarantine(e.name, name, reason, msg)
        metrics.counter("fib_dispatch_total", e.name, name, "fallback_error").inc()
        if self.strict:
            raise SolutionError(f"solution {name!r} for {e.name}: {reason}: {msg}") from exc
        return fb()

    def _quarantine(self, definition: str, name: str, reason: str, msg, content_hash=None) -> None:
        with self.lock:
            if name in self.quarantined:
                return
            self.quarantined[name] = reason
            sol = self.solutions.get(name)
            self._quarantined_hash[name] = content_hash or (sol.content_hash() if sol is not None else "")
            self.loaded.pop(name, None)
            for f in list(_ENTRIES.values()):
                ent = f.entry
                for k, d in list(ent.meta.items()):
                    if getattr(d, "fib_solution", None) == name:
                        ent.cache.pop(k, None)
                        ent.meta.pop(k, None)
        metrics.counter("fib_quarantine_total", definition, name, reason).inc()
        self._gauge_loaded()
        log.warning("fib-runtime: solution %s (%s) quarantined for this process: %s: %s; "
                    "the original runs instead", name, definition, reason, msg)

    def _log_once(self, key, fmt, *args) -> None:
        if key in self._logged:
            return
        self._logged.add(key)
        log.warning(fmt, *args)

    # ---- introspection ---------------------------------------------------------------------------
    def decisions(self) -> List[Dict[str, Any]]:
        """The decisions made so far: definition, key, solution, rule."""
        out = []
        for name, f in list(_ENTRIES.items()):
            for k, d in list(f.entry.meta.items()):
                sel = getattr(d, "fib_selection", None)
                out.append({"definition": name, "key": repr(k), "solution": getattr(d, "fib_solution", None),
                            "rule": sel.rule if sel else "fallback",
                            "detail": sel.detail if sel else getattr(d, "fib_why", "")})
        return out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if _RT is self:
            disable()
        return False


def _fits(r, spec) -> bool:
    shp, dt = spec
    return (shp is None or getattr(r, "shape", None) == shp) and (dt is None or getattr(r, "dtype", None) is dt)


def _describe_bad(result, specs) -> str:
    want = ", ".join(f"{tuple(s) if s is not None else 'scalar'}:{str(d).removeprefix('torch.') if d else '?'}"
                     for s, d in specs)
    if isinstance(result, (tuple, list)):
        got = ", ".join(f"{tuple(getattr(r, 'shape', ()))}:{str(getattr(r, 'dtype', type(r).__name__)).removeprefix('torch.')}"
                        for r in result)
        return f"returned {len(result)} outputs [{got}], expected {len(specs)} [{want}]"
    shp = getattr(result, "shape", None)
    got = f"{tuple(shp)}:{str(getattr(result, 'dtype', '')).removeprefix('torch.')}" if shp is not None \
        else type(result).__name__
    return f"returned {got}, expected [{want}]"


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
