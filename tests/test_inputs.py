"""inputs.materialize: random per dtype, sampling inputs, integer refusal, scalars vs 0-d, blobs."""

import math

import pytest
import torch
from safetensors.torch import save_file

from fib_runtime.errors import InputError
from fib_runtime.inputs import materialize
from fib_runtime.schema import Definition, Workload


def defn(inputs, op_type="test", axes=None, name="t"):
    axes = axes or {"n": {"type": "var"}, "h": {"type": "const", "value": 16}}
    return Definition.model_validate({
        "name": name, "op_type": op_type, "axes": axes, "inputs": inputs,
        "outputs": {"out": {"shape": [next(iter(axes))], "dtype": "float32"}},
        "reference": "def run(*args):\n    return None\n"})


def wl(inputs, axes=None):
    return Workload.model_validate({"uuid": "u", "axes": axes or {"n": 5}, "inputs": inputs})


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
                                   "float4_e2m1", "bool"])
def test_random_per_dtype(dtype):
    d = defn({"x": {"shape": ["n", "h"], "dtype": dtype}})
    x = materialize(d, wl({"x": {"type": "random"}}), seed=1)["x"]
    expected = torch.float4_e2m1fn_x2 if dtype == "float4_e2m1" else getattr(torch, dtype)
    assert x.dtype == expected and tuple(x.shape) == (5, 16)
    if dtype.startswith("float8"):
        assert float(x.float().abs().max()) <= 2.0  # randn clamped to [-2, 2]
    if dtype == "bool":
        assert set(x.unique().tolist()) <= {False, True}


def test_random_is_seeded():
    d = defn({"x": {"shape": ["n", "h"], "dtype": "float32"}})
    w = wl({"x": {"type": "random"}})
    assert torch.equal(materialize(d, w, seed=3)["x"], materialize(d, w, seed=3)["x"])
    assert not torch.equal(materialize(d, w, seed=3)["x"], materialize(d, w, seed=4)["x"])


def test_sampling_inputs():
    axes = {"batch_size": {"type": "var"}, "vocab_size": {"type": "const", "value": 1000}}
    d = defn({"probs": {"shape": ["batch_size", "vocab_size"], "dtype": "float32"},
              "top_k": {"shape": ["batch_size"], "dtype": "int32"},
              "top_p": {"shape": ["batch_size"], "dtype": "float32"}}, op_type="sampling", axes=axes)
    w = wl({k: {"type": "random"} for k in ("probs", "top_k", "top_p")}, axes={"batch_size": 64})
    a = materialize(d, w, seed=0)
    probs = a["probs"]
    assert probs.shape == (64, 1000) and float(probs.min()) >= 0
    assert torch.allclose(probs.sum(-1), torch.ones(64), atol=1e-5)  # softmaxed rows
    assert a["top_k"].dtype == torch.int32 and 1 <= int(a["top_k"].min()) and int(a["top_k"].max()) <= 1000
    assert 0.1 <= float(a["top_p"].min()) and float(a["top_p"].max()) <= 1.0


@pytest.mark.parametrize("dtype", ["int32", "int64", "int16", "int8"])
def test_random_integers_refused(dtype):
    d = defn({"kv_indices": {"shape": ["n"], "dtype": dtype}})
    with pytest.raises(InputError, match=r"integer input 'kv_indices' is 'random'.*safetensors"):
        materialize(d, wl({"kv_indices": {"type": "random"}}))


def test_scalar_vs_zero_d():
    d = defn({"sm_scale": {"shape": None, "dtype": "float32"}, "eps": {"shape": [], "dtype": "float32"}})
    a = materialize(d, wl({"sm_scale": {"type": "scalar", "value": 0.125}, "eps": {"type": "scalar", "value": 1e-5}}))
    assert a["sm_scale"] == 0.125 and isinstance(a["sm_scale"], float)
    assert isinstance(a["eps"], torch.Tensor) and a["eps"].shape == () and a["eps"].dtype == torch.float32
    assert math.isclose(float(a["eps"]), 1e-5, rel_tol=1e-6)


