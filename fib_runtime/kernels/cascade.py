"""Cascade (shared-prefix) attention on fib-runtime's own precompiled kernels.

Drop-in for FlashInfer 0.7.2's cascade API:

- ``merge_state(v_a, s_a, v_b, s_b) -> (v_merged, s_merged)``
- ``merge_state_in_place(v, s, v_other, s_other, mask=None) -> None``
- ``merge_states(v, s) -> (v_merged, s_merged)``
- ``MultiLevelCascadeAttentionWrapper(num_levels, float_workspace_buffer, kv_layout="NHD", ...)``
  with ``plan(...)`` (same arguments as FlashInfer) and ``run(q, paged_kv_cache)``.

LSE convention: base 2, like FlashInfer (``lse = log2(sum_i 2^(x_i * log2(e)))`` for the
softmax-scaled scores ``x_i``); an empty index set has ``lse = -inf`` and output 0.

``plan`` does all host work once (page-table copies, work lists, split choice, workspace);
``run`` only launches kernels on the caller's current CUDA stream, never synchronises, and is
CUDA-graph capturable (a graph replays the plan it was captured with: re-capture after a plan
that changes the batch structure).

Kernels: one launch per level. The shared level packs the B*G queries of each KV head into
row tiles of a tensor-core (mma.sync m16n8k16) flash-attention kernel that reads the prefix
pages once per (KV head, row tile, KV split); every level but the last writes float32 partial
states to the workspace and the last level merges them into its epilogue (or, when the last
level itself is split, one extra merge launch).
"""
from __future__ import annotations

import math
from typing import List, Optional

from .cascade_plan import (  # re-exported: fib_runtime.kernels.cascade.plan_level, ...
    MAX_SPLITS,
    SUPPORTED_HEAD_DIMS,
    TILE_KV,
    LevelPlan,
    _work_info,
    choose_splits,
    choose_tile_rows,
    default_ctas_per_sm,
    level_smem_bytes,
    max_stages,
    plan_level,
    tile_kv,
)
from .loader import load_family

FAMILY = "cascade"

__all__ = [
    "CascadeUnavailable", "available", "merge_state", "merge_state_in_place", "merge_states",
    "MultiLevelCascadeAttentionWrapper",
    # planning (.cascade_plan)
    "MAX_SPLITS", "SUPPORTED_HEAD_DIMS", "TILE_KV", "LevelPlan", "choose_splits", "choose_tile_rows",
    "default_ctas_per_sm", "level_smem_bytes", "max_stages", "plan_level", "tile_kv",
]


class CascadeUnavailable(RuntimeError):
    """The cascade kernel family cannot be used here (not built, no GPU, ...)."""


def _lib():
    mod = load_family(FAMILY)
    if mod is None:
        from .loader import reason

        raise CascadeUnavailable(f"fib cascade kernels unavailable: {reason(FAMILY)}")
    return mod


def available() -> bool:
    return load_family(FAMILY) is not None


# ----------------------------------------------------------------------------- merge functions


def _torch():
    import torch

    return torch


def merge_state(v_a, s_a, v_b, s_b):
    """Merge two attention states; FlashInfer's ``merge_state`` (base-2 LSE).

    v_a, v_b: ``[seq_len, num_heads, head_dim]`` float16/bfloat16; s_a, s_b: ``[seq_len,
    num_heads]`` (converted to float32). Returns ``(v_merged, s_merged)``.
    """
    torch = _torch()
    _check_merge_pair(v_a, s_a, v_b, s_b, "merge_state")
    s_a = s_a.to(torch.float32).contiguous()
    s_b = s_b.to(torch.float32).contiguous()
    v_a = v_a.contiguous()
    v_b = v_b.contiguous()
    v_merged = torch.empty_like(v_a)
    s_merged = torch.empty_like(s_a)
    _lib().merge_state(v_a, s_a, v_b, s_b, v_merged, s_merged)
    return v_merged, s_merged


