"""Tracer configuration: what to store per input (dump policies), what to keep (filter policies),
process-wide limits, which ranks record, and the ``FIB_*`` environment variables.

A :class:`Policy` applies to one definition (or a glob of names); :class:`TraceConfig` holds the
process-wide settings. Both are plain frozen dataclasses, so they are cheap to copy and compare::

    from fib_runtime.tracer import Policy, enable
    enable("/data/trace", policies={
        "top_k_sampling_from_probs_v*": Policy(dump="ints", keep_first_k=2),
        "rmsnorm_h4096": "none",                       # shorthand: dump policy only
        "gqa_paged_decode_*": ["kv_indptr", "kv_indices"],   # dump exactly these inputs
    })

Dump policies (what a kept call stores for each input; scalars, ``shape: null``, are always
written as ``scalar`` values and var-axis values are always written):

``"ints"`` (default)
    integer and bool tensors (indptr, indices, top_k, seeds) go to a safetensors blob, float
    activations are ``random`` -- the public dataset's policy (``scripts/sanitize_dumps.py``).
    Sampling definitions' per-row float parameters (``top_p``, ``min_p``, ``temperature``, a
    few bytes each) are dumped too: their real values (``top_p=1`` disables top-p) decide the
    kernel's path. Integer inputs that carry user content (token ids: ``input_ids``, ``*token_ids``, see
    ``runtime.CONTENT_INPUTS``) are *not* dumped: they are ``random``.
``"all"``
    every tensor goes to the blob (large: a 128k-vocab probs row is 512 kB in float32). Float
    activations and token ids derive from what users sent: opt in knowingly.
``"none"``
    every tensor is ``random``. Integer tensors recorded this way cannot be replayed (the
    benchmark refuses random indices), so use it only for float-only definitions.
``["name", ...]``
    exactly the named inputs go to the blob, every other tensor is ``random``.

Environment (declared in ``fib_runtime/envs.py``, read in :func:`env_config`; explicit
``enable()`` arguments win over them):

=========================== ==========================================================
``FIB_ENABLE_TRACING``      ``1`` turns tracing on at the first intercepted call
``FIB_TRACE_PATH``          dataset root to write into (default ``FIB_DATASET_PATH``)
``FIB_TRACE_DEFINITIONS``   comma-separated names or globs to trace (default: all)
``FIB_TRACE_DUMP``          default dump policy: ``ints`` / ``all`` / ``none`` / ``a,b``
``FIB_TRACE_KEEP_FIRST_K``  workloads kept per signature (default 1)
``FIB_TRACE_KEEP_PER_BUCKET`` workloads kept per power-of-two signature bucket (default 4; 0: off)
``FIB_TRACE_RATE``          records per second, whole process (default 20; 0: unlimited)
``FIB_TRACE_MAX_BYTES``     bytes written per process (default 1 GiB; 0: unlimited)
``FIB_TRACE_RANKS``         which ranks record: ``tp0`` (default: TP rank 0 of each TP
                            group, else rank 0), ``all``, ``local0``, ``every:N``, ``0,8``
=========================== ==========================================================
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

DumpSpec = Union[str, Tuple[str, ...]]
DUMP_KINDS = ("none", "ints", "all")


@dataclass(frozen=True)
class Policy:
    """Per-definition policy.

    Args:
        dump: ``"none"`` / ``"ints"`` / ``"all"`` or a tuple of input names (module docstring).
        keep_first_k: workloads kept per signature (the tuple of var-axis values).
        keep_per_bucket: distinct signatures kept per signature bucket (the dispatcher's
            power-of-two buckets: ``bit_length`` of each var-axis value, so 4..7 share one), or
            None. Bounds what a definition with a free-running axis (``num_kv_indices``) writes.
        max_workloads: distinct signatures kept for this definition (in the dataset with
            ``resume``, else in this process), or None.
    """

    dump: DumpSpec = "ints"
    keep_first_k: int = 1
    keep_per_bucket: Optional[int] = 4
    max_workloads: Optional[int] = 256

    def __post_init__(self):
        d = self.dump
        if isinstance(d, str):
            if d not in DUMP_KINDS:
                raise ValueError(f"dump policy {d!r}: expected one of {DUMP_KINDS} or a list of input names")
        else:
            object.__setattr__(self, "dump", tuple(str(x) for x in d))
        if self.keep_first_k < 0:
            raise ValueError("keep_first_k must be >= 0")


def as_policy(p: Any, base: Policy) -> Policy:
    """A Policy from a Policy, a dump shorthand (``"all"``, ``["x"]``) or a dict of fields."""
    if isinstance(p, Policy):
        return p
    if isinstance(p, Mapping):
        return replace(base, **p)
    if isinstance(p, str) or isinstance(p, (list, tuple)):
        return replace(base, dump=p if isinstance(p, str) else tuple(p))
    raise TypeError(f"cannot make a tracer Policy from {type(p).__name__}")


@dataclass(frozen=True)
class TraceConfig:
    """Process-wide tracer settings (see :func:`fib_runtime.tracer.enable`).

    Args:
        dataset_path: dataset root written into (``workloads/``, ``blob/``, ``definitions/``).
        definitions: names or globs to trace; None traces every definition seen.
        policies: ``{name or glob: Policy}``; the first matching key wins, in insertion order.
        default_policy: policy of a definition no key matches.
        rate_limit: records per second for the whole process (token bucket); None = unlimited.
        burst: token-bucket depth (records allowed at once after an idle spell).
        max_bytes: cap on bytes (blobs + JSONL lines) this process writes; None = unlimited.
        queue_size: entries waiting for the writer thread; a full queue drops (counted).
        max_pending_bytes: host bytes held by queued entries; above it new calls drop.
        ranks: which ranks record: ``"tp0"`` (default: TP rank 0 of each tensor-parallel group
            when vLLM / SGLang tell it, else global rank 0), ``"all"``, ``"local0"`` (local rank
            0 of each node), ``"every:N"`` (one per N consecutive ranks), ``"0,8"`` (these).
        write_definitions: write ``definitions/<op_type>/<name>.json`` when the dataset lacks it,
            so that the dataset validates on its own.
        install_signal_handler: flush on SIGTERM (main thread only; the previous handler is
            chained).
        flush_timeout: seconds a flush (exit, SIGTERM, :func:`flush`) waits for the writer.
        resume: count the workloads already in the dataset (per definition, read at its first
            call) against keep-first-k, the bucket and the definition caps, so a restarted
            server does not record the same signatures again. Off: limits are per process.
        export_env: also write the settings into ``os.environ`` (``FIB_ENABLE_TRACING=1``,
            ``FIB_TRACE_*``) so that worker processes spawned later (vLLM's, SGLang's) trace
            the same way; per-definition ``policies`` cannot be expressed there and stay local.
    """

    dataset_path: str = ""
    definitions: Optional[Tuple[str, ...]] = None
    policies: Tuple[Tuple[str, Policy], ...] = ()
    default_policy: Policy = field(default_factory=Policy)
    rate_limit: Optional[float] = 20.0
    burst: int = 50
    max_bytes: Optional[int] = 1 << 30
    queue_size: int = 128
    max_pending_bytes: int = 512 << 20
    ranks: str = "tp0"
    write_definitions: bool = True
    install_signal_handler: bool = True
    flush_timeout: float = 10.0
    resume: bool = True
    export_env: bool = False

    def selected(self, name: str) -> bool:
        if self.definitions is None:
            return True
        return any(name == p or fnmatch.fnmatchcase(name, p) for p in self.definitions)

    def policy_for(self, name: str) -> Policy:
        for pat, pol in self.policies:
            if name == pat or fnmatch.fnmatchcase(name, pat):
                return pol
        return self.default_policy


# ---- environment ------------------------------------------------------------------------------
# Every variable is declared (name, default, help) in fib_runtime/envs.py; only variables that
# are set override enable()'s defaults.

def _env(name: str):
    from fib_runtime import envs

    return envs.get(name) if envs.is_set(name) else None


def tracing_requested() -> bool:
    """``FIB_ENABLE_TRACING`` is set to a true value."""
    from fib_runtime import envs

    return bool(envs.FIB_ENABLE_TRACING)


def env_config() -> Dict[str, Any]:
    """``enable()`` keyword arguments taken from ``FIB_TRACE_*`` (only the variables that are set)."""
    from fib_runtime import envs

    out: Dict[str, Any] = {}
    path = envs.FIB_TRACE_PATH or envs.FIB_DATASET_PATH
    if path:
        out["dataset_path"] = path
    if _env("FIB_TRACE_DEFINITIONS"):
        out["definitions"] = list(envs.FIB_TRACE_DEFINITIONS)
    base = Policy()
    d = _env("FIB_TRACE_DUMP")
    if d:
        base = replace(base, dump=d if d in DUMP_KINDS else tuple(x.strip() for x in d.split(",") if x.strip()))
    if _env("FIB_TRACE_KEEP_FIRST_K") is not None:
        base = replace(base, keep_first_k=max(0, envs.FIB_TRACE_KEEP_FIRST_K))
    if _env("FIB_TRACE_KEEP_PER_BUCKET") is not None:
        v = envs.FIB_TRACE_KEEP_PER_BUCKET
        base = replace(base, keep_per_bucket=None if v <= 0 else v)
    if base != Policy():
        out["default_policy"] = base
    if _env("FIB_TRACE_RATE") is not None:
        v = envs.FIB_TRACE_RATE
        out["rate_limit"] = None if v <= 0 or v == float("inf") else v
    if _env("FIB_TRACE_MAX_BYTES") is not None:
        v = envs.FIB_TRACE_MAX_BYTES
        out["max_bytes"] = None if v <= 0 else v
    if _env("FIB_TRACE_RANKS"):
        out["ranks"] = envs.FIB_TRACE_RANKS
    return out


# ---- ranks -------------------------------------------------------------------------------------

#: engine modules whose ``get_tensor_model_parallel_rank()`` gives the rank inside a TP group.
#: They are only looked up in ``sys.modules`` (never imported here).
TP_MODULES = ("vllm.distributed.parallel_state", "sglang.srt.distributed.parallel_state")


def tp_rank() -> Optional[int]:
    """Rank inside the tensor-parallel group, from an engine already imported; None if unknown."""
    import sys

    for name in TP_MODULES:
        mod = sys.modules.get(name)
        if mod is None:
            continue
        try:
            ready = getattr(mod, "model_parallel_is_initialized", None)
            if ready is not None and not ready():
                continue
            return int(mod.get_tensor_model_parallel_rank())
        except Exception:  # groups not built yet
            continue
    return None


def current_rank() -> Tuple[int, int, Optional[int], bool]:
    """``(global rank, local rank, TP rank or None, final)``.

    The global rank is torch.distributed's once initialised, else ``RANK`` / ``LOCAL_RANK`` from
    the environment (the launchers' variables, torchrun's; not fib-runtime's, so they are read
    here rather than declared in ``fib_runtime/envs.py``). ``final`` is True once
    torch.distributed is initialised and, when an engine module of :data:`TP_MODULES` is loaded,
    its TP groups exist: the answer cannot change any more.
    """
    env = os.environ
    tp = tp_rank()
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            r = int(dist.get_rank())
            import sys

            engine = any(m in sys.modules for m in TP_MODULES)
            return r, int(env.get("LOCAL_RANK", r)), tp, tp is not None or not engine
    except Exception:  # a half-initialised process group: fall back to the environment
        pass
    r = int(env.get("RANK", env.get("LOCAL_RANK", 0)) or 0)
    return r, int(env.get("LOCAL_RANK", r) or 0), tp, False


def rank_records(spec: str, rank: int, local_rank: int, tp: Optional[int] = None) -> bool:
    """Whether this process records under the ``ranks`` spec (see :class:`TraceConfig`).

    ``tp0`` (the default): rank 0 of each tensor-parallel group when the engine's TP rank is
    known (so each data-parallel replica records its own traffic, once), else global rank 0.
    """
    s = str(spec).strip().lower()
    if s in ("all", "*"):
        return True
    if s == "tp0":
        return tp == 0 if tp is not None else rank == 0
    if s == "local0":
        return local_rank == 0
    if s.startswith("every:"):
        n = max(1, int(s.split(":", 1)[1]))
        return rank % n == 0
    return rank in {int(x) for x in s.split(",") if x.strip()}


def export_to_env(cfg: TraceConfig) -> None:
    """Write ``cfg`` (less its per-definition policies) as ``FIB_*`` variables for child processes."""
    p = cfg.default_policy
    env = {
        "FIB_ENABLE_TRACING": "1",
        "FIB_TRACE_PATH": cfg.dataset_path,
        "FIB_TRACE_DEFINITIONS": ",".join(cfg.definitions or ()),
        "FIB_TRACE_DUMP": p.dump if isinstance(p.dump, str) else ",".join(p.dump),
        "FIB_TRACE_KEEP_FIRST_K": str(p.keep_first_k),
        "FIB_TRACE_KEEP_PER_BUCKET": str(p.keep_per_bucket or 0),
        "FIB_TRACE_RATE": str(cfg.rate_limit or 0),
        "FIB_TRACE_MAX_BYTES": str(cfg.max_bytes or 0),
        "FIB_TRACE_RANKS": cfg.ranks,
    }
    for k, v in env.items():
        if v == "" and k == "FIB_TRACE_DEFINITIONS":
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def build_config(dataset_path=None, definitions=None, policies=None, **options) -> TraceConfig:
    """Merge explicit arguments over the environment into a :class:`TraceConfig`."""
    kw = env_config()
    base = options.pop("default_policy", None) or kw.pop("default_policy", None) or Policy()
    base = as_policy(base, Policy())
    kw.pop("default_policy", None)
    if dataset_path is not None:
        kw["dataset_path"] = dataset_path
    if definitions is not None:
        kw["definitions"] = definitions
    kw.update(options)
    if not kw.get("dataset_path"):
        raise ValueError("tracing needs a dataset path: pass dataset_path= or set FIB_TRACE_PATH / FIB_DATASET_PATH")
    kw["dataset_path"] = os.fspath(kw["dataset_path"])
    defs = kw.get("definitions")
    if defs is not None:
        if isinstance(defs, str):
            defs = [defs]
        kw["definitions"] = tuple(d if isinstance(d, str) else d.name if hasattr(d, "name") else d["name"]
                                  for d in defs)
    pols: Sequence = ()
    if policies:
        pols = tuple((str(k), as_policy(v, base)) for k, v in dict(policies).items())
    return TraceConfig(policies=tuple(pols), default_policy=base, **kw)
