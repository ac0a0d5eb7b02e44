"""Every ``FIB_*`` environment variable fib-runtime reads, in one place.

Values are read from ``os.environ`` when accessed (``envs.FIB_STRICT``), never cached here, so a
test can ``monkeypatch.setenv`` and see the new value. Hot paths never read the environment:
the dispatcher reads what it needs once, in :func:`fib_runtime.dispatch.enable`, and keeps it.

    from fib_runtime import envs
    if envs.FIB_ENABLE_APPLY:
        ...
    envs.describe()          # [(name, current value, default, help), ...] for docs and the CLI

Names shared with flashinfer-bench keep its meaning: ``FIB_ENABLE_APPLY``, ``FIB_ENABLE_TRACING``,
``FIB_DATASET_PATH``, ``FIB_CACHE_PATH``.

Parsing rules: booleans accept ``1/true/yes/on`` and ``0/false/no/off`` (any case; anything
else is the default); lists are comma-separated ``fnmatch`` patterns (blank items dropped);
numbers that do not parse are the default. A bad value never raises.

Other helpers (tracer, adapters, kernels) add their variables to :data:`_SPECS` below, one line
each, and read them the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["describe", "get", "is_set", "names"]

_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f", ""}


def _bool(raw: str, default: bool) -> bool:
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    return default


def _str(raw: str, default: Optional[str]) -> Optional[str]:
    v = raw.strip()
    return v if v else default


def _path(raw: str, default: Optional[str]) -> Optional[str]:
    v = raw.strip()
    return os.path.expanduser(v) if v else (os.path.expanduser(default) if default else None)


def _float(raw: str, default: float) -> float:
    try:
        return float(raw)
    except ValueError:
        return default


def _int(raw: str, default: int) -> int:
    try:
        return int(raw)
    except ValueError:
        return default


def _list(raw: str, default: Tuple[str, ...]) -> Tuple[str, ...]:
    items = tuple(p.strip() for p in raw.split(",") if p.strip())
    return items if raw.strip() else default


@dataclass(frozen=True)
class _Spec:
    parse: Callable[[str, Any], Any]
    default: Any
    help: str


_SPECS: Dict[str, _Spec] = {
    # ---- dispatcher (fib_runtime.dispatch) ------------------------------------------------
    "FIB_ENABLE_APPLY": _Spec(_bool, False,
        "Route intercepted calls through the dispatcher (apply). Off: every call runs the original."),
    "FIB_DATASET_PATH": _Spec(_path, None,
        "FlashInfer Trace dataset root (definitions/, solutions/, traces/). Unset: the dataset embedded in the package (fib_runtime/data/default_dataset)."),
    "FIB_CACHE_PATH": _Spec(_path, "~/.cache/fib-runtime",
        "Cache folder: compiled cuda/cpp solutions (one folder per content hash), python solution sources."),
    "FIB_STRICT": _Spec(_bool, False,
        "Strict mode: a solution that fails to load, raises or returns bad outputs re-raises instead of falling back."),
    "FIB_ALLOW_DEFINITIONS": _Spec(_list, (),
        "Comma-separated fnmatch patterns: only these definitions are dispatched (empty: all)."),
    "FIB_DENY_DEFINITIONS": _Spec(_list, (),
        "Comma-separated fnmatch patterns: these definitions always run the original (deny wins over allow)."),
    "FIB_ALLOW_SOLUTIONS": _Spec(_list, (),
        "Comma-separated fnmatch patterns: only these solutions may be chosen (empty: all)."),
    "FIB_DENY_SOLUTIONS": _Spec(_list, (),
        "Comma-separated fnmatch patterns: these solutions are never chosen (deny wins over allow)."),
    "FIB_HARDWARE": _Spec(_str, None,
        "Hardware class to select traces for (e.g. H200, A800, CPU; '*' = any). Unset: detected from device 0."),
    "FIB_RELOAD_INTERVAL": _Spec(_float, 2.0,
        "Seconds between dataset change checks of the hot-reload poller (0: no polling; reload() still works)."),
    "FIB_BUILTINS": _Spec(_str, "default",
        "Built-in solutions: 'default' (used where no traced winner exists), 'traced' (only when traces pick them), 'off'."),
    "FIB_BUCKET_MAX_DISTANCE": _Spec(_int, 0,
        "Largest power-of-two bucket distance used for unseen signatures (0: unlimited)."),
    "FIB_WARMUP": _Spec(_bool, True,
        "Build/load every candidate solution when the dispatcher is enabled (off: only `fib warmup` builds)."),
    # ---- tracer (fib_runtime.tracer) ------------------------------------------------------
    "FIB_ENABLE_TRACING": _Spec(_bool, False,
        "Record workloads of intercepted calls (the tracer)."),
    "FIB_TRACE_PATH": _Spec(_path, None,
        "Dataset root the tracer writes workloads into (unset: FIB_DATASET_PATH)."),
    "FIB_TRACE_DEFINITIONS": _Spec(_list, (),
        "Comma-separated fnmatch patterns: only these definitions are traced (empty: all)."),
    "FIB_TRACE_DUMP": _Spec(_str, "ints",
        "Default dump policy: 'ints' (int/bool tensors to blobs, floats random), 'all', 'none', or input names 'a,b'."),
    "FIB_TRACE_KEEP_FIRST_K": _Spec(_int, 1,
        "Workloads the tracer keeps per signature (tuple of var-axis values)."),
    "FIB_TRACE_KEEP_PER_BUCKET": _Spec(_int, 4,
        "Workloads kept per power-of-two signature bucket (0: no bucket limit)."),
    "FIB_TRACE_RATE": _Spec(_float, 20.0,
        "Workloads recorded per second, whole process (token bucket; 0: unlimited)."),
    "FIB_TRACE_MAX_BYTES": _Spec(_int, 1 << 30,
        "Bytes (blobs + JSONL lines) one process may write (0: unlimited)."),
    "FIB_TRACE_RANKS": _Spec(_str, "tp0",
        "Ranks that record: 'tp0' (TP rank 0 of each TP group, else rank 0), 'all', 'local0', 'every:N', or a list '0,8'."),
    # ---- metrics (fib_runtime.metrics) ----------------------------------------------------
    "FIB_METRICS": _Spec(_bool, True,
        "Export Prometheus metrics (the dispatcher's in-process stats() work either way)."),
    # ---- precompiled kernels (fib_runtime.kernels; read by the loader / the C++ launch code) --
    "FIB_KERNELS_DIR": _Spec(_path, None,
        "Folder holding libfib_<family>.so instead of the package's _bin (e.g. a profiling build)."),
    "FIB_DISABLE_KERNELS": _Spec(_str, None,
        "'1' or a comma list of families: report those kernels unavailable (the dispatcher falls back)."),
    "FIB_SAMPLING_CLUSTER": _Spec(_int, 0,
        "Sampling kernel choice (benchmarks): 0 automatic; 1..8 resident-row cluster kernel with that many "
        "CTAs per row; -1 streaming kernel; -2 one-pass plain kernel (calls without top-k); 999 the policy "
        "before the filter and plain kernels; 1000+S filter kernel; 2000 split-row kernel; 3000+S two-pass "
        "top-k kernel (3000: automatic S); 4000+S the two-pass kernel with two CTAs per SM (4000: S = 1); 5000+S / "
        "6000+S the same two kernels' large-k instantiation (3000 / 4000 knobs: the default one); 7000+S the "
        "cluster kernel with S CTAs per row in its gathered-tail instantiation (the one calls whose every row has "
        "top_k > FIB_SAMPLING_REJECT_MIN_K run: a scalar top_k or the min_top_k hint)."),
    "FIB_SAMPLING_FILTER_MIN_TOKENS": _Spec(_float, 6.0e6,
        "Automatic policy: top-k sampling calls of at least this many tokens (B*V, any dtype) "
        "and B >= 48 use the two-pass kernel on sm_90 (read once per device by the C++ side)."),
    "FIB_SAMPLING_TWOPASS_MAX_B": _Spec(_int, 256,
        "Automatic policy (sm_90): top-k sampling batches from 48 rows up to below this size (and from "
        "FIB_SAMPLING_FILTER_MIN_TOKENS tokens or FIB_SAMPLING_STREAM_MIN_B rows) use the two-pass kernel "
        "with one CTA per SM; batches from this size (and FIB_SAMPLING_FILTER_MIN_TOKENS tokens) the two-pass "
        "kernel with two CTAs per SM."),
    "FIB_SAMPLING_TWOPASS_LARGE_K": _Spec(_bool, True,
        "Automatic policy (sm_90): calls whose every row's top_k is known on the host to exceed 128 (a scalar "
        "top_k, or the min_top_k hint) run the two-pass kernel's large-k instantiation (speculative candidates, "
        "the rejection tail); 0 keeps them on the default instantiation (docs/kernels.md, \"Large k\")."),
    "FIB_SAMPLING_TWOPASS_ROW_BOUND": _Spec(_bool, True,
        "Automatic policy (sm_90): top_k_first calls of the two-pass kernel's large-k instantiation with one CTA "
        "per SM and several CTAs per row run its row's-bound kernel (every rank bounds the row's k-th largest "
        "from one sample of the whole row; docs/kernels.md, \"Large k\"); 0 keeps the slice's bound."),
    "FIB_SAMPLING_TWOPASS2_MIN_B": _Spec(_int, 0,
        "Automatic policy (sm_90): two-pass batches from this size below FIB_SAMPLING_TWOPASS_MAX_B run the "
        "two-pass kernel with two CTAs per SM and 2 #SMs / B CTAs per row (0: never; on the H100 every such "
        "layout was slower than the default at B=64 and 128: docs/sampling-journal.md, \"An H100 call\")."),
    "FIB_SAMPLING_PDL": _Spec(_bool, True,
        "sm_90: the sampling kernels launch with programmatic stream serialization (programmatic dependent "
        "launch): a call's CTAs may become resident while the kernel ahead of it on the stream drains, and wait "
        "for it before reading anything; 0 launches them after it as usual."),
    "FIB_SAMPLING_STREAM_MIN_B": _Spec(_int, 96,
        "Below the filter threshold: batches from this size use the streaming kernel, smaller ones the cluster kernel."),
    "FIB_SAMPLING_PLAIN_MIN_B": _Spec(_int, 128,
        "Plain sampling (no top-k, top-p or min-p) of batches from this size runs the one-pass plain kernel "
        "(from half of it where rows are at most 320 KB)."),
    "FIB_SAMPLING_REJECT_MIN_K": _Spec(_int, 512,
        "Cluster kernel (sample_row): top_k_first rows with a top_k above this sample top-p by rejection "
        "from the kept top-k instead of sorting it (0: never). Below 1024 it reaches only top_k_first sampling "
        "calls with top_p: joint calls and calls without top_p run as at 1024."),
    "FIB_SAMPLING_GATHER_CAP": _Spec(_int, 4032,
        "Cluster kernel (sample_row): in calls whose every row has top_k > FIB_SAMPLING_REJECT_MIN_K (a scalar "
        "top_k or the min_top_k hint), top_k_first rows finish on one CTA once a radix pass leaves at most this many "
        "tokens at or above the k-th largest key's bucket (the gathered tail; at most 4032, 0: never)."),
    "FIB_SAMPLING_GATHER_DIRECT": _Spec(_bool, True,
        "Cluster kernel (sample_row), the gathered tail's rows: where the delegates bound the k-th largest key (6-8 CTAs "
        "per row), every token at or above that bound goes to one CTA before any radix pass when at most "
        "FIB_SAMPLING_GATHER_CAP reach it (0: only after a radix pass)."),
    "FIB_SAMPLING_REJECT_JOINT_MIN_K": _Spec(_int, 256,
        "Cluster kernel (sample_row): peaked joint rows with a top_k above this sample by rejection from the "
        "whole row, checking top-k rank, min-p and nucleus per candidate, without a top-k select (0: never)."),
    "FIB_SAMPLING_CLUSTER_PUSH_MAX_S": _Spec(_int, 2,
        "Cluster kernel (sm_90): fp32 top-k calls from probs in clusters of 2..this many CTAs per row run its exchange "
        "instantiation (sampler_kernel<kF32, true, false, true>: delegates and the ranks' ordered top-k lists sent "
        "with st.async, no cluster barrier for rows with top_k <= 256; 0 or 1: never)."),
    "FIB_SAMPLING_CLUSTER_PUSH_LOGITS": _Spec(_bool, False,
        "Cluster kernel (sm_90): calls from logits take the exchange instantiation as well (FIB_SAMPLING_CLUSTER_PUSH_MAX_S "
        "bounds the cluster size); off by default, for A/B runs."),
    "FIB_SAMPLING_EXPLICIT_STREAM": _Spec(_bool, False,
        "Pass torch's current stream explicitly instead of tvm-ffi's stream context (debugging)."),
}


def names() -> List[str]:
    """All known variable names."""
    return list(_SPECS)


def get(name: str) -> Any:
    """Current parsed value of ``name`` (its default when unset or unparsable)."""
    spec = _SPECS[name]
    raw = os.environ.get(name)
    if raw is None:
        d = spec.default
        return os.path.expanduser(d) if spec.parse is _path and d else d
    return spec.parse(raw, spec.default)


def is_set(name: str) -> bool:
    """Whether ``name`` is present in the environment (even if empty)."""
    return name in os.environ


def describe() -> List[Tuple[str, Any, Any, str]]:
    """``(name, current value, default, help)`` for every variable."""
    return [(n, get(n), s.default, s.help) for n, s in _SPECS.items()]


def __getattr__(name: str) -> Any:  # PEP 562: envs.FIB_STRICT reads the environment now
    if name in _SPECS:
        return get(name)
    raise AttributeError(f"module 'fib_runtime.envs' has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(list(globals()) + list(_SPECS))
