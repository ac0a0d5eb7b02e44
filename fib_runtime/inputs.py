"""Turn a Workload into real inputs (tensors and scalars) on a chosen device.

    args = materialize(definition, workload, dataset_root=ds.root, device="cuda", seed=0)
    out = compile_reference(definition)(*args.values())

Rules (following flashinfer-bench's benchmark loader, stricter where it was unsafe):
- ``random`` float inputs: ``randn`` (fp8: ``randn.clamp(-2, 2)`` cast; fp4, which torch cannot
  cast to: random bytes reinterpreted as ``float4_e2m1fn_x2``). For
  ``op_type == "sampling"`` an input named ``probs`` is a softmax (rows sum to 1), ``logits`` is
  ``randn``, and the per-row parameters get values in their valid range: ``top_k`` in
  ``[1, min(V, 1024)]``, ``top_p`` in ``[0.1, 1]``, ``min_p`` in ``[0, 0.5]``, ``temperature`` in
  ``[0.5, 1.5]``.
- ``random`` integer inputs elsewhere are refused (indices and indptrs drawn at random would be
  out of range): record them as ``safetensors``. ``bool`` draws fair coins.
- ``scalar``: the recorded Python value (for ``shape: null``), or a 0-d tensor for ``shape: []``.
- ``safetensors``: loaded from the blob under the dataset root (paths leaving the root are
  refused); shape and dtype are checked against the definition.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Optional, Union

from .errors import InputError
from .schema import Definition, RandomInput, SafetensorsInput, ScalarInput, Workload

_LFS_MAGIC = b"version https://git-lfs"

SAMPLING_PARAM_RANGES = {
    "top_p": (0.1, 1.0), "min_p": (0.0, 0.5), "temperature": (0.5, 1.5),
}


def torch_dtype(name: str):
    import torch

    table = {
        "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
        "float8_e4m3fn": getattr(torch, "float8_e4m3fn", None),
        "float8_e5m2": getattr(torch, "float8_e5m2", None),
        "float4_e2m1": getattr(torch, "float4_e2m1fn_x2", None),
        "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8,
        "bool": torch.bool, "float64": torch.float64, "uint8": torch.uint8,
    }
    dt = table.get(name)
    if dt is None:
        raise InputError(f"dtype {name!r} is not available in this torch build")
    return dt


def dtype_name(dt) -> str:
    return str(dt).removeprefix("torch.")


def materialize(definition: Definition, workload: Workload, dataset_root: Optional[Union[str, Path]] = None,
                device: str = "cpu", seed: Optional[int] = None) -> Dict[str, Any]:
    """Inputs of ``workload`` in the definition's input order, as tensors/scalars on ``device``."""
    import torch

    gen = torch.Generator(device="cpu")
    # without a seed draw one from the OS: torch.seed() would also reseed the global RNG
    gen.manual_seed(seed if seed is not None else int.from_bytes(os.urandom(8), "little") >> 1)
    axes = {**definition.const_axes, **workload.axes}
    out: Dict[str, Any] = {}
    blobs: Dict[Path, Dict[str, Any]] = {}
    for name, spec in definition.inputs.items():
        src = workload.inputs.get(name)
        if src is None:
            if getattr(spec, "optional", False):
                out[name] = None
                continue
            raise InputError(f"{definition.name}: workload {workload.uuid} has no data for input {name!r}")
        shape = definition.shape_of(name, axes)
        if isinstance(src, ScalarInput):
            out[name] = src.value if shape is None else torch.tensor(src.value, dtype=torch_dtype(spec.dtype), device=device)
        elif isinstance(src, SafetensorsInput):
            out[name] = _load_blob(definition, name, spec, shape, src, dataset_root, device, blobs)
        elif isinstance(src, RandomInput):
            out[name] = _random(definition, name, spec.dtype, shape, axes, gen).to(device)
        else:  # pragma: no cover - schema forbids it
            raise InputError(f"{definition.name}: unknown input kind for {name!r}")
    return out


def _random(definition: Definition, name: str, dtype: str, shape, axes, gen):
    import torch

    if shape is None:
        raise InputError(f"{definition.name}: scalar input {name!r} is 'random'; record it as 'scalar'")
    dt = torch_dtype(dtype)
    sampling = definition.op_type == "sampling"
    if sampling and name == "top_k":
        vocab = axes.get("vocab_size", 1024)
        return torch.randint(1, min(int(vocab), 1024) + 1, shape, generator=gen).to(dt)
    if sampling and name in SAMPLING_PARAM_RANGES:
        lo, hi = SAMPLING_PARAM_RANGES[name]
        return (lo + (hi - lo) * torch.rand(shape, generator=gen)).to(dt)
    if dt == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if not dt.is_floating_point:
        raise InputError(f"{definition.name}: integer input {name!r} is 'random'; integer tensors "
                         f"(indices, indptr, ids) must come from a safetensors blob")
    if dtype == "float4_e2m1":
        # float4_e2m1fn_x2 packs two e2m1 values per byte and has no conversion kernels: draw
        # random bytes (every bit pattern is a finite value in [-6, 6]) and reinterpret them.
        return torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8).view(dt)
    x = torch.randn(shape, generator=gen, dtype=torch.float32)
    if sampling and name == "probs":
        return torch.softmax(x * 4.0, dim=-1).to(dt)
    if dtype.startswith("float8") or dtype.startswith("float4"):
        return x.clamp(-2, 2).to(dt)
    return x.to(dt)


def _load_blob(definition, name, spec, shape, src: SafetensorsInput, root, device, cache):
    from safetensors.torch import load_file

    if root is None:
        raise InputError(f"{definition.name}: input {name!r} needs a dataset root to find {src.path!r}")
    root = Path(root).resolve()
    path = (root / src.path).resolve()
    if path != root and root not in path.parents:
        raise InputError(f"blob path escapes the dataset root: {src.path!r}")
    if not path.is_file():
        raise InputError(f"missing blob file {src.path!r} (input {name!r} of {definition.name})")
    with open(path, "rb") as f:
        if f.read(len(_LFS_MAGIC)) == _LFS_MAGIC:
            raise InputError(f"blob {src.path!r} is a Git LFS pointer: run git lfs pull --include {src.path!r}")
    if path not in cache:
        try:
            cache[path] = load_file(str(path))
        except Exception as e:  # corrupt or truncated file: a user error, not a crash
            raise InputError(f"cannot read blob {src.path!r}: {type(e).__name__}: {e}") from None
    tensors = cache[path]
    if src.tensor_key not in tensors:
        raise InputError(f"blob {src.path!r} has no tensor {src.tensor_key!r} (has: {', '.join(tensors)})")
    t = tensors[src.tensor_key]
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise InputError(f"blob tensor {src.tensor_key!r}: shape {tuple(t.shape)}, definition expects {tuple(shape)}")
    if dtype_name(t.dtype) != spec.dtype and not (spec.dtype == "float4_e2m1" and "float4" in str(t.dtype)):
        raise InputError(f"blob tensor {src.tensor_key!r}: dtype {dtype_name(t.dtype)}, definition says {spec.dtype}")
    return t.to(device)
