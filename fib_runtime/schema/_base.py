"""Shared base of the FlashInfer Trace models: lossless, order-preserving, dialect-aware.

Every model keeps the keys it does not know (``extra="allow"``) and remembers the order of the
keys it was read with, so ``load -> save`` writes back the same JSON content (and, for
pretty-printed files, the same text). Values that were absent stay absent on output
(``exclude_unset``), values that were present stay present even when equal to the default.

Dialects: ``"fib"`` is flashinfer-bench 0.1.2 (the reference schema, strict); ``"flashinfer"`` is
what FlashInfer 0.7.2's ``flashinfer.trace`` writes (lenient: other reference function names,
``unknown`` dtypes, overlapping input/output names, DPS default ``False``). Pass the dialect as
validation context: ``Definition.model_validate(obj, context={"dialect": "flashinfer"})``.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationInfo, model_validator

DIALECTS = ("fib", "flashinfer")


def dialect_of(info: ValidationInfo | None) -> str:
    ctx = getattr(info, "context", None) or {}
    d = ctx.get("dialect", "fib")
    return d if d in DIALECTS else "fib"


class TraceModel(BaseModel):
    """Base model: keeps unknown keys and the original key order."""

    model_config = ConfigDict(
        extra="allow",
        populate_by_name=True,
        ser_json_inf_nan="strings",
        validate_default=False,
    )

    _key_order: List[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_key_order(cls, data: Any, handler):
        obj = handler(data)
        if isinstance(data, dict) and isinstance(obj, TraceModel):
            obj._key_order = list(data.keys())
        return obj

    def __eq__(self, other: Any) -> bool:
        """Equal content: fields and unknown keys. The remembered key order is presentation, so
        the same object read from files with different key orders compares equal."""
        if not isinstance(other, BaseModel):
            return NotImplemented
        if type(self) is not type(other):
            return False
        fields = type(self).model_fields
        return ({k: v for k, v in self.__dict__.items() if k in fields}
                == {k: v for k, v in other.__dict__.items() if k in fields}
                and (self.__pydantic_extra__ or {}) == (other.__pydantic_extra__ or {}))

    __hash__ = None  # mutable models; Solution keeps its own content hash (content_hash())

    # ---- output -----------------------------------------------------------------------
    def to_dict(self, *, lossless: bool = False) -> Dict[str, Any]:
        """JSON-ready dict: set fields and unknown keys, in the order they were read.

        ``lossless=True`` returns exactly what was read (for an unchanged object); without it,
        subclasses may add keys that make the file unambiguous across dialects (a Solution's
        ``destination_passing_style``).
        """
        return _finite(_order(self, self.model_dump(mode="json", exclude_unset=True, by_alias=True)))

    def to_json(self, indent: int | None = None, *, lossless: bool = False) -> str:
        """Serialise like flashinfer-bench (pretty with ``indent=2``, compact otherwise)."""
        data = self.to_dict(lossless=lossless)
        if indent is None:
            return json.dumps(data, ensure_ascii=False, separators=(", ", ": "))
        return json.dumps(data, ensure_ascii=False, indent=indent)


def _order(model: TraceModel, dumped: Dict[str, Any]) -> Dict[str, Any]:
    """Reorder ``dumped`` (and nested models) to the key order ``model`` was read with."""
    for name in list(dumped.keys()):
        value = getattr(model, name, None)
        dumped[name] = _order_value(value, dumped[name])
    order = model._key_order
    if not order:
        return dumped
    out: Dict[str, Any] = {k: dumped[k] for k in order if k in dumped}
    for k, v in dumped.items():
        if k not in out:
            out[k] = v
    return out


def _order_value(value: Any, dumped: Any) -> Any:
    if isinstance(value, TraceModel) and isinstance(dumped, dict):
        return _order(value, dumped)
    if isinstance(value, dict) and isinstance(dumped, dict):
        return {k: _order_value(value.get(k), v) for k, v in dumped.items()}
    if isinstance(value, (list, tuple)) and isinstance(dumped, list):
        return [_order_value(a, b) for a, b in zip(value, dumped)]
    return dumped


def is_absolute_path(v: str) -> bool:
    """POSIX or Windows absolute (``/x``, ``\\x``, ``C:...``): never allowed in dataset paths."""
    return v.startswith("/") or v.startswith("\\") or (len(v) > 1 and v[1] == ":")


def _finite(x: Any) -> Any:
    """Replace NaN/inf floats (anywhere in a JSON tree) with pydantic's string spelling."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return json_float(x)


def json_float(x: Any) -> Any:
    """NaN and infinities as the strings pydantic writes (``"NaN"``, ``"Infinity"``)."""
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    return x


def pydantic_problems(exc, file: str, line=None, prefix: str = ""):
    """Turn a pydantic ``ValidationError`` into one :class:`~fib_runtime.errors.Problem` each."""
    from ..errors import Problem

    out = []
    for err in exc.errors():
        raw_loc = tuple(err.get("loc", ()))
        loc = ".".join(str(p) for i, p in enumerate(raw_loc) if not _is_union_tag(raw_loc, i))
        msg = err.get("msg", "invalid").removeprefix("Value error, ")
        if not loc:  # model-level rule: the message starts with its own field path
            head, sep, rest = msg.partition(": ")
            if sep and " " not in head:
                loc, msg = head, rest
        if err.get("type") == "missing":
            msg = "required field is missing"
        field = ".".join(p for p in (prefix, loc) if p)
        out.append(Problem(file=file, line=line, field=field, message=msg))
    return out


def _is_union_tag(loc: tuple, i: int) -> bool:
    """True for the discriminator pydantic inserts after a key of ``axes`` / ``inputs``
    (``axes.<name>.const.value``), not for an axis or input that happens to be named ``var``."""
    part = loc[i]
    return (isinstance(part, str) and part in ("const", "var", "random", "scalar", "safetensors")
            and i >= 2 and loc[i - 2] in ("axes", "inputs"))
