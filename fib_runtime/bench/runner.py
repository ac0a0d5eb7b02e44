"""``fib bench``: evaluate every (definition, workload, solution) not yet evaluated.

    from fib_runtime.bench import run_bench, BenchConfig
    summary = run_bench("path/to/dataset", definitions=["rmsnorm_*"], devices=["cuda:0", "cuda:1"],
                        cfg=BenchConfig(timeout_s=60))
    summary.counts        # {"PASSED": 12, "TIMEOUT": 1, ...}

Steps:

1. **Plan.** Definitions (names or ``fnmatch`` globs), their workloads, and their solutions
   (filtered by ``solutions`` names/globs and ``authors``), plus the extra solutions asked for:
   the FlashInfer ``baseline`` (``baseline="auto"``: when FlashInfer is importable and the run is
   on CUDA devices; ``"on"``; ``"off"``), the definition's ``reference`` and the ``builtin``
   kernels; extra solutions are written to the dataset's ``solutions/`` so traces point at real
   files. **Resume**: a (definition, workload uuid, solution name) that already has an
   evaluation trace is skipped, whatever its status (``force=True`` re-evaluates).
2. **Run** in a :class:`~fib_runtime.bench.pool.WorkerPool` (one spawned worker per device,
   timeouts, crash recovery) with a progress bar and ETA.
3. **Write** each result as it arrives: a Trace with its Evaluation appended to
   ``traces/<author>/<op_type>/<definition>.jsonl`` (locked whole-line append, so an interrupted
   run keeps what it finished). The evaluation's ``environment`` is the worker's (GPU name,
   driver, library versions, ``libs.device`` = the worker's device label).
"""

from __future__ import annotations

import datetime
import fnmatch
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from ..schema import Correctness, Environment, Evaluation, Performance, Trace
from ..store import Dataset
from . import extras
from .config import BenchConfig
from .pool import InlinePool, Task, WorkerPool
from .progress import Progress


@dataclass
class BenchSummary:
    planned: int = 0
    already_done: int = 0
    evaluated: int = 0
    counts: Counter = field(default_factory=Counter)
    by_device: Counter = field(default_factory=Counter)
    skipped: List[str] = field(default_factory=list)
    respawns: int = 0
    not_started: int = 0
    wall_s: float = 0.0
    devices: List[str] = field(default_factory=list)
    traces: List[Trace] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"planned": self.planned, "already_done": self.already_done, "evaluated": self.evaluated,
                "counts": dict(self.counts), "by_device": dict(self.by_device), "skipped": self.skipped,
                "respawns": self.respawns, "not_started": self.not_started, "wall_s": round(self.wall_s, 3),
                "devices": self.devices}


AUTHOR_PRIORITY = {"fib-runtime": 0, "baseline": 1, "reference": 3}


def _match(name: str, patterns: Optional[Sequence[str]]) -> bool:
    return not patterns or any(name == p or fnmatch.fnmatchcase(name, p) for p in patterns)


def default_devices() -> List[str]:
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    except Exception:
        pass
    return ["cpu:0"]


def parse_devices(spec: Optional[Union[str, Sequence[str]]]) -> List[str]:
    """``None``/``"auto"``: every visible GPU, else ``cpu:0``; ``"cuda:0,cuda:1"``; ``"cpu*2"``."""
    if spec is None or spec == "auto" or spec == ["auto"]:
        return default_devices()
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: List[str] = []
    for it in items:
        it = it.strip()
        if not it:
            continue
        base, star, n = it.partition("*")
        if star:
            out += [f"{base.split(':')[0]}:{i}" for i in range(int(n))]
        elif it in ("cpu", "cuda"):
            out += default_devices() if it == "cuda" else ["cpu:0"]
        elif ":" not in it and it.isdigit():
            out.append(f"cuda:{it}")
        else:
            out.append(it)
    return out


def _spread(workloads: List[Trace], d, n: Optional[int]) -> List[Trace]:
    """At most ``n`` workloads, evenly spread over the definition's signatures (sorted)."""
    if not n or len(workloads) <= n:
        return workloads
    ws = sorted(workloads, key=lambda t: (t.workload.signature(d.var_axes), t.workload.uuid))
    idx = sorted({round(i * (len(ws) - 1) / max(n - 1, 1)) for i in range(n)})
    return [ws[i] for i in idx]


