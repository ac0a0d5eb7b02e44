"""fib_runtime.kernels.sampling's contract on the GPU: determinism for a (seed, offset), CUDA-graph
capture reading seed / offset from device tensors, the caller's stream and no host sync, the
library-allocated output, the host cost of one call.
"""
from __future__ import annotations

import math

import pytest
import torch

from sampling_ref import GPU_ONLY, S, loader, DEV

pytestmark = GPU_ONLY


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


@pytest.mark.parametrize("B,V,k", [(1, 128256, 50), (16, 32000, 2048), (64, 128256, 50), (64, 128256, 2048),
                                   (512, 32000, 50)])
@pytest.mark.parametrize("src", ["probs", "logits"])
def test_chained_calls_read_what_the_call_ahead_wrote(B, V, k, src):
    """Programmatic dependent launch (FIB_SAMPLING_PDL, on by default): a call may become resident
    while the kernel ahead of it on the stream still runs. Here that kernel is ours (top-k renorm /
    mask, which lets the next one launch as soon as it starts) writing the very buffer the sampler
    reads, over a poisoned copy (one-hot on each row's smallest token). A sampler that read before
    the writer finished would return the poison; every token must be the one sampled after a sync,
    eagerly and inside a CUDA graph."""
    torch.manual_seed(B * 7 + k)
    lg = torch.randn(B, V, device=DEV) * 3
    x = torch.softmax(lg, -1) if src == "probs" else lg
    poison = torch.zeros_like(x) if src == "probs" else torch.full_like(x, -30.0)
    poison.scatter_(1, x.argmin(-1, keepdim=True), 1.0 if src == "probs" else 30.0)
    buf = torch.empty_like(x)
    out = torch.empty(B, dtype=torch.int64, device=DEV)
    seed = torch.tensor([5], dtype=torch.int64, device=DEV)
    off = torch.tensor([0], dtype=torch.int64, device=DEV)
    sample = S.top_k_top_p_sampling_from_probs if src == "probs" else S.top_k_top_p_sampling_from_logits
    keep = S.top_k_renorm_probs if src == "probs" else S.top_k_mask_logits

    def chain():
        buf.copy_(poison)
        keep(x, k, out=buf)
        sample(buf, k, 0.9, seed=seed, offset=off, out=out)

    topk = x.topk(k, -1).indices
    refs = []
    for o in range(6):
        off.fill_(o)
        buf.copy_(poison)
        keep(x, k, out=buf)
        torch.cuda.synchronize()
        refs.append(sample(buf, k, 0.9, seed=seed, offset=off).clone())
        assert bool((refs[-1][:, None] == topk).any(-1).all()), o
    for o in range(6):  # (eager, back to back)
        off.fill_(o)
        chain()
        assert torch.equal(out, refs[o]), o
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        chain()
    for o in range(6):
        off.fill_(o)
        g.replay()
        assert torch.equal(out, refs[o]), ("graph", o)


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
