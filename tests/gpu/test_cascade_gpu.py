"""H200 checks of fib's cascade kernels (skipped without CUDA or without the built family).

- merge_state / merge_state_in_place (+mask) / merge_states vs float64, and vs FlashInfer's own
  outputs when FlashInfer is importable (base-2 LSE, -inf handling);
- MultiLevelCascadeAttentionWrapper vs an fp32 PyTorch attention over the concatenated KV for
  every configuration class: fp16/bf16, head_dim 64/128/256, GQA 1-8, page size 1-16, prefix
  not a multiple of the page size, ragged and empty suffixes, B = 1, 1 and several query tokens
  per request, causal last level, 1/2/3 levels, NHD/HND, tuple caches, every tile config
  (16/32/64-row tiles) and the split-KV paths (fused and separate final merge);
- LSE against FlashInfer's batch prefill (fp16, head_dim 128: the AOT-built module).
"""
from __future__ import annotations

import math
import os
import random

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("CUDA not available", allow_module_level=True)

from fib_runtime.kernels import cascade as fc  # noqa: E402

if not fc.available():
    pytest.skip("fib cascade kernels not built/loadable", allow_module_level=True)

LN2 = math.log(2.0)
DEV = "cuda"


def _flashinfer():
    try:
        import flashinfer.cascade  # noqa: F401
        import flashinfer.prefill  # noqa: F401

        return flashinfer
    except Exception:  # noqa: BLE001
        return None


def rel_err(a, b):
    a = a.double()
    b = b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


# ------------------------------------------------------------------ merge functions


def ref_merge(vs, ss):
    """float64 n-ary merge; vs [..., S, H, D], ss [..., S, H] base 2."""
    s = ss.double() * LN2
    m = s.max(dim=-2, keepdim=True).values
    m_safe = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(m), m)
    w = torch.exp(s - m_safe)
    den = w.sum(dim=-2)
    v = (vs.double() * w.unsqueeze(-1)).sum(dim=-3) / den.clamp_min(1e-300).unsqueeze(-1)
    v = torch.where((den > 0).unsqueeze(-1), v, torch.zeros_like(v))
    lse = (m_safe.squeeze(-2) + torch.log(den)) / LN2
    lse = torch.where(den > 0, lse, torch.full_like(lse, -math.inf))
    return v, lse


