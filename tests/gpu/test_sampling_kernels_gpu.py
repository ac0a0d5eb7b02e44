"""The sampling kernels against each other on the GPU: the same tokens for the same (seed, offset) on
every kernel and path (fixed k, the listing, the two-pass kernel's paths, the rejection tail), and
the min_top_k hint's kernel choice.
"""
from __future__ import annotations

import pytest
import torch

from sampling_ref import GPU_ONLY, S, DEV, rejects

pytestmark = GPU_ONLY


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k", [1, 50, 100, 128, 129, 200, 256, 300])
def test_kernels_same_tokens_fixed_k(dtype, k):
    """Every top-k kernel returns the same token, inside the top-k, for one k on all rows: the
    filter kernel's seeded threshold (k <= 128) and ranked final sets (65-256 entries) against the
    streaming, cluster and split kernels' sorts; random and ascending rows (a compaction per
    stage / tile), both orders (the cluster kernel's joint rows with k > 256 sample by rejection:
    there only the support is checked); the streaming kernel three times (its compaction decision
    once raced with the next tile's appends). 5001 / 5003 / 6001: the two-pass kernel's large-k
    instantiation (speculative candidates, the rejection tail) on every k, also k <= 128, where
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
            # top_k_first rows with k > FIB_SAMPLING_REJECT_MIN_K: the cluster kernel's rejection
            # rounds, and the large-k instantiation's rejection tail returns the cluster kernel's token
            rt = order == "top_k_first" and rejects(k)
            for cl in (1001, 1003, 4, 2000, 3001, 3003, 4001, 4003, 5001, 5003, 6001):
                S._CLUSTER = cl
                got = fn()
                if cl == 4 and (rt or (order == "joint" and k > 256)):
                    larger = (xf > xf.gather(1, got[:, None])).sum(1)
                    assert bool((larger < k).all()), (cl, order)
                    ref_rt = got
                elif rt and cl >= 5000:
                    assert torch.equal(got, ref_rt), (cl, order, int((got != ref_rt).sum()))
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
    magnitudes of both signs), a row with NaN, -0 and negative (probs) / -inf (logits) entries among
    its largest, a row with a +inf; probs rows at and past the edges of the prob bins' window (all
    at or above 2, all below 2^-31, bin-edge values with the float just below each); k from 1 to 2048; the tokens must equal the streaming kernel's under 2, 4 and 8 CTAs
    per row, in both orders, except where the cluster kernel samples by rejection (k >
    FIB_SAMPLING_REJECT_MIN_K, default 512; joint rows with k > 256: there no draw may fall outside
    the top-k)."""
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
    if src == "probs":
        # probs rows around the prob bins' window ([2^-31, 2), 6 mantissa bits; unnormalized rows are
        # weights as well): all at or above 2 (one saturated bin), all below 2^-31 (bin 0: every token
        # at or above the bound, the radix path), and bin-edge values with the float just below each
        # over a smaller background
        x = x.clone()
        x[8] = 2.0 + torch.rand(V, generator=gen, device=DEV) * 100
        x[9] = torch.rand(V, generator=gen, device=DEV) * 1e-12
        pe = torch.tensor([2.0 ** -10, 2.0 ** -10 * (1 + 1 / 64), 2.0 ** -10 * (1 + 63 / 64), 2.0 ** -9, 2.0 ** -31,
                           1.0, 2.0 - 2.0 ** -6], device=DEV)
        pnear = torch.cat([pe, torch.nextafter(pe, torch.zeros_like(pe))])
        x[10] = torch.rand(V, generator=gen, device=DEV) * 1e-6
        x[10, torch.randperm(V, generator=gen, device=DEV)[:len(pnear) * 20]] = pnear.repeat(20)
    # the load's integer keys (key_of_bits: the NaN / -0 / negative rules) on the listing's path:
    # NaN, -0, negative probs and -inf logits among the candidates of row 7; a +inf in row 0 sends
    # that row past the listing to the radix path
    x = x.clone()
    spots = torch.randperm(V, generator=gen, device=DEV)[:400]
    big = x[7].max()
    x[7, spots[:100]] = float("nan")
    x[7, spots[100:200]] = -0.0
    x[7, spots[200:300]] = -big if src == "probs" else float("-inf")
    x[7, spots[300:]] = big * (1.0 + torch.rand(100, generator=gen, device=DEV))
    x[0, 123] = float("inf")
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
                    if rejects(k) or (order == "joint" and k > 256):  # (rejection sampling: the support only)
                        xf = x.float()
                        larger = (xf > xf.gather(1, got[:, None])).sum(1)
                        assert bool((larger < k).all()), (k, cl)
                    else:
                        assert torch.equal(got, ref), (k, order, cl, (got != ref).nonzero().flatten().tolist())
    finally:
        S._CLUSTER = old


