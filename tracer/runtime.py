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
4. a kept call copies the tensors its dump policy selects: CUDA tensors with a non-blocking copy
   into a pinned host buffer plus an event on the current stream (the engine's stream is never
   synchronised), CPU tensors with a clone (the caller may overwrite them in place). The
   :class:`~fib_runtime.tracer.writer.Writer` thread waits for the event, writes the blob and
   appends the line.

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
from typing import Any, Dict, List, Optional, Tuple

import torch

from fib_runtime.schema import Definition, parse

from fib_runtime import metrics
from fib_runtime.dispatch.table import bucket_of

from .config import Policy, TraceConfig, current_rank, rank_records

log = logging.getLogger("fib_runtime.tracer")

#: drop reasons (labels of ``fib_trace_dropped_total``).
REASONS = ("dedup", "bucket", "definition_cap", "cuda_graph_capture", "compiling", "rank",
           "mismatch", "byte_cap", "rate_limit", "queue_full", "unknown_definition", "error",
           "write_error")
_PROM_INTERVAL = 2.0  # seconds between pushes into Prometheus (fib_runtime.metrics.flush)
_CLOSED_MAX = 1 << 16  # signatures remembered per definition as "decided"; beyond, re-derived

_INT_DTYPES = ("int64", "int32", "int16", "int8", "bool", "uint8", "uint32")
#: integer inputs that carry what users wrote (token ids), never dumped by the ``ints`` policy:
#: they are recorded as ``random`` unless a policy names them or asks for ``all``.
CONTENT_INPUTS = ("input_ids", "token_ids", "tokens", "prompt_token_ids", "output_token_ids",
                  "prompt_tokens", "output_tokens")


#: per-row float parameters of sampling definitions, dumped by the ``ints`` policy too: they are
#: ``[batch_size]`` (a few bytes), and their real values decide the kernel's path (``top_p=1``
#: disables top-p), which random draws in the valid range never reproduce.
SAMPLING_PARAMS = ("top_p", "min_p", "temperature")


def _is_content(name: str) -> bool:
    n = name.lower()
    return n in CONTENT_INPUTS or n.endswith("token_ids")


class _Plan:
    """How one input is stored: ``kind`` in ``scalar`` / ``dump`` / ``random``."""

    __slots__ = ("name", "index", "kind", "rank", "dtype", "shape", "optional", "is_int")

    def __init__(self, name, index, spec, dump: bool, tdtype):
        self.name, self.index = name, index
        self.shape = None if spec.shape is None else tuple(spec.shape)
        self.rank = None if spec.shape is None else len(spec.shape)
        self.dtype = tdtype
        self.optional = bool(getattr(spec, "optional", False))
        self.is_int = spec.dtype in _INT_DTYPES
        self.kind = "scalar" if spec.shape is None else ("dump" if dump else "random")


class DefState:
    """Everything the hot path needs about one definition, computed once."""

    def __init__(self, name: str, defn: Optional[Definition], config: TraceConfig):
        self.name = name
        self.defn = defn
        self.closed: Dict[tuple, str] = {}
        self.counts: Dict[tuple, int] = {}
        self.buckets: Dict[tuple, int] = {}
        self.kept = 0
        if defn is None:
            self.selected = False
            return
        self.selected = config.selected(name)
        self.policy: Policy = config.policy_for(name)
        self.op_type = defn.op_type
        self.var_axes = defn.var_axes
        names = list(defn.inputs)
        # every (input, dim) carrying each var axis, in input order (the first one is the key)
        self.axis_srcs: List[List[Tuple[str, int, int]]] = [[] for _ in self.var_axes]
        self.const_checks: List[Tuple[str, int, int, int]] = []
        for i, (tname, spec) in enumerate(defn.inputs.items()):
            for d, ax in enumerate(spec.shape or ()):
                if ax in defn.const_axes:
                    self.const_checks.append((tname, i, d, defn.const_axes[ax]))
                elif ax in self.var_axes:
                    self.axis_srcs[self.var_axes.index(ax)].append((tname, i, d))
        firsts = [s[0] for s in self.axis_srcs if s]
        if len(firsts) < len(self.axis_srcs):  # an axis only outputs carry: no signature
            def _unbound(x):
                raise ValueError(f"{name}: a var axis is carried by no input")

            self.sig_dict = self.sig_tuple = _unbound
        elif len(firsts) == 1:
            (n0, i0, d0), = firsts
            self.sig_dict = lambda x: (x[n0].shape[d0],)
            self.sig_tuple = lambda x: (x[i0].shape[d0],)
        elif len(firsts) == 2:
            (n0, i0, d0), (n1, i1, d1) = firsts
            self.sig_dict = lambda x: (x[n0].shape[d0], x[n1].shape[d1])
            self.sig_tuple = lambda x: (x[i0].shape[d0], x[i1].shape[d1])
        else:
            self.sig_dict = lambda x: tuple(x[n].shape[d] for n, _, d in firsts)
            self.sig_tuple = lambda x: tuple(x[i].shape[d] for _, i, d in firsts)
        dump = self.policy.dump
        from fib_runtime.inputs import torch_dtype

        self.plans: List[_Plan] = []
        for i, (tname, spec) in enumerate(defn.inputs.items()):
            if dump == "all":
                dmp = True
            elif dump == "none":
                dmp = False
            elif dump == "ints":
                dmp = ((spec.dtype in _INT_DTYPES and not _is_content(tname))
                       or (defn.op_type == "sampling" and tname in SAMPLING_PARAMS))
            else:
                dmp = tname in dump
            try:
                tdt = torch_dtype(spec.dtype)
            except Exception:
                tdt = None
            self.plans.append(_Plan(tname, i, spec, dmp, tdt))
        self.input_names = names

    def slow_sig(self, inputs) -> tuple:
        """Signature when the first carrier of an axis is missing (an optional input)."""
        by_name = type(inputs) is dict
        out = []
        for srcs in self.axis_srcs:
            for n, i, d in srcs:
                v = inputs.get(n) if by_name else (inputs[i] if i < len(inputs) else None)
                if v is not None and hasattr(v, "shape"):
                    out.append(int(v.shape[d]))
                    break
            else:
                raise ValueError("var axis not bound by any input")
        return tuple(out)


