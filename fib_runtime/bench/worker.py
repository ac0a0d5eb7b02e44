"""Benchmark worker processes: one per device, spawned, killed and respawned by the parent.

Protocol over a ``multiprocessing`` pipe (parent -> worker: a task dict or ``None`` to stop;
worker -> parent: tuples):

- ``("ready", environment)`` once, after torch and the device are initialised;
- ``("phase", task_id, "solution")`` when the workload is prepared and the solution's own time
  starts (the per-solution timeout counts from here);
- ``("result", task_id, result_dict)`` at the end of a task (see :mod:`.evaluate`).

The worker's stdout/stderr (file descriptors 1 and 2, so C/CUDA prints too) go to a log file per
worker, truncated at the start of each task: the parent reads it for the evaluation's ``log``,
also after killing a hung worker or finding a crashed one.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import Any, Dict


@contextlib.contextmanager
def capture_fds(path: str):
    """Send fds 1 and 2 to ``path`` (truncated) for the ``with`` block."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    py = sys.stdout, sys.stderr
    text = open(path, "a", buffering=1, encoding="utf-8", errors="replace")
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = sys.stderr = text  # also when sys.stdout was replaced (pytest, redirect_stdout)
        yield
    finally:
        sys.stdout, sys.stderr = py
        try:
            text.close()
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(fd)
        os.close(saved[0])
        os.close(saved[1])


def read_log(path: str, cap: int) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except OSError:
        return ""
    text = data[:cap].decode("utf-8", "replace")
    if len(data) > cap:
        text += f"\n[log truncated at {cap} bytes]"
    return text


def worker_main(conn, device_label: str, dataset_root: str, cfg_dict: Dict[str, Any], log_path: str) -> None:
    from ..schema import Solution, Workload
    from .config import BenchConfig
    from .environment import snapshot
    from .evaluate import WorkerState

    cfg = BenchConfig.from_dict(cfg_dict)
    try:
        with capture_fds(log_path):
            state = WorkerState(device_label, dataset_root, cfg)
            env = snapshot(device_label)
    except BaseException as e:  # noqa: BLE001
        conn.send(("fatal", f"worker on {device_label} failed to start: {type(e).__name__}: {e}\n"
                            + read_log(log_path, 4096)))
        return
    conn.send(("ready", env))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        tid = task["id"]
        try:
            with capture_fds(log_path):
                d = state.definition(task["definition"])
                w = Workload.model_validate(task["workload"])
                s = Solution.model_validate(task["solution"])
                result = state.evaluate(d, w, s, lambda phase: conn.send(("phase", tid, phase)))
        except BaseException as e:  # noqa: BLE001 - keep the worker alive
            with capture_fds(log_path + ".err"):
                traceback.print_exc()
            result = {"status": "RUNTIME_ERROR", "message": f"internal error of fib bench: {type(e).__name__}: {e}"}
        result["log"] = read_log(log_path, cfg.log_cap_bytes)
        conn.send(("result", tid, result))
        if not _healthy(state):  # e.g. a CUDA context poisoned by the solution: start afresh
            os._exit(3)


def _healthy(state) -> bool:
    try:
        state.sync()
        return True
    except BaseException:  # noqa: BLE001
        return False