def _states(n, h, d, dtype, with_inf=True):
    v_a = torch.randn(n, h, d, device=DEV).to(dtype)
    v_b = torch.randn(n, h, d, device=DEV).to(dtype)
    s_a = torch.randn(n, h, device=DEV) * 8
    s_b = torch.randn(n, h, device=DEV) * 8
    if with_inf:
        s_a[0, 0] = -math.inf
        s_b[1 % n, 0] = -math.inf
        s_a[2 % n, 1 % h] = -math.inf
        s_b[2 % n, 1 % h] = -math.inf
    return v_a, s_a, v_b, s_b


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1, 64), (37, 8, 128), (513, 32, 128), (7, 4, 256), (3, 2, 512)])
def test_merge_state_vs_float64(dtype, shape):
    n, h, d = shape
    v_a, s_a, v_b, s_b = _states(n, h, d, dtype)
    v, s = fc.merge_state(v_a, s_a, v_b, s_b)
    rv, rs = ref_merge(torch.stack([v_a, v_b], 1), torch.stack([s_a, s_b], 1))
    tol = 4e-3 if dtype == torch.float16 else 2e-2
    assert rel_err(v, rv) < tol
    fin = torch.isfinite(rs)
    assert torch.equal(torch.isfinite(s), fin)
    if fin.any():
        assert (s[fin].double() - rs[fin]).abs().max().item() < 1e-4 * (1 + rs[fin].abs().max().item())
    assert torch.isneginf(s[2 % n, 1 % h]) and (v[2 % n, 1 % h] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("use_mask", [False, True])
def test_merge_state_in_place_vs_float64(dtype, use_mask):
    n, h, d = 129, 8, 128
    v_a, s_a, v_b, s_b = _states(n, h, d, dtype)
    v, s = v_a.clone(), s_a.clone()
    mask = (torch.rand(n, device=DEV) < 0.6) if use_mask else None
    fc.merge_state_in_place(v, s, v_b, s_b, mask)
    rv, rs = ref_merge(torch.stack([v_a, v_b], 1), torch.stack([s_a, s_b], 1))
    if mask is not None:
        rv = torch.where(mask[:, None, None], rv, v_a.double())
        rs = torch.where(mask[:, None], rs, s_a.double())
        assert torch.equal(v[~mask], v_a[~mask]) and torch.equal(s[~mask], s_a[~mask])
    tol = 4e-3 if dtype == torch.float16 else 2e-2
    assert rel_err(v, rv) < tol
    fin = torch.isfinite(rs)
    assert torch.equal(torch.isfinite(s), fin)
    assert (s[fin].double() - rs[fin]).abs().max().item() < 1e-3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("num_states", [0, 1, 2, 5, 16])
def test_merge_states_vs_float64(dtype, num_states):
    n, h, d = 65, 8, 128
    v = torch.randn(n, num_states, h, d, device=DEV).to(dtype)
    s = torch.randn(n, num_states, h, device=DEV) * 6
    if num_states >= 2:
        s[0, :, 0] = -math.inf
        s[1, 0, :] = -math.inf
    vm, sm = fc.merge_states(v, s)
    if num_states == 0:
        assert (vm == 0).all() and torch.isneginf(sm).all()
        return
    if num_states == 1:
        assert torch.equal(vm, v[:, 0]) and torch.equal(sm, s[:, 0])
        return
    rv, rs = ref_merge(v, s)
    tol = 4e-3 if dtype == torch.float16 else 2e-2
    assert rel_err(vm, rv) < tol
    fin = torch.isfinite(rs)
    assert torch.equal(torch.isfinite(sm), fin)
    assert (sm[fin].double() - rs[fin]).abs().max().item() < 1e-3
    assert (vm[0, 0] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_merge_functions_match_flashinfer(dtype):
    fi = _flashinfer()
    if fi is None:
        pytest.skip("flashinfer not importable")
    v_a, s_a, v_b, s_b = _states(300, 32, 128, dtype)
    a = fc.merge_state(v_a, s_a, v_b, s_b)
    b = fi.cascade.merge_state(v_a, s_a, v_b, s_b)
    assert rel_err(a[0], b[0]) < 2e-3
    fin = torch.isfinite(b[1])
    assert torch.equal(torch.isfinite(a[1]), fin)
    assert (a[1][fin] - b[1][fin]).abs().max().item() < 1e-4
    v, s = v_a.clone(), s_a.clone()
    v2, s2 = v_a.clone(), s_a.clone()
    mask = torch.rand(300, device=DEV) < 0.5
    fc.merge_state_in_place(v, s, v_b, s_b, mask)
    fi.cascade.merge_state_in_place(v2, s2, v_b, s_b, mask)
    assert rel_err(v, v2) < 2e-3
    vv = torch.randn(100, 7, 32, 128, device=DEV).to(dtype)
    ss = torch.randn(100, 7, 32, device=DEV) * 5
    x, y = fc.merge_states(vv, ss), fi.cascade.merge_states(vv, ss)
    assert rel_err(x[0], y[0]) < 2e-3 and (x[1] - y[1]).abs().max().item() < 1e-4


# ------------------------------------------------------------------ cascade attention


def build_case(cfg, seed):
    """Random multi-level cascade problem. Returns dict with the cache, q and per-level arrays."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    rnd = random.Random(seed)
    B, P, ps = cfg["B"], cfg["P"], cfg["page_size"]
    Hq, Hkv, D = cfg["Hq"], cfg["Hkv"], cfg["D"]
    dtype = cfg["dtype"]
    nq = cfg.get("nq", 1)  # query tokens per request (list or int)
    qo_lens = [nq] * B if isinstance(nq, int) else list(nq)
    suffix = cfg["suffix"](rnd, B)
    num_levels = cfg.get("levels", 2)
    # page allocation (random page ids, shuffled)
    level_specs = []
    if num_levels == 1:
        # each request: prefix P (own copy) + suffix
        level_specs.append(([[b] for b in range(B)], [P + suffix[b] for b in range(B)]))
    elif num_levels == 2:
        level_specs.append(([list(range(B))], [P]))
        level_specs.append(([[b] for b in range(B)], suffix))
    else:  # 3 levels: shared P, then two sub-groups with a mid prefix, then suffixes
        half = max(1, B // 2)
        subs = [list(range(0, half)), list(range(half, B))] if B > 1 else [[0]]
        mid = [rnd.randint(1, 3 * ps + 2) for _ in subs]
        level_specs.append(([list(range(B))], [P]))
        level_specs.append((subs, mid))
        level_specs.append(([[b] for b in range(B)], suffix))
    total_pages = sum(-(-n // ps) for _, lens in level_specs for n in lens) + 3
    perm = torch.randperm(total_pages, generator=g).tolist()
    nxt = 0
    levels = []
    qo_indptr_tok = [0]
    for b in range(B):
        qo_indptr_tok.append(qo_indptr_tok[-1] + qo_lens[b])
    for groups, lens in level_specs:
        qo_ptr, kv_ptr, idx, last = [0], [0], [], []
        for grp, n in zip(groups, lens):
            qo_ptr.append(qo_ptr[-1] + sum(qo_lens[b] for b in grp))
            npg = -(-n // ps)
            idx += perm[nxt: nxt + npg]
            nxt += npg
            kv_ptr.append(kv_ptr[-1] + npg)
            last.append(n - (npg - 1) * ps if npg > 0 else 1)
        levels.append(dict(qo_indptr=qo_ptr, kv_indptr=kv_ptr, kv_indices=idx, last_page_len=last))
    total_q = qo_indptr_tok[-1]
    layout = cfg.get("layout", "NHD")
    shape = (total_pages, 2, ps, Hkv, D) if layout == "NHD" else (total_pages, 2, Hkv, ps, D)
    cache = torch.randn(shape, generator=g).to(dtype).to(DEV)
    q = torch.randn(total_q, Hq, D, generator=g).to(dtype).to(DEV)
    return dict(cache=cache, q=q, levels=levels, total_q=total_q, layout=layout)


def reference(case, cfg, causal=False, sm_scale=None):
    """fp32 attention of each query over the concatenation of its groups' KV at every level."""
    cache, q, levels = case["cache"], case["q"], case["levels"]
    ps, Hq, Hkv, D = cfg["page_size"], cfg["Hq"], cfg["Hkv"], cfg["D"]
    G = Hq // Hkv
    if case["layout"] == "HND":
        cache = cache.transpose(2, 3)
    kc = cache[:, 0].float()  # [pages, ps, Hkv, D]
    vc = cache[:, 1].float()
    sm_scale = sm_scale or 1.0 / math.sqrt(D)
    T = case["total_q"]
    out = torch.zeros(T, Hq, D, device=DEV)
    lse = torch.full((T, Hq), -math.inf, device=DEV)

    def tokens(lv, gidx):
        pages = lv["kv_indices"][lv["kv_indptr"][gidx]: lv["kv_indptr"][gidx + 1]]
        if not pages:
            return None, None
        n = (len(pages) - 1) * ps + lv["last_page_len"][gidx]
        pi = torch.tensor(pages, device=DEV)
        k = kc[pi].reshape(-1, Hkv, D)[:n]
        v = vc[pi].reshape(-1, Hkv, D)[:n]
        return k, v

    for t in range(T):
        ks, vs = [], []
        for li, lv in enumerate(levels):
            qp = lv["qo_indptr"]
            gidx = max(i for i in range(len(qp) - 1) if qp[i] <= t < qp[i + 1])
            k, v = tokens(lv, gidx)
            if k is None:
                continue
            if causal and li == len(levels) - 1:
                qo_len = qp[gidx + 1] - qp[gidx]
                qi = t - qp[gidx]
                lim = k.shape[0] - qo_len + qi + 1
                k, v = k[: max(0, lim)], v[: max(0, lim)]
            ks.append(k)
            vs.append(v)
        if not ks or sum(k.shape[0] for k in ks) == 0:
            continue
        K = torch.cat(ks).repeat_interleave(G, dim=1)  # [n, Hq, D]
        V = torch.cat(vs).repeat_interleave(G, dim=1)
        logits = torch.einsum("hd,nhd->hn", q[t].float(), K) * sm_scale
        lse[t] = torch.logsumexp(logits, dim=-1) / LN2
        out[t] = torch.einsum("hn,nhd->hd", torch.softmax(logits, dim=-1), V)
    return out, lse


def run_ours(case, cfg, causal=False, tuple_cache=False):
    levels = case["levels"]
    ws = torch.empty(16 * 1024 * 1024, dtype=torch.uint8, device=DEV)
    w = fc.MultiLevelCascadeAttentionWrapper(len(levels), ws, case["layout"])
    i32 = lambda x: torch.tensor(x, dtype=torch.int32, device=DEV)  # noqa: E731
    w.plan([i32(l["qo_indptr"]) for l in levels], [i32(l["kv_indptr"]) for l in levels],
           [i32(l["kv_indices"]) for l in levels], [i32(l["last_page_len"]) for l in levels],
           cfg["Hq"], cfg["Hkv"], cfg["D"], cfg["page_size"], causal=causal,
           q_data_type=cfg["dtype"])
    kv = (case["cache"][:, 0], case["cache"][:, 1]) if tuple_cache else case["cache"]
    out, lse = w.run(case["q"], kv, return_lse=True)
    return out, lse, w


def _suffix_ragged(rnd, B):
    s = [rnd.randint(0, 90) for _ in range(B)]
    if B > 1:
        s[1] = 0
    return s


CASES = []
for dtype in ("float16", "bfloat16"):
    for D in (64, 128, 256):
        CASES.append(dict(name=f"{dtype}-d{D}-g4-ps16", dtype=dtype, D=D, Hq=8, Hkv=2, page_size=16, B=5, P=300,
                          suffix=_suffix_ragged))
CASES += [
    dict(name="g1-ps1-B1", dtype="float16", D=128, Hq=4, Hkv=4, page_size=1, B=1, P=77, suffix=lambda r, B: [13]),
    dict(name="g2-ps5-rows32", dtype="float16", D=128, Hq=4, Hkv=2, page_size=5, B=13, P=203, suffix=_suffix_ragged),
    dict(name="g8-ps16-rows64", dtype="bfloat16", D=128, Hq=16, Hkv=2, page_size=16, B=17, P=1000,
         suffix=_suffix_ragged),
    dict(name="g4-ps3-nq3", dtype="float16", D=128, Hq=8, Hkv=2, page_size=3, B=4, P=150, nq=3, suffix=_suffix_ragged),
    dict(name="g1-ps7-nq-ragged", dtype="bfloat16", D=64, Hq=2, Hkv=2, page_size=7, B=4, P=61, nq=[1, 4, 2, 5],
         suffix=lambda r, B: [40, 3, 0, 70]),
    dict(name="g8-ps16-B1-longsuffix-split", dtype="float16", D=128, Hq=8, Hkv=1, page_size=16, B=1, P=2500,
         suffix=lambda r, B: [3001]),
    dict(name="all-empty-suffix", dtype="float16", D=128, Hq=8, Hkv=8, page_size=16, B=6, P=129,
         suffix=lambda r, B: [0] * B),
    dict(name="empty-prefix", dtype="float16", D=128, Hq=8, Hkv=4, page_size=4, B=3, P=0, suffix=lambda r, B: [5, 0, 9]),
    dict(name="hnd", dtype="float16", D=128, Hq=8, Hkv=2, page_size=8, B=5, P=333, layout="HND", suffix=_suffix_ragged),
    dict(name="levels1", dtype="bfloat16", D=128, Hq=8, Hkv=2, page_size=16, B=5, P=100, levels=1,
         suffix=_suffix_ragged),
    dict(name="levels3", dtype="float16", D=128, Hq=8, Hkv=4, page_size=4, B=6, P=260, levels=3, suffix=_suffix_ragged),
    dict(name="d256-g8-rows64", dtype="bfloat16", D=256, Hq=8, Hkv=1, page_size=16, B=9, P=700, suffix=_suffix_ragged),
    dict(name="d64-g1-B40", dtype="float16", D=64, Hq=4, Hkv=4, page_size=2, B=40, P=515, suffix=_suffix_ragged),
]


def _tol(dtype):
    return 4e-3 if dtype == "float16" else 2e-2


@pytest.mark.parametrize("cfg", CASES, ids=[c["name"] for c in CASES])
def test_cascade_vs_fp32(cfg):
    cfg = dict(cfg)
    cfg["dtype"] = getattr(torch, cfg["dtype"])
    seed = random.randrange(1 << 30) if os.environ.get("FIB_TEST_FRESH", "1") == "1" else 0
    case = build_case(cfg, seed)
    out, lse, w = run_ours(case, cfg)
    ref_o, ref_l = reference(case, cfg)
    e = rel_err(out, ref_o)
    assert e < _tol(str(cfg["dtype"]).replace("torch.", "")), (cfg["name"], seed, e, w.plan_info())
    fin = torch.isfinite(ref_l)
    assert torch.equal(torch.isfinite(lse), fin), (cfg["name"], seed)
    assert (lse[fin] - ref_l[fin]).abs().max().item() < 2e-3, (cfg["name"], seed)
    assert (out[~fin] == 0).all()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cascade_causal_last_level(dtype):
    cfg = dict(name="causal", dtype=getattr(torch, dtype), D=128, Hq=8, Hkv=2, page_size=4, B=4, P=90, nq=[3, 1, 4, 2],
               suffix=lambda r, B: [5, 1, 20, 2])
    case = build_case(cfg, random.randrange(1 << 30))
    out, lse, _ = run_ours(case, cfg, causal=True)
    ref_o, ref_l = reference(case, cfg, causal=True)
    assert rel_err(out, ref_o) < _tol(dtype)
    assert (lse - ref_l).abs().max().item() < 2e-3


def test_cascade_tuple_cache_and_graph():
    cfg = dict(name="tuple", dtype=torch.float16, D=128, Hq=8, Hkv=2, page_size=16, B=8, P=500, suffix=_suffix_ragged)
    case = build_case(cfg, 123)
    out, lse, w = run_ours(case, cfg, tuple_cache=True)
    ref_o, _ = reference(case, cfg)
    assert rel_err(out, ref_o) < 4e-3
    # graph capture on a side stream, replay on fresh q
    s = torch.cuda.Stream()
    q2 = case["q"].clone()
    with torch.cuda.stream(s):
        w.run(q2, case["cache"])
    torch.cuda.synchronize()
    gph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gph, stream=s):
        o_g = w.run(q2, case["cache"])
    q2.copy_(torch.randn_like(q2))
    gph.replay()
    torch.cuda.synchronize()
    case2 = dict(case)
    case2["q"] = q2
    ref2, _ = reference(case2, cfg)
    assert rel_err(o_g, ref2) < 4e-3


def test_lse_matches_flashinfer_prefill():
    fi = _flashinfer()
    if fi is None:
        pytest.skip("flashinfer not importable")
    cfg = dict(name="fi", dtype=torch.float16, D=128, Hq=32, Hkv=8, page_size=16, B=7, P=0, levels=1,
               suffix=lambda r, B: [r.randint(1, 700) for _ in range(B)])
    case = build_case(cfg, random.randrange(1 << 30))
    out, lse, _ = run_ours(case, cfg)
    lv = case["levels"][0]
    i32 = lambda x: torch.tensor(x, dtype=torch.int32, device=DEV)  # noqa: E731
    ws = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device=DEV)
    pw = fi.prefill.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD")
    pw.plan(i32(lv["qo_indptr"]), i32(lv["kv_indptr"]), i32(lv["kv_indices"]), i32(lv["last_page_len"]),
            32, 8, 128, 16, causal=False, q_data_type=torch.float16)
    o_fi, l_fi = pw.run(case["q"], case["cache"], return_lse=True)
    assert rel_err(out, o_fi) < 2e-3
    assert (lse - l_fi).abs().max().item() < 1e-3  # same base (2): a natural-log lse would be off by ~30 %


