"""Runtime, part 1: reading the dataset, building the table, loading solutions, reloading.

Everything here runs at :func:`~fib_runtime.dispatch.enable`, in the poller thread or in
:func:`~fib_runtime.dispatch.reload`, never on a call's hot path. A new table is built and its
candidate solutions are loaded before anything is swapped; the swap is one assignment of the
entries dict, after every key already seen has been re-decided against the new table.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from .. import metrics
from .codegen import _pack
from .table import Table, build_table, matches

log = logging.getLogger("fib_runtime.dispatch")


class LoadingMixin:
    """Dataset, table and solution management of :class:`~fib_runtime.dispatch.runtime.Runtime`."""

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

        extra = R.registered_definitions()

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
        defs = dict(R.registered_definitions())
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
        if R._RT is not self:
            return
        fresh: Dict[str, Callable] = {}
        for name, f in list(R._ENTRIES.items()):
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
        R._ENTRIES = fresh

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
            # a baseline stands for the original call (decide.is_baseline): never loaded
            if n in sols and self.solution_ok(n) and getattr(sols[n], "author", None) != "baseline":
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
                raise R.SolutionError(str(e)) from e
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
            f = R._ENTRIES.get(defn.name)
            if f is not None and f.entry.definition is None:
                del R._ENTRIES[defn.name]
            if self.dataset is not None and defn.name not in self.dataset.definitions:
                # the dataset dropped its traces for this name when it was unknown: rebuild the
                # table in the background thread (keys decided meanwhile are re-decided at the swap)
                self._kick.set()

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
        self._kick = threading.Event()
        t = threading.Thread(target=self._poll, name="fib-runtime-poller", daemon=True)
        self._thread = t
        t.start()

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)
        self._thread = None

    def _poll(self) -> None:
        period = self.reload_interval if self.reload_interval > 0 else 2.0
        stop, kick = self._stop, self._kick
        while True:
            kicked = kick.wait(period)
            if stop.is_set():
                return
            kick.clear()
            try:
                if kicked or (self.reload_interval > 0 and self._scan() != self._fingerprint):
                    self.reload(force=True)
            except Exception:  # pragma: no cover - never let the poller die
                log.debug("fib-runtime: poller error", exc_info=True)
            metrics.flush()




from . import runtime as R  # noqa: E402  (bottom: runtime imports this module)
