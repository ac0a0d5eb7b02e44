"""Definition: the contract of a kernel (axes, input/output tensors, reference, tags).

Field names, defaults and JSON spelling follow flashinfer-bench 0.1.2
(``flashinfer_bench/data/definition.py``). Example::

    from fib_runtime.schema import Definition
    d = Definition.model_validate(json.load(open("rmsnorm_h4096.json")))
    d.var_axes            # ('batch_size',)
    d.const_value("hidden_size")   # 4096

Rules checked on read (``fib`` dialect): every axis named in a shape is declared; a const axis
has a value; a var axis appears in some tensor shape; input and output names do not overlap;
``reference`` is present, parses and defines a top-level ``def run``; dtypes come from
:data:`DTYPES`; each constraint is a Python expression. The ``flashinfer`` dialect (what
FlashInfer 0.7.2's ``flashinfer.trace`` writes; checked against all 201 templates it ships)
keeps only what FlashInfer itself guarantees: const axes may lack a value, shapes may name
undeclared (derived) axes, var axes may be bound from scalars, inputs and outputs may share a
name, the reference may be missing or use its own function name, and any dtype word is accepted
(``unknown``, ``float8_e8m0fnu``...). Its extra keys (``optional``, ``param``, ``check``,
``init``) are kept and written back.
"""

from __future__ import annotations

import ast
import re
from functools import cached_property
from typing import Annotated, Dict, List, Literal, Optional, Tuple, Union

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ._base import TraceModel, dialect_of

#: dtypes of the reference schema, in its order.
DTYPES: Tuple[str, ...] = (
    "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1",
    "int64", "int32", "int16", "int8", "bool",
)
#: extra dtypes FlashInfer 0.7.2's tracer writes (read in the ``flashinfer`` dialect only).
FLASHINFER_EXTRA_DTYPES: Tuple[str, ...] = (
    "float64", "uint8", "uint32", "float4_e2m1fn_x2", "unknown",
)

NonEmptyStr = Annotated[str, Field(min_length=1)]
_DTYPE_WORD = re.compile(r"^[a-z][a-z0-9_]*$")


class AxisConst(TraceModel):
    """A dimension fixed by the definition (``{"type": "const", "value": 4096}``)."""

    type: Literal["const"]
    value: Optional[Annotated[int, Field(ge=0)]] = None
    description: Optional[str] = None

    @model_validator(mode="after")
    def _value_required(self, info: ValidationInfo):
        if self.value is None and dialect_of(info) == "fib":
            raise ValueError("const axis has no 'value'")
        return self


class AxisVar(TraceModel):
    """A dimension whose value each workload provides (``{"type": "var"}``)."""

    type: Literal["var"]
    description: Optional[str] = None


Axis = Annotated[Union[AxisConst, AxisVar], Field(discriminator="type")]


class TensorSpec(TraceModel):
    """Shape and dtype of one input or output. ``shape: null`` is a Python scalar; ``[]`` is 0-d."""

    shape: Optional[List[NonEmptyStr]]
    dtype: str
    description: Optional[str] = None

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, v: str, info: ValidationInfo) -> str:
        if dialect_of(info) == "fib":
            if v not in DTYPES:
                raise ValueError(f"unknown dtype {v!r} (expected one of: {', '.join(DTYPES)})")
        elif not _DTYPE_WORD.match(v):
            # FlashInfer writes whatever torch calls the dtype (float8_e8m0fnu, uint16...) or
            # what a template declares ("unknown", "str"): any lower-case word is accepted.
            raise ValueError(f"bad dtype {v!r} (expected a dtype name such as "
                             f"{', '.join(FLASHINFER_EXTRA_DTYPES[:3])})")
        return v

    @property
    def is_scalar(self) -> bool:
        return self.shape is None


