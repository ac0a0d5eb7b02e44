"""Correctness checks of one solution call against the reference (the default evaluator).

Order of checks, each mapped to a status of the format:

1. the call returned the right number of outputs, each a tensor of the definition's shape
   (``INCORRECT_SHAPE``) and dtype (``INCORRECT_DTYPE``), on the worker's device;
2. nothing was written outside the outputs: inputs are compared with a pristine copy after the
   call, and destination-passing outputs are views into a buffer with canary regions before and
   after them, pre-filled with a poison value so unwritten elements show up
   (``INCORRECT_NUMERICAL``, with the reason in ``correctness.extra``);
3. values: ``|out - ref| <= atol + rtol * |ref|`` elementwise per output, with per-dtype
   tolerances (:class:`~fib_runtime.bench.config.BenchConfig`); NaN must match NaN, inf must
   match inf; at most ``mismatch`` of the elements may fail (``INCORRECT_NUMERICAL``).

``max_absolute_error`` / ``max_relative_error`` are over all outputs (relative to ``|ref|``,
guarded by a tiny epsilon), NaN/inf when non-finite values disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..inputs import dtype_name, torch_dtype
from .config import BenchConfig

POISON_FLOAT = float("nan")
CANARY_FLOAT = 1234.5
CANARY_INT = 0x5A5A


@dataclass
class Verdict:
    status: str                        # an EvaluationStatus value
    message: str = ""
    max_abs: float = 0.0
    max_rel: float = 0.0
    extra: Dict[str, Any] = field(default_factory=dict)


def _poison_value(dt):
    import torch

    if dt.is_floating_point:
        return POISON_FLOAT if dt not in (getattr(torch, "float8_e4m3fn", None),) else 448.0
    if dt == torch.bool:
        return True
    return torch.iinfo(dt).min


def _canary_value(dt):
    import torch

    if dt.is_floating_point:
        return CANARY_FLOAT if dt.itemsize > 1 else 3.0
    if dt == torch.bool:
        return True
    return min(CANARY_INT, torch.iinfo(dt).max)


class GuardedOutputs:
    """Destination-passing output buffers with canary regions on both sides."""

    def __init__(self, definition, axes: Dict[str, int], device: str, guard: int):
        import torch

        self.views: List[Any] = []
        self._bufs: List[Tuple[Any, int, int, Any]] = []
        for name, spec in definition.outputs.items():
            shape = definition.shape_of(name, axes) or ()
            dt = torch_dtype(spec.dtype)
            n = math.prod(shape)
            buf = torch.empty(n + 2 * guard, dtype=dt, device=device)
            buf[:guard] = _canary_value(dt)
            buf[guard + n:] = _canary_value(dt)
            view = buf[guard:guard + n].view(shape) if shape else buf[guard:guard + 1].view(())
            view.fill_(_poison_value(dt))
            self.views.append(view)
            self._bufs.append((buf, guard, n, dt))

    def canaries_intact(self) -> List[int]:
        """Indices of outputs whose canaries were overwritten."""
        bad = []
        for i, (buf, g, n, dt) in enumerate(self._bufs):
            c = _canary_value(dt)
            if g and not (bool((buf[:g] == c).all()) and bool((buf[g + n:] == c).all())):
                bad.append(i)
        return bad


def snapshot_inputs(inputs: Dict[str, Any]) -> Dict[str, Any]:
    import torch

    return {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}


def changed_inputs(inputs: Dict[str, Any], pristine: Dict[str, Any]) -> List[str]:
    import torch

    out = []
    for k, ref in pristine.items():
        v = inputs[k]
        if not isinstance(ref, torch.Tensor):
            if not isinstance(v, type(ref)) or v != ref:
                out.append(k)
            continue
        if not isinstance(v, torch.Tensor) or v.shape != ref.shape or v.dtype != ref.dtype:
            out.append(k)
        elif not torch.equal(v, ref) and not _equal_nan(v, ref):
            out.append(k)
    return out


def _equal_nan(a, b) -> bool:
    import torch

    if not a.dtype.is_floating_point:
        return False
    return bool(torch.isclose(a.float(), b.float(), rtol=0, atol=0, equal_nan=True).all())


def check_structure(definition, outputs: Sequence[Any], axes: Dict[str, int], device: str) -> Optional[Verdict]:
    """Number, type, shape, dtype and device of the outputs; None when all are right."""
    import torch

    names = list(definition.outputs)
    if len(outputs) != len(names):
        return Verdict("INCORRECT_SHAPE", f"returned {len(outputs)} output(s), definition has "
                                          f"{len(names)} ({', '.join(names)})")
    for name, out in zip(names, outputs):
        spec = definition.outputs[name]
        want = definition.shape_of(name, axes)
        if not isinstance(out, torch.Tensor):
            if want is None and isinstance(out, (int, float, bool)):
                continue
            return Verdict("INCORRECT_SHAPE", f"output {name!r} is a {type(out).__name__}, not a tensor")
        if tuple(out.shape) != tuple(want or ()):
            return Verdict("INCORRECT_SHAPE", f"output {name!r}: shape {tuple(out.shape)}, "
                                              f"definition expects {tuple(want or ())}")
        if dtype_name(out.dtype) != spec.dtype and not (spec.dtype == "float4_e2m1" and "float4" in str(out.dtype)):
            return Verdict("INCORRECT_DTYPE", f"output {name!r}: dtype {dtype_name(out.dtype)}, "
                                              f"definition says {spec.dtype}")
        if out.device.type != torch.device(device).type:
            return Verdict("RUNTIME_ERROR", f"output {name!r} is on {out.device}, expected {device}")
    return None


def compare(definition, outputs: Sequence[Any], reference: Sequence[Any], cfg: BenchConfig) -> Verdict:
    """Elementwise comparison with per-dtype tolerances (structure already checked)."""
    import torch

    max_abs = 0.0
    max_rel = 0.0
    failures: List[str] = []
    for name, out, ref in zip(definition.outputs, outputs, reference):
        spec = definition.outputs[name]
        tol = cfg.tolerance_for(definition, spec.dtype)
        if not isinstance(out, torch.Tensor):
            out = torch.tensor(out)
            ref = torch.as_tensor(ref)
        a = out.detach().to("cpu", torch.float64) if out.dtype != torch.bool else out.detach().cpu().to(torch.float64)
        b = ref.detach().to("cpu", torch.float64) if ref.dtype != torch.bool else ref.detach().cpu().to(torch.float64)
        if a.numel() == 0:
            continue
        nan_a, nan_b = torch.isnan(a), torch.isnan(b)
        nonfinite_mismatch = (nan_a != nan_b) | ((torch.isinf(a) | torch.isinf(b)) & (a != b) & ~(nan_a & nan_b))
        finite = torch.isfinite(a) & torch.isfinite(b)
        diff = torch.where(finite, (a - b).abs(), torch.zeros_like(a))
        rel = diff / (b.abs() + 1e-12)
        bad = nonfinite_mismatch | (finite & (diff > tol.atol + tol.rtol * b.abs()))
        n_bad = int(bad.sum())
        if bool(nonfinite_mismatch.any()):
            max_abs, max_rel = math.inf, math.inf
        else:
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float(rel.max()))
        if n_bad > tol.mismatch * a.numel():
            failures.append(f"{name}: {n_bad}/{a.numel()} elements outside atol={tol.atol:g} "
                            f"rtol={tol.rtol:g}" + (" (non-finite values differ)" if bool(nonfinite_mismatch.any()) else ""))
    if failures:
        return Verdict("INCORRECT_NUMERICAL", "; ".join(failures), max_abs, max_rel)
    return Verdict("PASSED", "", max_abs, max_rel)
