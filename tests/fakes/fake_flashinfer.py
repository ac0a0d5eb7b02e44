"""A fake ``flashinfer`` package for CPU tests of the adapters.

It reproduces what matters for patching, not FlashInfer's kernels:
- the public signatures of 0.7.2 (``flashinfer.sampling``, ``.norm``, ``.cascade``,
  ``.cake_sampling``, ``.decode``, ``.prefill``, ``.attention._core``);
- package-level re-exports (separate bindings) and module-level aliases
  (``top_p_renorm_prob = top_p_renorm_probs``);
- nested calls through module globals (``top_k_top_p_sampling_from_logits`` calls
  ``top_k_mask_logits`` and ``top_p_sampling_from_probs``; the cascade wrapper calls the
  prefill wrappers' ``run`` and the global ``merge_state_in_place``);
- class aliases: ``begin_forward = plan``, ``forward`` calling ``self.run``,
  ``run_return_lse = functools.partialmethod(run, return_lse=True)``.

Every function increments ``CALLS[name]`` so tests can see which originals ran.

    with fake_flashinfer.installed() as fi:
        fi.sampling.top_p_sampling_from_probs(probs, 0.9)
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections import Counter

CALLS: Counter = Counter()

_SAMPLING = r'''
import torch
from tests_fakes_calls import CALLS

def _draw(probs, generator=None):
    return torch.multinomial(probs, 1, generator=generator).view(-1).to(torch.int32)

def _rows(v, n, dtype):
    if isinstance(v, torch.Tensor):
        return v.to(dtype)
    return torch.full((n,), v, dtype=dtype)

def softmax(logits, temperature=None, enable_pdl=None):
    CALLS["softmax"] += 1
    return torch.softmax(logits.float(), dim=-1)

def sampling_from_probs(probs, indices=None, deterministic=True, generator=None, check_nan=False,
                        seed=None, offset=None, return_valid=False):
    CALLS["sampling_from_probs"] += 1
    return _draw(probs, generator)

def sampling_from_logits(logits, indices=None, deterministic=True, generator=None, check_nan=False,
                         seed=None, offset=None):
    CALLS["sampling_from_logits"] += 1
    return _draw(torch.softmax(logits, -1), generator)

def top_k_renorm_probs(probs, top_k, is_deterministic=False):
    CALLS["top_k_renorm_probs"] += 1
    k = _rows(top_k, probs.shape[0], torch.int64)
    order = probs.argsort(dim=-1, descending=True, stable=True)
    rank = order.argsort(dim=-1)
    keep = rank < k[:, None]
    x = torch.where(keep, probs, torch.zeros_like(probs))
    return x / x.sum(-1, keepdim=True)

top_k_renorm_prob = top_k_renorm_probs

def top_p_renorm_probs(probs, top_p, is_deterministic=False):
    CALLS["top_p_renorm_probs"] += 1
    p = _rows(top_p, probs.shape[0], torch.float32)
    vals, order = probs.sort(dim=-1, descending=True, stable=True)
    keep_s = (vals.cumsum(-1) - vals) <= p[:, None]
    keep = torch.zeros_like(keep_s).scatter_(1, order, keep_s)
    x = torch.where(keep, probs, torch.zeros_like(probs))
    return x / x.sum(-1, keepdim=True)

top_p_renorm_prob = top_p_renorm_probs

def top_k_mask_logits(logits, top_k):
    CALLS["top_k_mask_logits"] += 1
    k = _rows(top_k, logits.shape[0], torch.int64)
    rank = logits.argsort(dim=-1, descending=True, stable=True).argsort(dim=-1)
    return torch.where(rank < k[:, None], logits, torch.full_like(logits, float("-inf")))

def top_p_sampling_from_probs(probs, top_p, indices=None, deterministic=True, generator=None,
                              check_nan=False, seed=None, offset=None, return_valid=False):
    CALLS["top_p_sampling_from_probs"] += 1
    return _draw(top_p_renorm_probs(probs, top_p), generator)

def top_k_sampling_from_probs(probs, top_k, indices=None, deterministic=True, generator=None,
                              check_nan=False, seed=None, offset=None, return_valid=False):
    CALLS["top_k_sampling_from_probs"] += 1
    return _draw(top_k_renorm_probs(probs, top_k), generator)

def min_p_sampling_from_probs(probs, min_p, indices=None, deterministic=True, generator=None,
                              check_nan=False, seed=None, offset=None, return_valid=False):
    CALLS["min_p_sampling_from_probs"] += 1
    m = _rows(min_p, probs.shape[0], torch.float32)
    x = torch.where(probs >= m[:, None] * probs.amax(-1, keepdim=True), probs, torch.zeros_like(probs))
    return _draw(x / x.sum(-1, keepdim=True), generator)

def top_k_top_p_sampling_from_logits(logits, top_k, top_p, indices=None,
                                     filter_apply_order="top_k_first", deterministic=True,
                                     generator=None, check_nan=False, seed=None, offset=None):
    CALLS["top_k_top_p_sampling_from_logits"] += 1
    if filter_apply_order == "top_k_first":
        masked = top_k_mask_logits(logits, top_k)
        return top_p_sampling_from_probs(torch.softmax(masked, -1), top_p, generator=generator)
    probs = torch.softmax(logits, -1)
    return top_k_top_p_sampling_from_probs(probs, top_k, top_p, filter_apply_order="joint",
                                           generator=generator)

def top_k_top_p_sampling_from_probs(probs, top_k, top_p, indices=None,
                                    filter_apply_order="top_k_first", deterministic=True,
                                    generator=None, check_nan=False, seed=None, offset=None,
                                    return_valid=False):
    CALLS["top_k_top_p_sampling_from_probs"] += 1
    if filter_apply_order == "top_k_first":
        return top_p_sampling_from_probs(top_k_renorm_probs(probs, top_k), top_p, generator=generator)
    a = top_k_renorm_probs(probs, top_k) > 0
    b = top_p_renorm_probs(probs, top_p) > 0
    x = torch.where(a & b, probs, torch.zeros_like(probs))
    return _draw(x / x.sum(-1, keepdim=True), generator)

def chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, maybe_output_accepted_token_num=None,
                               maybe_output_emitted_draft_token_num=None, deterministic=True,
                               generator=None, seed=None, offset=None):
    CALLS["chain_speculative_sampling"] += 1
    return draft_token_ids
'''

_CAKE = r'''
import torch
from tests_fakes_calls import CALLS
import flashinfer.sampling as _s

def top_k_top_p_sampling_from_probs(probs, top_k, top_p, *, top_k_max=None, generator=None,
                                    philox_seed=None, philox_offset=None, out=None,
                                    renorm_out=None, workspace=None, enable_pdl=True):
    CALLS["cake_top_k_top_p_sampling_from_probs"] += 1
    # like the real one, it falls back to flashinfer.sampling for requests it cannot serve
    return _s.top_k_top_p_sampling_from_probs(probs, top_k, top_p, deterministic=True,
                                              generator=generator)
'''

_NORM = r'''
import torch
from tests_fakes_calls import CALLS

def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
    CALLS["rmsnorm"] += 1
    x = input.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    y = y.to(input.dtype)
    if out is not None:
        out.copy_(y)
        return out
    return y

def fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
    CALLS["fused_add_rmsnorm"] += 1
    residual.add_(input)
    x = residual.float()
    input.copy_((x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(input.dtype))
'''

_CASCADE = r'''
import torch
from tests_fakes_calls import CALLS
from flashinfer.prefill import BatchPrefillWithPagedKVCacheWrapper

def merge_state(v_a, s_a, v_b, s_b):
    CALLS["merge_state"] += 1
    m = torch.maximum(s_a, s_b)
    wa, wb = torch.exp2(s_a - m), torch.exp2(s_b - m)
    v = (v_a.float() * wa[..., None] + v_b.float() * wb[..., None]) / (wa + wb)[..., None]
    return v.to(v_a.dtype), m + torch.log2(wa + wb)

def merge_state_in_place(v, s, v_other, s_other, mask=None):
    CALLS["merge_state_in_place"] += 1
    vm, sm = merge_state(v, s, v_other, s_other)
    v.copy_(vm)
    s.copy_(sm)

def merge_states(v, s):
    CALLS["merge_states"] += 1
    m = s.amax(dim=1, keepdim=True)
    w = torch.exp2(s - m)
    out = (v.float() * w[..., None]).sum(1) / w.sum(1)[..., None]
    return out.to(v.dtype), (m.squeeze(1) + torch.log2(w.sum(1)))

class MultiLevelCascadeAttentionWrapper:
    def __init__(self, num_levels, float_workspace_buffer=None, kv_layout="NHD"):
        self._kv_layout = kv_layout
        self._batch_prefill_wrappers = [BatchPrefillWithPagedKVCacheWrapper() for _ in range(num_levels)]

    def plan(self, qo_indptr_arr, paged_kv_indptr_arr, paged_kv_indices_arr,
             paged_kv_last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False, sm_scale=None,
             window_left=-1, logits_soft_cap=None, rope_scale=None, rope_theta=None,
             q_data_type="float16", kv_data_type=None):
        CALLS["cascade.plan"] += 1
        for w in self._batch_prefill_wrappers:
            w.plan(None, None, None, None, num_qo_heads, num_kv_heads, head_dim, page_size)

    begin_forward = plan

    def run(self, q, paged_kv_cache):
        CALLS["cascade.run"] += 1
        out, lse = self._batch_prefill_wrappers[-1].run(q, paged_kv_cache, return_lse=True)
        for w in self._batch_prefill_wrappers[:-1]:
            out_i, lse_i = w.run(q, paged_kv_cache, return_lse=True)
            merge_state_in_place(out, lse, out_i, lse_i)
        return out

    forward = run
'''

_PREFILL = r'''
import functools
import torch
from tests_fakes_calls import CALLS

class _Base:
    _name = "prefill"

    def __init__(self, float_workspace_buffer=None, kv_layout="NHD"):
        self._kv_layout = kv_layout

    def plan(self, *args, **kwargs):
        CALLS[f"{self._name}.plan"] += 1

    begin_forward = plan

    def forward(self, q, *args, **kwargs):
        CALLS[f"{self._name}.forward"] += 1
        return self.run(q, *args, **kwargs)

    def run(self, q, paged_kv_cache=None, *args, return_lse=False, **kwargs):
        CALLS[f"{self._name}.run"] += 1
        out = q.clone()
        if return_lse:
            return out, torch.zeros(q.shape[:2], dtype=torch.float32)
        return out

    run_return_lse = functools.partialmethod(run, return_lse=True)

    def forward_return_lse(self, q, *args, **kwargs):
        CALLS[f"{self._name}.forward_return_lse"] += 1
        return self.run_return_lse(q, *args, **kwargs)

class BatchPrefillWithPagedKVCacheWrapper(_Base):
    _name = "paged_prefill"

class BatchPrefillWithRaggedKVCacheWrapper(_Base):
    _name = "ragged_prefill"
'''

_DECODE = r'''
import functools
import torch
from tests_fakes_calls import CALLS

class BatchDecodeWithPagedKVCacheWrapper:
    def __init__(self, float_workspace_buffer=None, kv_layout="NHD", use_cuda_graph=False):
        self._kv_layout = kv_layout
        self._use_cuda_graph = use_cuda_graph

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
             page_size, *deprecated, **kwargs):
        CALLS["decode.plan"] += 1
        self._paged_kv_indptr_buf = indptr
        self._paged_kv_indices_buf = indices
        self._paged_kv_last_page_len_buf = last_page_len
        self._num_qo_heads, self._num_kv_heads, self._page_size = num_qo_heads, num_kv_heads, page_size
        self._sm_scale = kwargs.get("sm_scale")
        self._logits_soft_cap = kwargs.get("logits_soft_cap")

    begin_forward = plan

    def forward(self, q, paged_kv_cache, pos_encoding_mode="NONE", q_scale=None, k_scale=None,
                v_scale=None, window_left=-1, logits_soft_cap=None, sm_scale=None,
                rope_scale=None, rope_theta=None):
        CALLS["decode.forward"] += 1
        self._sm_scale = sm_scale
        self._logits_soft_cap = logits_soft_cap
        return self.run(q, paged_kv_cache, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale)

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None,
            lse=None, return_lse=False, enable_pdl=None, window_left=None, sinks=None,
            q_len_per_req=None):
        CALLS["decode.run"] += 1
        o = torch.zeros_like(q)
        if return_lse:
            return o, torch.zeros(q.shape[:2], dtype=torch.float32)
        return o

    def forward_return_lse(self, q, paged_kv_cache, **kwargs):
        CALLS["decode.forward_return_lse"] += 1
        return self.run(q, paged_kv_cache, return_lse=True)

    run_return_lse = functools.partialmethod(run, return_lse=True)

def fast_decode_plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
                     page_size, **kwargs):
    CALLS["fast_decode_plan"] += 1
    self._paged_kv_indptr_buf = indptr
    self._paged_kv_indices_buf = indices
'''

_CORE = r'''
from tests_fakes_calls import CALLS
from flashinfer.prefill import BatchPrefillWithPagedKVCacheWrapper

class BatchAttentionWithAttentionSinkWrapper(BatchPrefillWithPagedKVCacheWrapper):
    _name = "sink"

    def plan(self, *args, **kwargs):
        CALLS["sink.plan"] += 1

    def run(self, q, *args, **kwargs):
        CALLS["sink.run"] += 1
        return q.clone()
'''

_PACKAGE_EXPORTS = {
    "flashinfer.sampling": ["softmax", "sampling_from_probs", "sampling_from_logits",
                            "top_k_renorm_probs", "top_p_renorm_probs", "top_k_mask_logits",
                            "top_p_sampling_from_probs", "top_k_sampling_from_probs",
                            "min_p_sampling_from_probs", "top_k_top_p_sampling_from_logits",
                            "top_k_top_p_sampling_from_probs", "chain_speculative_sampling"],
    "flashinfer.norm": ["rmsnorm", "fused_add_rmsnorm"],
    "flashinfer.cascade": ["merge_state", "merge_state_in_place", "merge_states",
                           "MultiLevelCascadeAttentionWrapper"],
    "flashinfer.decode": ["BatchDecodeWithPagedKVCacheWrapper"],
    "flashinfer.prefill": ["BatchPrefillWithPagedKVCacheWrapper", "BatchPrefillWithRaggedKVCacheWrapper"],
}

_ORDER = [("flashinfer.sampling", _SAMPLING), ("flashinfer.cake_sampling", _CAKE),
          ("flashinfer.norm", _NORM), ("flashinfer.prefill", _PREFILL),
          ("flashinfer.decode", _DECODE), ("flashinfer.cascade", _CASCADE),
          ("flashinfer.attention", ""), ("flashinfer.attention._core", _CORE)]


def _new(name: str) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__file__ = f"<fake {name}>"
    return m


def build(version: str = "0.7.2.post1") -> dict:
    """Create the fake modules and return ``{name: module}`` (not yet in ``sys.modules``)."""
    calls = _new("tests_fakes_calls")
    calls.CALLS = CALLS
    pkg = _new("flashinfer")
    pkg.__path__ = []  # a package
    pkg.__version__ = version
    mods = {"tests_fakes_calls": calls, "flashinfer": pkg}
    saved = {k: sys.modules.get(k) for k in [n for n, _ in _ORDER] + ["flashinfer", "tests_fakes_calls"]}
    try:
        sys.modules["tests_fakes_calls"] = calls
        sys.modules["flashinfer"] = pkg
        for name, src in _ORDER:
            m = _new(name)
            if name == "flashinfer.attention":
                m.__path__ = []
            sys.modules[name] = m
            exec(compile(src, m.__file__, "exec"), m.__dict__)
            mods[name] = m
            parent, _, leaf = name.rpartition(".")
            setattr(mods[parent], leaf, m)
        for mod, names in _PACKAGE_EXPORTS.items():
            for n in names:
                setattr(pkg, n, getattr(mods[mod], n))
        pkg.cake_top_k_top_p_sampling_from_probs = mods["flashinfer.cake_sampling"].top_k_top_p_sampling_from_probs
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mods


@contextlib.contextmanager
def installed(version: str = "0.7.2.post1", only: tuple = ()):
    """Put the fake flashinfer into ``sys.modules`` for the duration of the block.

    ``only``: if given, install just these submodules (others stay absent, to test targets
    that are missing or imported later).
    """
    mods = build(version)
    names = [n for n in mods if not only or n in only or n in ("flashinfer", "tests_fakes_calls")]
    saved = {k: sys.modules.get(k) for k in names}
    CALLS.clear()
    for n in names:
        sys.modules[n] = mods[n]
    pkg = types.SimpleNamespace(**{n.rpartition(".")[2] if n != "flashinfer" else "pkg": mods[n] for n in mods})
    pkg.modules = mods
    try:
        yield pkg
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