def plan(ds: Dataset, definitions=None, solutions=None, authors=None, *, baseline: str = "auto",
         reference: bool = False, builtin: bool = False, force: bool = False,
         devices: Sequence[str] = ("cpu:0",), max_workloads: Optional[int] = None) -> tuple:
    """``(tasks, already_done)`` for a run (see module docstring)."""
    defs = [d for name, d in sorted(ds.definitions.items()) if _match(name, definitions)]
    on_cuda = any(x.startswith("cuda") for x in devices)
    want_baseline = baseline == "on" or (baseline == "auto" and on_cuda and extras.flashinfer_available())
    extra = []
    for d in defs:
        if want_baseline:
            s = extras.baseline_solution(d)
            if s is not None:
                extra.append(s)
        if reference:
            extra.append(extras.reference_solution(d))
    if builtin:
        extra += extras.builtin_solutions(defs)
    for s in extra:
        if s.name not in ds.solutions or ds.solutions[s.name] != s:
            ds.add_solution(s, overwrite=True)
    tasks: List[Task] = []
    done_count = 0
    for d in defs:
        sols = [s for s in ds.solutions_for(d.name)
                if _match(s.name, solutions) and (not authors or s.author in authors)]
        done = {(t.workload.uuid, t.solution) for t in ds.traces_for(d.name)}
        for w in _spread(ds.workloads_for(d.name), d, max_workloads):
            for s in sols:
                if not force and (w.workload.uuid, s.name) in done:
                    done_count += 1
                    continue
                tasks.append(Task(len(tasks), d, w, s, priority=AUTHOR_PRIORITY.get(s.author, 2)))
    # our kernels and the baseline first, the (slow) reference last: a run cut by --max-wall
    # still compares what matters; stable, so definitions and workloads keep their order
    tasks.sort(key=lambda t: t.priority)
    for i, t in enumerate(tasks):
        t.id = i
    return tasks, done_count


def run_bench(dataset: Union[str, Path, Dataset], definitions: Optional[Sequence[str]] = None,
              solutions: Optional[Sequence[str]] = None, authors: Optional[Sequence[str]] = None,
              devices: Optional[Union[str, Sequence[str]]] = None, cfg: Optional[BenchConfig] = None, *,
              baseline: str = "auto", reference: bool = False, builtin: bool = False, force: bool = False,
              progress: bool = True, inline: bool = False, dry_run: bool = False,
              logdir: Optional[str] = None, max_wall_s: Optional[float] = None,
              max_workloads: Optional[int] = None) -> BenchSummary:
    """Plan and run (module docstring). ``max_wall_s``: start no evaluation after that many
    seconds (in-flight ones finish); what did not start is reported and a later run resumes it.
    ``max_workloads``: per definition, at most that many workloads, spread over the signatures."""
    ds = dataset if isinstance(dataset, Dataset) else Dataset.open(dataset)
    cfg = cfg or BenchConfig()
    devs = parse_devices(devices)
    t0 = time.monotonic()
    tasks, done = plan(ds, definitions, solutions, authors, baseline=baseline, reference=reference,
                       builtin=builtin, force=force, devices=devs, max_workloads=max_workloads)
    summary = BenchSummary(planned=len(tasks), already_done=done, devices=devs)
    if dry_run or not tasks:
        summary.wall_s = time.monotonic() - t0
        return summary
    bar = Progress(len(tasks), enabled=progress)

    def on_result(task: Task, r: Dict[str, Any], env: Dict[str, Any], label: str) -> None:
        trace = make_trace(task, r, env, label)
        ds.add_traces([trace], author=task.solution.author)
        summary.traces.append(trace)
        summary.evaluated += 1
        summary.counts[trace.evaluation.status.value] += 1
        summary.by_device[label] += 1
        bar.update(1, f"{label} {task.solution.name[:40]}: {trace.evaluation.status.value}")

    pool_cls = InlinePool if inline else WorkerPool
    n_workers = 1 if inline else min(len(devs), max(1, len({t.key for t in tasks})))
    n_cpu = sum(1 for x in devs[:n_workers] if not x.startswith("cuda"))
    if not inline and n_cpu and cfg.cpu_threads <= 0:
        import dataclasses
        import os

        cfg = dataclasses.replace(cfg, cpu_threads=max(1, (os.cpu_count() or 1) // n_cpu))
    deadline = t0 + max_wall_s if max_wall_s else None
    with pool_cls(devs[:n_workers], ds.root, cfg, logdir=logdir) as pool:
        pool.run(tasks, on_result, deadline=deadline)
        summary.skipped = list(pool.skipped)
        summary.respawns = pool.respawns
        summary.not_started = pool.not_started
    if bar.enabled and bar.done < bar.total:
        bar.stream.write("\n")
    summary.wall_s = time.monotonic() - t0
    return summary


def make_trace(task: Task, r: Dict[str, Any], env: Dict[str, Any], label: str) -> Trace:
    libs = dict(env.get("libs", {}))
    libs.setdefault("device", label)
    status = r["status"]
    corr = r.get("correctness")
    perf = r.get("performance")
    log = r.get("log", "") or ""
    if r.get("message") and r["message"] not in log:
        log = (log + ("\n" if log else "") + f"[fib bench] {status}: {r['message']}")
    ev = Evaluation(
        status=status,
        environment=Environment(hardware=str(env.get("hardware", "unknown")), libs={k: str(v) for k, v in libs.items()}),
        timestamp=datetime.datetime.now().isoformat(),
        log=log,
        correctness=Correctness(**corr) if corr is not None and status in ("PASSED", "INCORRECT_NUMERICAL") else None,
        performance=Performance(**perf) if perf is not None and status == "PASSED" else None,
    )
    return Trace(definition=task.definition.name, workload=task.workload.workload,
                 solution=task.solution.name, evaluation=ev)