def merge_state_in_place(v, s, v_other, s_other, mask=None) -> None:
    """``(v, s) <- (v, s) (+) (v_other, s_other)`` in place; rows whose ``mask[token]`` is False
    are left untouched. FlashInfer's ``merge_state_in_place``."""
    torch = _torch()
    _check_merge_pair(v, s, v_other, s_other, "merge_state_in_place")
    if not v.is_contiguous():
        raise ValueError("merge_state_in_place: v must be contiguous (it is updated in place)")
    hd = v.shape[-1]
    if hd % 8 or hd > 2048:
        raise ValueError(f"merge_state_in_place: head_dim {hd} unsupported (multiple of 8, at most 2048)")
    s_work = s if (s.dtype == torch.float32 and s.is_contiguous()) else s.to(torch.float32).contiguous()
    s_other = s_other.to(torch.float32).contiguous()
    v_other = v_other.contiguous()
    m = None
    if mask is not None:
        if mask.dim() != 1 or mask.shape[0] != v.shape[0]:
            raise ValueError("merge_state_in_place: mask must be [seq_len]")
        m = mask.contiguous()
        m = m.view(torch.uint8) if m.dtype == torch.bool else m.to(torch.uint8)
    _lib().merge_state_in_place(v, s_work, v_other, s_other, m)
    if s_work is not s:
        s.copy_(s_work)


def merge_states(v, s):
    """Merge ``num_states`` states: v ``[seq_len, num_states, num_heads, head_dim]``, s
    ``[seq_len, num_states, num_heads]``. FlashInfer's ``merge_states``."""
    torch = _torch()
    if v.dim() != 4 or s.dim() != 3 or tuple(v.shape[:3]) != tuple(s.shape):
        raise ValueError(
            "merge_states: v must be [seq_len, num_states, num_heads, head_dim] and s "
            f"[seq_len, num_states, num_heads]; got {tuple(v.shape)} and {tuple(s.shape)}"
        )
    if v.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"merge_states: v must be float16 or bfloat16, got {v.dtype}")
    if v.shape[-1] % 8:
        raise ValueError("merge_states: head_dim must be a multiple of 8")
    s = s.to(torch.float32).contiguous()
    v = v.contiguous()
    seq_len, _, num_heads, head_dim = v.shape
    v_merged = torch.empty(seq_len, num_heads, head_dim, dtype=v.dtype, device=v.device)
    s_merged = torch.empty(seq_len, num_heads, dtype=torch.float32, device=v.device)
    _lib().merge_states(v, s, v_merged, s_merged)
    return v_merged, s_merged


def _check_merge_pair(v_a, s_a, v_b, s_b, name):
    torch = _torch()
    if v_a.dim() != 3 or v_b.dim() != 3 or s_a.dim() != 2 or s_b.dim() != 2:
        raise ValueError(f"{name}: v must be [seq_len, num_heads, head_dim] and s [seq_len, num_heads]")
    if v_a.shape != v_b.shape or s_a.shape != s_b.shape or tuple(v_a.shape[:2]) != tuple(s_a.shape):
        raise ValueError(
            f"{name}: shape mismatch v {tuple(v_a.shape)}/{tuple(v_b.shape)} s {tuple(s_a.shape)}/{tuple(s_b.shape)}"
        )
    if v_a.dtype != v_b.dtype or v_a.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"{name}: v must be float16 or bfloat16 (one dtype), got {v_a.dtype}/{v_b.dtype}")
    if v_a.shape[-1] % 8:
        raise ValueError(f"{name}: head_dim must be a multiple of 8")


def _to_host_list(t) -> List[int]:
    if hasattr(t, "tolist"):
        if hasattr(t, "device") and getattr(t.device, "type", "cpu") != "cpu":
            t = t.cpu()
        return [int(x) for x in t.tolist()]
    return [int(x) for x in t]


