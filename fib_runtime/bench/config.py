"""Benchmark configuration: timing knobs, correctness tolerances, sampling-evaluator bounds.

    cfg = BenchConfig(timeout_s=60, warmup=3, iterations=20, trials=5)
    cfg.tolerance_for(definition, "bfloat16")     # Tolerance(atol=0.01, rtol=0.02)

Tolerances: per-dtype defaults (:data:`DEFAULT_TOLERANCES`), overridden per definition, in this
order (later wins):

1. a ``tolerance`` key in the definition JSON (kept by the lossless schema), either one
   ``{"atol": .., "rtol": ..}`` for every output or ``{"<dtype>": {"atol": .., "rtol": ..}}``;
2. tags ``tol:atol=1e-2`` / ``tol:rtol=1e-2`` / ``tol:mismatch=1e-4`` on the definition;
3. ``BenchConfig.tolerances``: ``{"<definition name or fnmatch glob>": {...same forms...}}``,
   e.g. from ``fib bench --tolerance tol.json`` or ``--tolerance 'rmsnorm_*:atol=0.02,rtol=0.02'``.

``mismatch`` is the share of output elements allowed outside ``atol + rtol * |ref|`` (default 0).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    mismatch: float = 0.0  # share of elements allowed outside the tolerance

    def merged(self, d: Dict[str, Any]) -> "Tolerance":
        return Tolerance(float(d.get("atol", self.atol)), float(d.get("rtol", self.rtol)),
                         float(d.get("mismatch", self.mismatch)))


#: Per-dtype defaults: about 2-4 ulps of the output type, enough for a different reduction order.
DEFAULT_TOLERANCES: Dict[str, Tolerance] = {
    "float64": Tolerance(1e-7, 1e-7),
    "float32": Tolerance(1e-4, 1e-4),
    "float16": Tolerance(5e-3, 5e-3),
    "bfloat16": Tolerance(1e-2, 2e-2),
    "float8_e4m3fn": Tolerance(1.25e-1, 1.25e-1),
    "float8_e5m2": Tolerance(2.5e-1, 2.5e-1),
    "float4_e2m1": Tolerance(5e-1, 5e-1),
}
EXACT = Tolerance(0.0, 0.0)  # integer and bool outputs compare exactly


@dataclass
class SamplingConfig:
    """Statistical evaluator for sampling definitions (see :mod:`.sampling_eval`)."""

    support_trials: int = 100        # calls whose every sample must lie in the filtered support
    tvd_bound: float = 0.2           # max per-row total variation distance vs the exact distribution
    tvd_samples: int = 100_000       # samples per row for the TVD estimate
    tvd_rows: int = 16               # rows of the batch whose distribution is measured
    tvd_max_rows: int = 4096         # rows per call when inputs are repeated to draw many samples
    tvd_max_calls: int = 2000        # cap on solution calls for the TVD
    tvd_max_bytes: int = 1 << 30     # cap on the repeated-input buffer
    noise_fraction: float = 0.5      # when the expected sampling noise exceeds this share of the
    bins: int = 64                   # bound, TVD is measured over `bins` equal-mass bins instead
    support_eps: float = 5e-3        # slack of the top-p boundary in the support check


@dataclass
class BenchConfig:
    timeout_s: float = 120.0          # per solution (load + check + timing) in a worker
    prepare_timeout_s: float = 600.0  # per workload: inputs + reference (not charged to a solution)
    warmup: int = 3
    iterations: int = 20              # timed calls per trial
    trials: int = 5                   # median over trials (and over calls within a trial)
    l2_flush: bool = True
    time_budget_s: float = 3.0        # timed calls are cut down for slow callables
    graphs: str = "auto"              # "auto": CUDA graphs for calls shorter than graph_threshold_ms
    graph_threshold_ms: float = 0.05
    graph_calls: int = 20
    seed: int = 0
    log_cap_bytes: int = 1 << 20      # captured stdout/stderr kept per evaluation
    tolerances: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    check_inputs: bool = True         # inputs must be unchanged after the call
    guard_elems: int = 1024           # canary elements around DPS output buffers
    cpu_threads: int = 0              # torch threads of a CPU worker (0: cores / CPU workers)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "BenchConfig":
        d = dict(d)
        s = d.pop("sampling", None) or {}
        return cls(**d, sampling=SamplingConfig(**s))

    # ---- tolerances ---------------------------------------------------------------------
    def tolerance_for(self, definition, dtype: str) -> Tolerance:
        base = DEFAULT_TOLERANCES.get(dtype)
        if base is None:
            return EXACT
        extra = getattr(definition, "model_extra", None) or {}
        if isinstance(extra.get("tolerance"), dict):
            base = _apply(base, extra["tolerance"], dtype)
        tags = {}
        for t in getattr(definition, "tags", ()):
            if t.startswith("tol:") and "=" in t:
                k, _, v = t[4:].partition("=")
                tags[k] = v
        if tags:
            base = base.merged(tags)
        for pat, spec in self.tolerances.items():
            if pat == definition.name or fnmatch.fnmatchcase(definition.name, pat):
                base = _apply(base, spec, dtype)
        return base


def _apply(base: Tolerance, spec: Dict[str, Any], dtype: str) -> Tolerance:
    if any(k in spec for k in ("atol", "rtol", "mismatch")):
        base = base.merged(spec)
    for key in (dtype, "*"):
        if isinstance(spec.get(key), dict):
            base = base.merged(spec[key])
    return base


def parse_tolerance_args(values: Optional[List[str]]) -> Dict[str, Dict[str, Any]]:
    """``--tolerance`` values: a JSON file, or ``PATTERN:atol=X,rtol=Y[,mismatch=Z]``."""
    out: Dict[str, Dict[str, Any]] = {}
    for v in values or ():
        p = Path(v)
        if p.suffix == ".json" and p.is_file():
            out.update(json.loads(p.read_text()))
            continue
        pat, sep, rest = v.rpartition(":")
        if not sep:
            pat, rest = "*", v
        spec: Dict[str, Any] = {}
        for kv in rest.split(","):
            k, eq, val = kv.partition("=")
            if not eq or k.strip() not in ("atol", "rtol", "mismatch"):
                raise ValueError(f"bad --tolerance {v!r}: expected PATTERN:atol=X,rtol=Y")
            spec[k.strip()] = float(val)
        out.setdefault(pat, {}).update(spec)
    return out