def test_random_scalar_refused():
    d = defn({"sm_scale": {"shape": None, "dtype": "float32"}})
    with pytest.raises(InputError, match="record it as 'scalar'"):
        materialize(d, wl({"sm_scale": {"type": "random"}}))


def test_missing_input_data():
    d = defn({"x": {"shape": ["n"], "dtype": "float32"}})
    with pytest.raises(InputError, match="no data for input 'x'"):
        materialize(d, wl({}))


def _blob_def():
    return defn({"indptr": {"shape": ["n"], "dtype": "int32"}})


def test_blob_loading(tmp_path):
    (tmp_path / "blob").mkdir()
    save_file({"indptr": torch.arange(5, dtype=torch.int32)}, str(tmp_path / "blob" / "w.safetensors"))
    w = wl({"indptr": {"type": "safetensors", "path": "./blob/w.safetensors", "tensor_key": "indptr"}})
    a = materialize(_blob_def(), w, dataset_root=tmp_path)
    assert a["indptr"].tolist() == [0, 1, 2, 3, 4]


def test_blob_errors(tmp_path):
    (tmp_path / "blob").mkdir()
    save_file({"indptr": torch.arange(4, dtype=torch.int64)}, str(tmp_path / "blob" / "w.safetensors"))
    src = lambda key="indptr", path="./blob/w.safetensors": wl(
        {"indptr": {"type": "safetensors", "path": path, "tensor_key": key}})
    with pytest.raises(InputError, match="shape"):
        materialize(_blob_def(), src(), dataset_root=tmp_path)
    with pytest.raises(InputError, match="has no tensor 'nope'"):
        materialize(_blob_def(), src(key="nope"), dataset_root=tmp_path)
    with pytest.raises(InputError, match="missing blob file './blob/x.safetensors'"):
        materialize(_blob_def(), src(path="./blob/x.safetensors"), dataset_root=tmp_path)
    with pytest.raises(InputError, match="needs a dataset root"):
        materialize(_blob_def(), src())
    (tmp_path / "blob" / "lfs.safetensors").write_text("version https://git-lfs.github.com/spec/v1\n")
    with pytest.raises(InputError, match="Git LFS pointer"):
        materialize(_blob_def(), src(path="./blob/lfs.safetensors"), dataset_root=tmp_path)
    (tmp_path / "blob" / "bad.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(InputError, match="cannot read blob './blob/bad.safetensors'"):
        materialize(_blob_def(), src(path="./blob/bad.safetensors"), dataset_root=tmp_path)


def test_blob_dtype_mismatch(tmp_path):
    save_file({"indptr": torch.arange(5, dtype=torch.int64)}, str(tmp_path / "w.safetensors"))
    w = wl({"indptr": {"type": "safetensors", "path": "w.safetensors", "tensor_key": "indptr"}})
    with pytest.raises(InputError, match="dtype int64, definition says int32"):
        materialize(_blob_def(), w, dataset_root=tmp_path)


def test_blob_escape_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside.safetensors"
    save_file({"indptr": torch.arange(5, dtype=torch.int32)}, str(outside))
    # '..' is refused by the schema already
    with pytest.raises(ValueError, match="escapes the dataset root"):
        wl({"indptr": {"type": "safetensors", "path": "../outside.safetensors", "tensor_key": "indptr"}})
    # a symlink inside the root pointing out of it is refused when loading
    (root / "link.safetensors").symlink_to(outside)
    w = wl({"indptr": {"type": "safetensors", "path": "link.safetensors", "tensor_key": "indptr"}})
    with pytest.raises(InputError, match="escapes the dataset root"):
        materialize(_blob_def(), w, dataset_root=root)


def test_unseeded_does_not_touch_global_rng():
    d = defn({"x": {"shape": ["n", "h"], "dtype": "float32"}})
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    materialize(d, wl({"x": {"type": "random"}}))
    assert torch.equal(torch.rand(3), expected)
