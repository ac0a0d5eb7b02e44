"""The sampling library's argument reader (kernels_cuda/include/fib/sampling/host_args.h), on the CPU.

`describe_args` runs the same reader as `sample` without a GPU (CPU tensors accepted, nothing
launched) and returns the kernel parameters it would launch with. The Python wrapper is driven
through it too, so its fast path (arguments passed as they are) and its slow path (convert what
the library refused, call again) meet the real C++ checks. Needs the built library (CI builds it);
skipped where it was not built.
"""
from __future__ import annotations

import importlib

import pytest
import torch

from fib_runtime.kernels import loader

LIB = loader.bin_dir() / "libfib_sampling.so"
pytestmark = pytest.mark.skipif(not LIB.is_file(), reason=f"{LIB} not built (no nvcc)")

S = importlib.import_module("fib_runtime.kernels.sampling")


@pytest.fixture(scope="module")
def lib():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    return tvm_ffi.load_module(str(LIB))


def parse(desc: str) -> dict:
    out = {}
    for kv in str(desc).split(","):
        k, v = kv.split("=")
        out[k] = float(v) if "." in v else int(v)
    return out


def describe(lib, x, out, flags, top_k=None, top_p=None, min_p=None, temperature=None, seed=0, offset=0):
    return parse(lib.describe_args(x, out, flags, top_k, top_p, min_p, temperature, seed, offset))


def test_scalars_tensors_and_defaults(lib):
    x = torch.randn(3, 101)
    out = torch.empty(3, dtype=torch.int64)
    k = torch.tensor([1, 2, 3], dtype=torch.int32)
    p = torch.tensor([0.5, 0.9, 1.0])
    d = describe(lib, x, out, S._SAMPLE | S._LOGITS, k, p, None, 0.7, 5, 9)
    assert (d["B"], d["V"], d["dt"], d["mode"], d["is_logits"], d["joint"]) == (3, 101, 0, 0, 1, 0)
    assert d["in"] == x.data_ptr() and d["in_stride"] == 101 and d["out_idx"] == out.data_ptr()
    assert d["top_k_arr"] == k.data_ptr() and d["top_k_is64"] == 0 and d["has_topk"] == 1
    assert d["top_p_arr"] == p.data_ptr() and d["has_topp"] == 1
    assert d["min_p_arr"] == 0 and d["has_minp"] == 0 and d["min_p_val"] == 0.0
    assert d["temp_arr"] == 0 and abs(d["temp_val"] - 0.7) < 1e-6
    assert (d["seed_arr"], d["seed_val"], d["offset_val"], d["seed_per_row"]) == (0, 5, 9, 0)
    d = describe(lib, x.softmax(-1), out, S._SAMPLE | S._JOINT, 50, 0.9, 0.1, None, 1, 2)
    assert d["joint"] == 1 and d["is_logits"] == 0 and d["top_k_arr"] == 0 and d["top_k_val"] == 50
    assert abs(d["top_p_val"] - 0.9) < 1e-6 and abs(d["min_p_val"] - 0.1) < 1e-6 and d["has_minp"] == 1
    assert d["temp_val"] == 1.0
    # nothing given: no filter; int top_p / bool top_k are numbers
    d = describe(lib, x, out, S._SAMPLE | S._LOGITS, None, 1, None, None)
    assert (d["has_topk"], d["has_topp"], d["has_minp"]) == (0, 0, 0)
    d = describe(lib, x, out, S._SAMPLE, True)
    assert d["top_k_val"] == 1 and d["has_topk"] == 1


