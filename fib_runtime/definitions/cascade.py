"""FlashInfer Trace Definitions of the cascade ops (``flashinfer.cascade``) at any shape.

Names follow ``flashinfer.trace`` (0.7.2): the API name plus one token per const axis,

- ``merge_state_h{H}_d{D}``            inputs ``v_a, s_a, v_b, s_b``  -> ``v_merged, s_merged``
- ``merge_state_in_place_h{H}_d{D}``   inputs ``v, s, v_other, s_other`` -> ``v_merged, s_merged``
  (FlashInfer mutates ``v``/``s``; as a Definition it returns the merged state, outputs renamed so
  that no output shares an input's name, and the adapter writes the buffers back; the optional
  ``mask`` is not part of the contract: masked calls are not dispatched)
- ``merge_states_h{H}_d{D}``           inputs ``v, s`` -> ``v_merged, s_merged``
- ``multi_level_cascade_run_h{Hq}_kv{Hkv}_d{D}_ps{P}`` inputs ``q, k_cache, v_cache``, then per
  level ``qo_indptr_{i}, kv_indptr_{i}, kv_indices_{i}, kv_last_page_len_{i}``, then ``sm_scale``
  -> ``output`` (NHD cache, non-causal, no RoPE/soft-cap/window: the adapter dispatches only
  such calls). ``num_levels`` (default 2) is a generator argument: the name does not carry it.

LSE (``s``) is base 2, as in FlashInfer: ``s = log2(sum_i exp2(x_i))`` with ``x_i`` the scores
times ``sm_scale * log2(e)``; an empty state has ``s = -inf``.

    from fib_runtime.definitions import cascade
    cascade.generate("merge_state_h32_d128")
    cascade.definition("multi_level_cascade_run", num_qo_heads=32, num_kv_heads=8, head_dim=128,
                       page_size=16, num_levels=2)
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Optional

__all__ = ["KINDS", "name", "definition", "generate", "parse_name"]

KINDS = ("merge_state", "merge_state_in_place", "merge_states", "multi_level_cascade_run")

_MERGE_RE = re.compile(r"^(merge_state|merge_state_in_place|merge_states)_h(\d+)_d(\d+)$")
_RUN_RE = re.compile(r"^multi_level_cascade_run_h(\d+)_kv(\d+)_d(\d+)_ps(\d+)$")

_MERGE_HELPER = '''import math
import torch


def _merge(vs, ss):
    # vs [n, S, H, D], ss [n, S, H] (base-2 lse) -> merged v [n, H, D] float32, s [n, H]
    s = ss.to(torch.float32) * math.log(2.0)
    m = s.amax(dim=1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    w = torch.exp(s - m)
    den = w.sum(dim=1)
    v = (vs.to(torch.float32) * w.unsqueeze(-1)).sum(dim=1) / den.clamp_min(1e-30).unsqueeze(-1)
    v = torch.where((den > 0).unsqueeze(-1), v, torch.zeros_like(v))
    lse = (m.squeeze(1) + torch.log(den)) / math.log(2.0)
    return v, lse
'''

_REF = {
    "merge_state": _MERGE_HELPER + '''

@torch.no_grad()
def run(v_a, s_a, v_b, s_b):
    assert v_a.shape[1] == {H} and v_a.shape[2] == {D}
    v, s = _merge(torch.stack([v_a, v_b], 1), torch.stack([s_a, s_b], 1))
    return v.to(v_a.dtype), s
''',
    "merge_state_in_place": _MERGE_HELPER + '''

@torch.no_grad()
def run(v, s, v_other, s_other):
    assert v.shape[1] == {H} and v.shape[2] == {D}
    vm, sm = _merge(torch.stack([v, v_other], 1), torch.stack([s, s_other], 1))
    return vm.to(v.dtype), sm
''',
    "merge_states": _MERGE_HELPER + '''

@torch.no_grad()
def run(v, s):
    assert v.shape[2] == {H} and v.shape[3] == {D}
    if v.shape[1] == 0:
        n = v.shape[0]
        return (torch.zeros(n, {H}, {D}, dtype=v.dtype, device=v.device),
                torch.full((n, {H}), float("-inf"), dtype=torch.float32, device=v.device))
    if v.shape[1] == 1:
        return v[:, 0].clone(), s[:, 0].to(torch.float32).clone()
    vm, sm = _merge(v, s)
    return vm.to(v.dtype), sm
''',
}

_RUN_REF = '''import math
import torch


@torch.no_grad()
def run(q, k_cache, v_cache, *args):
    # args: per level (qo_indptr, kv_indptr, kv_indices, kv_last_page_len), then sm_scale
    num_levels = {L}
    assert len(args) == 4 * num_levels + 1
    sm_scale = float(args[-1])
    total_q, num_qo_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    assert num_qo_heads == {HQ} and num_kv_heads == {HKV} and head_dim == {D} and page_size == {PS}
    G = num_qo_heads // num_kv_heads
    kf = k_cache.to(torch.float32)
    vf = v_cache.to(torch.float32)
    qf = q.to(torch.float32)
    outs, lses = [], []
    for lvl in range(num_levels):
        qo_indptr, kv_indptr, kv_indices, last = (a.tolist() for a in args[4 * lvl: 4 * lvl + 4])
        assert qo_indptr[-1] == total_q
        o = torch.zeros(total_q, num_qo_heads, head_dim, dtype=torch.float32, device=q.device)
        lse = torch.full((total_q, num_qo_heads), float("-inf"), dtype=torch.float32, device=q.device)
        for g in range(len(qo_indptr) - 1):
            qs, qe = qo_indptr[g], qo_indptr[g + 1]
            ps_, pe_ = kv_indptr[g], kv_indptr[g + 1]
            if qe <= qs or pe_ <= ps_:
                continue
            n = (pe_ - ps_ - 1) * page_size + last[g]
            pages = torch.tensor(kv_indices[ps_:pe_], dtype=torch.long, device=q.device)
            k = kf[pages].reshape(-1, num_kv_heads, head_dim)[:n].repeat_interleave(G, dim=1)
            v = vf[pages].reshape(-1, num_kv_heads, head_dim)[:n].repeat_interleave(G, dim=1)
            logits = torch.einsum("thd,nhd->thn", qf[qs:qe], k) * sm_scale
            lse[qs:qe] = torch.logsumexp(logits, dim=-1) / math.log(2.0)
            o[qs:qe] = torch.einsum("thn,nhd->thd", torch.softmax(logits, dim=-1), v)
        outs.append(o)
        lses.append(lse)
    s = torch.stack(lses, 1) * math.log(2.0)
    m = s.amax(dim=1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    w = torch.exp(s - m)
    den = w.sum(dim=1)
    out = (torch.stack(outs, 1) * w.unsqueeze(-1)).sum(dim=1) / den.clamp_min(1e-30).unsqueeze(-1)
    out = torch.where((den > 0).unsqueeze(-1), out, torch.zeros_like(out))
    return out.to(q.dtype)
'''


def name(kind: str, **c) -> str:
    if kind == "multi_level_cascade_run":
        return (f"multi_level_cascade_run_h{int(c['num_qo_heads'])}_kv{int(c['num_kv_heads'])}"
                f"_d{int(c['head_dim'])}_ps{int(c['page_size'])}")
    if kind not in KINDS:
        raise KeyError(f"unknown cascade kind {kind!r}")
    return f"{kind}_h{int(c['num_heads'])}_d{int(c['head_dim'])}"


def parse_name(definition_name: str) -> Optional[tuple]:
    """(kind, const dict) for a cascade definition name, else None."""
    m = _MERGE_RE.match(definition_name)
    if m:
        return m.group(1), dict(num_heads=int(m.group(2)), head_dim=int(m.group(3)))
    m = _RUN_RE.match(definition_name)
    if m:
        return "multi_level_cascade_run", dict(num_qo_heads=int(m.group(1)), num_kv_heads=int(m.group(2)),
                                               head_dim=int(m.group(3)), page_size=int(m.group(4)))
    return None


def _t(shape, dtype, desc=None, optional=False):
    d = {"shape": shape, "dtype": dtype}
    if desc:
        d["description"] = desc
    return d


@functools.lru_cache(maxsize=None)
def _merge_def(kind: str, H: int, D: int, dtype: str) -> dict:
    seq = ["seq_len", "num_heads", "head_dim"]
    sv = ["seq_len", "num_heads"]
    axes = {"seq_len": {"type": "var", "description": "Number of query tokens."}}
    if kind == "merge_states":
        axes["num_states"] = {"type": "var", "description": "Number of KV segments (states) to merge."}
    axes["num_heads"] = {"type": "const", "value": H}
    axes["head_dim"] = {"type": "const", "value": D}
    lse = "Log-sum-exp (base 2) of the attention scores of the segment."
    if kind == "merge_state":
        inputs = {"v_a": _t(seq, dtype, "Attention output of KV segment A."), "s_a": _t(sv, "float32", lse),
                  "v_b": _t(seq, dtype, "Attention output of KV segment B."), "s_b": _t(sv, "float32", lse)}
        desc = "Merge two attention (V, S) states (base-2 log-sum-exp)."
    elif kind == "merge_state_in_place":
        inputs = {"v": _t(seq, dtype, "Attention output (FlashInfer updates it in place)."),
                  "s": _t(sv, "float32", lse + " Updated in place by FlashInfer."),
                  "v_other": _t(seq, dtype, "Other attention output."), "s_other": _t(sv, "float32", lse)}
        desc = ("Merge attention state (v, s) with (v_other, s_other); FlashInfer writes the result into v and s, "
                "the Definition returns it.")
    else:
        inputs = {"v": _t(["seq_len", "num_states", "num_heads", "head_dim"], dtype, "Attention outputs of all segments."),
                  "s": _t(["seq_len", "num_states", "num_heads"], "float32", lse)}
        desc = "Merge num_states attention (V, S) states (base-2 log-sum-exp)."
    return {
        "name": name(kind, num_heads=H, head_dim=D),
        "description": desc + " Generated by fib-runtime.",
        "op_type": "cascade_merge",
        "tags": [f"fi_api:flashinfer.cascade.{kind}", "status:generated", "lse:base2"],
        "axes": axes,
        "inputs": inputs,
        "outputs": {"v_merged": _t(seq, dtype, "Merged attention output."),
                    "s_merged": _t(sv, "float32", "Merged log-sum-exp (base 2).")},
        "reference": _REF[kind].replace("{H}", str(H)).replace("{D}", str(D)),
    }


@functools.lru_cache(maxsize=None)
def _run_def(HQ: int, HKV: int, D: int, PS: int, L: int, dtype: str) -> dict:
    axes = {
        "batch_size": {"type": "var", "description": "Total number of query tokens."},
        "num_qo_heads": {"type": "const", "value": HQ},
        "num_kv_heads": {"type": "const", "value": HKV},
        "head_dim": {"type": "const", "value": D},
        "num_pages": {"type": "var"},
        "page_size": {"type": "const", "value": PS},
    }
    inputs = {
        "q": _t(["batch_size", "num_qo_heads", "head_dim"], dtype),
        "k_cache": _t(["num_pages", "page_size", "num_kv_heads", "head_dim"], dtype),
        "v_cache": _t(["num_pages", "page_size", "num_kv_heads", "head_dim"], dtype),
    }
    constraints = []
    for i in range(L):
        axes[f"len_qo_indptr_{i}"] = {"type": "var", "description": f"Groups of level {i} plus one."}
        axes[f"num_kv_indices_{i}"] = {"type": "var", "description": f"KV page indices of level {i}."}
        axes[f"num_groups_{i}"] = {"type": "var", "description": f"Groups (requests) of level {i}."}
        inputs[f"qo_indptr_{i}"] = _t([f"len_qo_indptr_{i}"], "int32", f"Query offsets of the groups of level {i}.")
        inputs[f"kv_indptr_{i}"] = _t([f"len_qo_indptr_{i}"], "int32", f"KV page offsets of the groups of level {i}.")
        inputs[f"kv_indices_{i}"] = _t([f"num_kv_indices_{i}"], "int32", f"Page ids of level {i}.")
        inputs[f"kv_last_page_len_{i}"] = _t([f"num_groups_{i}"], "int32",
                                            f"Tokens in the last page of each group of level {i} (1..page_size).")
        constraints += [f"len_qo_indptr_{i} == num_groups_{i} + 1",
                        f"qo_indptr_{i}[-1].item() == batch_size",
                        f"num_kv_indices_{i} >= kv_indptr_{i}[-1].item()"]
    inputs["sm_scale"] = {"shape": None, "dtype": "float32", "description": "Softmax scale (default 1/sqrt(head_dim))."}
    return {
        "name": name("multi_level_cascade_run", num_qo_heads=HQ, num_kv_heads=HKV, head_dim=D, page_size=PS),
        "description": (f"MultiLevelCascadeAttentionWrapper.run() with {L} levels over a paged NHD KV cache: every query "
                        "attends the KV of its group at each level (non-causal); level states are merged with "
                        "base-2 log-sum-exp. Generated by fib-runtime."),
        "op_type": "cascade_attention",
        "tags": ["fi_api:flashinfer.cascade.MultiLevelCascadeAttentionWrapper.run", "status:generated", "cascade",
                 f"levels:{L}"],
        "axes": axes,
        "constraints": constraints,
        "inputs": inputs,
        "outputs": {"output": _t(["batch_size", "num_qo_heads", "head_dim"], dtype)},
        "reference": (_RUN_REF.replace("{L}", str(L)).replace("{HQ}", str(HQ)).replace("{HKV}", str(HKV))
                      .replace("{D}", str(D)).replace("{PS}", str(PS))),
    }


def definition(kind: str, dtype: str = "bfloat16", num_levels: int = 2, **consts) -> dict:
    """The Definition dict (a fresh copy) of a cascade op at the given const axes."""
    if kind == "multi_level_cascade_run":
        return copy.deepcopy(_run_def(int(consts["num_qo_heads"]), int(consts["num_kv_heads"]), int(consts["head_dim"]),
                                      int(consts["page_size"]), int(num_levels), dtype))
    if kind not in KINDS:
        raise KeyError(f"unknown cascade kind {kind!r}")
    return copy.deepcopy(_merge_def(kind, int(consts["num_heads"]), int(consts["head_dim"]), dtype))


def generate(definition_name: str, dtype: str = "bfloat16", num_levels: int = 2, **_kw) -> Optional[dict]:
    """Definition for a cascade name (see module doc), or None if the name is not a cascade op."""
    parsed = parse_name(definition_name)
    if parsed is None:
        return None
    kind, consts = parsed
    return definition(kind, dtype=dtype, num_levels=num_levels, **consts)