_DTYPES = {"float16": "float16", "half": "float16", "fp16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}


def _dtype_name(dt) -> str:
    if dt is None:
        return "float16"
    s = str(dt).replace("torch.", "")
    if s not in _DTYPES:
        raise NotImplementedError(f"fib cascade: data type {dt} not supported (float16, bfloat16)")
    return _DTYPES[s]


class MultiLevelCascadeAttentionWrapper:
    """FlashInfer-compatible multi-level cascade attention over a unified paged KV cache.

    Same constructor, ``plan`` and ``run`` as ``flashinfer.MultiLevelCascadeAttentionWrapper``
    (0.7.2). Supported: float16/bfloat16 q and KV (same dtype), head_dim 64/128/256, any GQA
    ratio, any page size, NHD and HND layouts, single 5-D tensor or (k, v) tuple caches,
    ``causal`` (last level, FlashInfer's bottom-right alignment), ``sm_scale``. Not supported
    (raise NotImplementedError): RoPE/ALiBi, logits soft-cap, sliding window, fp8 KV.
    """

    def __init__(
        self,
        num_levels,
        float_workspace_buffer,
        kv_layout: str = "NHD",
        use_cuda_graph: bool = False,
        qo_indptr_buf_arr=None,
        paged_kv_indptr_buf_arr=None,
        paged_kv_indices_buf_arr=None,
        paged_kv_last_page_len_buf_arr=None,
    ) -> None:
        if int(num_levels) < 1:
            raise ValueError("num_levels must be >= 1")
        if kv_layout not in ("NHD", "HND"):
            raise ValueError(f"kv_layout must be 'NHD' or 'HND', got {kv_layout!r}")
        self._num_levels = int(num_levels)
        self._kv_layout = kv_layout
        self._float_workspace_buffer = float_workspace_buffer
        self._use_cuda_graph = bool(use_cuda_graph)
        self._bufs = None
        if use_cuda_graph:
            arrs = (qo_indptr_buf_arr, paged_kv_indptr_buf_arr, paged_kv_indices_buf_arr,
                    paged_kv_last_page_len_buf_arr)
            if any(a is not None for a in arrs):
                if any(a is None or len(a) != self._num_levels for a in arrs):
                    raise ValueError("use_cuda_graph: give all four buffer arrays, one entry per level")
                self._bufs = [list(a) for a in arrs]
        self._planned = False

    @property
    def is_cuda_graph_enabled(self) -> bool:
        return self._use_cuda_graph

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffers=None) -> None:
        self._float_workspace_buffer = float_workspace_buffer
        if self._planned:
            self._alloc_workspace()

    def plan(
        self,
        qo_indptr_arr,
        paged_kv_indptr_arr,
        paged_kv_indices_arr,
        paged_kv_last_page_len,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim: int,
        page_size: int,
        causal: bool = False,
        pos_encoding_mode: str = "NONE",
        use_fp16_qk_reduction: bool = False,
        sm_scale: Optional[float] = None,
        window_left: int = -1,
        logits_soft_cap: Optional[float] = None,
        rope_scale: Optional[float] = None,
        rope_theta: Optional[float] = None,
        q_data_type="float16",
        kv_data_type=None,
    ):
        torch = _torch()
        L = self._num_levels
        for name, arr in (("qo_indptr_arr", qo_indptr_arr), ("paged_kv_indptr_arr", paged_kv_indptr_arr),
                          ("paged_kv_indices_arr", paged_kv_indices_arr),
                          ("paged_kv_last_page_len", paged_kv_last_page_len)):
            if len(arr) != L:
                raise ValueError(f"{name} has {len(arr)} entries, expected num_levels={L}")
        if pos_encoding_mode != "NONE":
            raise NotImplementedError("fib cascade: pos_encoding_mode other than 'NONE'")
        if logits_soft_cap not in (None, 0, 0.0):
            raise NotImplementedError("fib cascade: logits_soft_cap")
        if window_left not in (-1, None):
            raise NotImplementedError("fib cascade: window_left (sliding window)")
        qdt = _dtype_name(q_data_type)
        kdt = _dtype_name(kv_data_type) if kv_data_type is not None else qdt
        if qdt != kdt:
            raise NotImplementedError("fib cascade: q and kv must share one dtype")
        num_qo_heads, num_kv_heads, head_dim, page_size = map(int, (num_qo_heads, num_kv_heads, head_dim, page_size))
        if head_dim not in SUPPORTED_HEAD_DIMS:
            raise NotImplementedError(f"fib cascade: head_dim {head_dim} not in {SUPPORTED_HEAD_DIMS}")
        if num_kv_heads <= 0 or num_qo_heads % num_kv_heads:
            raise ValueError(f"num_qo_heads ({num_qo_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
        if page_size <= 0:
            raise ValueError("page_size must be positive")
        G = num_qo_heads // num_kv_heads
        device = _device_of(qo_indptr_arr, paged_kv_indptr_arr, paged_kv_indices_arr, self._float_workspace_buffer)
        lib = _lib() if device.type == "cuda" else None
        num_sms = int(lib.sm_count()) if lib is not None else 132
        is_bf16 = 1 if qdt == "bfloat16" else 0
        occ_cache = {}

        def occ(hd, tr, st):
            key = (hd, tr, st)
            if key not in occ_cache:
                occ_cache[key] = int(lib.level_occupancy(is_bf16, hd, tr, st)) if lib is not None else \
                    default_ctas_per_sm(hd, tr, st)
            return max(1, occ_cache[key])

        total_q = None
        plans, dev = [], []
        for lvl in range(L):
            qo_h = _to_host_list(qo_indptr_arr[lvl])
            kv_h = _to_host_list(paged_kv_indptr_arr[lvl])
            lp_h = _to_host_list(paged_kv_last_page_len[lvl])
            if not qo_h or qo_h[0] != 0:
                raise ValueError(f"level {lvl}: qo_indptr must start at 0")
            if total_q is None:
                total_q = qo_h[-1]
            elif qo_h[-1] != total_q:
                raise ValueError(f"level {lvl}: qo_indptr[-1]={qo_h[-1]} differs from level 0's {total_q}")
            nidx = int(paged_kv_indices_arr[lvl].numel())
            if kv_h and kv_h[-1] > nidx:
                raise ValueError(f"level {lvl}: paged_kv_indptr[-1]={kv_h[-1]} > len(paged_kv_indices)={nidx}")
            pl = plan_level(qo_h, kv_h, lp_h, page_size, G, num_kv_heads, head_dim, num_sms, occ,
                            causal=causal and lvl == L - 1)
            plans.append(pl)

            def dev_i32(x, buf=None):
                t = x if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=torch.int32)
                t = t.to(device=device, dtype=torch.int32, copy=True)  # own copy: caller may reuse its tensor
                if buf is not None:
                    buf[: t.numel()].copy_(t, non_blocking=True)
                    return buf
                return t.contiguous()

            bufs = [self._bufs[i][lvl] for i in range(4)] if self._bufs else [None] * 4
            dev.append(dict(
                qo_indptr=dev_i32(qo_indptr_arr[lvl], bufs[0]),
                kv_indptr=dev_i32(paged_kv_indptr_arr[lvl], bufs[1]),
                kv_indices=dev_i32(paged_kv_indices_arr[lvl], bufs[2]) if nidx > 0 else
                torch.zeros(1, dtype=torch.int32, device=device),
                last_page_len=dev_i32(paged_kv_last_page_len[lvl], bufs[3]) if len(lp_h) > 0 else
                torch.ones(1, dtype=torch.int32, device=device),
                work_info=torch.tensor(_work_info(pl, qo_h, kv_h) or [[0] * 8], dtype=torch.int32).to(device),
            ))
        # workspace slots: every level but a fused last level writes num_splits slots
        slot_base, slots = [], 0
        for lvl, pl in enumerate(plans):
            last = lvl == L - 1
            if last and pl.num_splits == 1:
                slot_base.append(-1)
            else:
                slot_base.append(slots)
                slots += pl.num_splits
        self._plans = plans
        self._dev = dev
        self._slot_base = slot_base
        self._num_slots = slots
        self._total_q = int(total_q)
        self._num_qo_heads, self._num_kv_heads = num_qo_heads, num_kv_heads
        self._head_dim, self._page_size = head_dim, page_size
        self._causal = bool(causal)
        self._sm_scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(head_dim)
        self._dtype = getattr(torch, qdt)
        self._device = device
        self._alloc_workspace()
        self._planned = True

    begin_forward = plan

    def _alloc_workspace(self) -> None:
        torch = _torch()
        rows = self._total_q * self._num_qo_heads
        n_o = self._num_slots * rows * self._head_dim
        n_l = self._num_slots * rows
        need = max(1, n_o + n_l)
        buf = self._float_workspace_buffer
        flat = None
        if buf is not None and buf.is_contiguous() and buf.device == self._device:
            nbytes = buf.numel() * buf.element_size()
            if nbytes >= need * 4 and buf.data_ptr() % 16 == 0:
                flat = buf.view(torch.uint8)[: need * 4].view(torch.float32)
        if flat is None:  # user workspace too small: own buffer (plan time only, never in run)
            flat = torch.empty(need, dtype=torch.float32, device=self._device)
        self._ws_o = flat[: max(1, n_o)]
        self._ws_lse = flat[n_o: n_o + max(1, n_l)] if n_l > 0 else flat[:1]

    def _kv_views(self, paged_kv_cache):
        if isinstance(paged_kv_cache, (tuple, list)):
            k, v = paged_kv_cache
        else:
            if paged_kv_cache.dim() != 5 or paged_kv_cache.shape[1] != 2:
                raise ValueError("paged_kv_cache must be [pages, 2, ...] or a (k, v) tuple")
            k, v = paged_kv_cache[:, 0], paged_kv_cache[:, 1]
        if k.dim() != 4 or v.dim() != 4:
            raise ValueError("k/v caches must be 4-D")
        if self._kv_layout == "HND":
            k, v = k.transpose(1, 2), v.transpose(1, 2)
        ps, hkv, hd = k.shape[1], k.shape[2], k.shape[3]
        if (ps, hkv, hd) != (self._page_size, self._num_kv_heads, self._head_dim):
            raise ValueError(
                f"kv cache shape {tuple(k.shape)} does not match plan (page_size={self._page_size}, "
                f"num_kv_heads={self._num_kv_heads}, head_dim={self._head_dim}, layout {self._kv_layout})")
        if k.stride() != v.stride():
            raise ValueError("k and v caches must have the same strides")
        if k.stride(3) != 1 or any(s % 8 for s in k.stride()[:3]) or k.data_ptr() % 16 or v.data_ptr() % 16:
            raise ValueError("kv cache: head_dim must be contiguous and 16-byte aligned")
        if k.dtype != self._dtype or v.dtype != self._dtype:
            raise TypeError(f"kv cache dtype {k.dtype} != planned {self._dtype}")
        return k, v

    def run(self, q, paged_kv_cache, *, return_lse: bool = False):
        """Cascade attention for ``q`` ``[total_q, num_qo_heads, head_dim]``; returns ``out``
        (and the base-2 ``lse`` ``[total_q, num_qo_heads]`` when ``return_lse=True``)."""
        torch = _torch()
        if not self._planned:
            raise RuntimeError("plan() must be called before run()")
        if q.dim() != 3 or tuple(q.shape) != (self._total_q, self._num_qo_heads, self._head_dim):
            raise ValueError(
                f"q shape {tuple(q.shape)} != planned ({self._total_q}, {self._num_qo_heads}, {self._head_dim})")
        if q.dtype != self._dtype:
            raise TypeError(f"q dtype {q.dtype} != planned {self._dtype}")
        if q.stride(2) != 1 or q.stride(0) % 8 or q.stride(1) % 8 or q.data_ptr() % 16:
            q = q.contiguous()
        k, v = self._kv_views(paged_kv_cache)
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device) if return_lse else None
        for lvl in range(self._num_levels):
            self._launch_level(lvl, q, k, v, out, lse)
        self._launch_final_merge(out, lse)
        return (out, lse) if return_lse else out

    def _launch_level(self, lvl, q, k, v, out, lse) -> None:
        pl, d = self._plans[lvl], self._dev[lvl]
        if pl.num_items == 0:
            return
        last = lvl == self._num_levels - 1
        fused = last and self._slot_base[lvl] < 0
        _lib().cascade_level(
            q, k, v, d["qo_indptr"], d["kv_indptr"], d["kv_indices"], d["last_page_len"],
            d["work_info"], pl.tile_rows, pl.num_splits, pl.kv_chunk,
            pl.stages_alloc, bool(self._causal and last), self._sm_scale, self._ws_o,
            self._ws_lse, max(0, self._slot_base[lvl]), self._num_slots if fused else 0,
            fused, out, lse if fused else None)

    def _launch_final_merge(self, out, lse) -> None:
        if self._slot_base[-1] >= 0 and self._total_q > 0:
            _lib().merge_slots(self._ws_o, self._ws_lse, self._num_slots, out, lse)

    forward = run

    # introspection (tests, benchmarks)
    def plan_info(self) -> List[dict]:
        return [dict(tile_rows=p.tile_rows, items=p.num_items, num_splits=p.num_splits, kv_chunk=p.kv_chunk,
                     stages=p.stages_alloc, max_kv_len=p.max_kv_len, slot_base=sb)
                for p, sb in zip(self._plans, self._slot_base)]