def test_top_k_clamps_and_rng_tensors(lib):
    x = torch.rand(3, 50)
    out = torch.empty(3, dtype=torch.int64)
    assert describe(lib, x, out, 0, 2**40)["top_k_val"] == 2**31 - 1
    assert describe(lib, x, out, 0, 2**40)["has_topk"] == 0  # k >= V keeps everything
    assert describe(lib, x, out, 0, -3)["has_topk"] == 0 and describe(lib, x, out, 0, 50)["has_topk"] == 0
    d = describe(lib, x, out, 0, torch.tensor([5, 6, 7]))
    assert d["top_k_is64"] == 1 and d["has_topk"] == 1
    one, per_row = torch.tensor([7]), torch.tensor([1, 2, 3])
    d = describe(lib, x, out, 0, seed=one, offset=per_row)
    assert d["seed_arr"] == one.data_ptr() and d["seed_per_row"] == 0
    assert d["offset_arr"] == per_row.data_ptr() and d["offset_per_row"] == 1
    # a 0-d tensor is one entry
    d = describe(lib, x[:1], out[:1], 0, torch.tensor(4), torch.tensor(0.5), seed=torch.tensor(3))
    assert d["B"] == 1 and d["top_k_arr"] and d["top_p_arr"] and d["seed_arr"] and d["seed_per_row"] == 0


def test_one_row_strides_and_outputs(lib):
    x = torch.randn(4, 64)[:, :50]  # rows strided: stride(0) = 64
    out = torch.empty(4, dtype=torch.int64)
    d = describe(lib, x, out, S._LOGITS)
    assert d["in_stride"] == 64 and d["V"] == 50
    v = torch.randn(77)
    d = describe(lib, v, torch.empty((), dtype=torch.int64), S._LOGITS)
    assert (d["B"], d["V"], d["in_stride"]) == (1, 77, 77)
    r = torch.empty(77)
    d = describe(lib, v, r, S._RENORM)
    assert d["out_vals"] == r.data_ptr() and d["out_stride"] == 77 and d["mode"] == 1
    m = torch.empty(4, 50, dtype=torch.bfloat16)
    d = describe(lib, x.bfloat16(), m, S._MASK | S._LOGITS, 3)
    assert d["dt"] == 1 and d["out_stride"] == 50 and d["mode"] == 2
    d = describe(lib, torch.empty(0, 10), torch.empty(0, dtype=torch.int64), 0)
    assert d["B"] == 0


