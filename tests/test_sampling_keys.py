"""The cluster kernel's integer key conversion (common.cuh `key_of_bits<LOGITS>`) against the float
definition it replaces (`f2key(sanitize(x, logits))`), replayed in numpy with the same operations;
and `vec_max_key<LOGITS>` (a 16-byte vector's largest key from its float maximum) against the
maximum of the four keys.

Every sign and exponent with the mantissas at and next to the edges, the special values, and 2^22
random bit patterns; FIB_KEYS_EXHAUSTIVE=1 runs all 2^32 patterns (~5 minutes on 2 cores).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

U32 = np.uint32


def ref_keys(u: np.ndarray, logits: bool) -> np.ndarray:
    """f2key(sanitize(x, logits)) as common.cuh writes it: float compares, then the sign branch."""
    with np.errstate(invalid="ignore"):
        v = u.view(np.float32).copy()
        nan = v != v
        v[nan] = -np.inf if logits else 0.0
        if not logits:
            v[v < 0.0] = 0.0
        v[v == 0.0] = 0.0  # -0 -> +0
    b = v.view(U32)
    return np.where((b & U32(0x80000000)) != 0, ~b, b | U32(0x80000000)).astype(U32)


def new_keys(u: np.ndarray, logits: bool) -> np.ndarray:
    """key_of_bits<LOGITS>: integer operations only."""
    u = u.astype(U32)
    if logits:
        a = u & U32(0x7FFFFFFF)
        s = (u.view(np.int32) >> 31).view(U32)
        key = np.where(a == 0, U32(0x80000000), u ^ (s | U32(0x80000000)))
        return np.where(a > U32(0x7F800000), U32(0x007FFFFF), key).astype(U32)
    return (U32(0x80000000) | np.where(u <= U32(0x7F800000), u, U32(0))).astype(U32)


def edge_patterns() -> np.ndarray:
    mant = np.array([0, 1, 2, 3, 0x3FFFFF, 0x400000, 0x400001, 0x7FFFFD, 0x7FFFFE, 0x7FFFFF], dtype=np.uint64)
    exp = np.arange(256, dtype=np.uint64)
    sign = np.array([0, 1], dtype=np.uint64)
    pats = (sign[:, None, None] << 31) | (exp[None, :, None] << 23) | mant[None, None, :]
    rng = np.random.default_rng(20261205)
    rnd = rng.integers(0, 2**32, size=1 << 22, dtype=np.uint64)
    return np.concatenate([pats.ravel(), rnd]).astype(U32)


@pytest.mark.parametrize("logits", [False, True])
def test_key_of_bits_matches_sanitized_f2key(logits):
    u = edge_patterns()
    ref, new = ref_keys(u, logits), new_keys(u, logits)
    bad = np.nonzero(ref != new)[0]
    assert bad.size == 0, f"first mismatch: bits {u[bad[0]]:#010x} ref {ref[bad[0]]:#010x} new {new[bad[0]]:#010x}"
    # the definition itself: NaN -> -inf (logits) / 0 (probs), -0 -> +0, order kept on the rest
    specials = np.array([0x7FC00000, 0xFFC00000, 0x80000000, 0x00000000, 0x7F800000, 0xFF800000], dtype=U32)
    k = new_keys(specials, logits)
    zero = 0x80000000
    if logits:
        assert list(k) == [0x007FFFFF, 0x007FFFFF, zero, zero, 0xFF800000, 0x007FFFFF]
    else:
        assert list(k) == [zero, zero, zero, zero, 0xFF800000, zero]
    finite = np.sort(np.random.default_rng(1).standard_normal(4096).astype(np.float32))
    if not logits:
        finite = np.abs(finite)
        finite.sort()
    assert np.all(np.diff(new_keys(finite.view(U32), logits).astype(np.int64)) >= 0)


def vec_max_key(q: np.ndarray, logits: bool) -> np.ndarray:
    """vec_max_key<LOGITS> on rows of 4 bit patterns: fmaxf (np.fmax: a NaN yields the other operand)
    over the four floats, then the key (logits) or the bits of max(m, +0) with the sign bit set (probs)."""
    with np.errstate(invalid="ignore"):
        f = q.view(np.float32)
        m = np.fmax(np.fmax(f[:, 0], f[:, 1]), np.fmax(f[:, 2], f[:, 3]))
        if logits:
            return new_keys(m.view(U32), True)
        return (U32(0x80000000) | np.fmax(m, np.float32(0.0)).view(U32)).astype(U32)


@pytest.mark.parametrize("logits", [False, True])
def test_vec_max_key_is_the_largest_key(logits):
    u = edge_patterns()
    rng = np.random.default_rng(20261206)
    specials = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x80000000, 0x00000000, 0x7F800000,
                         0xFF800000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF], dtype=U32)
    # random vectors of edge / random patterns, and vectors drawn only from the special values
    q = np.concatenate([rng.choice(u, size=(1 << 20, 4)), rng.choice(specials, size=(1 << 16, 4))]).astype(U32)
    # every ordering of +-0 (fmaxf may return either zero): both orders of each pair
    q = np.concatenate([q, q[:, ::-1].copy()])
    want = new_keys(q.ravel(), logits).reshape(-1, 4).max(axis=1)
    got = vec_max_key(q, logits)
    bad = np.nonzero(want != got)[0]
    assert bad.size == 0, f"first mismatch: {[hex(x) for x in q[bad[0]]]} keys max {want[bad[0]]:#010x} got {got[bad[0]]:#010x}"


@pytest.mark.skipif(os.environ.get("FIB_KEYS_EXHAUSTIVE") != "1", reason="FIB_KEYS_EXHAUSTIVE=1: all 2^32 patterns")
@pytest.mark.parametrize("logits", [False, True])
def test_key_of_bits_exhaustive(logits):
    step = 1 << 26
    for lo in range(0, 1 << 32, step):
        u = np.arange(lo, lo + step, dtype=np.uint64).astype(U32)
        assert np.array_equal(ref_keys(u, logits), new_keys(u, logits)), f"mismatch in [{lo:#x}, {lo + step:#x})"
