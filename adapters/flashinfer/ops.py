"""Op specs of the FlashInfer adapter: how one FlashInfer call maps to a Definition call.

Each spec is data (parameter order, the parameters that must keep their default for us to
dispatch, per-row parameters) plus a tiny binder. Binding never uses ``inspect.signature``: it
zips ``args`` with the parameter tuple and checks ``kwargs`` against it (hot path). A call the
Definition cannot express exactly (``indices=``, a ``generator``/``seed``/``offset``,
``return_valid=True``, non-float32 rows, an unknown keyword...) binds to ``None`` and runs
FlashInfer unchanged, so RNG streams and return types stay FlashInfer's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from fib_runtime.adapters.base import Call, note_min_top_k
from fib_runtime.definitions import norm as _norm_defs
from fib_runtime.definitions import sampling as _sampling_defs

_SAMPLING_TAIL = ("indices", "deterministic", "generator", "check_nan", "seed", "offset", "return_valid")
_SAMPLING_DEFAULTS = {"indices": None, "generator": None, "check_nan": False, "seed": None,
                      "offset": None, "return_valid": False}
#: keywords accepted and ignored (hints that do not change the result)
_IGNORED = frozenset({"deterministic", "is_deterministic", "top_k_max", "enable_pdl"})


def _collect(params: Tuple[str, ...], args: tuple, kwargs: dict) -> Optional[Dict[str, Any]]:
    if len(args) > len(params):
        return None
    vals = dict(zip(params, args))
    for k, v in kwargs.items():
        if k in vals or (k not in params and k not in _IGNORED):
            return None  # duplicate or unknown keyword: FlashInfer decides (and raises)
        vals[k] = v
    return vals


def _defaults_ok(vals: dict, must: dict) -> bool:
    for k, d in must.items():
        if k in vals:
            v = vals[k]
            if d is None:
                if v is not None:
                    return False
            elif v is not d and v != d:
                return False
    return True


_Tensor = torch.Tensor


def _row(v: Any, batch: int, dtype: torch.dtype, ref: Any) -> Optional[torch.Tensor]:
    """A per-row parameter as a ``[batch]`` tensor of ``dtype`` (scalars broadcast on the device
    of ``ref``, a tensor or a device)."""
    if type(v) is _Tensor or isinstance(v, _Tensor):
        shape = v.shape
        if len(shape) == 1 and shape[0] == batch:
            return v if v.dtype is dtype else v.to(dtype)
        if len(shape) == 0:
            return v.to(dtype).expand(batch).contiguous()
        return None
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        device = ref.device if isinstance(ref, _Tensor) else ref
        return torch.full((batch,), v, dtype=dtype, device=device)
    return None


_ROW_DTYPES = {"top_k": torch.int32, "top_p": torch.float32, "min_p": torch.float32}


@dataclass(frozen=True)
class SamplingSpec:
    """One ``flashinfer.sampling`` function: ``kind`` is the Definition kind (name prefix)."""

    kind: str
    params: Tuple[str, ...]
    main: str                      # "probs" or "logits"
    rows: Tuple[str, ...] = ()     # per-row parameters in definition order
    must_default: Dict[str, Any] = field(default_factory=dict)
    order_param: bool = False      # has filter_apply_order (top_k_first | joint)
    output: str = "samples"        # samples | probs | logits

    def bind(self, instance: Any, args: tuple, kwargs: dict) -> Optional[Call]:
        nrows = len(self.rows)
        if not kwargs and len(args) == nrows + 1:
            # fast path (the engines' common form): every optional parameter at its default
            x = args[0]
            rows = args[1:]
            kind = self.kind
        else:
            vals = _collect(self.params, args, kwargs)
            if vals is None or not _defaults_ok(vals, self.must_default):
                return None
            x = vals.get(self.main)
            rows = tuple(vals.get(r) for r in self.rows)
            kind = self.kind
            if self.order_param:
                order = vals.get("filter_apply_order", "top_k_first")
                if order == "joint":
                    kind += "_joint"
                elif order != "top_k_first":
                    return None
        if not isinstance(x, _Tensor) or x.dtype is not torch.float32:
            return None
        shape = x.shape
        if len(shape) != 2:
            return None
        batch, vocab = shape
        if nrows:
            conv = []
            for r, v in zip(self.rows, rows):
                t = _row(v, batch, _ROW_DTYPES[r], x)
                if t is None:
                    return None
                if r == "top_k" and type(v) is int:
                    note_min_top_k(t, v)  # (a broadcast scalar: its own minimum)
                conv.append(t)
            inputs = (x, *conv)
        else:
            inputs = (x,)
        key = (kind, vocab)
        meta = _META.get(key)
        if meta is None:
            meta = _META[key] = (_sampling_defs.name(kind, vocab), _sampling_factory(kind, vocab))
        return Call(meta[0], inputs, self._names, _ADAPT[self.output], meta[1])

    def __post_init__(self) -> None:
        object.__setattr__(self, "_names", (self.main,) + self.rows)


#: (kind, vocab) -> (definition name, definition factory)
_META: Dict[tuple, tuple] = {}


def _sampling_factory(kind: str, vocab: int) -> Callable[[], dict]:
    return lambda: _sampling_defs.definition(kind, vocab)


def _first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


def _as_int32(out: Any) -> torch.Tensor:
    t = _first(out)
    return t if t.dtype == torch.int32 else t.to(torch.int32)


def _as_f32(out: Any) -> torch.Tensor:
    t = _first(out)
    return t if t.dtype == torch.float32 else t.to(torch.float32)


_ADAPT = {"samples": _as_int32, "probs": _as_f32, "logits": _as_f32}


def _sampling(kind, main, rows=(), order=False, output="samples", tail=_SAMPLING_TAIL,
              must=_SAMPLING_DEFAULTS) -> SamplingSpec:
    params = (main,) + tuple(rows) + (("indices", "filter_apply_order") + tail[1:] if order else tail)
    return SamplingSpec(kind, params, main, tuple(rows), dict(must), order, output)


SAMPLING_SPECS: Dict[str, SamplingSpec] = {
    "sampling_from_probs": _sampling("sampling_from_probs", "probs"),
    "sampling_from_logits": _sampling("sampling_from_logits", "logits", tail=_SAMPLING_TAIL[:-1]),
    "top_p_sampling_from_probs": _sampling("top_p_sampling_from_probs", "probs", ("top_p",)),
    "top_k_sampling_from_probs": _sampling("top_k_sampling_from_probs", "probs", ("top_k",)),
    "min_p_sampling_from_probs": _sampling("min_p_sampling_from_probs", "probs", ("min_p",)),
    "top_k_top_p_sampling_from_logits": _sampling(
        "top_k_top_p_sampling_from_logits", "logits", ("top_k", "top_p"), order=True,
        tail=_SAMPLING_TAIL[:-1]),
    "top_k_top_p_sampling_from_probs": _sampling(
        "top_k_top_p_sampling_from_probs", "probs", ("top_k", "top_p"), order=True),
    "top_p_renorm_probs": SamplingSpec("top_p_renorm_probs", ("probs", "top_p", "is_deterministic"),
                                       "probs", ("top_p",), {}, False, "probs"),
    "top_k_renorm_probs": SamplingSpec("top_k_renorm_probs", ("probs", "top_k", "is_deterministic"),
                                       "probs", ("top_k",), {}, False, "probs"),
    "top_k_mask_logits": SamplingSpec("top_k_mask_logits", ("logits", "top_k"), "logits",
                                      ("top_k",), {}, False, "logits"),
    # flashinfer.cake_sampling.top_k_top_p_sampling_from_probs (keyword-only tail)
    "cake_top_k_top_p_sampling_from_probs": SamplingSpec(
        "top_k_top_p_sampling_from_probs",
        ("probs", "top_k", "top_p", "top_k_max", "generator", "philox_seed", "philox_offset", "out",
         "renorm_out", "workspace", "enable_pdl"),
        "probs", ("top_k", "top_p"),
        {"generator": None, "philox_seed": None, "philox_offset": None, "out": None,
         "renorm_out": None, "workspace": None}, False, "samples"),
}


# --------------------------------------------------------------------------------------------
# norm


@dataclass(frozen=True)
class NormSpec:
    kind: str  # rmsnorm | fused_add_rmsnorm

    def bind(self, instance: Any, args: tuple, kwargs: dict) -> Optional[Call]:
        if self.kind == "rmsnorm":
            vals = _collect(("input", "weight", "eps", "out", "enable_pdl"), args, kwargs)
            if vals is None or vals.get("out") is not None:
                return None
        else:
            vals = _collect(("input", "residual", "weight", "eps", "enable_pdl"), args, kwargs)
            if vals is None:
                return None
        x, w = vals.get("input"), vals.get("weight")
        eps = vals.get("eps", 1e-6)
        if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor) or x.dim() != 2:
            return None
        if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16:
            return None  # the public definitions are bf16
        if not isinstance(eps, float) or abs(eps - _norm_defs.EPS) > 1e-12:
            return None  # definitions fix eps = 1e-5
        hidden = x.shape[1]
        if w.dim() != 1 or w.shape[0] != hidden:
            return None
        name = _norm_defs.name(self.kind, hidden)
        factory = lambda: _norm_defs.definition(self.kind, hidden)  # noqa: E731
        if self.kind == "rmsnorm":
            return Call(name, (x, w), ("hidden_states", "weight"), adapt=_first,
                        definition_factory=factory)
        r = vals.get("residual")
        if not isinstance(r, torch.Tensor) or r.shape != x.shape or r.dtype != x.dtype:
            return None

        def adapt(out: Any, x=x, r=r) -> None:
            y = _first(out)
            r.add_(x)
            x.copy_(y)
            return None

        return Call(name, (x, r, w), ("hidden_states", "residual", "weight"), adapt=adapt,
                    definition_factory=factory)


# --------------------------------------------------------------------------------------------
# cascade (names follow flashinfer.trace: merge_state_h{H}_d{D}; definitions by the cascade owner)


_DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


def _cascade_factory(name: str, dtype: Any = None, **kw: Any) -> Callable[[], Optional[dict]]:
    """Definition generator of a cascade / attention name (by the cascade owner's generator), at
    the call's dtype; the bare name when no generator knows it (the tracer then looks it up)."""
    def make():
        from fib_runtime.definitions import generate

        extra = dict(kw)
        if dtype in _DTYPE_NAMES:
            extra["dtype"] = _DTYPE_NAMES[dtype]
        return generate(name, **extra) or name

    return make


@dataclass(frozen=True)
class MergeSpec:
    kind: str  # merge_state | merge_state_in_place | merge_states

    def bind(self, instance: Any, args: tuple, kwargs: dict) -> Optional[Call]:
        if self.kind == "merge_state":
            names = ("v_a", "s_a", "v_b", "s_b")
            vals = _collect(names, args, kwargs)
        elif self.kind == "merge_state_in_place":
            names = ("v", "s", "v_other", "s_other")
            vals = _collect(names + ("mask",), args, kwargs)
            if vals is not None and vals.get("mask") is not None:
                return None
        else:
            names = ("v", "s")
            vals = _collect(names, args, kwargs)
        if vals is None or any(not isinstance(vals.get(n), torch.Tensor) for n in names):
            return None
        v = vals[names[0]]
        if self.kind == "merge_states":
            if v.dim() != 4:
                return None
            heads, dim = v.shape[2], v.shape[3]
        else:
            if v.dim() != 3:
                return None
            heads, dim = v.shape[1], v.shape[2]
        if any(vals[n].dtype != torch.float32 for n in names if n.startswith("s")):
            return None
        name = f"{self.kind}_h{heads}_d{dim}"
        inputs = tuple(vals[n] for n in names)
        if self.kind == "merge_state_in_place":
            def adapt(out: Any, v=vals["v"], s=vals["s"]) -> None:
                v.copy_(out[0])
                s.copy_(out[1])
                return None
        else:
            def adapt(out: Any) -> tuple:
                return (out[0], out[1])
        return Call(name, inputs, names, adapt=adapt,
                    definition_factory=_cascade_factory(name, v.dtype))


@dataclass(frozen=True)
class PlanRecorder:
    """``plan`` / ``begin_forward`` of a wrapper: never dispatched, remembers the plan arguments
    on the instance (``_fib_plan``) so that ``run`` can name its Definition."""

    def bind(self, instance: Any, args: tuple, kwargs: dict) -> None:
        if instance is not None:
            try:
                instance._fib_plan = (args, dict(kwargs))
            except Exception:
                pass
        return None


_CASCADE_PLAN = ("qo_indptr_arr", "paged_kv_indptr_arr", "paged_kv_indices_arr",
                 "paged_kv_last_page_len", "num_qo_heads", "num_kv_heads", "head_dim",
                 "page_size", "causal", "pos_encoding_mode", "use_fp16_qk_reduction", "sm_scale",
                 "window_left", "logits_soft_cap", "rope_scale", "rope_theta", "q_data_type",
                 "kv_data_type")
_CASCADE_PLAN_DEFAULTS = {"causal": False, "pos_encoding_mode": "NONE", "window_left": -1,
                          "logits_soft_cap": None, "rope_scale": None, "rope_theta": None,
                          "use_fp16_qk_reduction": False}


@dataclass(frozen=True)
class CascadeRunSpec:
    """``MultiLevelCascadeAttentionWrapper.run(q, paged_kv_cache)`` ->
    ``multi_level_cascade_run_h{Hq}_kv{Hkv}_d{D}_ps{P}`` (flashinfer.trace's name), inputs
    ``q, k_cache, v_cache`` then per level ``qo_indptr_{i}, kv_indptr_{i}, kv_indices_{i},
    kv_last_page_len_{i}``, then ``sm_scale`` (a Python float)."""

    def bind(self, instance: Any, args: tuple, kwargs: dict) -> Optional[Call]:
        plan = getattr(instance, "_fib_plan", None)
        if plan is None or getattr(instance, "_kv_layout", "NHD") != "NHD":
            return None
        pv = _collect(_CASCADE_PLAN, plan[0], plan[1])
        if pv is None or not _defaults_ok(pv, _CASCADE_PLAN_DEFAULTS):
            return None
        vals = _collect(("q", "paged_kv_cache"), args, kwargs)
        if vals is None:
            return None
        q, kv = vals.get("q"), vals.get("paged_kv_cache")
        if isinstance(kv, (tuple, list)) and len(kv) == 2:
            k_cache, v_cache = kv
        elif isinstance(kv, torch.Tensor) and kv.dim() == 5:
            k_cache, v_cache = kv[:, 0], kv[:, 1]
        else:
            return None
        if not isinstance(q, torch.Tensor) or q.dim() != 3:
            return None
        try:
            hq, hkv, d, ps = (int(pv[k]) for k in ("num_qo_heads", "num_kv_heads", "head_dim", "page_size"))
        except (KeyError, TypeError, ValueError):
            return None
        sm_scale = pv.get("sm_scale")
        sm_scale = float(sm_scale) if sm_scale is not None else d ** -0.5
        levels = len(pv["qo_indptr_arr"])
        inputs, names = [q, k_cache, v_cache], ["q", "k_cache", "v_cache"]
        for i in range(levels):
            for key, nm in (("qo_indptr_arr", "qo_indptr"), ("paged_kv_indptr_arr", "kv_indptr"),
                            ("paged_kv_indices_arr", "kv_indices"),
                            ("paged_kv_last_page_len", "kv_last_page_len")):
                inputs.append(pv[key][i])
                names.append(f"{nm}_{i}")
        inputs.append(sm_scale)
        names.append("sm_scale")
        name = f"multi_level_cascade_run_h{hq}_kv{hkv}_d{d}_ps{ps}"
        return Call(name, tuple(inputs), tuple(names), adapt=_first,
                    definition_factory=_cascade_factory(name, q.dtype, num_levels=levels))


# --------------------------------------------------------------------------------------------
# attention wrappers (decode / prefill): run and its aliases


_RUN_PARAMS = ("q", "paged_kv_cache", "q_scale", "k_scale", "v_scale", "out", "lse", "return_lse",
               "enable_pdl", "window_left", "sinks", "q_len_per_req")
_RUN_DEFAULTS = {"q_scale": None, "out": None, "lse": None, "sinks": None, "window_left": None}


@dataclass(frozen=True)
class AttentionRunSpec:
    """``Batch{Decode,Prefill}...Wrapper.run`` and ``run_return_lse``.

    Decode maps to the public ``gqa_paged_decode_h{Hq}_kv{Hkv}_d{D}_ps{P}`` (inputs ``q, k_cache,
    v_cache, kv_indptr, kv_indices, sm_scale``; outputs ``output, lse``) when the wrapper was
    planned for an NHD cache with page size 1, outside CUDA-graph mode, without logits soft-cap,
    sliding window, RoPE or scales. The plan is read from the wrapper's own state (which both
    ``plan`` and SGLang's ``fast_decode_plan`` update), never from a copy of ours. Prefill calls
    are observed (counted) and run FlashInfer unchanged.
    """

    family: str  # decode | paged_prefill | ragged_prefill
    return_lse: bool = False

    def bind(self, instance: Any, args: tuple, kwargs: dict) -> Optional[Call]:
        if self.family != "decode" or instance is None:
            return None
        g = instance.__dict__
        if g.get("_kv_layout", "NHD") != "NHD" or g.get("_use_cuda_graph", False):
            return None
        if g.get("_logits_soft_cap") not in (None, 0, 0.0) or g.get("_pos_encoding_mode", "NONE") != "NONE":
            return None
        if g.get("_window_left", -1) not in (None, -1) or g.get("_rope_scale") is not None \
                or g.get("_rope_theta") is not None or g.get("_q_len_per_req") not in (None, 1):
            return None
        vals = _collect(_RUN_PARAMS, args, kwargs)
        if vals is None or not _defaults_ok(vals, _RUN_DEFAULTS):
            return None
        if vals.get("k_scale") not in (None, 1.0) or vals.get("v_scale") not in (None, 1.0) \
                or vals.get("q_len_per_req") not in (None, 1):
            return None
        want_lse = bool(vals.get("return_lse", False)) or self.return_lse
        q, kv = vals.get("q"), vals.get("paged_kv_cache")
        if isinstance(kv, (tuple, list)) and len(kv) == 2:
            k_cache, v_cache = kv
        elif isinstance(kv, torch.Tensor) and kv.dim() == 5:
            k_cache, v_cache = kv[:, 0], kv[:, 1]
        else:
            return None
        indptr, indices = g.get("_paged_kv_indptr_buf"), g.get("_paged_kv_indices_buf")
        hq, hkv, ps = g.get("_num_qo_heads"), g.get("_num_kv_heads"), g.get("_page_size")
        if not isinstance(q, torch.Tensor) or q.dim() != 3 or None in (indptr, indices, hq, hkv, ps):
            return None
        if int(ps) != 1 or indptr.shape[0] != q.shape[0] + 1 or k_cache.dim() != 4:
            return None  # the public contract (kv_indptr, kv_indices) has no last_page_len
        d = q.shape[-1]
        sm_scale = g.get("_sm_scale")
        sm_scale = float(sm_scale) if sm_scale is not None else d ** -0.5
        name = f"gqa_paged_decode_h{int(hq)}_kv{int(hkv)}_d{d}_ps{int(ps)}"
        inputs = (q, k_cache, v_cache, indptr, indices, sm_scale)
        names = ("q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "sm_scale")

        def adapt(out: Any) -> Any:
            o, lse = (out[0], out[1]) if isinstance(out, (tuple, list)) else (out, None)
            if want_lse:
                if lse is None:
                    raise ValueError("solution returned no lse")
                return o, lse
            return o

        return Call(name, inputs, names, adapt=adapt, definition_factory=_cascade_factory(name, q.dtype))


@dataclass(frozen=True)
class Transparent:
    """Aliases that call another patched method (``forward`` -> ``self.run``): counted, and the
    inner call is the one dispatched (no re-entrancy depth is taken)."""

    transparent: bool = True

    def bind(self, instance: Any, args: tuple, kwargs: dict) -> None:
        return None


OBSERVE = type("Observe", (), {"bind": staticmethod(lambda instance, args, kwargs: None)})()

#: op key -> spec (anything with ``bind(instance, args, kwargs) -> Call | None``)
SPECS: Dict[str, Any] = {
    **SAMPLING_SPECS,
    "softmax": OBSERVE,
    "chain_speculative_sampling": OBSERVE,
    "rmsnorm": NormSpec("rmsnorm"),
    "fused_add_rmsnorm": NormSpec("fused_add_rmsnorm"),
    "merge_state": MergeSpec("merge_state"),
    "merge_state_in_place": MergeSpec("merge_state_in_place"),
    "merge_states": MergeSpec("merge_states"),
    "wrapper_plan": PlanRecorder(),
    "cascade_run": CascadeRunSpec(),
    "decode_run": AttentionRunSpec("decode"),
    "alias_forward": Transparent(),
    "decode_run_return_lse": AttentionRunSpec("decode", return_lse=True),
    "paged_prefill_run": AttentionRunSpec("paged_prefill"),
    "ragged_prefill_run": AttentionRunSpec("ragged_prefill"),
}