@pytest.mark.parametrize("src", ["probs", "logits"])
@pytest.mark.parametrize("k", [1, 50, 129, 256])
def test_cluster_push_exchange_same_tokens(src, k):
    """The cluster kernel's exchange variant (fp32 top-k calls from probs in clusters of 2 to
    FIB_SAMPLING_CLUSTER_PUSH_MAX_S CTAs, default 2; test_cluster_push_exchange_all_sizes runs this
    test with 8; from logits the same rows check the top-k instantiation at those sizes) on rows
    with k <= 256 exchanges delegates and candidate lists by st.async instead of cluster barriers
    (sampler.cuh, XP): every rank adds the others' delegates to its histogram and selects the bound
    alone, lists its candidates, puts its top k in order (ranked by counting up to 256 candidates,
    the bitonic network for 257-2048) and sends them to rank 0, which merges the lists; a rank with
    more than 2048 candidates sends -1, and rank 0's verdict then sends the whole cluster to the
    radix path. Rows built for each case, with V = 32000 (2 CTAs: 16000 tokens each, 8 CTAs: 4000):
    600 tokens tied at the top spread over the row (~600 / S candidates per rank: the bitonic
    network at S <= 2, ranked above), 3000 tied at the row's end (the last rank alone overflows) and
    at its start (rank 0 alone overflows), 2100 near-equal ones spread (257-1050 per rank), a
    constant row (every rank overflows), an ascending row, a flat row, fewer than k positive probs /
    finite logits (no bound: the radix path without a list exchange), NaN entries and a +inf. The
    tokens must equal the streaming kernel's at 2, 3, 5, 6, 7 and 8 CTAs per row (k = 129: the
    exchange up to 4 CTAs, k = 256: up to 3), in both orders, with min-p on and off."""
    B, V = 12, 32000
    gen = torch.Generator(device=DEV).manual_seed(101 + k + (src == "logits"))
    lg = torch.randn(B, V, generator=gen, device=DEV) * 3
    lg[1] = 0.1 * torch.randn(V, generator=gen, device=DEV)
    lg[1, torch.randperm(V, generator=gen, device=DEV)[:600]] = 4.0
    lg[2, V - 3000:] = 5.0
    lg[3, :3000] = 5.0
    lg[4] = 0.1 * torch.randn(V, generator=gen, device=DEV)
    lg[4, torch.randperm(V, generator=gen, device=DEV)[:2100]] = 4.0 + 1e-4 * torch.rand(2100, generator=gen, device=DEV)
    lg[5] = 0.5  # constant
    lg[6] = torch.sort(lg[6]).values
    lg[7] = 0.05 * torch.randn(V, generator=gen, device=DEV)  # flat
    lg[8] = -float("inf")
    lg[8, torch.randperm(V, generator=gen, device=DEV)[: max(1, k // 2)]] = 1.0
    lg[9, torch.randperm(V, generator=gen, device=DEV)[:700]] = float("nan")
    lg[10, 777] = float("inf")
    lg[11, ::1001] += 8.0
    if src == "logits":
        x = lg
        xf = torch.nan_to_num(x, nan=-float("inf"))
    else:
        x = torch.softmax(torch.nan_to_num(lg, nan=-float("inf"), posinf=30.0), dim=1)
        x[9, torch.randperm(V, generator=gen, device=DEV)[:700]] = float("nan")
        x[10, 777] = float("inf")
        xf = torch.nan_to_num(x, nan=-1.0)
    flags = S._LOGITS if src == "logits" else S._SAMPLE
    old = S._CLUSTER
    try:
        for order in ("top_k_first", "joint"):
            for mp in (None, 0.02):
                fl = flags | (S._JOINT if order == "joint" else 0)
                fn = lambda: S._call(x, fl, top_k=k, top_p=0.9, min_p=mp, seed=13, offset=5)
                S._CLUSTER = -1
                ref = fn()
                larger = (xf > xf.gather(1, ref[:, None])).sum(1)
                assert bool((larger < k).all()), (order, mp)
                for cl in (2, 3, 5, 6, 7, 8):
                    S._CLUSTER = cl
                    got = fn()
                    if order == "top_k_first" and rejects(k):  # (FIB_SAMPLING_REJECT_MIN_K < k: rejection)
                        larger = (xf > xf.gather(1, got[:, None])).sum(1)
                        assert bool((larger < k).all()), (order, mp, cl)
                    else:
                        assert torch.equal(got, ref), (order, mp, cl, (got != ref).nonzero().flatten().tolist())
    finally:
        S._CLUSTER = old


def test_cluster_push_exchange_all_sizes():
    """test_cluster_push_exchange_same_tokens with the exchange variant on clusters of 2-8 CTAs
    (FIB_SAMPLING_CLUSTER_PUSH_MAX_S=8, read once per process: a subprocess)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, FIB_SAMPLING_CLUSTER_PUSH_MAX_S="8")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                        "test_cluster_push_exchange_same_tokens"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout.splitlines()[-1], r.stdout[-500:]


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
    top_k_first rows with k > FIB_SAMPLING_REJECT_MIN_K (default 512), which return the cluster
    kernel's token (the rejection tail)."""
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
    # rows with k > FIB_SAMPLING_REJECT_MIN_K whose maximum is finite return the cluster kernel's token
    rt = rejects(k) and order == "top_k_first"
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
        for cl in (1001, 1002, 1004) + ((4,) if k <= 256 else ()) + (3001, 3002, 3004, 4001, 4002, 4003, 4004) + (
                5001, 5002, 5004, 6001, 6002, 6003, 6004):
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
    k > FIB_SAMPLING_REJECT_MIN_K (top_p >= 0.25) by the cluster kernel's rejection rounds on its exact top-k set
    (reject_tail.cuh: the top k in token order by a counting sort, the same weights, draws and
    checks), so every row returns the cluster kernel's token: 1, 2 and 4 CTAs per row, one and two
    CTAs per SM, against the cluster kernel with 4 CTAs per row; peaked, flat and ascending rows,
    per-row top_p down to 0.26 (rows whose sixteen candidates all fall outside take the exact
    nucleus and a fresh draw in token order, as the cluster kernel's), with and without min-p;
    k = 1100 / 1500 cut the merged set of up to 2048 to the exact top k first."""
    knobs = (5001, 5002, 5004, 6001, 6002, 6004)
    if S._build_config().get("twopass_reject_tail", 0) == 1:
        knobs += (3001, 3002, 3004, 4001, 4002, 4004)
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
def test_twopass_large_k_rows_without_a_finite_maximum(src):
    """The large-k instantiation's rows that would draw in reject_tail but whose maximum is +inf
    (or, from logits, -inf everywhere) take the sorted tail instead (the merge's exact top k copied
    out of the token-order set, FIB_TWOPASS_FUSED_TAIL): the token is one of the +inf entries
    (token 0 for a row of -inf logits), the same at 1, 2 and 4 CTAs per row and at two CTAs per SM,
    and the finite rows beside them still return the cluster kernel's token."""
    B, V, k = 6, 50021, 2048
    if not rejects(k):
        pytest.skip("top_k_first rows with k = 2048 take the sorted tail under this FIB_SAMPLING_REJECT_MIN_K")
    gen = torch.Generator(device=DEV).manual_seed(29 + (src == "logits"))
    lg = torch.randn(B, V, generator=gen, device=DEV) * 2.0
    infs = {0: [17, 30000, 50020], 1: [4242], 3: [7, 8, 9, 40000]}
    if src == "probs":
        x = torch.softmax(lg, -1)
    else:
        x = lg.clone()
        x[2] = -float("inf")
    for r, cols in infs.items():
        x[r, cols] = float("inf")
    p = torch.full((B,), 0.9, device=DEV)
    flags = S._SAMPLE | (S._LOGITS if src == "logits" else 0)
    old = S._CLUSTER
    try:
        S._CLUSTER = 4
        ref = S._call(x, flags, top_k=k, top_p=p, seed=5, offset=1)
        got = {}
        for cl in (5001, 5002, 5004, 6001, 6002):
            S._CLUSTER = cl
            got[cl] = S._call(x, flags, top_k=k, top_p=p, seed=5, offset=1)
            for r, cols in infs.items():
                assert int(got[cl][r]) in cols, (cl, r, int(got[cl][r]))
            if src == "logits":
                assert int(got[cl][2]) == 0, (cl, int(got[cl][2]))
            fin = [r for r in range(B) if r not in infs and not (src == "logits" and r == 2)]
            assert torch.equal(got[cl][fin], ref[fin]), (cl, got[cl][fin].tolist(), ref[fin].tolist())
        for cl in (5002, 5004, 6001, 6002):
            assert torch.equal(got[cl], got[5001]), (cl, got[cl].tolist(), got[5001].tolist())
    finally:
        S._CLUSTER = old


@pytest.mark.parametrize("src", ["probs", "logits", "logits_bf16"])
@pytest.mark.parametrize("k", [1100, 2048])
def test_twopass_large_k_row_bound_same_tokens(src, k):
    """The two-pass kernel's large-k instantiation at 2 and 4 CTAs per row (5002 / 5004; 6002 / 6004
    with two CTAs per SM, which keep the slice's bound) on rows long enough for its speculative candidates in
    every slice (V=150001: the slices hold at least 2 x 8 batches of 512 vectors), so that its
    row's-bound kernel (FIB_SAMPLING_TWOPASS_ROW_BOUND, on by default; top_k_first and top-k alone,
    not joint) bounds the row's k-th largest from one sample of the whole row (fp32; bf16
    rows need twice the tokens per slice, so they keep the slice's bound at 4 CTAs). Rows: peaked and flat, ascending
    and descending (the row's top k in one slice), and a row whose large values sit only at the
    sample's positions (8 consecutive tokens at tid * (V - 8) // 512 for 40 of the 512 threads):
    the sample's bound then holds far fewer than k tokens of the row, every rank reads its slice
    again by the radix path, and the merge runs a second time. Every knob must return the token of
    the same call on the reference kernel: the cluster kernel (4 CTAs per row) for top_k_first with
    top-p above FIB_SAMPLING_REJECT_MIN_K (the rejection tail), the streaming kernel for top-k alone
    and joint rows. With FIB_SAMPLING_TWOPASS_ROW_BOUND=0 the same rows go through the per-slice bound."""
    B, V = 8, 150001
    gen = torch.Generator(device=DEV).manual_seed(k + len(src))
    lg = torch.randn(B, V, generator=gen, device=DEV) * torch.tensor(
        [4.0, 0.7, 2.0, 1.0, 1.0, 1.0, 1.0, 3.0], device=DEV)[:, None]
    lg[4] = torch.sort(lg[4]).values
    lg[5] = torch.sort(lg[5], descending=True).values
    for row in (6, 7):  # large values at the sample's positions only
        for t in range(0, 512, 13):
            t0 = t * (V - 8) // 512
            lg[row, t0:t0 + 8] = 12.0 + 0.01 * torch.arange(8, device=DEV) + 0.001 * t
    if src == "probs":
        x = torch.softmax(lg, -1)
        xf = x
    else:
        x = lg.to(torch.bfloat16) if src == "logits_bf16" else lg
        xf = x.float()
    flags = S._SAMPLE | (S._LOGITS if src != "probs" else 0)
    p = torch.full((B,), 0.9, device=DEV)
    cases = [("top_k_first", p, 4 if rejects(k) else -1), ("top_k", None, -1), ("joint", p, -1)]
    old = S._CLUSTER
    try:
        for order, tp, ref_cl in cases:
            fn = lambda: S._call(x, flags | (S._joint("joint") if order == "joint" else 0), top_k=k, top_p=tp,
                                 seed=21, offset=3)
            S._CLUSTER = ref_cl
            ref = fn()
            larger = (xf > xf.gather(1, ref[:, None])).sum(1)
            assert bool((larger < k).all()), (order, larger.tolist())
            for cl in (5002, 5004, 6002, 6004):
                S._CLUSTER = cl
                got = fn()
                assert torch.equal(got, ref), (order, cl, (got != ref).nonzero().flatten().tolist())
    finally:
        S._CLUSTER = old


@pytest.mark.parametrize("src", ["probs", "logits"])
def test_min_top_k_hint_picks_the_large_k_kernel(src):
    """With FIB_SAMPLING_TWOPASS_LARGE_K=1 the automatic policy (B=64 and 300 rows: the two-pass
    kernel with one / two CTAs per SM) runs its large-k instantiation for a scalar top_k > 128 or a
    per-row top_k with a min_top_k hint > 128 (or noted with note_min_top_k), else the default one;
    without it (the default) always the default one. The token tells them apart: top_k_first rows
    with k > FIB_SAMPLING_REJECT_MIN_K take the rejection tail (the cluster kernel's token, knob 4) in the large-k one
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
            rej_small = run(4, kw)  # (k = 500 > FIB_SAMPLING_REJECT_MIN_K: the cluster kernel's rejection token)
            for cl, h in ((0, 1000), (5000, None), (6000, None)):  # a wrong hint; the knobs
                got = run(cl, kw, hint=h)
                want = want_small[:4].clone()
                if rejects(500) and (cl or lk_on or rt_default):
                    want[3] = rej_small[3]
                assert torch.equal(got[:4], want), (B, cl, got[:4].tolist(), want.tolist())
                assert torch.equal(got[4:], (run(4, kw) if cl or lk_on else want_small if not rt_default
                                             else run(4, kw))[4:]), (B, cl)
            xf = x.float()
            larger = (xf > xf.gather(1, got[:, None])).sum(1)
            assert bool((larger < kw).all()), B
    finally:
        S._CLUSTER = old
    with pytest.raises(ValueError):
        S.top_k_sampling_from_probs(torch.rand(2, 100, device=DEV), 5, min_top_k=-1)


@pytest.mark.parametrize("src", ["probs", "logits"])
@pytest.mark.parametrize("V,Ss", [(32000, (1, 2, 4)), (50021, (2, 4, 8)), (128256, (4, 8))])
def test_cluster_gathered_tail_same_tokens(src, V, Ss):
    """The cluster kernel's gathered-tail instantiation (gather_tail.cuh; calls whose every row has
    k > FIB_SAMPLING_REJECT_MIN_K: a scalar top_k or the min_top_k hint; kernel code 7000 + S): top_k_first rows finish on
    rank 0 once a radix pass leaves at most 4032 tokens at or above the k-th largest key's bucket
    (or at once, at 8 CTAs, when at most 4032 reach the delegates' bound: the direct path; row 9's
    5000 tied top tokens exceed it), and return the token of the cluster-wide rejection rounds (the default instantiation: a per-row
    top_k without the hint) for every row: S CTAs per row, peaked, flat and ascending rows, rows of
    tied values at the top-k boundary (logits rounded to 1/4, and to 1/128: tie groups of ~10 in the
    k-th entry's digit bin, which gathered_select resolves by token index) and probs rows with zeros, k from 1025
    to 2048 (and 3000: not gathered), per-row top_p down to 0.26 (rows whose sixteen candidates all
    fall outside take reject_tail's fallback against the exact radix path), with and without min-p.
    With FIB_SAMPLING_GATHER_CAP=0 the hinted calls run the default instantiation (kernel code S)."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("clusters of CTAs run on sm_90+")
    B = 24
    gen = torch.Generator(device=DEV).manual_seed(V + (src == "logits"))
    lg = torch.randn(B, V, generator=gen, device=DEV) * torch.where(
        torch.rand(B, 1, generator=gen, device=DEV) < 0.5, 4.0, 0.8)
    lg[:3] = torch.sort(lg[:3], dim=1).values
    lg[3:7] = torch.round(lg[3:7] * 4) / 4  # ties at the boundary
    # more than 4032 tokens tied at the top: the direct path's count exceeds the cap (the radix path)
    lg[9, torch.randperm(V, generator=gen, device=DEV)[:min(5000, V // 4)]] = lg[9].max() + 1.0
    # tie groups of ~8-10 tokens around the k-th largest: the digit bin that holds it is small and
    # tied (gathered_select takes the lower token indices first)
    lg[10:12] = torch.round(torch.randn(2, V, generator=gen, device=DEV) * 4.0 * 128) / 128
    if src == "probs":
        x = torch.softmax(lg, -1)
        x[7:9, ::3] = 0.0  # rows with zeros
        x = x / x.sum(-1, keepdim=True)
    else:
        x = lg
    p = torch.linspace(0.26, 0.99, B, device=DEV)
    flags = S._SAMPLE | (S._LOGITS if src == "logits" else 0)
    from fib_runtime import envs

    on = int(envs.get("FIB_SAMPLING_GATHER_CAP")) > 0
    raw = S._sample_fn()
    out = torch.empty(B, dtype=torch.int64, device=DEV)
    old = S._CLUSTER
    try:
        for k in (1025, 1500, 2048, 3000):
            kt = torch.full((B,), k, dtype=torch.int32, device=DEV)
            for mp in (None, 0.02):
                for S_ in Ss:
                    S._CLUSTER = S_
                    ref = S._call(x, flags, top_k=kt, top_p=p, min_p=mp, seed=7, offset=k)  # (no hint)
                    hinted = S._call(x, flags | S._hint(k), top_k=kt, top_p=p, min_p=mp, seed=7, offset=k)
                    scalar = S._call(x, flags, top_k=k, top_p=p, min_p=mp, seed=7, offset=k)
                    for got in (hinted, scalar):
                        assert torch.equal(got, ref), (k, mp, S_, (got != ref).nonzero().flatten().tolist())
                    assert raw(x, out, flags, kt, p, mp, None, 7, k, S_, -1) == S_
                    assert raw(x, out, flags | S._hint(k), kt, p, mp, None, 7, k, S_, -1) == (7000 if on else 0) + S_
                    assert torch.equal(out, ref)
    finally:
        S._CLUSTER = old