@pytest.mark.parametrize("case, exc, msg", [
    (dict(top_k=torch.tensor([1, 2, 3], dtype=torch.int16)), TypeError, "top_k must be int32/int64"),
    (dict(top_k=5.0), TypeError, "top_k must be an integer"),
    (dict(top_p=torch.tensor([0.5, 0.5, 0.5], dtype=torch.float64)), TypeError, "top_p must be float32"),
    (dict(top_k=torch.tensor([1, 2])), ValueError, "must have B (3) entries"),
    (dict(top_k=torch.tensor([1])), ValueError, "must have B (3) entries"),
    (dict(temperature=torch.ones(3, 1)), ValueError, "0-d or 1-D"),
    (dict(min_p=torch.ones(6)[::2]), ValueError, "min_p must be contiguous"),
    (dict(seed=torch.tensor([1], dtype=torch.int32)), TypeError, "seed must be int64"),
    (dict(offset=torch.tensor([1, 2])), ValueError, "1 or B (3) entries"),
    (dict(seed="x"), TypeError, "seed must be None, a number or a tensor"),
    (dict(out=torch.empty(2, dtype=torch.int64)), ValueError, "out must be a contiguous int64 [B]"),
    (dict(out=torch.empty(3, dtype=torch.int32)), ValueError, "out must be a contiguous int64 [B]"),
    (dict(x=torch.randn(3, 40).t()), ValueError, "rows must be contiguous"),
    (dict(x=torch.randn(3, 40, dtype=torch.float64)), TypeError, "input dtype"),
    (dict(x=torch.randn(2, 3, 4)), ValueError, "input must be [B, V] or [V]"),
    (dict(flags=S._SAMPLE | 3), ValueError, "bad mode"),
])
def test_refusals_name_the_argument(lib, case, exc, msg):
    a = dict(x=torch.randn(3, 40), out=torch.empty(3, dtype=torch.int64), flags=S._LOGITS, top_k=None, top_p=None,
             min_p=None, temperature=None, seed=1, offset=2)
    a.update(case)
    if "x" in case and case["x"].dim() == 2 and case["x"].shape[0] != 3:
        a["out"] = torch.empty(case["x"].shape[0], dtype=torch.int64)
    with pytest.raises(exc, match=msg.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        lib.describe_args(a["x"], a["out"], a["flags"], a["top_k"], a["top_p"], a["min_p"], a["temperature"],
                          a["seed"], a["offset"])


def test_probs_must_be_float32_and_renorm_out_checked(lib):
    x = torch.rand(2, 30)
    with pytest.raises(TypeError, match="probs must be float32"):
        lib.describe_args(x.half(), torch.empty(2, dtype=torch.int64), 0, None, None, None, None, 0, 0)
    with pytest.raises(ValueError, match="float32"):
        lib.describe_args(x, torch.empty(2, 30, dtype=torch.float16), S._RENORM, 3, None, None, None, 0, 0)
    with pytest.raises(ValueError, match="input dtype"):
        lib.describe_args(x.half(), torch.empty(2, 30), S._MASK | S._LOGITS, 3, None, None, None, 0, 0)


def test_sample_refuses_cpu_tensors(lib):
    x = torch.randn(2, 30)
    with pytest.raises(ValueError, match="input must be a CUDA tensor"):
        lib.sample(x, torch.empty(2, dtype=torch.int64), S._LOGITS, None, None, None, None, 1, 2, 0, -1)


def test_wrapper_through_the_real_reader(lib, monkeypatch):
    """The wrapper's calls as the library reads them: the fast path passes tensors and numbers as
    they are; what the reader refuses (int16 k, float64 p, a float k, strided rows, numpy scalars)
    is converted and read again; a real error still reaches the caller."""
    np = pytest.importorskip("numpy")
    seen = []

    def fn(x, out, flags, k, p, m, t, s, o, cluster, stream):
        seen.append(parse(lib.describe_args(x, out, flags, k, p, m, t, s, o)))
        return 0

    monkeypatch.setattr(S, "_fn", fn)
    monkeypatch.setattr(S, "_fn_alloc", None)  # (the library-allocating entry is not faked)
    x = torch.randn(3, 40)
    k = torch.tensor([1, 2, 3], dtype=torch.int32)
    S.top_k_top_p_sampling_from_logits(x, k, 0.9, temperature=0.5, seed=7, offset=8)
    d = seen[-1]
    assert d["top_k_arr"] == k.data_ptr() and abs(d["top_p_val"] - 0.9) < 1e-6 and d["seed_val"] == 7
    S.top_k_top_p_sampling_from_probs(x.softmax(-1), k.to(torch.int16), torch.full((3,), 0.5, dtype=torch.float64),
                                      seed=1, offset=2)
    assert seen[-1]["top_k_arr"] and seen[-1]["top_p_arr"] and seen[-1]["top_k_is64"] == 0
    S.top_k_sampling_from_probs(x.softmax(-1), 4.0, seed=np.int64(3), offset=2)
    assert seen[-1]["top_k_val"] == 4 and seen[-1]["seed_val"] == 3
    S.top_k_sampling_from_logits(torch.randn(40, 3).t(), 5, seed=1, offset=2)
    assert seen[-1]["in_stride"] == 40 and seen[-1]["V"] == 40
    S.min_p_sampling_from_probs(x.softmax(-1)[0], np.float32(0.25), seed=1, offset=2)
    assert seen[-1]["B"] == 1 and abs(seen[-1]["min_p_val"] - 0.25) < 1e-6
    y = S.top_k_renorm_probs(x.softmax(-1), 3)
    assert seen[-1]["out_vals"] == y.data_ptr() and y.shape == x.shape
    n = len(seen)
    with pytest.raises(ValueError, match="must have B"):
        S.top_k_sampling_from_probs(x.softmax(-1), torch.tensor([1, 2]), seed=1, offset=2)
    assert len(seen) == n