class Definition(TraceModel):
    """A kernel definition (see module docstring)."""

    name: NonEmptyStr
    op_type: NonEmptyStr
    axes: Dict[str, Axis]
    inputs: Dict[str, TensorSpec]
    outputs: Dict[str, TensorSpec]
    reference: Optional[NonEmptyStr] = None  # required in the fib dialect
    tags: List[str] = Field(default_factory=list)
    description: Optional[str] = None
    constraints: List[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo):
        fib = dialect_of(info) == "fib"
        # FlashInfer 0.7 templates may name axes they do not declare (derived sizes such as
        # K_div_2), declare var axes bound from scalar parameters, and omit the reference:
        # the flashinfer dialect accepts all three (see undeclared_axes / unbound_var_axes).
        if fib:
            for kind, specs in (("inputs", self.inputs), ("outputs", self.outputs)):
                for tname, spec in specs.items():
                    for ax in spec.shape or ():
                        if ax not in self.axes:
                            raise ValueError(f"{kind}.{tname}.shape: names undefined axis {ax!r}")
            overlap = sorted(set(self.inputs) & set(self.outputs))
            if overlap:
                raise ValueError(f"outputs: input and output names overlap: {', '.join(overlap)}")
            for ax in self.unbound_var_axes:
                raise ValueError(f"axes.{ax}: var axis is never bound (no tensor shape uses it)")
            if self.reference is None:
                raise ValueError("reference: required field is missing")
        if self.reference is None:
            return self._check_constraints()
        try:
            tree = ast.parse(self.reference)
        except SyntaxError as e:
            raise ValueError(f"reference: not valid Python ({e.msg}, line {e.lineno})") from None
        funcs = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if "run" not in funcs and (fib or not funcs):
            raise ValueError("reference: must define a top-level function 'run'")
        return self._check_constraints()

    def _check_constraints(self):
        for i, c in enumerate(self.constraints):
            try:
                ast.parse(c, mode="eval")
            except SyntaxError:
                raise ValueError(f"constraints[{i}]: not a Python expression: {c!r}") from None
        return self

    # ---- helpers (not serialised) ------------------------------------------------------
    @cached_property
    def var_axes(self) -> Tuple[str, ...]:
        """Names of the var axes, in declaration order: the order of a signature."""
        return tuple(k for k, a in self.axes.items() if isinstance(a, AxisVar))

    @cached_property
    def const_axes(self) -> Dict[str, int]:
        return {k: a.value for k, a in self.axes.items() if isinstance(a, AxisConst) and a.value is not None}

    def const_value(self, axis: str) -> int:
        return self.const_axes[axis]

    @property
    def undeclared_axes(self) -> Tuple[str, ...]:
        """Axes named in some shape but not declared (only possible in the flashinfer dialect)."""
        seen = {ax for s in list(self.inputs.values()) + list(self.outputs.values()) for ax in (s.shape or ())}
        return tuple(sorted(seen - set(self.axes)))

    @property
    def unbound_var_axes(self) -> Tuple[str, ...]:
        """Var axes no tensor shape uses (only possible in the flashinfer dialect)."""
        used = {ax for s in list(self.inputs.values()) + list(self.outputs.values()) for ax in (s.shape or ())}
        return tuple(ax for ax, a in self.axes.items() if isinstance(a, AxisVar) and ax not in used)

    @cached_property
    def reference_entry(self) -> Optional[str]:
        """Name of the reference's entry function (``run``, or FlashInfer's own name); None without one."""
        if self.reference is None:
            return None
        tree = ast.parse(self.reference)
        funcs = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        return "run" if "run" in funcs else funcs[-1]

    @cached_property
    def axis_sources(self) -> Dict[str, Tuple[str, int]]:
        """For each var axis, the first input (name, dim) that carries it."""
        out: Dict[str, Tuple[str, int]] = {}
        for tname, spec in self.inputs.items():
            for dim, ax in enumerate(spec.shape or ()):
                if ax in self.var_axes and ax not in out:
                    out[ax] = (tname, dim)
        return out

    def tag_values(self, namespace: str) -> List[str]:
        """Values of the tags ``namespace:value`` (e.g. ``fi_api``)."""
        p = namespace + ":"
        return [t[len(p):] for t in self.tags if t.startswith(p)]

    def axes_values(self, shapes: Dict[str, Tuple[int, ...]]) -> Dict[str, int]:
        """Bind var axes from input shapes (first tensor wins; a conflict raises)."""
        out: Dict[str, int] = {}
        for tname, spec in self.inputs.items():
            if spec.shape is None or tname not in shapes:
                continue
            shape = shapes[tname]
            if len(shape) != len(spec.shape):
                raise ValueError(f"input {tname!r}: rank {len(shape)}, definition says {len(spec.shape)}")
            for ax, n in zip(spec.shape, shape):
                if ax in self.const_axes:
                    continue
                if ax in out and out[ax] != n:
                    raise ValueError(f"axis {ax!r} is {out[ax]} in one input and {n} in {tname!r}")
                out[ax] = int(n)
        return out

    def shape_of(self, tensor: str, axes: Dict[str, int]) -> Optional[Tuple[int, ...]]:
        """Concrete shape of an input or output given var-axis values."""
        spec = self.inputs.get(tensor) or self.outputs[tensor]
        if spec.shape is None:
            return None
        vals = {**self.const_axes, **axes}
        return tuple(int(vals[a]) for a in spec.shape)
