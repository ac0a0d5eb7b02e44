"""Workload: the concrete var-axis values and input data of one recorded call.

On disk a workload is a :class:`~fib_runtime.schema.trace.Trace` whose ``solution`` and
``evaluation`` are null, one per line of ``workloads/<op_type>/<definition>.jsonl``. Inputs are
``random`` (the benchmark draws them), ``scalar`` (a Python value) or ``safetensors`` (a tensor
in a blob file, path relative to the dataset root)::

    {"uuid": "...", "axes": {"batch_size": 7},
     "inputs": {"x": {"type": "random"}, "eps": {"type": "scalar", "value": 1e-5},
                "indptr": {"type": "safetensors", "path": "./blob/...", "tensor_key": "indptr"}}}
"""

from __future__ import annotations

import posixpath
from typing import Annotated, Dict, Literal, Union

from pydantic import Field, field_validator

from ._base import TraceModel, is_absolute_path

NonEmptyStr = Annotated[str, Field(min_length=1)]


class RandomInput(TraceModel):
    type: Literal["random"]


class ScalarInput(TraceModel):
    type: Literal["scalar"]
    value: Union[bool, int, float]


class SafetensorsInput(TraceModel):
    type: Literal["safetensors"]
    path: NonEmptyStr
    tensor_key: NonEmptyStr

    @field_validator("path")
    @classmethod
    def _relative(cls, v: str) -> str:
        if is_absolute_path(v):
            raise ValueError(f"blob path must be relative to the dataset root: {v!r}")
        norm = posixpath.normpath(v.replace("\\", "/"))
        if norm == ".." or norm.startswith("../"):
            raise ValueError(f"blob path escapes the dataset root: {v!r}")
        return v


InputSpec = Annotated[Union[RandomInput, ScalarInput, SafetensorsInput], Field(discriminator="type")]


class Workload(TraceModel):
    """Var-axis values + per-input data source + uuid."""

    axes: Dict[str, Annotated[int, Field(ge=0)]]
    inputs: Dict[str, InputSpec]
    uuid: NonEmptyStr

    def signature(self, var_axes) -> tuple:
        """The workload's signature: var-axis values in the definition's order."""
        return tuple(self.axes[a] for a in var_axes)
