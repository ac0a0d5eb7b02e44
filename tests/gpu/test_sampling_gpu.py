"""GPU checks of fib_runtime.kernels.sampling (H200; skipped without CUDA or without the built kernels).

Statistical rule used throughout: N >= 2^20 draws of one distribution; expected counts from the exact
filtered distribution computed here in float64; bins with expected count < 5 pooled; the chi-square
statistic converted to a z-score (Wilson-Hilferty) must stay below 4.75 (one-sided p ~ 1e-6 per
case), and not one draw may fall outside the support. The total-variation distance is reported and
must stay below 4 * sqrt(support / N) + 1e-3.
"""
from __future__ import annotations

import math

import pytest
import torch

cuda_ok = torch.cuda.is_available()
pytestmark = pytest.mark.skipif(not cuda_ok, reason="needs a CUDA GPU")

if cuda_ok:
    from fib_runtime.kernels import loader
    from fib_runtime.kernels import sampling as S

    if loader.load_family("sampling") is None:  # pragma: no cover
        pytestmark = pytest.mark.skip(reason=f"sampling kernels unavailable: {loader.reason('sampling')}")

DEV = "cuda"
Z_MAX = 4.75


# ----------------------------------------------------------------------------- float64 references
def ref_kept(vals: torch.Tensor, is_logits: bool, k=None, p=None, min_p=None, joint=False, temperature=1.0):
    """Exact filtered distribution of one row (float64). Returns (q, margin): q sums to 1 over the
    kept set; margin = distance of the top-p decision from its boundary (small = ambiguous)."""
    v = vals.double()
    V = v.numel()
    if is_logits:
        v = torch.nan_to_num(v, nan=-math.inf)
        if temperature is not None and temperature <= 0:
            k, p, min_p = 1, None, None
            temperature = 1.0
        x = v / (temperature or 1.0)
        if torch.isposinf(x).any():
            prob = torch.isposinf(x).double()
        elif torch.isneginf(x).all():
            prob = torch.zeros_like(x)
        else:
            prob = torch.softmax(x, 0)
        key = v
    else:
        prob = torch.nan_to_num(v, nan=0.0).clamp_min(0.0)
        if torch.isposinf(prob).any():
            prob = torch.isposinf(prob).double()
        key = prob
    keep = torch.ones(V, dtype=torch.bool, device=v.device)
    # top-k: exactly k, ties to the lower index (stable sort on -key)
    if k is not None and 0 < k < V:
        order = torch.sort(-key, stable=True).indices
        keep = torch.zeros_like(keep)
        keep[order[:k]] = True
    if min_p is not None and min_p > 0:
        keep &= prob >= min(min_p, 1.0) * prob.max()
    margin = math.inf
    if p is not None and p < 1.0 and prob.sum() > 0:
        base = prob.sum() if joint else prob[keep].sum()
        pk = torch.where(keep, prob, torch.zeros_like(prob))
        vals_sorted, idx = torch.sort(pk, descending=True)
        # mass strictly larger: group equal values
        uniq, inv, cnt = torch.unique_consecutive(vals_sorted, return_inverse=True, return_counts=True)
        group_mass = uniq * cnt
        strictly_larger = torch.cumsum(group_mass, 0) - group_mass
        thr = p * base if p > 0 else 0.0
        kept_group = strictly_larger < thr if p > 0 else strictly_larger <= 0
        if p > 0:
            d = (strictly_larger - thr).abs() / max(float(base), 1e-300)
            margin = float(d.min())
        keep_sorted = kept_group[inv]
        newkeep = torch.zeros_like(keep)
        newkeep[idx[keep_sorted]] = True
        keep &= newkeep
    q = torch.where(keep, prob, torch.zeros_like(prob))
    s = q.sum()
    q = q / s if s > 0 else q
    return q, margin


def chi2_z(obs: torch.Tensor, q: torch.Tensor, n: int):
    e = q * n
    supp = q > 0
    outside = int(obs[~supp].sum())
    e_s, o_s = e[supp], obs[supp].double()
    big = e_s >= 5
    stat = float((((o_s[big] - e_s[big]) ** 2) / e_s[big]).sum())
    bins = int(big.sum())
    if (~big).any():
        eo, oo = float(e_s[~big].sum()), float(o_s[~big].sum())
        if eo > 0:
            stat += (oo - eo) ** 2 / eo
            bins += 1
    dof = max(bins - 1, 1)
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    tv = 0.5 * float((obs.double() / n - q).abs().sum())
    return z, outside, tv, int(supp.sum())


def draw_counts(fn, row: torch.Tensor, rows: int, calls: int, **kw):
    x = row.unsqueeze(0).expand(rows, -1).contiguous()
    V = row.numel()
    counts = torch.zeros(V + 1, dtype=torch.int64, device=DEV)
    lo = torch.zeros((), dtype=torch.int64, device=DEV)
    seed = 1234
    for c in range(calls):
        s = fn(x, seed=seed, offset=c, **kw)
        lo = torch.minimum(lo, s.min())
        counts += torch.bincount(s.clamp(0, V), minlength=V + 1)[: V + 1]
    assert int(lo) >= 0, "negative token id"
    assert int(counts[V]) == 0, "token id >= V"
    return counts[:V]


def assert_distribution(counts, q, n, label):
    z, outside, tv, supp = chi2_z(counts, q, n)
    bound = 4 * math.sqrt(supp / n) + 1e-3
    msg = f"{label}: z={z:.2f} outside={outside} tv={tv:.4g} (bound {bound:.4g}) support={supp}"
    print(msg)
    assert outside == 0, msg
    assert z < Z_MAX, msg
    assert tv < bound, msg


def make_row(V, kind, gen, dtype=torch.float32):
    scale = {"peaked": 4.0, "flat": 1.0, "mid": 2.0}[kind]
    lg = torch.randn(V, generator=gen, dtype=torch.float64) * scale
    return lg.to(dtype).to(DEV)


N_ROWS, N_CALLS = 4096, 256  # 2^20 draws per case


# ----------------------------------------------------------------------------- distributions
CASES = [
    # (name, is_logits, kwargs for the reference, api function name, api kwargs builder)
    ("plain", dict(), "sampling_from", {}),
    ("top_k_1", dict(k=1), "top_k_sampling_from", {"top_k": 1}),
    ("top_k_7", dict(k=7), "top_k_sampling_from", {"top_k": 7}),
    ("top_k_50", dict(k=50), "top_k_sampling_from", {"top_k": 50}),
    ("top_k_V", dict(k=None), "top_k_sampling_from", {"top_k": "V"}),
    ("top_p_0.9", dict(p=0.9), "top_p_sampling_from", {"top_p": 0.9}),
    ("top_p_0.5", dict(p=0.5), "top_p_sampling_from", {"top_p": 0.5}),
    ("top_p_1", dict(p=1.0), "top_p_sampling_from", {"top_p": 1.0}),
    ("top_p_tiny", dict(p=1e-7), "top_p_sampling_from", {"top_p": 1e-7}),
    ("min_p_0.1", dict(min_p=0.1), "min_p_sampling_from", {"min_p": 0.1}),
    ("kp_first", dict(k=20, p=0.8), "top_k_top_p_sampling_from", {"top_k": 20, "top_p": 0.8}),
    ("kp_joint", dict(k=20, p=0.8, joint=True), "top_k_top_p_sampling_from",
     {"top_k": 20, "top_p": 0.8, "filter_apply_order": "joint"}),
]


def _api(name, src):
    return getattr(S, f"{name}_{src}")


@pytest.fixture
def force_path(request):
    old = S._CLUSTER
    S._CLUSTER = {"auto": 0, "cluster4": 4, "stream": -1, "filter1": 1001, "filter3": 1003,
                  "split": 2000, "twopass1": 3001, "twopass3": 3003, "twopass2_1": 4001,
                  "twopass2_2": 4002, "twopass_lk1": 5001, "twopass_lk3": 5003, "twopass2_lk1": 6001}[request.param]
    yield request.param
    S._CLUSTER = old


