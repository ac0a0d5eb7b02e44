"""Worker pool: one spawned process per device; timeouts and crashes become statuses.

    pool = WorkerPool(["cuda:0", "cuda:1"], dataset_root, cfg)
    pool.run(tasks, on_result)          # on_result(task, result_dict, environment, device_label)

- Processes are started with the ``spawn`` method (no inherited CUDA state), one per device
  label. ``cpu:N`` labels run on the CPU (several of them fake several devices, for tests).
- The parent hands out tasks itself, in priority classes (``Task.priority``): within the most
  urgent class left, an idle worker gets the next task of the workload it prepared last (inputs
  and reference are cached in the worker), otherwise the first task of a workload no other
  worker is on, otherwise the head of the queue. So workloads spread over the
  devices and each workload's reference runs about once.
- Deadlines: ``prepare_timeout_s`` for the workload (inputs + reference), then
  ``timeout_s`` from the worker's ``solution`` message on. A worker past its deadline is killed
  (SIGKILL) and respawned: the task is a ``TIMEOUT`` (or skipped when the workload preparation
  hung). A worker that dies mid-task (segfault, ``os._exit``, CUDA abort) makes the task a
  ``RUNTIME_ERROR`` with the exit code and the worker's captured output, and is respawned.
- A device whose worker cannot start twice in a row is dropped; the run goes on with the others.

``InlinePool`` evaluates in the calling process (no isolation, no timeouts): for debugging.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, Callable, Deque, Dict, List, Optional

from .config import BenchConfig
from .worker import read_log, worker_main

STARTUP_TIMEOUT_S = 600.0
STARTUP_GRACE_S = 90.0  # how long the first dispatch waits for all workers to be ready


@dataclass
class Task:
    id: int
    definition: Any          # Definition
    workload: Any            # Trace (workload-only)
    solution: Any            # Solution
    payload: Dict[str, Any] = field(default_factory=dict)
    priority: int = 0        # lower runs first (see runner.plan)

    @property
    def key(self):
        return (self.definition.name, self.workload.workload.uuid)

    def message(self) -> Dict[str, Any]:
        if not self.payload:
            self.payload = {"id": self.id, "definition": self.definition.to_dict(),
                            "workload": self.workload.workload.to_dict(), "solution": self.solution.to_dict()}
        return self.payload


OnResult = Callable[[Task, Dict[str, Any], Dict[str, Any], str], None]


class _Worker:
    def __init__(self, pool: "WorkerPool", label: str, slot: int):
        self.pool = pool
        self.label = label
        self.slot = slot
        self.log_path = os.path.join(pool.logdir, f"worker{slot}.log")
        self.failures = 0
        self.dead = False
        self.proc = None
        self.start()

    def start(self) -> None:
        ctx = self.pool.ctx
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, name=f"fib-bench-{self.label}", daemon=True,
                                args=(child, self.label, self.pool.root, self.pool.cfg.to_dict(), self.log_path))
        self.proc.start()
        child.close()
        self.conn = parent
        self.env: Optional[Dict[str, Any]] = None
        self.task: Optional[Task] = None
        self.phase = "startup"
        self.deadline = time.monotonic() + STARTUP_TIMEOUT_S
        self.last_key = None

    @property
    def ready(self) -> bool:
        return self.env is not None and self.task is None and not self.dead

    def send(self, task: Task) -> None:
        self.task = task
        self.phase = "prepare"
        self.deadline = time.monotonic() + self.pool.cfg.prepare_timeout_s
        self.last_key = task.key
        self.conn.send(task.message())

    def kill(self) -> None:
        try:
            if self.proc.is_alive():
                os.kill(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass
        self.proc.join(10)
        try:
            self.conn.close()
        except OSError:
            pass

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.kill()


class WorkerPool:
    def __init__(self, devices: List[str], dataset_root, cfg: BenchConfig, logdir: Optional[str] = None):
        if not devices:
            raise ValueError("no devices")
        self.ctx = mp.get_context("spawn")
        self.root = str(dataset_root) if dataset_root is not None else None
        self.cfg = cfg
        self.logdir = logdir or tempfile.mkdtemp(prefix="fib-bench-logs-")
        self.devices = list(devices)
        self.workers: List[_Worker] = []
        self.skipped: List[str] = []
        self.respawns = 0
        self.not_started = 0

    def __enter__(self):
        self.workers = [_Worker(self, d, i) for i, d in enumerate(self.devices)]
        return self

    def __exit__(self, *exc):
        for w in self.workers:
            if not w.dead:
                w.stop()

    # ---- scheduling -------------------------------------------------------------------
    def _pick(self, w: _Worker, pending: Deque[Task]) -> Task:
        busy = {x.task.key for x in self.workers if x.task is not None}
        prio = pending[0].priority  # stay within the most urgent class of tasks
        for i, t in enumerate(pending):
            if t.priority != prio:
                break
            if t.key == w.last_key:
                del pending[i]
                return t
        for i, t in enumerate(pending):
            if t.priority != prio:
                break
            if t.key not in busy:
                del pending[i]
                return t
        return pending.popleft()

    def run(self, tasks: List[Task], on_result: OnResult, deadline: Optional[float] = None) -> None:
        """Evaluate ``tasks``; after ``deadline`` (a ``time.monotonic()`` value) no new task starts."""
        if not self.workers:
            self.__enter__()
        pending: Deque[Task] = deque(tasks)
        self._await_startup(on_result)
        while True:
            if deadline is not None and pending and time.monotonic() > deadline:
                self.not_started = len(pending)
                self.skipped.append(f"{len(pending)} evaluation(s) not started: wall-clock limit reached "
                                    f"(run again to resume)")
                pending.clear()
            live = [w for w in self.workers if not w.dead]
            if not live:
                for t in pending:
                    self.skipped.append(f"{t.definition.name}/{t.solution.name}: no worker could start")
                return
            for w in live:
                if w.ready and pending:
                    w.send(self._pick(w, pending))
            if not pending and all(w.task is None for w in live):
                return
            now = time.monotonic()
            timeout = max(0.0, min(w.deadline for w in live) - now) if live else 1.0
            wait([w.conn for w in live] + [w.proc.sentinel for w in live], timeout=min(timeout, 5.0))
            for w in live:
                self._drain(w, on_result)
                if not w.dead and not w.proc.is_alive():
                    self._drain(w, on_result)
                    self._died(w, on_result)
            now = time.monotonic()
            for w in live:
                if not w.dead and w.proc.is_alive() and now > w.deadline:
                    self._expired(w, on_result)

    def _await_startup(self, on_result: OnResult) -> None:
        """Let every worker come up (up to STARTUP_GRACE_S) so the first tasks spread over all."""
        end = time.monotonic() + STARTUP_GRACE_S
        while time.monotonic() < end:
            waiting = [w for w in self.workers if not w.dead and w.env is None]
            if not waiting:
                return
            wait([w.conn for w in waiting] + [w.proc.sentinel for w in waiting], timeout=1.0)
            for w in waiting:
                self._drain(w, on_result)
                if not w.dead and not w.proc.is_alive():
                    self._died(w, on_result)

    def _drain(self, w: _Worker, on_result: OnResult) -> None:
        try:
            while not w.dead and w.conn.poll():
                msg = w.conn.recv()
                kind = msg[0]
                if kind == "ready":
                    w.env = msg[1]
                    w.phase = "idle"
                    w.failures = 0
                    w.deadline = float("inf")
                elif kind == "fatal":
                    self.skipped.append(msg[1])
                    w.failures += 1
                elif kind == "phase" and w.task is not None and msg[1] == w.task.id:
                    w.phase = msg[2]
                    w.deadline = time.monotonic() + self.cfg.timeout_s
                elif kind == "result" and w.task is not None and msg[1] == w.task.id:
                    task, w.task = w.task, None
                    w.phase = "idle"
                    w.deadline = float("inf")
                    self._deliver(task, msg[2], w, on_result)
        except (EOFError, OSError):
            pass

    def _deliver(self, task: Task, result: Dict[str, Any], w: _Worker, on_result: OnResult) -> None:
        if "skip" in result:
            self.skipped.append(result["skip"])
            return
        on_result(task, result, w.env or {"hardware": "unknown", "libs": {"device": w.label}}, w.label)

    def _respawn(self, w: _Worker) -> None:
        w.kill()
        if w.failures >= 2:
            w.dead = True
            self.skipped.append(f"device {w.label} dropped: its worker failed to start twice")
            return
        self.respawns += 1
        w.start()

    def _died(self, w: _Worker, on_result: OnResult) -> None:
        code = w.proc.exitcode
        task = w.task
        if task is None:
            if w.env is None:
                w.failures += 1
            self._respawn(w)
            return
        log = read_log(w.log_path, self.cfg.log_cap_bytes)
        w.task = None
        if w.phase == "solution":
            sig = f" (signal {-code})" if code is not None and code < 0 else ""
            self._deliver(task, {"status": "RUNTIME_ERROR", "message": f"worker died, exit code {code}{sig}",
                                 "log": log + f"\n[fib bench] worker process died with exit code {code}{sig} "
                                              f"while running the solution"}, w, on_result)
        else:
            self.skipped.append(f"{task.definition.name} workload {task.workload.workload.uuid}: worker died "
                                f"(exit code {code}) while preparing inputs/reference")
        self._respawn(w)

    def _expired(self, w: _Worker, on_result: OnResult) -> None:
        task = w.task
        if task is None:  # startup took too long
            w.failures += 1
            self._respawn(w)
            return
        w.kill()
        log = read_log(w.log_path, self.cfg.log_cap_bytes)
        w.task = None
        if w.phase == "solution":
            self._deliver(task, {"status": "TIMEOUT", "message": f"no result within {self.cfg.timeout_s:g} s",
                                 "log": log + f"\n[fib bench] killed after {self.cfg.timeout_s:g} s without a result"},
                          w, on_result)
        else:
            self.skipped.append(f"{task.definition.name} workload {task.workload.workload.uuid}: preparation "
                                f"(inputs + reference) exceeded {self.cfg.prepare_timeout_s:g} s")
        self._respawn(w)


class InlinePool:
    """Evaluate in this process (no isolation, no timeouts)."""

    def __init__(self, devices: List[str], dataset_root, cfg: BenchConfig, logdir: Optional[str] = None):
        self.devices = devices[:1] or ["cpu:0"]
        self.root = str(dataset_root) if dataset_root is not None else None
        self.cfg = cfg
        self.skipped: List[str] = []
        self.respawns = 0
        self.not_started = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def run(self, tasks: List[Task], on_result: OnResult, deadline: Optional[float] = None) -> None:
        from .environment import snapshot
        from .evaluate import WorkerState

        from .worker import capture_fds

        import torch

        label = self.devices[0]
        threads = torch.get_num_threads()
        state = WorkerState(label, self.root, self.cfg)
        env = snapshot(label)
        fd, log_path = tempfile.mkstemp(prefix="fib-bench-inline-", suffix=".log")
        os.close(fd)
        try:
            for i, t in enumerate(tasks):
                if deadline is not None and time.monotonic() > deadline:
                    self.not_started = len(tasks) - i
                    self.skipped.append(f"{self.not_started} evaluation(s) not started: wall-clock limit reached")
                    break
                try:
                    with capture_fds(log_path):
                        r = state.evaluate(t.definition, t.workload.workload, t.solution, lambda phase: None)
                except Exception as e:  # noqa: BLE001
                    r = {"status": "RUNTIME_ERROR", "message": f"{type(e).__name__}: {e}"}
                if "skip" in r:
                    self.skipped.append(r["skip"])
                    continue
                r["log"] = read_log(log_path, self.cfg.log_cap_bytes)
                on_result(t, r, env, label)
        finally:
            os.unlink(log_path)
            torch.set_num_threads(threads)
