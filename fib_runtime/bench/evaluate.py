"""Evaluate one (definition, workload, solution) inside a worker process.

:class:`WorkerState` keeps, per worker, the parsed definitions, the loaded solutions and the
prepared workloads (inputs drawn with a seed derived from the workload uuid, so every solution
and every worker sees the same inputs; the reference outputs; the reference latency). A task's
result is a plain dict (sent over a pipe to the parent)::

    {"status": "PASSED", "correctness": {...} | None, "performance": {...} | None,
     "message": "...", "timing": "cuda-events+l2flush"}

or ``{"skip": "why"}`` when the workload itself cannot be prepared (inputs or reference fail):
that is not the solution's fault and no trace is written.
"""

from __future__ import annotations

import hashlib
import math
import time
import traceback
from collections import OrderedDict
from typing import Any, Callable, Dict, Optional

from ..inputs import materialize
from ..reference import compile_reference, outputs_tuple
from ..schema import Definition, Solution, Workload
from . import loading
from .config import BenchConfig
from .correctness import GuardedOutputs, Verdict, changed_inputs, check_structure, compare, snapshot_inputs
from .sampling_eval import evaluate_sampling, is_sampling_definition
from .timing import time_callable


def workload_seed(uuid: str, base: int = 0) -> int:
    return (int(hashlib.sha1(uuid.encode()).hexdigest()[:12], 16) + base) % (2**62)


def device_of(label: str) -> str:
    return label if label.startswith("cuda") else "cpu"


class Prepared:
    def __init__(self, inputs, ref_out, ref_ms, axes):
        self.inputs = inputs
        self.ref_out = ref_out
        self.ref_ms = ref_ms
        self.axes = axes


