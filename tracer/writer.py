"""The tracer's background writer: turns queued entries into blobs and JSONL lines.

One daemon thread per process, started at the first kept call (a forked child starts its own at
its first kept call; no thread is inherited). It does its work (torch, safetensors, file and
metrics calls) under ``Tracer.work_lock``, which a ``fork`` waits for: the child never inherits
a library lock held by the writer thread it does not have. For each entry it waits for the entry's CUDA
events (the non-blocking copies), writes the dumped tensors to
``blob/workloads/<op_type>/<definition>/<definition>_<uuid4>.safetensors`` (temp file + rename,
so a blob is either whole or absent), *then* appends the workload line to
``workloads/<op_type>/<definition>.jsonl`` with :func:`fib_runtime.fileio.append_lines`
(whole lines under ``flock``): a line never references a blob that does not exist, and lines of
many processes never interleave. A line holds the definition name, a fresh uuid4, the var-axis
values and the per-input sources -- nothing about the host, user, request or process.

The first time it writes a definition it also writes ``definitions/<op_type>/<name>.json`` when
the dataset has no file of that name, so that the dataset validates on its own.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Dict, List

from fib_runtime.fileio import append_lines, atomic_write_bytes, atomic_write_text

from fib_runtime import metrics

log = logging.getLogger("fib_runtime.tracer")
_STOP = object()
_BATCH = 64


def workload_rel(op_type: str, definition: str) -> str:
    return f"workloads/{op_type}/{definition}.jsonl"


def blob_rel(op_type: str, definition: str, uid: str) -> str:
    """Blob path relative to the dataset root (the layout of ``Dataset.blob_path``)."""
    return f"blob/workloads/{op_type}/{definition}/{definition}_{uid}.safetensors"


class Writer(threading.Thread):
    def __init__(self, tracer):
        super().__init__(name="fib-trace-writer", daemon=True)
        self.tracer = tracer
        self.q = tracer.queue
        self._stop_flag = False
        self._defs_written: set = set()

    def stop(self) -> None:
        self._stop_flag = True
        try:
            self.q.put_nowait(_STOP)
        except queue.Full:
            pass

    def run(self) -> None:
        t = self.tracer
        while True:
            try:
                first = self.q.get(timeout=0.25)
            except queue.Empty:
                t.sync_metrics()
                if self._stop_flag:
                    return
                continue
            batch = [first]
            while len(batch) < _BATCH:
                try:
                    batch.append(self.q.get_nowait())
                except queue.Empty:
                    break
            stop = any(e is _STOP for e in batch)
            entries = [e for e in batch if e is not _STOP]
            if entries:
                write_batch(t, entries, self._defs_written)
            t.sync_metrics()
            if stop:
                return


def drain_sync(tracer) -> None:
    """Write what is still queued from the calling thread (no writer thread left)."""
    entries = []
    while True:
        try:
            e = tracer.queue.get_nowait()
        except queue.Empty:
            break
        if e is not _STOP:
            entries.append(e)
    if entries:
        write_batch(tracer, entries, set())


def write_batch(t, entries: List, defs_written: set) -> None:
    root = Path(t.config.dataset_path)
    cap = t.config.max_bytes
    lines: Dict[str, List[str]] = defaultdict(list)
    per_def: Dict[str, int] = defaultdict(int)
    try:
        for e in entries:
            try:
                with t.work_lock:
                    line, nbytes = _write_one(t, root, e, defs_written, cap)
                if line is not None:
                    lines[workload_rel(e.state.op_type, e.state.name)].append(line)
                    per_def[e.state.name] += 1
                    t.bytes_written += nbytes
            except Exception:
                t.drops["write_error"] += 1
                _warn_once(t, ("write", e.state.name), "fib-runtime tracer: writing a workload of %s failed "
                           "(further failures are only counted)", e.state.name)
            finally:
                t.bytes_dequeued += e.est_bytes
        for rel, ls in lines.items():
            try:
                with t.work_lock:
                    n = append_lines(root / rel, ls)
                t.bytes_written += n - sum(len(x) + 1 for x in ls)  # newline repair, if any
                metrics.inc_trace_bytes(n)
            except Exception:
                t.drops["write_error"] += len(ls)
                _warn_once(t, ("append", rel), "fib-runtime tracer: appending to %s failed "
                           "(further failures are only counted)", rel)
                name = Path(rel).stem
                per_def[name] -= len(ls)
        for name, n in per_def.items():
            if n > 0:
                t.records[name] += n
                metrics.inc_trace_records(name, n)
    finally:
        t.n_done += len(entries)


def _warn_once(t, key, msg: str, *args) -> None:
    if key not in t._warned:
        t._warned.add(key)
        log.warning(msg, *args, exc_info=True)


def _write_one(t, root: Path, e, defs_written: set, cap):
    st = e.state
    if st.name not in defs_written and t.config.write_definitions:
        _ensure_definition(root, st)
        defs_written.add(st.name)
    for ev in e.events:
        ev.synchronize()
    uid = str(uuid.uuid4())
    inputs = {}
    tensors = {}
    for name, kind, val in e.items:
        if kind == "random":
            inputs[name] = {"type": "random"}
        elif kind == "scalar":
            v = val.item() if hasattr(val, "item") and not isinstance(val, (bool, int, float)) else val
            inputs[name] = {"type": "scalar", "value": v}
        elif kind == "dump":
            tensors[name] = val.contiguous()
            inputs[name] = None
        elif kind == "fill":
            import torch

            shape, v, dtype = val
            tensors[name] = torch.full(shape, v, dtype=dtype)
            inputs[name] = None
    data = b""
    if tensors:
        from safetensors.torch import save

        rel = blob_rel(st.op_type, st.name, uid)
        data = save(tensors)
        for name in tensors:
            inputs[name] = {"type": "safetensors", "path": "./" + rel, "tensor_key": name}
    line = json.dumps({"definition": st.name, "solution": None,
                       "workload": {"uuid": uid, "axes": e.axes, "inputs": inputs},
                       "evaluation": None}, separators=(",", ":"))
    nbytes = len(data) + len(line) + 1
    if cap is not None and t.bytes_written + nbytes > cap:
        t.drops["byte_cap"] += 1
        return None, 0
    if tensors:
        atomic_write_bytes(root / rel, data)
        metrics.inc_trace_bytes(len(data))
    return line, nbytes


def _ensure_definition(root: Path, st) -> None:
    d = root / "definitions"
    if d.is_dir() and any(d.glob(f"**/{st.name}.json")):
        return
    atomic_write_text(d / st.op_type / f"{st.name}.json", st.defn.to_json(indent=2) + "\n")