@pytest.mark.parametrize("force_path", ["auto", "cluster4", "stream", "filter1", "filter3", "split", "twopass1",
                                        "twopass3", "twopass2_1", "twopass_lk1"], indirect=True)
@pytest.mark.parametrize("V", [111, 1000])
@pytest.mark.parametrize("kind", ["peaked", "flat"])
@pytest.mark.parametrize("src", ["probs", "logits"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_distribution(case, src, kind, V, force_path):
    """auto: B=4096 rows of V <= 1000 take the streaming kernel for top-k (below the filter kernel's
    token threshold), the cluster kernel otherwise; cluster4: the resident-row cluster kernel (4
    CTAs per row); stream: the streaming kernel; filter1 / filter3: the one-pass filter kernel with
    1 / 3 CTAs per row (sm_90); split: the split-row kernel (chunks of 8192 tokens, k <= 128);
    twopass1 / twopass3: the two-pass kernel with 1 / 3 CTAs per row (sm_90); twopass_lk1: its
    large-k instantiation (1 CTA per row) on these k <= 128 rows, which the host sends it only on a
    wrong min_top_k hint (the group maxima bound instead of the lane maxima)."""
    name, refkw, api, apikw = case
    if force_path != "auto" and "k" not in refkw:
        pytest.skip("same kernel as auto")
    gen = torch.Generator().manual_seed(hash((name, src, kind, V)) & 0xFFFF)
    is_logits = src == "logits"
    for _ in range(20):  # pick a row whose top-p decision is not within 1e-5 of its boundary
        lg = make_row(V, kind, gen)
        row = lg if is_logits else torch.softmax(lg.double(), 0).float()
        q, margin = ref_kept(row, is_logits, **refkw)
        if margin > 1e-5:
            break
    kw = {a: (V if b == "V" else b) for a, b in apikw.items()}
    n = N_ROWS * N_CALLS
    counts = draw_counts(_api(api, src), row, N_ROWS, N_CALLS, **kw)
    assert_distribution(counts, q, n, f"{name}/{src}/{kind}/V={V}/{force_path}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("temperature", [0.7, 1.3])
@pytest.mark.parametrize("V", [1000, 1001])  # 1001: rows not 16-byte aligned (head/tail tokens)
def test_distribution_half_logits(dtype, temperature, V):
    gen = torch.Generator().manual_seed(7)
    lg = make_row(V, "mid", gen, dtype)
    q, _ = ref_kept(lg.float(), True, k=40, p=0.9, temperature=temperature)
    n = N_ROWS * N_CALLS
    counts = draw_counts(S.top_k_top_p_sampling_from_logits, lg, N_ROWS, N_CALLS, top_k=40, top_p=0.9,
                         temperature=temperature)
    assert_distribution(counts, q, n, f"half {dtype} T={temperature}")


@pytest.mark.parametrize("force_path", ["auto", "cluster4", "filter3", "split", "twopass2_2"], indirect=True)
@pytest.mark.parametrize("V,k,p,kind", [
    (128256, 50, 0.9, "peaked"),
    (151936, 2048, 0.95, "flat"),
    (262208, 1500, 1.0, "mid"),
    (32000, 32000, 0.3, "flat"),
    (128256, 0, 1.0, "peaked"),  # no filter at all: plain sampling over the whole vocabulary
])
def test_distribution_large_vocab(V, k, p, kind, force_path):
    gen = torch.Generator().manual_seed(V + k)
    lg = make_row(V, kind, gen)
    q, margin = ref_kept(lg, True, k=k, p=p)
    rows, calls = 989, 1061  # ~1.05e6 draws, odd batch
    if force_path == "cluster4" and V > 4 * 40000:
        rows, calls = 97, 10811
    n = rows * calls
    counts = draw_counts(S.top_k_top_p_sampling_from_logits, lg, rows, calls, top_k=k, top_p=p)
    assert_distribution(counts, q, n, f"large V={V} k={k} p={p} {kind} (margin {margin:.2g}) {force_path}")


@pytest.mark.parametrize("force_path", ["auto", "cluster4", "twopass_lk3"], indirect=True)
@pytest.mark.parametrize("V,k,p,mp,kind,src,order", [
    (32000, 2048, 0.9, 0.0, "peaked", "logits", "joint"),    # joint, peaked: candidates from the whole row
    (32000, 2048, 0.9, 0.0, "flat", "probs", "joint"),       # flat: straight to the exact radix path
    (32000, 1500, 0.5, 0.0, "peaked", "probs", "top_k_first"),
    (128256, 2048, 0.9, 0.0, "flat", "logits", "top_k_first"),
    (128256, 1100, 0.95, 0.05, "peaked", "logits", "joint"),  # min-p checked per candidate
    (32000, 2048, 0.7, 0.001, "mid", "probs", "top_k_first"),
])
def test_distribution_large_k_rejection(V, k, p, mp, kind, src, order, force_path):
    """Large-k rows sample top-p by rejection in the cluster kernel (sample_row): top-k-first rows
    with k > 1024 (FIB_SAMPLING_REJECT_MIN_K) draw from the kept top-k and check the nucleus; joint
    rows with k > 256 (FIB_SAMPLING_REJECT_JOINT_MIN_K) draw from the whole row and check the top-k
    rank, min-p and the row's nucleus per candidate, on peaked rows only (flat ones: the exact radix
    path for k > 1024, else the candidate path); a row whose rounds all fall outside draws again on
    the exact path. auto: B=989 rows take the two-pass kernel with two CTAs per SM (sm_90; with
    FIB_SAMPLING_TWOPASS_LARGE_K=1 its large-k instantiation, as the scalar k > 128 allows);
    twopass_lk3: the large-k instantiation with 3 CTAs per row (speculative candidates, the sets
    merged over DSMEM, then for top_k_first rows with k > 1024 the rejection tail: the cluster
    kernel's rounds on the merged exact top k); cluster4: the resident-row cluster kernel."""
    gen = torch.Generator().manual_seed(V + k + int(p * 100))
    for _ in range(20):
        lg = make_row(V, kind, gen)
        row = lg if src == "logits" else torch.softmax(lg.double(), 0).float()
        q, margin = ref_kept(row, src == "logits", k=k, p=p, min_p=mp or None, joint=order == "joint")
        if margin > 1e-5:
            break
    rows, calls = 989, 1061
    fn = S.top_k_top_p_sampling_from_logits if src == "logits" else S.top_k_top_p_sampling_from_probs
    if mp:  # no public entry takes top-k, top-p and min-p together: the wrapper's one call
        flags = S._SAMPLE | (S._LOGITS if src == "logits" else 0) | S._joint(order)
        counts = draw_counts(lambda x, **kw: S._call(x, flags, top_k=k, top_p=p, min_p=mp, **kw), row, rows, calls)
    else:
        counts = draw_counts(fn, row, rows, calls, top_k=k, top_p=p, filter_apply_order=order)
    assert_distribution(counts, q, rows * calls,
                        f"large k V={V} k={k} p={p} min_p={mp} {kind} {src} {order} (margin {margin:.2g}) {force_path}")


@pytest.mark.parametrize("V,p,kind,src", [
    (128256, 0.9, "flat", "probs"),
    (151936, 0.3, "flat", "logits"),  # acceptance ~0.3: a round passes ~1/4 of the rows on, ~0.3% reach the exact path
    (32000, 0.95, "peaked", "logits"),
    (262208, 0.6, "mid", "probs"),
])
def test_distribution_top_p_large(V, p, kind, src):
    """top-p alone on resident rows: rounds of four candidates from the whole row, the first in the
    nucleus wins, the exact radix path with a fresh draw when four rounds fall outside."""
    gen = torch.Generator().manual_seed(V + int(p * 100))
    lg = make_row(V, kind, gen)
    row = lg if src == "logits" else torch.softmax(lg.double(), 0).float()
    q, margin = ref_kept(row, src == "logits", p=p)
    rows, calls = 989, 1061
    fn = S.top_p_sampling_from_logits if src == "logits" else S.top_p_sampling_from_probs
    counts = draw_counts(fn, row, rows, calls, top_p=p)
    assert_distribution(counts, q, rows * calls, f"top_p large V={V} p={p} {kind} {src} (margin {margin:.2g})")


@pytest.mark.parametrize("src", ["probs", "logits"])
def test_distribution_min_p_large(src):
    V = 151936
    gen = torch.Generator().manual_seed(99)
    lg = make_row(V, "peaked", gen)
    row = lg if src == "logits" else torch.softmax(lg.double(), 0).float()
    q, _ = ref_kept(row, src == "logits", min_p=0.02)
    rows, calls = 989, 1061
    fn = S.min_p_sampling_from_logits if src == "logits" else S.min_p_sampling_from_probs
    counts = draw_counts(fn, row, rows, calls, min_p=0.02)
    assert_distribution(counts, q, rows * calls, f"min_p large V {src}")


# ----------------------------------------------------------------------------- support on odd sizes
def _ref_kept_batch(x, is_logits, k, p, joint=False):
    """Kept masks for a batch (float64 sort based; top-k exact with lower-index ties)."""
    B, V = x.shape
    masks, margins = [], []
    for b in range(B):
        q, m = ref_kept(x[b], is_logits, k=int(k[b]), p=float(p[b]), joint=joint)
        masks.append(q > 0)
        margins.append(m)
    return torch.stack(masks).cpu(), torch.tensor(margins)


@pytest.mark.parametrize("B", [1, 3, 99, 989])
@pytest.mark.parametrize("V", [111, 32000, 128256, 151936, 262208])
def test_support_odd_sizes(B, V):
    gen = torch.Generator(device=DEV).manual_seed(B * 7 + V)
    scale = torch.where(torch.rand(B, 1, generator=gen, device=DEV) < 0.5, 4.0, 1.0)
    lg = torch.randn(B, V, generator=gen, device=DEV) * scale
    choices = torch.tensor([1, 5, 50, 1024, 1500, 4096, V, V + 7, 0], device=DEV)
    k = choices[torch.randint(0, len(choices), (B,), generator=gen, device=DEV)].to(torch.int32)
    p = torch.rand(B, generator=gen, device=DEV).clamp_min(1e-3)
    p[torch.rand(B, generator=gen, device=DEV) < 0.2] = 1.0
    nb = min(B, 24)  # the float64 reference is per row: check up to 24 rows, all rows for validity
    probs = torch.softmax(lg, -1)
    masks_l, marg_l = _ref_kept_batch(lg[:nb], True, k[:nb], p[:nb])
    masks_p, marg_p = _ref_kept_batch(probs[:nb], False, k[:nb], p[:nb])
    for off in range(4):
        sl = S.top_k_top_p_sampling_from_logits(lg, k, p, seed=5, offset=off)
        sp = S.top_k_top_p_sampling_from_probs(probs, k, p, seed=5, offset=off)
        for s, masks, marg in ((sl, masks_l, marg_l), (sp, masks_p, marg_p)):
            assert s.shape == (B,) and s.dtype == torch.int64
            assert int(s.min()) >= 0 and int(s.max()) < V
            hit = masks[torch.arange(nb), s[:nb].cpu()]
            bad = (~hit) & (marg > 1e-6)
            assert not bool(bad.any()), f"drawn outside the support in rows {bad.nonzero().flatten().tolist()}"
        # every row: within top-k (count of strictly larger logits < k)
        kk = torch.where((k > 0) & (k < V), k, V).long()
        larger = (lg > lg.gather(1, sl[:, None])).sum(1)
        assert bool((larger < kk).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cl", [0, 1001, 1003, 1008, 2000, 3001, 3003, 4001, 4002, 5003, 6001])
def test_strided_rows_same_tokens(dtype, cl):
    """Rows with a padded stride (and odd alignment) give the same tokens as a contiguous copy, for
    every filter-kernel geometry; adversarial order (ascending rows) forces repeated compactions."""
    B, V = 37, 50021
    gen = torch.Generator(device=DEV).manual_seed(3)
    big = (torch.randn(B, V + 5, generator=gen, device=DEV) * 3).to(dtype)
    big[: B // 2, :V] = torch.sort(big[: B // 2, :V], dim=1).values  # ascending: tau rises every stage
    x = big[:, 1:V + 1]  # stride V + 5, rows start one element in
    k = torch.randint(1, 2049, (B,), generator=gen, device=DEV).to(torch.int32)
    p = torch.rand(B, generator=gen, device=DEV).clamp_min(0.05)
    old = S._CLUSTER
    try:
        S._CLUSTER = cl
        for joint in (False, True):
            order = "joint" if joint else "top_k_first"
            a = S.top_k_top_p_sampling_from_logits(x, k, p, seed=11, offset=3, filter_apply_order=order)
            b = S.top_k_top_p_sampling_from_logits(x.contiguous(), k, p, seed=11, offset=3, filter_apply_order=order)
            assert torch.equal(a, b), (cl, joint)
            xf = x.float()
            larger = (xf > xf.gather(1, a[:, None])).sum(1)
            assert bool((larger < k).all()), (cl, joint)
    finally:
        S._CLUSTER = old


# ----------------------------------------------------------------------------- edge cases
def test_one_hot_zeros_and_degenerate():
    V = 32000
    probs = torch.zeros(5, V, device=DEV)
    probs[0, 777] = 1.0  # one-hot
    probs[1, [3, 10, 31999]] = torch.tensor([0.2, 0.3, 0.5], device=DEV)  # rows with zeros
    probs[2, 5] = float("nan")
    probs[2, 6] = 0.4  # NaN counts as 0
    probs[3, 9] = float("inf")  # +inf: uniform over the inf entries
    probs[3, 11] = float("inf")
    probs[3, 12] = 1.0
    # row 4: all zero -> degenerate, token 0
    for off in range(64):
        s = S.top_k_sampling_from_probs(probs, 1000, seed=1, offset=off).cpu()
        assert s[0] == 777
        assert int(s[1]) in (3, 10, 31999)
        assert s[2] == 6
        assert int(s[3]) in (9, 11)
        assert s[4] == 0
        s2 = S.top_p_sampling_from_probs(probs, 0.99, seed=1, offset=off).cpu()
        assert s2[0] == 777 and int(s2[1]) in (3, 10, 31999) and s2[2] == 6
    lg = torch.full((3, 1000), -float("inf"), device=DEV)
    lg[0, 17] = 3.0
    lg[1, :] = float("nan")
    lg[2, 4] = float("inf")
    lg[2, 8] = float("inf")
    for off in range(32):
        s = S.top_k_top_p_sampling_from_logits(lg, 50, 0.9, seed=2, offset=off).cpu()
        assert s[0] == 17 and s[1] == 0 and int(s[2]) in (4, 8)
    # temperature 0: greedy (lowest index among the maxima)
    x = torch.randn(7, 5000, device=DEV)
    x[:, 100] = 50.0
    x[:, 200] = 50.0
    assert bool((S.sampling_from_logits(x, temperature=0.0, seed=3, offset=0) == 100).all())


def test_split_kernel_ties_zeros_and_adversarial():
    """The split-row kernel (knob 2000) on the inputs that leave its common path: rows of zeros and
    one-hot rows (the tie cut at the threshold), constant rows (ties broken by the lower index),
    chunks whose lanes 0..3 of every warp hold large values (more than kSplitCap - k distinct
    values above the threshold: the exact select on the chunk), NaN / inf; every token equals the
    streaming kernel's for the same seed and offset and lies in the top-k."""
    old = S._CLUSTER
    try:
        V, B = 40000, 8
        gen = torch.Generator(device=DEV).manual_seed(17)
        x = torch.randn(B, V, generator=gen, device=DEV)
        x[0] = 0.0
        x[0, 31000] = 1.0  # one-hot (zeros elsewhere)
        x[1] = 0.0
        x[1, [5, 9000, 39999]] = torch.tensor([0.2, 0.3, 0.5], device=DEV)
        x[2] = 0.25  # constant: the first k indices
        idx = torch.arange(8192, device=DEV)
        lane_lt4 = ((idx // 4) % 512 % 32) < 4  # fp32 chunk layout: token (v*512 + tid)*4 + e
        for c in range(4):
            seg = x[3, c * 8192:(c + 1) * 8192]
            seg[lane_lt4] = 100.0 + torch.rand(int(lane_lt4.sum()), generator=gen, device=DEV)
        x[4, 77] = float("nan")
        x[5, 123] = float("inf")
        x[5, 4567] = float("inf")
        x[6] = x[6].sort().values  # ascending
        sm = torch.softmax(torch.nan_to_num(x, nan=0.0, posinf=30.0), -1)
        probs = torch.where(torch.arange(B, device=DEV)[:, None] < 3, x.clamp_min(0), sm)
        probs[4, 77] = float("nan")
        probs[5, [123, 4567]] = float("inf")
        for src, inp in (("probs", probs), ("logits", x)):
            fn = S.top_k_top_p_sampling_from_probs if src == "probs" else S.top_k_top_p_sampling_from_logits
            for k, p in ((50, 0.9), (1, 1.0), (128, 0.5), (7, 1.0)):
                for order in ("top_k_first", "joint"):
                    S._CLUSTER = 2000
                    a = fn(inp, k, p, seed=3, offset=k, filter_apply_order=order)
                    S._CLUSTER = -1
                    b = fn(inp, k, p, seed=3, offset=k, filter_apply_order=order)
                    assert torch.equal(a, b), (src, k, p, order, a.tolist(), b.tolist())
                    if src == "probs":
                        assert int(a[0]) == 31000 and int(a[1]) in (5, 9000, 39999), a.tolist()
                        assert int(a[2]) < k, a.tolist()
                        assert int(a[4]) != 77
                    xf = torch.nan_to_num(inp.float(), nan=-float("inf"))
                    larger = (xf > xf.gather(1, a[:, None])).sum(1)
                    assert bool((larger < k).all()), (src, k, larger.tolist())
                    assert int(a[5]) in (123, 4567), a.tolist()
    finally:
        S._CLUSTER = old


def test_top_k_ties_lower_index():
    V = 4096
    x = torch.randn(6, V, device=DEV).to(torch.bfloat16).float()  # many exact ties
    x[:, 10:40] = 5.0  # 30 tied maxima
    for k in (1, 7, 30, 31, 200):
        m = S.top_k_mask_logits(x, k)
        kept = torch.isfinite(m)
        assert bool((kept.sum(1) == k).all()), k
        for b in range(x.shape[0]):
            q, _ = ref_kept(x[b], True, k=k)
            assert torch.equal(kept[b], q > 0), (k, b)
        # kept values unchanged
        assert torch.equal(m[kept], x[kept])
        r = S.top_k_renorm_probs(torch.softmax(x, -1), k)
        assert bool(((r > 0).sum(1) <= k).all())
        torch.testing.assert_close(r.sum(1), torch.ones(x.shape[0], device=DEV), rtol=1e-5, atol=1e-5)


def test_renorm_helpers_vs_reference():
    gen = torch.Generator(device=DEV).manual_seed(11)
    for V in (111, 32000, 151936):
        lg = torch.randn(9, V, generator=gen, device=DEV) * 3
        probs = torch.softmax(lg, -1)
        k = torch.randint(1, min(V, 3000), (9,), generator=gen, device=DEV).to(torch.int32)
        p = torch.rand(9, generator=gen, device=DEV) * 0.9 + 0.05
        rk = S.top_k_renorm_probs(probs, k)
        rp = S.top_p_renorm_probs(probs, p)
        mk = S.top_k_mask_logits(lg, k)
        for b in range(9):
            qk, _ = ref_kept(probs[b], False, k=int(k[b]))
            qp, marg = ref_kept(probs[b], False, p=float(p[b]))
            torch.testing.assert_close(rk[b].double(), qk, rtol=1e-5, atol=1e-7)
            if marg > 1e-6:
                torch.testing.assert_close(rp[b].double(), qp, rtol=1e-5, atol=1e-7)
            assert torch.equal(torch.isfinite(mk[b]), ref_kept(lg[b], True, k=int(k[b]))[0] > 0)


# ----------------------------------------------------------------------------- determinism, graphs, streams
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k", [1, 50, 100, 128, 129, 200, 256, 300])
def test_kernels_same_tokens_fixed_k(dtype, k):
    """Every top-k kernel returns the same token, inside the top-k, for one k on all rows: the
    filter kernel's seeded threshold (k <= 128) and ranked final sets (65-256 entries) against the
    streaming, cluster and split kernels' sorts; random and ascending rows (a compaction per
    stage / tile), both orders (the cluster kernel's joint rows with k > 256 sample by rejection:
    there only the support is checked); the streaming kernel three times (its compaction decision
    once raced with the next tile's appends). 5001 / 5003 / 6001: the two-pass kernel's large-k
    instantiation (speculative candidates, no lane-maxima path) on every k, also k <= 128, where
    only a wrong min_top_k hint sends rows."""
    B, V = 48, 50021
    gen = torch.Generator(device=DEV).manual_seed(7 + k)
    lg = torch.randn(B, V, generator=gen, device=DEV) * 3
    lg[: B // 2] = torch.sort(lg[: B // 2], dim=1).values
    x = lg.to(dtype)
    xf = x.float()
    p = torch.rand(B, generator=gen, device=DEV).clamp_min(0.3)
    old = S._CLUSTER
    try:
        for order in ("top_k_first", "joint"):
            fn = lambda: S.top_k_top_p_sampling_from_logits(x, k, p, seed=5, offset=2, filter_apply_order=order)
            S._CLUSTER = -1
            ref = fn()
            for _ in range(2):
                assert torch.equal(fn(), ref), ("stream repeat", order)
            larger = (xf > xf.gather(1, ref[:, None])).sum(1)
            assert bool((larger < k).all()), order
            for cl in (1001, 1003, 4, 2000, 3001, 3003, 4001, 4003, 5001, 5003, 6001):
                S._CLUSTER = cl
                got = fn()
                if cl == 4 and order == "joint" and k > 256:
                    larger = (xf > xf.gather(1, got[:, None])).sum(1)
                    assert bool((larger < k).all()), (cl, order)
                else:
                    assert torch.equal(got, ref), (cl, order, int((got != ref).sum()))
    finally:
        S._CLUSTER = old


@pytest.mark.parametrize("V", [32000, 32003, 128256])
@pytest.mark.parametrize("src", ["probs", "logits"])
def test_cluster_listing_summary_same_tokens(src, V):
    """The cluster kernel's candidate listing on fp32 resident slices reads a 16-bit maximum per
    16-byte vector first and only the vectors that reach its bound (then the slice's tail tokens,
    V=32003: the last rank of row 0, the only 16-byte aligned row there, has 3 of them). Random,
    ascending, constant and one-bin rows and rows whose large values sit at vector and slice
    edges; logits rows at, inside and past the edges of the logit bins' window (bin-edge values
    with the float just below each, all above 2^10, all within +-2^-6, all below -2^10, log-uniform
    magnitudes of both signs); k from 1 to 2048; the tokens must equal the streaming kernel's under 2, 4 and 8 CTAs
    per row, in both orders, except where the cluster kernel samples by rejection (k > 1024, joint
    rows with k > 256: there no draw may fall outside the top-k)."""
    B = 12
    gen = torch.Generator(device=DEV).manual_seed(V + (src == "logits"))
    lg = torch.randn(B, V, generator=gen, device=DEV) * 3
    lg[1] = torch.sort(lg[1]).values  # ascending: every candidate in the last vectors
    lg[2] = 0.25  # constant: ties everywhere (the lower index wins)
    lg[3] = 1.0 + torch.rand(V, generator=gen, device=DEV) * 1e-3  # one 11-bit key bin
    lg[4] = -5.0
    edges = [0, 1, 3, 4, 7, V // 2 - 1, V // 2, V // 4 - 1, V // 4, V - 4, V - 3, V - 1]
    lg[4, edges] = torch.linspace(4.0, 6.0, len(edges), device=DEV)
    lg[5, ::977] += 6.0  # strided large values
    # logits rows around the logit bins' window (|x| in [2^-6, 2^10), 6 mantissa bits): all above
    # it (one saturated bin), all inside the innermost bins of both signs, all below -2^10 (no
    # bound: the radix path), and log-uniform magnitudes of both signs across and past both edges,
    # with exact bin edges, +-2^-6, +-2^10 and +-0 among them
    e = torch.tensor([9.0, 9.125, 9.25], device=DEV)  # logit-bin edges in [8, 16), and the floats below
    near = torch.cat([e, torch.nextafter(e, torch.full_like(e, -1e9))])
    lg[6, torch.randperm(V, generator=gen, device=DEV)[:len(near) * 30]] = near.repeat(30)
    lg[8] = 1500.0 + torch.randn(V, generator=gen, device=DEV) * 20
    lg[9] = torch.randn(V, generator=gen, device=DEV) * 1e-3
    lg[10] = -3000.0 + torch.randn(V, generator=gen, device=DEV) * 50
    mag = torch.exp2(torch.rand(V, generator=gen, device=DEV) * 20 - 8)
    sgn = torch.where(torch.rand(V, generator=gen, device=DEV) < 0.5, -1.0, 1.0)
    lg[11] = mag * sgn
    edge_vals = torch.tensor([2.0 ** -6, -(2.0 ** -6), 2.0 ** 10, -(2.0 ** 10), 0.0, -0.0, 1.0 + 2.0 ** -6,
                              1.0 + 2.0 ** -7, 4.0 - 2.0 ** -5, 1023.0, 1024.0 - 2.0 ** -4], device=DEV)
    lg[11, torch.randperm(V, generator=gen, device=DEV)[:len(edge_vals) * 20]] = edge_vals.repeat(20)
    x = lg if src == "logits" else torch.softmax(lg, -1)
    fn_name = "top_k_top_p_sampling_from_" + src
    p = torch.full((B,), 0.9, device=DEV)
    old = S._CLUSTER
    try:
        for k in (1, 50, 200, 1000, 2048):
            for order in ("top_k_first", "joint"):
                fn = lambda: getattr(S, fn_name)(x, k, p, seed=9, offset=4, filter_apply_order=order)
                S._CLUSTER = -1
                ref = fn()
                for cl in (2, 4, 8):
                    S._CLUSTER = cl
                    got = fn()
                    if k > 1024 or (order == "joint" and k > 256):  # (rejection sampling: the support only)
                        xf = x.float()
                        larger = (xf > xf.gather(1, got[:, None])).sum(1)
                        assert bool((larger < k).all()), (k, cl)
                    else:
                        assert torch.equal(got, ref), (k, order, cl, (got != ref).nonzero().flatten().tolist())
    finally:
        S._CLUSTER = old


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("src", ["logits", "probs"])
@pytest.mark.parametrize("order", ["top_k_first", "joint"])
@pytest.mark.parametrize("k", [1, 50, 128, 300, 2048])
def test_filter_prepass_paths_same_tokens(dtype, src, k, order):
    """The filter kernel's pre-pass (rows with k <= 128) on rows built for each of its paths: one
    candidate per lane, a few lanes holding several of the top tokens (they re-read their tokens),
    hundreds of such lanes and a constant row (too many re-reads: the stage loop from the
    pre-pass's bound), fewer than k tokens above the floor (no bound: the stage loop from 0), NaN
    and +inf entries, an ascending row, a row inside one 11-bit key bin. Rows are 16-byte aligned,
    so lane t of a CTA holds the tokens (u * 512 + t) * 4 + j (fp32) or (u * 512 + t) * 8 + j
    (16-bit) of its slice. The two-pass kernel (3000 + S) partitions slices the same way and bounds
    them by the same lane maxima (k <= 64; 16 per warp for k = 128), and its radix path takes the
    rest (the constant and one-bin rows: more digits, ties). Rows 10 and 11 hold lanes in every warp
    with exactly 2, 3 and 4 large values (equal and distinct ones: the two-pass kernel reads every
    lane with two or more at or above its bound again) and 100 lanes with three tokens tied at the
    top. k = 300 and 2048 put the same rows through the two-pass kernel's group maxima bound
    (128 < k <= 2048): its gather overflows on the constant row and finds no bound on row 3 (the
    radix path then), and reads only the batches that reach the bound elsewhere. The tokens must
    equal the streaming kernel's for the filter kernel (1, 2, 4 CTAs per row), the cluster kernel
    and the two-pass kernel (1, 2, 4; with two CTAs per SM: 1, 2), and its large-k instantiation
    (5000 + S / 6000 + S: speculative candidates for every k, no lane maxima), except its
    top_k_first rows with k > 1024, which return the cluster kernel's token (the rejection tail)."""
    if src == "probs" and dtype != torch.float32:
        pytest.skip("probs are fp32")
    B, V = 12, 32768
    tpv = 4 if dtype == torch.float32 else 8
    gen = torch.Generator(device=DEV).manual_seed(11 + k)
    lg = torch.randn(B, V, generator=gen, device=DEV)
    lane_tok = lambda t, u: (u * 512 + t) * tpv  # first token of lane t's vector u (one CTA)
    # row 0: lanes 0-3 hold 2k large values each (a few re-reading lanes)
    for t in range(4):
        for u in range(min(2 * k, V // (512 * tpv))):
            lg[0, lane_tok(t, u)] = 6.0 + 0.01 * u + 0.1 * t
    # row 1: 300 lanes with two large values each (too many re-reads)
    for t in range(300):
        lg[1, lane_tok(t, 0)] = 5.0 + t * 1e-3
        lg[1, lane_tok(t, 1) + 1] = 5.0 + t * 1e-3 + 5e-4
    lg[2] = 0.25  # constant row: ties everywhere (lower index first)
    lg[3] = -float("inf")  # fewer than k finite tokens: no bound from the lane maxima
    lg[3, torch.randperm(V, generator=gen, device=DEV)[: max(1, k // 2)]] = 1.0
    lg[4, torch.randperm(V, generator=gen, device=DEV)[:500]] = float("nan")
    lg[5, torch.randperm(V, generator=gen, device=DEV)[:3]] = float("inf")
    lg[6] = torch.sort(lg[6]).values
    lg[7, ::2] = lg[7, 1::2]  # pairs of equal values in one lane
    # values within 1e-3 of 1: one 11-bit key bin holds the whole row (the two-pass kernel's radix
    # path counts the next digits; bf16 rounds the row to a constant: ties)
    lg[9] = 1.0 + 1e-4 * torch.randn(V, generator=gen, device=DEV)
    # row 10: lanes t * 8 (every warp) with 2, 3 or 4 large values (equal within even lanes)
    for t in range(60):
        for u in range(2 + t % 3):
            lg[10, lane_tok(t * 8, 2 * u) + u % tpv] = 6.0 + 0.01 * t + (0.0 if t % 2 == 0 else 0.001 * u)
    # row 11: 100 lanes with three tokens tied at the top (the tie rule picks the lowest indices)
    for t in range(100):
        for u in range(3):
            lg[11, lane_tok(t * 5, 3 * u + 1) + (u + 1) % tpv] = 7.0
    if src == "logits":
        x = lg.to(dtype)
        fn = lambda: S.top_k_top_p_sampling_from_logits(x, k, 0.9, seed=3, offset=1, filter_apply_order=order)
        xf = x.float()
    else:
        pr = torch.softmax(torch.nan_to_num(lg, nan=-float("inf"), posinf=30.0), dim=1)
        pr[2] = 1.0 / V
        pr[4, torch.randperm(V, generator=gen, device=DEV)[:500]] = float("nan")
        pr[8, :] = 0.0
        pr[8, :7] = 0.5  # seven equal tokens (k > 7: every one kept)
        x = pr
        fn = lambda: S.top_k_top_p_sampling_from_probs(x, k, 0.9, seed=3, offset=1, filter_apply_order=order)
        xf = torch.nan_to_num(x, nan=-1.0)
    # the large-k instantiation (and builds with FIB_TWOPASS_REJECT_TAIL=1 in both): top_k_first
    # rows with k > 1024 whose maximum is finite return the cluster kernel's token
    rt = k > 1024 and order == "top_k_first"
    rt_default = rt and S._build_config().get("twopass_reject_tail", 0) == 1
    old = S._CLUSTER
    try:
        S._CLUSTER = -1
        ref = fn()
        larger = (xf > xf.gather(1, ref[:, None])).sum(1)
        assert bool((larger < k).all())
        assert not bool(torch.isnan(x.float().gather(1, ref[:, None])).any())  # never a NaN entry
        ref_tp = ref
        if rt:
            S._CLUSTER = 4
            mx = torch.nan_to_num(xf, nan=-float("inf")).max(1).values
            ref_tp = torch.where(torch.isfinite(mx) & (mx > (-float("inf") if src == "logits" else 0.0)), fn(), ref)
        # (the cluster kernel samples rows with k > 256 by rejection: the same distribution, another
        # token; docs/kernels.md, "Large k")
        for cl in (1001, 1002, 1004) + ((4,) if k <= 256 else ()) + (3001, 3002, 3004, 4001, 4002) + (
                5001, 5002, 5004, 6001, 6002):
            S._CLUSTER = cl
            got = fn()
            want = ref_tp if cl >= 5000 or (cl >= 3000 and rt_default) else ref
            assert torch.equal(got, want), (cl, (got != want).nonzero().flatten().tolist())
    finally:
        S._CLUSTER = old


@pytest.mark.parametrize("src", ["probs", "logits"])
@pytest.mark.parametrize("k", [1100, 1500, 2048])
def test_twopass_reject_tail_same_tokens_as_cluster(src, k):
    """The two-pass kernel's large-k instantiation (5000 + S / 6000 + S; the default one too in
    builds with FIB_TWOPASS_REJECT_TAIL=1) samples top_k_first rows with
    k > 1024 (top_p >= 0.25) by the cluster kernel's rejection rounds on its exact top-k set
    (reject_tail.cuh: the top k in token order by a counting sort, the same weights, draws and
    checks), so every row returns the cluster kernel's token: 1, 2 and 4 CTAs per row, one and two
    CTAs per SM, against the cluster kernel with 4 CTAs per row; peaked, flat and ascending rows,
    per-row top_p down to 0.26 (rows whose sixteen candidates all fall outside take the exact
    nucleus and a fresh draw in token order, as the cluster kernel's), with and without min-p;
    k = 1100 / 1500 cut the merged set of up to 2048 to the exact top k first."""
    knobs = (5001, 5002, 5004, 6001, 6002)
    if S._build_config().get("twopass_reject_tail", 0) == 1:
        knobs += (3001, 3002, 3004, 4001, 4002)
    B, V = 64, 50021
    gen = torch.Generator(device=DEV).manual_seed(k + (src == "logits"))
    lg = torch.randn(B, V, generator=gen, device=DEV) * torch.where(
        torch.rand(B, 1, generator=gen, device=DEV) < 0.5, 4.0, 0.7)
    lg[:4] = torch.sort(lg[:4], dim=1).values
    x = lg if src == "logits" else torch.softmax(lg, -1)
    p = torch.linspace(0.26, 0.99, B, device=DEV)
    flags = S._SAMPLE | (S._LOGITS if src == "logits" else 0)
    old = S._CLUSTER
    try:
        for mp in (None, 0.02):
            fn = lambda: S._call(x, flags, top_k=k, top_p=p, min_p=mp, seed=13, offset=5)
            S._CLUSTER = 4
            ref = fn()
            for cl in knobs:
                S._CLUSTER = cl
                got = fn()
                assert torch.equal(got, ref), (cl, mp, (got != ref).nonzero().flatten().tolist())
    finally:
        S._CLUSTER = old


@pytest.mark.parametrize("src", ["probs", "logits"])
def test_min_top_k_hint_picks_the_large_k_kernel(src):
    """With FIB_SAMPLING_TWOPASS_LARGE_K=1 the automatic policy (B=64 and 300 rows: the two-pass
    kernel with one / two CTAs per SM) runs its large-k instantiation for a scalar top_k > 128 or a
    per-row top_k with a min_top_k hint > 128 (or noted with note_min_top_k), else the default one;
    without it (the default) always the default one. The token tells them apart: top_k_first rows
    with k > 1024 take the rejection tail (the cluster kernel's token, knob 4) in the large-k one
    and the sorted tail (the streaming kernel's token, knob -1) in the default one. A wrong hint (rows with k = 1,
    50, 128, 500 under min_top_k=1000) changes the kernel, never which tokens a row keeps: those
    rows still return the streaming kernel's token."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the two-pass kernel runs on sm_90+")
    from fib_runtime import envs

    rt_default = S._build_config().get("twopass_reject_tail", 0) == 1
    lk_on = bool(envs.get("FIB_SAMPLING_TWOPASS_LARGE_K"))
    V = 100003  # (B=64: 6.4M tokens, past the two-pass kernel's threshold)
    old = S._CLUSTER
    try:
        for B in (64, 300):
            gen = torch.Generator(device=DEV).manual_seed(B + (src == "logits"))
            lg = torch.randn(B, V, generator=gen, device=DEV) * torch.where(
                torch.rand(B, 1, generator=gen, device=DEV) < 0.5, 3.0, 0.8)
            x = lg if src == "logits" else torch.softmax(lg, -1)
            fn = getattr(S, "top_k_top_p_sampling_from_" + src)
            k = torch.randint(1025, 2049, (B,), generator=gen, device=DEV).to(torch.int32)
            p = torch.rand(B, generator=gen, device=DEV).clamp_min(0.3)

            def run(cl, kk, hint=None):
                S._CLUSTER = cl
                return fn(x, kk, p, seed=21, offset=B, min_top_k=hint)

            sorted_tail, rejection = run(-1, k), run(4, k)
            assert not torch.equal(sorted_tail, rejection)  # (the two tails differ on most rows)
            default = rejection if rt_default else sorted_tail  # (the default kernel's token)
            large = rejection if lk_on else default  # (where the hint picks the large-k kernel)
            assert torch.equal(run(0, k), default), B  # no hint
            assert torch.equal(run(0, k, hint=int(k.min())), large), B
            assert torch.equal(run(0, k, hint=129), large), B
            assert torch.equal(run(0, k, hint=128), default), B
            S.note_min_top_k(k, int(k.min()))
            assert torch.equal(run(0, k), large), B  # (the note on this tensor)
            assert torch.equal(run(0, k.clone()), default), B
            S._hints.clear()
            S._CLUSTER = 0
            scalar = fn(x, 1500, p, seed=21, offset=B)  # a scalar k > 128 is its own hint
            S._CLUSTER = 4 if lk_on or rt_default else -1
            assert torch.equal(scalar, fn(x, 1500, p, seed=21, offset=B)), B
            for cl in (5000, 6000):  # the knobs reach the large-k kernel either way
                assert torch.equal(run(cl, k), rejection), (B, cl)
            kw = k.clone()
            kw[:4] = torch.tensor([1, 50, 128, 500], dtype=torch.int32, device=DEV)
            want_small = run(-1, kw)
            for cl, h in ((0, 1000), (5000, None), (6000, None)):  # a wrong hint; the knobs
                got = run(cl, kw, hint=h)
                assert torch.equal(got[:4], want_small[:4]), (B, cl, got[:4].tolist(), want_small[:4].tolist())
                assert torch.equal(got[4:], (run(4, kw) if cl or lk_on else want_small if not rt_default
                                             else run(4, kw))[4:]), (B, cl)
            xf = x.float()
            larger = (xf > xf.gather(1, got[:, None])).sum(1)
            assert bool((larger < kw).all()), B
    finally:
        S._CLUSTER = old
    with pytest.raises(ValueError):
        S.top_k_sampling_from_probs(torch.rand(2, 100, device=DEV), 5, min_top_k=-1)


# ----------------------------------------------------------------------------- plain kernel
@pytest.fixture
def plain_kernel():
    """Forces the one-pass plain kernel (knob -2) for calls without top-k (plain.cuh)."""
    old = S._CLUSTER
    S._CLUSTER = -2
    yield
    S._CLUSTER = old


@pytest.mark.parametrize("V", [111, 1001, 32000, 151936])
@pytest.mark.parametrize("kind", ["peaked", "flat"])
@pytest.mark.parametrize("src", ["probs", "logits", "bf16"])
def test_plain_kernel_distribution(plain_kernel, V, kind, src):
    """Plain sampling through the one-pass kernel: 2^20 draws match softmax / the normalised probs
    (logits at temperature 0.7, bf16 logits at 1.3), never a token outside the support."""
    gen = torch.Generator().manual_seed(V * 3 + len(kind) + len(src))
    lg = make_row(V, kind, gen)
    if src == "probs":
        row = torch.softmax(lg.double(), 0).float()
        row[torch.rand(V, generator=gen) < 0.1] = 0.0  # zeros inside the row
        fn, kw, q = S.sampling_from_probs, {}, ref_kept(row, False)[0]
    else:
        T = 0.7 if src == "logits" else 1.3
        row = lg if src == "logits" else lg.to(torch.bfloat16)
        fn, kw, q = S.sampling_from_logits, {"temperature": T}, ref_kept(row.float(), True, temperature=T)[0]
    rows = max(1, min(4096, (1 << 27) // (V * 4)))
    calls = -(-(1 << 20) // rows)
    counts = draw_counts(fn, row, rows, calls, **kw)
    assert_distribution(counts, q, rows * calls, f"plain/{src}/{kind}/V={V}")


def test_plain_kernel_edge_cases(plain_kernel):
    """One-hot rows, zeros, NaN, +inf (uniform over them), all-zero / all -inf / all NaN rows (token
    0), greedy rows (temperature 0, per row), unaligned and strided rows (same tokens as a
    contiguous copy), and rows that carry a filter only through a scalar that filters nothing."""
    V = 32003  # odd: a scalar tail past the 16-byte vectors
    probs = torch.zeros(6, V, device=DEV)
    probs[0, 777] = 1.0
    probs[1, [3, 10, 32002]] = torch.tensor([0.2, 0.3, 0.5], device=DEV)
    probs[2, 5] = float("nan")
    probs[2, 6] = 0.4
    probs[3, [9, 11]] = float("inf")
    probs[3, 12] = 1.0
    probs[5, 100] = -1.0  # negative counts as 0
    probs[5, 32001] = 1e-30  # tiny but positive: the row's only weight
    huge = torch.zeros(2, V, device=DEV)
    huge[:, 40:32000:40] = 3e38  # partial sums past the fp32 range: the general algorithm, uniform here
    seen = set()
    for off in range(64):
        s = S.sampling_from_probs(probs, seed=1, offset=off).cpu()
        assert s[0] == 777 and int(s[1]) in (3, 10, 32002) and s[2] == 6 and int(s[3]) in (9, 11)
        assert s[4] == 0 and s[5] == 32001
        seen.add(int(s[3]))
        assert torch.equal(s, S.top_p_sampling_from_probs(probs, 1.0, seed=1, offset=off).cpu())
        assert torch.equal(s, S.min_p_sampling_from_probs(probs, 0.0, seed=1, offset=off).cpu())
    assert seen == {9, 11}
    hc = torch.cat([S.sampling_from_probs(huge, seed=9, offset=o) for o in range(2000)]).cpu()
    assert bool(((hc % 40 == 0) & (hc > 0) & (hc < 32000)).all())
    assert len(set(hc.tolist())) > 600  # ~799 positions, each drawn with probability 1/799
    lg = torch.full((4, 1000), -float("inf"), device=DEV)
    lg[0, 17] = 3.0
    lg[1, :] = float("nan")
    lg[2, [4, 8]] = float("inf")
    lg[3, [500, 999]] = torch.tensor([1.0, 1.0], device=DEV)
    for off in range(32):
        s = S.sampling_from_logits(lg, seed=2, offset=off).cpu()
        assert s[0] == 17 and s[1] == 0 and int(s[2]) in (4, 8) and int(s[3]) in (500, 999)
    # greedy: temperature 0 for the whole call, or for some rows of a per-row tensor
    x = torch.randn(200, 5000, device=DEV)
    x[:, 100] = 50.0
    x[:, 200] = 50.0
    assert bool((S.sampling_from_logits(x, temperature=0.0, seed=3, offset=0) == 100).all())
    t = torch.full((200,), 1.0, device=DEV)
    t[::7] = 0.0
    s = S.sampling_from_logits(x, temperature=t, seed=3, offset=0)
    assert bool((s[::7] == 100).all()) and bool(((s == 100) | (s == 200)).all())
    # unaligned / strided rows: the same tokens as a contiguous copy (fp32 and bf16)
    gen = torch.Generator(device=DEV).manual_seed(8)
    for dtype in (torch.float32, torch.bfloat16):
        big = (torch.randn(131, 50021 + 5, generator=gen, device=DEV) * 3).to(dtype)
        xs = big[:, 1:50022]
        a = S.sampling_from_logits(xs, temperature=0.9, seed=11, offset=3)
        b = S.sampling_from_logits(xs.contiguous(), temperature=0.9, seed=11, offset=3)
        assert torch.equal(a, b), dtype
        pr = torch.softmax(xs.float(), -1)
        pbig = torch.zeros(131, 50026, device=DEV)
        pbig[:, 1:50022] = pr
        assert torch.equal(S.sampling_from_probs(pbig[:, 1:50022], seed=5, offset=1),
                           S.sampling_from_probs(pr, seed=5, offset=1))


def test_plain_kernel_policy_determinism_and_graph():
    """Automatic policy: plain sampling from plain_min_b rows takes the plain kernel (forced and
    automatic give the same tokens there; below it the cluster kernel); same (seed, offset), same
    tokens, device seed/offset tensors as ints; CUDA-graph replay reads the offset tensor."""
    x = torch.softmax(torch.randn(256, 128256, device=DEV) * 3, -1)
    a = S.sampling_from_probs(x, seed=42, offset=7)
    assert torch.equal(a, S.sampling_from_probs(x, seed=42, offset=7))
    assert not torch.equal(a, S.sampling_from_probs(x, seed=42, offset=8))
    st = torch.tensor([42], device=DEV, dtype=torch.int64)
    ot = torch.tensor([7], device=DEV, dtype=torch.int64)
    assert torch.equal(a, S.sampling_from_probs(x, seed=st, offset=ot))
    old = S._CLUSTER
    try:
        S._CLUSTER = -2
        assert torch.equal(a, S.sampling_from_probs(x, seed=42, offset=7))
        assert torch.equal(a[:37], S.sampling_from_probs(x[:37], seed=42, offset=7))  # per row, any B
        S._CLUSTER = 4
        c = S.sampling_from_probs(x, seed=42, offset=7)
    finally:
        S._CLUSTER = old
    # another kernel, another token for the same seed: the same distribution (rows mostly differ)
    assert int((a != c).sum()) > 100
    out = torch.empty(256, dtype=torch.int64, device=DEV)
    off = torch.tensor([0], dtype=torch.int64, device=DEV)
    S.sampling_from_probs(x, seed=st, offset=off, out=out)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        S.sampling_from_probs(x, seed=st, offset=off, out=out)
    for o in range(4):
        off.fill_(o)
        g.replay()
        assert torch.equal(out, S.sampling_from_probs(x, seed=42, offset=o)), o


def test_same_seed_offset_same_tokens():
    x = torch.randn(64, 128256, device=DEV)
    a = S.top_k_top_p_sampling_from_logits(x, 50, 0.9, seed=42, offset=7)
    b = S.top_k_top_p_sampling_from_logits(x, 50, 0.9, seed=42, offset=7)
    c = S.top_k_top_p_sampling_from_logits(x, 50, 0.9, seed=42, offset=8)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # device tensors give the same as ints; geometry (cluster size) does not change the result
    st = torch.tensor([42], device=DEV, dtype=torch.int64)
    ot = torch.tensor([7], device=DEV, dtype=torch.int64)
    assert torch.equal(a, S.top_k_top_p_sampling_from_logits(x, 50, 0.9, seed=st, offset=ot))
    old = S._CLUSTER
    try:
        for cl in (-1, 1, 2, 5, 8, 1000, 1001, 1003, 1008, 2000, 3000, 3002, 3008, 4000, 4002):
            S._CLUSTER = cl
            assert torch.equal(a, S.top_k_top_p_sampling_from_logits(x, 50, 0.9, seed=42, offset=7)), cl
    finally:
        S._CLUSTER = old
    # a row sampled alone gives the same token as inside the batch only if it has the same row index
    assert int(S.top_k_top_p_sampling_from_logits(x[:1], 50, 0.9, seed=42, offset=7)) == int(a[0])


def test_single_filters_same_tokens_any_geometry():
    """Plain sampling and min-p give the same token whether the slice is streamed (S = 1, 2 at
    V=128256: keys read from global memory) or resident (S = 4, 8); top-p alone gives the same
    token under every resident geometry (4 and 8 CTAs; 1..8 at V=32000)."""
    gen = torch.Generator(device=DEV).manual_seed(21)
    old = S._CLUSTER
    try:
        for V in (128256, 32000):
            x = torch.softmax(torch.randn(37, V, generator=gen, device=DEV) * 3, -1)
            p = torch.rand(37, generator=gen, device=DEV) * 0.7 + 0.25
            for name, call, knobs in [
                ("plain", lambda: S.sampling_from_probs(x, seed=5, offset=2), (1, 2, 4, 8)),
                ("min_p", lambda: S.min_p_sampling_from_probs(x, 0.05, seed=5, offset=2), (1, 2, 4, 8)),
                ("top_p", lambda: S.top_p_sampling_from_probs(x, p, seed=5, offset=2),
                 (4, 8) if V > 40000 else (1, 2, 4, 8)),
            ]:
                outs = []
                for cl in knobs:
                    S._CLUSTER = cl
                    outs.append(call())
                for cl, o in zip(knobs[1:], outs[1:]):
                    assert torch.equal(outs[0], o), (name, V, cl, int((outs[0] != o).sum()))
    finally:
        S._CLUSTER = old


def test_cuda_graph_capture_reads_offset_tensor():
    x = torch.randn(16, 32000, device=DEV)
    k = torch.full((16,), 100, dtype=torch.int32, device=DEV)
    p = torch.full((16,), 0.95, device=DEV)
    seed = torch.tensor([9], dtype=torch.int64, device=DEV)
    off = torch.tensor([0], dtype=torch.int64, device=DEV)
    out = torch.empty(16, dtype=torch.int64, device=DEV)
    S.top_k_top_p_sampling_from_logits(x, k, p, seed=seed, offset=off, out=out)  # warm-up
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        S.top_k_top_p_sampling_from_logits(x, k, p, seed=seed, offset=off, out=out)
    for o in range(5):
        off.fill_(o)
        g.replay()
        ref = S.top_k_top_p_sampling_from_logits(x, k, p, seed=9, offset=o)
        assert torch.equal(out, ref), o


def test_current_stream_and_no_sync():
    mod = loader.load_family("sampling")
    x = torch.randn(8, 32000, device=DEV)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert int(mod.current_stream(x)) == s.cuda_stream
        y = S.top_k_sampling_from_logits(x, 10, seed=1, offset=0)
    s.synchronize()
    assert int(mod.current_stream(x)) == torch.cuda.current_stream().cuda_stream
    assert torch.equal(y, S.top_k_sampling_from_logits(x, 10, seed=1, offset=0))
    torch.cuda.set_sync_debug_mode("error")
    try:
        k = torch.full((8,), 10, dtype=torch.int32, device=DEV)
        S.top_k_top_p_sampling_from_logits(x, k, 0.9, seed=1, offset=0)
        S.top_p_renorm_probs(torch.softmax(x, -1), 0.9)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_library_allocated_output():
    """Without out= the library allocates the tokens through torch's allocator (sample_alloc): a
    torch int64 CUDA tensor of [B] (0-d for one row) holding the same tokens as with out=, made on
    the current stream (usable there without a sync), and a fresh tensor per call."""
    mod = loader.load_family("sampling")
    assert hasattr(mod, "sample_alloc")
    x = torch.randn(9, 32000, device=DEV)
    a = S.top_k_top_p_sampling_from_logits(x, 20, 0.9, seed=4, offset=2)
    assert type(a) is torch.Tensor and a.dtype == torch.int64 and a.shape == (9,) and a.is_cuda
    out = torch.empty(9, dtype=torch.int64, device=DEV)
    S.top_k_top_p_sampling_from_logits(x, 20, 0.9, seed=4, offset=2, out=out)
    assert torch.equal(a, out)
    b = S.top_k_top_p_sampling_from_logits(x, 20, 0.9, seed=4, offset=2)
    assert b.data_ptr() != a.data_ptr() and torch.equal(a, b)
    one = S.sampling_from_logits(x[3], seed=4, offset=2)
    assert one.shape == () and one.dtype == torch.int64
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = S.top_k_sampling_from_logits(x, 5, seed=1, offset=0)
        z = y + 0
    s.synchronize()
    assert torch.equal(z, S.top_k_sampling_from_logits(x, 5, seed=1, offset=0))
    # refused arguments still work (converted in Python, allocated there)
    k16 = torch.full((9,), 20, dtype=torch.int16, device=DEV)
    assert torch.equal(a, S.top_k_top_p_sampling_from_logits(x, k16, 0.9, seed=4, offset=2))


def test_host_cost_per_call():
    """Host (enqueue) cost of one whole call, measured while the GPU is kept busy (so device time
    does not leak into the host clock)."""
    import time

    x = torch.randn(1, 32000, device=DEV)
    out = torch.empty(1, dtype=torch.int64, device=DEV)
    k = torch.full((1,), 50, dtype=torch.int32, device=DEV)
    p = torch.full((1,), 0.9, device=DEV)
    st = torch.tensor([1], dtype=torch.int64, device=DEV)
    for _ in range(50):
        S.top_k_top_p_sampling_from_logits(x, k, p, seed=st, offset=st, out=out)
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(5):
        torch.cuda._sleep(100_000_000)  # ~50 ms of GPU work queued ahead
        t0 = time.perf_counter()
        for i in range(300):
            S.top_k_top_p_sampling_from_logits(x, k, p, seed=st, offset=st, out=out)
        best = min(best, (time.perf_counter() - t0) / 300 * 1e6)
        torch.cuda.synchronize()
    print(f"host cost per call (enqueue, GPU busy): {best:.2f} us")
    assert best < 15.0
