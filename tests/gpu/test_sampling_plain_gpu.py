"""The one-pass plain kernel (plain.cuh) on the GPU: distributions, edge cases, policy, determinism
and CUDA-graph capture.
"""
from __future__ import annotations

import pytest
import torch

from sampling_ref import GPU_ONLY, S, DEV, ref_kept, draw_counts, assert_distribution, make_row

pytestmark = GPU_ONLY


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
