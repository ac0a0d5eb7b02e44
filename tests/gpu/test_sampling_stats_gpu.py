"""Statistical checks of fib_runtime.kernels.sampling on the GPU: every filter, both orders, from
probs and logits, on every kernel (forced), against the exact float64 distribution
(``sampling_ref``: >= 2^20 draws, chi-square z < 4.75, no draw outside the support).
"""
from __future__ import annotations

import pytest
import torch

from sampling_ref import GPU_ONLY, S, N_ROWS, N_CALLS, ref_kept, draw_counts, assert_distribution, make_row

pytestmark = GPU_ONLY


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
    wrong min_top_k hint (the same lane-maxima path, in a kernel compiled with the large-k paths)."""
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


@pytest.mark.parametrize("force_path", ["auto", "cluster4", "twopass_lk3", "gather4"], indirect=True)
@pytest.mark.parametrize("V,k,p,mp,kind,src,order", [
    (32000, 2048, 0.9, 0.0, "peaked", "logits", "joint"),    # joint, peaked: candidates from the whole row
    (32000, 2048, 0.9, 0.0, "flat", "probs", "joint"),       # flat: straight to the exact radix path
    (32000, 1500, 0.5, 0.0, "peaked", "probs", "top_k_first"),
    (128256, 2048, 0.9, 0.0, "flat", "logits", "top_k_first"),
    (128256, 1100, 0.95, 0.05, "peaked", "logits", "joint"),  # min-p checked per candidate
    (32000, 2048, 0.7, 0.001, "mid", "probs", "top_k_first"),
    # 512 < k <= 1024: rejection at the default FIB_SAMPLING_REJECT_MIN_K (512), the sorted tail at 1024
    (128256, 600, 0.8, 0.0, "peaked", "logits", "top_k_first"),
])
def test_distribution_large_k_rejection(V, k, p, mp, kind, src, order, force_path):
    """Large-k rows sample top-p by rejection in the cluster kernel (sample_row): top-k-first rows
    with k > FIB_SAMPLING_REJECT_MIN_K (512) draw from the kept top-k and check the nucleus; joint
    rows with k > 256 (FIB_SAMPLING_REJECT_JOINT_MIN_K) draw from the whole row and check the top-k
    rank, min-p and the row's nucleus per candidate, on peaked rows only (flat ones: the exact radix
    path for k > max(1024, FIB_SAMPLING_REJECT_MIN_K), else the candidate path); a row whose rounds all fall outside draws again on
    the exact path. auto: B=989 rows take the two-pass kernel with two CTAs per SM (sm_90; with
    FIB_SAMPLING_TWOPASS_LARGE_K=1 its large-k instantiation, as the scalar k > 128 allows);
    twopass_lk3: the large-k instantiation with 3 CTAs per row (speculative candidates, the sets
    merged over DSMEM, then for top_k_first rows with k > 1024 the rejection tail: the cluster
    kernel's rounds on the merged exact top k); cluster4: the resident-row cluster kernel; gather4: its
    gathered-tail instantiation (knob 7004: top_k_first rows with k > 1024 finish on rank 0 once a radix
    pass leaves at most 4032 tokens; with FIB_SAMPLING_GATHER_CAP=0 the knob runs cluster4)."""
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