def test_cascade_matches_flashinfer_wrapper():
    fi = _flashinfer()
    if fi is None:
        pytest.skip("flashinfer not importable")
    cfg = dict(name="fi2", dtype=torch.float16, D=128, Hq=32, Hkv=8, page_size=16, B=9, P=1500,
               suffix=lambda r, B: [r.randint(1, 90) for _ in range(B)])
    case = build_case(cfg, random.randrange(1 << 30))
    out, _, _ = run_ours(case, cfg)
    i32 = lambda x: torch.tensor(x, dtype=torch.int32, device=DEV)  # noqa: E731
    ws = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device=DEV)
    fw = fi.cascade.MultiLevelCascadeAttentionWrapper(2, ws, "NHD")
    lv = case["levels"]
    fw.plan([i32(l["qo_indptr"]) for l in lv], [i32(l["kv_indptr"]) for l in lv], [i32(l["kv_indices"]) for l in lv],
            [i32(l["last_page_len"]) for l in lv], 32, 8, 128, 16)
    o_fi = fw.run(case["q"], case["cache"])
    assert rel_err(out, o_fi) < 2e-3


def test_builtin_solutions_match_definition_references():
    from fib_runtime.definitions import generate
    from fib_runtime.kernels import builtin_table

    def ref(name, **kw):
        ns = {}
        exec(compile(generate(name, **kw)["reference"], name, "exec"), ns)  # noqa: S102
        return ns["run"]

    v_a, s_a, v_b, s_b = _states(50, 8, 128, torch.float16)
    for name, args in (("merge_state_h8_d128", (v_a, s_a, v_b, s_b)),
                       ("merge_state_in_place_h8_d128", (v_a, s_a, v_b, s_b))):
        ent = builtin_table.find(name)
        assert ent is not None and ent.supports(args)
        out = ent.load()(*args)
        r = ref(name, dtype="float16")(*args)
        assert rel_err(out[0], r[0]) < 4e-3
    vv = torch.randn(30, 3, 8, 128, device=DEV).half()
    ss = torch.randn(30, 3, 8, device=DEV)
    ent = builtin_table.find("merge_states_h8_d128")
    assert rel_err(ent.load()(vv, ss)[0], ref("merge_states_h8_d128", dtype="float16")(vv, ss)[0]) < 4e-3
    # cascade run through the built-in (definition input order), twice (plan cache)
    cfg = dict(name="builtin", dtype=torch.bfloat16, D=128, Hq=8, Hkv=2, page_size=16, B=5, P=300,
               suffix=lambda r, B: [r.randint(1, 60) for _ in range(B)])
    case = build_case(cfg, 7)
    i32 = lambda x: torch.tensor(x, dtype=torch.int32, device=DEV)  # noqa: E731
    args = [case["q"], case["cache"][:, 0], case["cache"][:, 1]]
    for lv in case["levels"]:
        args += [i32(lv["qo_indptr"]), i32(lv["kv_indptr"]), i32(lv["kv_indices"]), i32(lv["last_page_len"])]
    args.append(1 / math.sqrt(128))
    name = "multi_level_cascade_run_h8_kv2_d128_ps16"
    ent = builtin_table.find(name)
    assert ent.supports(args)
    o1 = ent.load()(*args)
    o2 = ent.load()(*args)
    r = ref(name, dtype="bfloat16")(*args)
    assert rel_err(o1, r) < 2e-2 and torch.equal(o1, o2)
