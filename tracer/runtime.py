"""The tracer's hot path: decide per call, copy only what a kept call stores, hand it to the writer.

Per call (:meth:`Tracer.record`), in this order:

1. resolve the definition by name (one dict lookup; a Definition or dict seen for the first time
   is parsed once and cached);
2. compute the signature, the tuple of var-axis values read from the input shapes (no CUDA call,
   no device sync), and look it up in the definition's ``closed`` table: a signature already
   decided (kept k times, its bucket full, mismatched...) is dropped and counted right there.
   This is the steady state: about 1 us (see ``benchmarks/tracing_overhead.py``);
3. only for a signature still open: CUDA-graph capture and ``torch.compile`` tracing (never
   recorded, counted), the rank filter, keep-first-k per signature and per bucket, the
   definition cap, input checks (dtype, rank, const axes), the byte cap, the global token
   bucket and the bounded queue;
4. a kept call copies the tensors its dump policy selects (:mod:`.entry`): CUDA tensors with a
   non-blocking copy into a pinned host buffer plus an event on the current stream (the
   engine's stream is never synchronised), CPU tensors with a clone (the caller may overwrite
   them in place). The :class:`~fib_runtime.tracer.writer.Writer` thread waits for the event,
   writes the blob and appends the line.

Signatures and buckets are the dispatcher's (the tuple of var-axis values in the definition's
order; :func:`fib_runtime.dispatch.table.bucket_of`), so "one workload per bucket" means one
benchmarked shape for every bucket the dispatch table can select by.

Counters on the hot path are plain ints; the writer thread pushes them to
:mod:`fib_runtime.metrics` (``fib_trace_*``).
Counting is exact for one calling thread per process (the engines' case); under many threads
calling the same definition at once a dedup drop may be missed in the count, never in the
decision (decisions are taken under a lock).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import defaultdict
from typing import Any, Dict, Optional

import torch

from fib_runtime import metrics
from fib_runtime.dispatch.table import bucket_of
from fib_runtime.schema import Definition, parse

from .config import TraceConfig, current_rank, rank_records
from .entry import DefState, copy_inputs, prepare

log = logging.getLogger("fib_runtime.tracer")

#: drop reasons (labels of ``fib_trace_dropped_total``).
REASONS = ("dedup", "bucket", "definition_cap", "cuda_graph_capture", "compiling", "rank",
           "mismatch", "byte_cap", "rate_limit", "queue_full", "unknown_definition", "error",
           "write_error")
_PROM_INTERVAL = 2.0  # seconds between pushes into Prometheus (fib_runtime.metrics.flush)
_CLOSED_MAX = 1 << 16  # signatures remembered per definition as "decided"; beyond, re-derived
_RESUME_MAX_BYTES = 64 << 20  # of an existing workloads file read to seed the dedup state


class Tracer:
    """One per process (see :func:`fib_runtime.tracer.enable`)."""

    def __init__(self, config: TraceConfig, registry: Dict[str, Any]):
        self.config = config
        self._registry = registry
        self._defs: Dict[str, DefState] = {}
        self._warned: set = set()
        self._init_process_state()
        self.muted = False  # True once this rank is known not to record
        self._rank_final = False
        self._rank_ok = True
        self._rank_env: Optional[bool] = None  # the environment's answer, before distributed init
        try:
            import torch.distributed as dist

            self._dist = dist if dist.is_available() else None
        except Exception:
            self._dist = None
        self._tokens = float(config.burst)
        self._t_last = time.monotonic()

    def _init_process_state(self) -> None:
        """Locks, queue, writer and per-process counters (also the fresh state of a forked child)."""
        self._lock = threading.Lock()
        self._mlock = threading.Lock()
        # held by the writer while it is inside torch / safetensors / file / metrics code: a fork
        # waits for it, so the child never inherits a library lock held by a thread it lacks
        self.work_lock = threading.Lock()
        self.queue: "queue.Queue" = queue.Queue(maxsize=max(1, self.config.queue_size))
        self.writer = None
        self.drops: Dict[str, int] = defaultdict(int)
        self._pushed: Dict[str, int] = defaultdict(int)
        self._prom_at = 0.0
        self.records: Dict[str, int] = defaultdict(int)
        self.n_put = 0          # entries queued (producer side, under _lock)
        self.n_done = 0         # entries finished by the writer (writer side only)
        self.bytes_queued = 0   # estimated host bytes queued (producer)
        self.bytes_dequeued = 0  # estimated host bytes taken off the queue (writer)
        self.bytes_written = 0  # actual bytes on disk (writer)

    # ---- hot path ----------------------------------------------------------------------------
    def record(self, definition, inputs) -> bool:
        """Consider one call; True when it was queued for writing. Never raises."""
        try:
            t = type(definition)
            name = definition if t is str else (definition["name"] if t is dict else definition.name)
            st = self._defs.get(name)
            if st is None:
                st = self._new_state(name, definition)
            if not st.selected:
                if st.defn is None:
                    self.drops["unknown_definition"] += 1
                return False
            if self.muted:
                self.drops["rank"] += 1
                return False
            try:
                sig = st.sig_dict(inputs) if type(inputs) is dict else st.sig_tuple(inputs)
            except Exception:
                try:
                    sig = st.slow_sig(inputs)
                except Exception:
                    self.drops["mismatch"] += 1
                    return False
            reason = st.closed.get(sig)
            if reason is not None:
                self.drops[reason] += 1
                return False
            return self._admit(st, sig, inputs)
        except Exception:
            self.drops["error"] += 1
            key = getattr(definition, "name", None) or (definition.get("name") if isinstance(definition, dict)
                                                        else str(definition))
            if key not in self._warned:
                self._warned.add(key)
                log.warning("fib-runtime tracer: recording %s failed (further failures are only "
                            "counted)", key, exc_info=True)
            return False

    # ---- definitions ---------------------------------------------------------------------------
    def _new_state(self, name: str, definition) -> DefState:
        defn = None
        if isinstance(definition, Definition):
            defn = definition
        elif isinstance(definition, dict):
            defn = parse(Definition, definition)
        if defn is None:
            defn = self._registry.get(name)
        if defn is None:
            defn = self._find_in_dataset(name)
        if defn is not None:
            self._registry.setdefault(name, defn)
        st = DefState(name, defn, self.config)
        if defn is not None and st.selected and self.config.resume:
            self._seed_from_dataset(st)
        self._defs[name] = st
        return st

    def _seed_from_dataset(self, st: DefState) -> None:
        """Count the workloads the dataset already holds for ``st`` as kept, so a restarted
        server does not record the same signatures again (once per definition, at its first
        call; at most :data:`_RESUME_MAX_BYTES` of the file are read)."""
        import json
        from pathlib import Path

        from .writer import workload_rel

        path = Path(self.config.dataset_path) / workload_rel(st.op_type, st.name)
        try:
            with open(path, "rb") as f:
                data = f.read(_RESUME_MAX_BYTES)
        except OSError:
            return
        pol = st.policy
        for raw in data.splitlines():
            try:
                axes = json.loads(raw)["workload"]["axes"]
                sig = tuple(int(axes[a]) for a in st.var_axes)
            except Exception:  # a partial last line, another definition's dialect...
                continue
            n = st.counts.get(sig, 0)
            st.counts[sig] = n + 1
            if n == 0:
                st.kept += 1
                b = bucket_of(sig)
                st.buckets[b] = st.buckets.get(b, 0) + 1
            if n + 1 >= pol.keep_first_k and len(st.closed) < _CLOSED_MAX:
                st.closed[sig] = "dedup"

    def forget(self, name: str) -> None:
        """Drop the cached state of ``name`` (a definition registered after a miss)."""
        st = self._defs.get(name)
        if st is not None and st.defn is None:
            self._defs.pop(name, None)

    def _find_in_dataset(self, name: str) -> Optional[Definition]:
        import json
        from pathlib import Path

        root = Path(self.config.dataset_path) / "definitions"
        for p in root.glob(f"**/{name}.json") if root.is_dir() else ():
            try:
                d = parse(Definition, json.loads(p.read_text(encoding="utf-8")))
                if d.name == name:
                    return d
            except Exception:
                continue
        return None

    # ---- decisions for an open signature ---------------------------------------------------
    def _capturing(self) -> bool:
        try:
            return bool(torch.cuda.is_current_stream_capturing())
        except Exception:  # CPU-only build: no capture possible
            return False

    def _compiling(self) -> bool:
        try:
            return bool(torch.compiler.is_compiling())
        except Exception:
            return False

    def _check_rank(self) -> bool:
        """Whether this process records. The environment's answer is computed once; once
        ``torch.distributed`` is initialised its rank is final (and a non-recording rank is
        muted: later calls stop before the signature)."""
        if self._rank_final:
            return self._rank_ok
        dist = self._dist
        if self._rank_env is not None and not dist.is_initialized():
            return self._rank_env
        r, lr, tp, final = current_rank()
        self._rank_ok = rank_records(self.config.ranks, r, lr, tp)
        if final or dist is None:  # no torch.distributed: the environment is all there is
            self._rank_final = True
            self.muted = not self._rank_ok
        else:
            self._rank_env = self._rank_ok
        return self._rank_ok

    def _close(self, st: DefState, sig, reason: str) -> None:
        if len(st.closed) < _CLOSED_MAX:
            st.closed[sig] = reason
        self.drops[reason] += 1

    def _admit(self, st: DefState, sig, inputs) -> bool:
        if self._capturing():
            self.drops["cuda_graph_capture"] += 1
            return False
        if self._compiling():
            self.drops["compiling"] += 1
            return False
        if not self._check_rank():
            self.drops["rank"] += 1
            return False
        pol = st.policy
        cfg = self.config
        with self._lock:
            if sig in st.closed:
                self.drops[st.closed[sig]] += 1
                return False
            n = st.counts.get(sig, 0)
            if n >= pol.keep_first_k:
                self._close(st, sig, "dedup")
                return False
            b = bucket_of(sig) if pol.keep_per_bucket is not None else None
            if b is not None and n == 0 and st.buckets.get(b, 0) >= pol.keep_per_bucket:
                self._close(st, sig, "bucket")
                return False
            if pol.max_workloads is not None and n == 0 and st.kept >= pol.max_workloads:
                self._close(st, sig, "definition_cap")
                return False
            prepared = prepare(st, sig, inputs)
            if prepared is None:
                self._close(st, sig, "mismatch")
                return False
            axes, est = prepared
            if cfg.max_bytes is not None and (
                    self.bytes_written + self.bytes_queued - self.bytes_dequeued + est > cfg.max_bytes):
                self.drops["byte_cap"] += 1
                return False
            if cfg.rate_limit is not None:
                now = time.monotonic()
                self._tokens = min(float(cfg.burst), self._tokens + (now - self._t_last) * cfg.rate_limit)
                self._t_last = now
                if self._tokens < 1.0:
                    self.drops["rate_limit"] += 1
                    return False
            if (self.queue.full() or
                    self.bytes_queued - self.bytes_dequeued + est > cfg.max_pending_bytes):
                self.drops["queue_full"] += 1
                return False
            entry = copy_inputs(st, axes, inputs, est)
            try:
                self.queue.put_nowait(entry)
            except queue.Full:
                self.drops["queue_full"] += 1
                return False
            if cfg.rate_limit is not None:
                self._tokens -= 1.0
            st.counts[sig] = n + 1
            if n + 1 >= pol.keep_first_k:
                st.closed[sig] = "dedup"
            if b is not None and n == 0:
                st.buckets[b] = st.buckets.get(b, 0) + 1
            if n == 0:
                st.kept += 1
            self.bytes_queued += est
            self.n_put += 1
            self._ensure_writer()
        return True

    # ---- writer, flush, stats ------------------------------------------------------------------
    def _ensure_writer(self) -> None:
        w = self.writer
        if w is None or not w.is_alive():
            from .writer import Writer

            self.writer = Writer(self)
            self.writer.start()

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Wait until every queued entry is written (True) or ``timeout`` passes (False).

        Takes no lock the hot path holds, so it is safe from a signal handler; when the writer
        thread is gone (interpreter shutdown), the queue is drained in the calling thread.
        """
        timeout = self.config.flush_timeout if timeout is None else timeout
        target = self.n_put
        deadline = time.monotonic() + timeout
        while self.n_done < target:
            w = self.writer
            if w is None or not w.is_alive():
                from .writer import drain_sync

                drain_sync(self)
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.002)
        self.sync_metrics(force=True)
        return self.n_done >= target

    def stop(self, timeout: Optional[float] = None) -> bool:
        ok = self.flush(timeout)
        w = self.writer
        if w is not None:
            w.stop()
            if threading.current_thread() is not w:
                w.join(timeout=1.0)
        return ok

    def sync_metrics(self, force: bool = False) -> None:
        """Push the hot path's drop counts (deltas) to :mod:`fib_runtime.metrics`, and move
        the metrics module's counters into Prometheus at most every ``_PROM_INTERVAL`` seconds
        (the dispatcher's poller does it too, but tracing may run without the dispatcher)."""
        if not self._mlock.acquire(timeout=1.0):
            return
        try:
            for reason, n in list(self.drops.items()):
                d = n - self._pushed[reason]
                if d > 0:
                    self._pushed[reason] = n
                    metrics.inc_trace_dropped(reason, d)
            now = time.monotonic()
            if force or now - self._prom_at >= _PROM_INTERVAL:
                self._prom_at = now
                with self.work_lock:
                    metrics.flush()
        except Exception:  # metrics never break tracing
            log.debug("fib-runtime tracer: metrics push failed", exc_info=True)
        finally:
            self._mlock.release()

    def stats(self) -> Dict[str, Any]:
        self.sync_metrics()
        return {
            "enabled": True,
            "dataset_path": self.config.dataset_path,
            "records": dict(self.records),
            "dropped": {k: v for k, v in self.drops.items() if v},
            "bytes": self.bytes_written,
            "pending": self.n_put - self.n_done,
            "rank_records": self._rank_ok,
        }

    # ---- fork ----------------------------------------------------------------------------------
    def before_fork(self) -> None:
        self._lock.acquire()
        if not self.work_lock.acquire(timeout=max(1.0, self.config.flush_timeout)):
            self._fork_unsafe = True  # a write hangs (dead disk?): fork anyway, say so once
            log.warning("fib-runtime tracer: forking while the trace writer is busy")
        else:
            self._fork_unsafe = False

    def after_fork_parent(self) -> None:
        if not getattr(self, "_fork_unsafe", False):
            self.work_lock.release()
        self._lock.release()

    def after_fork_child(self) -> None:
        """The child keeps the dedup decisions, drops the parent's queue and starts no thread
        until it keeps a call; its byte cap and counters start from zero."""
        self._init_process_state()
        self._rank_final = False
        self._rank_env = None
        self.muted = False
