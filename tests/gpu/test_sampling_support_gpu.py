"""Support and edge cases of fib_runtime.kernels.sampling on the GPU: odd batch and vocabulary sizes,
strided rows, one-hot rows, zeros, ties (the lower index wins), NaN / inf, the renorm helpers.
"""
from __future__ import annotations

import pytest
import torch

from sampling_ref import GPU_ONLY, S, DEV, ref_kept, ref_kept_batch

pytestmark = GPU_ONLY


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
    masks_l, marg_l = ref_kept_batch(lg[:nb], True, k[:nb], p[:nb])
    masks_p, marg_p = ref_kept_batch(probs[:nb], False, k[:nb], p[:nb])
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