def _device_of(*objs):
    torch = _torch()
    for o in objs:
        seq = o if isinstance(o, (list, tuple)) else [o]
        for t in seq:
            if isinstance(t, torch.Tensor) and t.device.type == "cuda":
                return t.device
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


# ----------------------------------------------------------------------------- built-in solutions
# Callables of the Definitions in fib_runtime.definitions.cascade (inputs in Definition order,
# outputs returned). Registered in builtin_table.CASCADE_BUILTINS.


def builtin_merge_state(v_a, s_a, v_b, s_b):
    return merge_state(v_a, s_a, v_b, s_b)


def builtin_merge_state_in_place(v, s, v_other, s_other):
    """Definition form of merge_state_in_place: returns the merged state (inputs untouched; the
    adapter writes it back into FlashInfer's v and s)."""
    return merge_state(v, s, v_other, s_other)


def builtin_merge_states(v, s):
    return merge_states(v, s)


_RUN_CACHE: dict = {}
_RUN_CACHE_MAX = 16


def _meta_key(t):
    return (t.data_ptr(), tuple(t.shape), t.dtype, getattr(t, "_version", 0))


def builtin_cascade_run(q, k_cache, v_cache, *args):
    """``multi_level_cascade_run_*``: q, k_cache, v_cache, per level (qo_indptr, kv_indptr,
    kv_indices, kv_last_page_len), sm_scale -> output. Plans are cached per metadata tensors
    (pointer, shape, version counter), so the per-layer calls of one decode step plan once."""
    if (len(args) - 1) % 4 or len(args) < 5:
        raise ValueError("cascade run: expected 4 tensors per level then sm_scale")
    sm_scale = float(args[-1])
    levels = (len(args) - 1) // 4
    meta = args[:-1]
    key = (levels, q.shape[1], k_cache.shape[2], q.shape[2], k_cache.shape[1], q.dtype, sm_scale,
           q.device, tuple(_meta_key(t) for t in meta))
    w = _RUN_CACHE.get(key)
    if w is None:
        if len(_RUN_CACHE) >= _RUN_CACHE_MAX:
            _RUN_CACHE.pop(next(iter(_RUN_CACHE)))
        w = MultiLevelCascadeAttentionWrapper(levels, None, "NHD")
        w.plan([meta[4 * i] for i in range(levels)], [meta[4 * i + 1] for i in range(levels)],
               [meta[4 * i + 2] for i in range(levels)], [meta[4 * i + 3] for i in range(levels)],
               q.shape[1], k_cache.shape[2], q.shape[2], k_cache.shape[1], sm_scale=sm_scale,
               q_data_type=q.dtype)
        _RUN_CACHE[key] = w
    return w.run(q, (k_cache, v_cache))


def _supports_merge(inputs) -> bool:
    try:
        torch = _torch()
        seq = list(inputs.values()) if isinstance(inputs, dict) else list(inputs)
        v = seq[0]
        if not (isinstance(v, torch.Tensor) and v.is_cuda and v.dtype in (torch.float16, torch.bfloat16)):
            return False
        if v.shape[-1] % 8 or v.shape[-1] > 2048:
            return False
        return all(isinstance(t, torch.Tensor) and t.is_cuda for t in seq) and available()
    except Exception:  # noqa: BLE001 - a support probe never raises
        return False


def _supports_run(inputs) -> bool:
    try:
        torch = _torch()
        seq = list(inputs.values()) if isinstance(inputs, dict) else list(inputs)
        q, k, v = seq[:3]
        if not all(isinstance(t, torch.Tensor) and t.is_cuda for t in (q, k, v)):
            return False
        if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
            return False
        if q.dim() != 3 or k.dim() != 4 or q.shape[2] not in SUPPORTED_HEAD_DIMS or k.shape[3] != q.shape[2]:
            return False
        if q.shape[1] % k.shape[2] or (len(seq) - 4) % 4:
            return False
        return available()
    except Exception:  # noqa: BLE001
        return False