class WorkerState:
    def __init__(self, device_label: str, dataset_root: Optional[str], cfg: BenchConfig):
        self.label = device_label
        self.device = device_of(device_label)
        self.root = dataset_root
        self.cfg = cfg
        self._defs: Dict[str, Definition] = {}
        self._prepared: "OrderedDict[tuple, Prepared]" = OrderedDict()
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.set_device(torch.device(self.device))
        elif cfg.cpu_threads > 0:  # several CPU workers on one machine must not oversubscribe it
            torch.set_num_threads(cfg.cpu_threads)

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)

    def definition(self, raw: Dict[str, Any]) -> Definition:
        key = raw["name"] + ":" + hashlib.sha1(raw["reference"].encode()).hexdigest()
        d = self._defs.get(key)
        if d is None:
            d = Definition.model_validate(raw)
            self._defs[key] = d
        return d

    # ---- workload preparation (charged to the workload, not the solution) -------------------
    def prepare(self, d: Definition, w: Workload) -> Prepared:
        key = (d.name, w.uuid)
        p = self._prepared.get(key)
        if p is not None:
            self._prepared.move_to_end(key)
            return p
        import torch

        torch.manual_seed(workload_seed(w.uuid, self.cfg.seed))
        inputs = materialize(d, w, dataset_root=self.root, device=self.device,
                             seed=workload_seed(w.uuid, self.cfg.seed))
        ref = compile_reference(d)
        args = list(inputs.values())
        with torch.no_grad():
            ref_out = outputs_tuple(d, ref(*args))
        self.sync()
        with torch.no_grad():
            ref_ms, _ = time_callable(ref, args, self.device, self.cfg)
        axes = {**w.axes}
        p = Prepared(inputs, ref_out, ref_ms, axes)
        self._prepared[key] = p
        while len(self._prepared) > 2:
            self._prepared.popitem(last=False)
        return p

    # ---- one solution ----------------------------------------------------------------------
    def evaluate(self, d: Definition, w: Workload, s: Solution, notify: Callable[[str], None]) -> Dict[str, Any]:
        import torch

        try:
            prep = self.prepare(d, w)
        except Exception as e:
            traceback.print_exc()
            return {"skip": f"cannot prepare workload {w.uuid} of {d.name}: {type(e).__name__}: {e}"}
        notify("solution")
        t0 = time.monotonic()
        try:
            fn = loading.load(s, self.device)
        except BaseException as e:  # noqa: BLE001 - solution code may raise anything
            traceback.print_exc()
            return {"status": "COMPILE_ERROR", "message": f"{type(e).__name__}: {e}"}
        dps = s.spec.destination_passing_style
        pristine = prep.inputs
        copies = snapshot_inputs(pristine)  # the solution gets copies; pristine stays the reference's
        named = {k: copies.get(k, v) for k, v in pristine.items()}
        guards = None

        def call(named_inputs, guarded: bool = False):
            nonlocal guards
            a = list(named_inputs.values())
            if dps:
                g = GuardedOutputs(d, _axes_of(d, named_inputs, prep.axes), self.device,
                                   self.cfg.guard_elems if guarded else 0)
                if guarded:
                    guards = g
                fn(*a, *g.views)
                return tuple(g.views)
            return outputs_tuple(d, fn(*a))

        try:
            with torch.no_grad():
                outputs = call(named, guarded=True)
            self.sync()
        except BaseException as e:  # noqa: BLE001
            traceback.print_exc()
            return {"status": "RUNTIME_ERROR", "message": f"{type(e).__name__}: {e}"}

        v = check_structure(d, outputs, prep.axes, self.device)
        if v is not None:
            print(v.message)
            return {"status": v.status, "message": v.message}
        extra: Dict[str, Any] = {}
        if self.cfg.check_inputs:
            changed = changed_inputs(named, pristine)
            if changed:
                msg = f"solution wrote into its input(s): {', '.join(changed)}"
                print(msg)
                return _numerical(Verdict("INCORRECT_NUMERICAL", msg, math.inf, math.inf,
                                          {"reason": "input_mutated", "inputs": changed}))
        if guards is not None:
            bad = guards.canaries_intact()
            if bad:
                names = [list(d.outputs)[i] for i in bad]
                msg = f"solution wrote outside its output buffer(s): {', '.join(names)}"
                print(msg)
                return _numerical(Verdict("INCORRECT_NUMERICAL", msg, math.inf, math.inf,
                                          {"reason": "out_of_bounds_write", "outputs": names}))

        try:
            with torch.no_grad():
                if is_sampling_definition(d):
                    ref = compile_reference(d)
                    verdict = evaluate_sampling(
                        d, lambda x: call(x)[0], named, self.cfg.sampling,
                        reference=lambda x: outputs_tuple(d, ref(*x.values()))[0], synchronize=self.sync)
                else:
                    verdict = compare(d, outputs, prep.ref_out, self.cfg)
            self.sync()
        except BaseException as e:  # noqa: BLE001
            traceback.print_exc()
            return {"status": "RUNTIME_ERROR", "message": f"{type(e).__name__}: {e}"}
        if verdict.status != "PASSED":
            print(verdict.message)
            if verdict.status != "INCORRECT_NUMERICAL":
                return {"status": verdict.status, "message": verdict.message}
            return _numerical(verdict)
        extra.update(verdict.extra)

        try:
            with torch.no_grad():
                timed_args = list(named.values())
                target = loading.prepared(fn, timed_args)
                if dps:
                    outs = GuardedOutputs(d, prep.axes, self.device, 0).views
                    timed_args = timed_args + list(outs)
                ms, how = time_callable(target, timed_args, self.device, self.cfg)
        except BaseException as e:  # noqa: BLE001
            traceback.print_exc()
            return {"status": "RUNTIME_ERROR", "message": f"during timing: {type(e).__name__}: {e}"}
        ms = max(ms, 1e-6)
        extra["timing"] = how
        extra["eval_s"] = round(time.monotonic() - t0, 3)
        return {
            "status": "PASSED", "timing": how,
            "correctness": {"max_relative_error": verdict.max_rel, "max_absolute_error": verdict.max_abs,
                            "extra": extra},
            "performance": {"latency_ms": ms, "reference_latency_ms": prep.ref_ms,
                            "speedup_factor": prep.ref_ms / ms},
        }


def _axes_of(d: Definition, named: Dict[str, Any], default: Dict[str, int]) -> Dict[str, int]:
    try:
        return d.axes_values({k: tuple(v.shape) for k, v in named.items() if hasattr(v, "shape")})
    except Exception:
        return default


def _numerical(v: Verdict) -> Dict[str, Any]:
    return {"status": "INCORRECT_NUMERICAL", "message": v.message,
            "correctness": {"max_relative_error": v.max_rel, "max_absolute_error": v.max_abs,
                            "extra": v.extra or None}}