class Entry:
    """One kept call on its way to the writer."""

    __slots__ = ("state", "axes", "items", "events", "est_bytes")

    def __init__(self, state, axes, items, events, est_bytes):
        self.state, self.axes, self.items, self.events, self.est_bytes = state, axes, items, events, est_bytes


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
        self._defs[name] = st
        return st

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
        r, lr, final = current_rank()
        self._rank_ok = rank_records(self.config.ranks, r, lr)
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
            prepared = self._prepare(st, sig, inputs)
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
            entry = self._copy(st, axes, inputs, est)
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

    def _prepare(self, st: DefState, sig, inputs):
        """Check the call against the definition; ``(axes, estimated bytes)`` or None."""
        by_name = type(inputs) is dict
        get = inputs.get if by_name else (lambda i: inputs[i] if i < len(inputs) else None)
        for tname, i, d, val in st.const_checks:
            v = get(tname if by_name else i)
            if v is not None and hasattr(v, "shape") and int(v.shape[d]) != val:
                return None
        axes = dict(zip(st.var_axes, (int(x) for x in sig)))
        for ax, srcs in zip(st.var_axes, st.axis_srcs):
            for tname, i, d in srcs:
                v = get(tname if by_name else i)
                if isinstance(v, torch.Tensor) and int(v.shape[d]) != axes[ax]:
                    return None
        est = 1024
        for p in st.plans:
            v = get(p.name if by_name else p.index)
            if v is None:
                if p.optional:
                    continue
                return None
            if isinstance(v, torch.Tensor):
                if p.kind == "scalar":
                    if v.numel() != 1:
                        return None
                    continue
                if v.dim() != p.rank or (p.dtype is not None and v.dtype != p.dtype):
                    return None
                if p.kind == "dump":
                    est += v.numel() * v.element_size()
            elif isinstance(v, (bool, int, float)):
                if p.kind == "dump" and p.rank:
                    est += 8 * _numel(st, p, axes)
            else:
                return None
        return axes, est

    def _copy(self, st: DefState, axes, inputs, est) -> Entry:
        """Host copies of the dumped tensors (non-blocking for CUDA) and the storage plan."""
        by_name = type(inputs) is dict
        items = []
        events = {}
        for p in st.plans:
            v = inputs.get(p.name) if by_name else (inputs[p.index] if p.index < len(inputs) else None)
            if v is None:
                continue
            if p.kind == "scalar":
                items.append((p.name, "scalar", _host(v, events) if isinstance(v, torch.Tensor) else v))
            elif isinstance(v, torch.Tensor):
                if p.kind == "dump":
                    items.append((p.name, "dump", _host(v, events)))
                elif p.rank == 0 and p.is_int:  # 0-d int tensor: keep its value
                    items.append((p.name, "scalar", _host(v, events)))
                else:
                    items.append((p.name, "random", None))
            else:  # a Python number given for a tensor input
                if p.rank == 0:
                    items.append((p.name, "scalar", v))
                elif p.kind == "dump":
                    shape = tuple(int({**st.defn.const_axes, **axes}[a]) for a in p.shape)
                    items.append((p.name, "fill", (shape, v, p.dtype)))
                else:
                    items.append((p.name, "random", None))
        return Entry(st, axes, items, list(events.values()), est)

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


def _numel(st: DefState, p: _Plan, axes) -> int:
    vals = {**st.defn.const_axes, **axes}
    n = 1
    for a in p.shape:
        n *= int(vals[a])
    return n


def _host(t, events: dict):
    """A host copy of ``t`` that the writer can read once ``events`` have completed."""
    t = t.detach()
    dev = t.device
    if dev.type == "cpu":
        return t.clone(memory_format=torch.contiguous_format)
    if dev.type == "cuda":
        buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        buf.copy_(t, non_blocking=True)
        if dev not in events:
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(dev))
            events[dev] = ev
        else:  # one event per device, recorded after the last copy
            events[dev].record(torch.cuda.current_stream(dev))
        return buf
    return t.to("cpu")
