"""Solution: one implementation of a Definition (sources + how to build and call it).

Follows flashinfer-bench 0.1.2 ``data/solution.py``. ``destination_passing_style`` defaults to
``True`` (``run(*inputs, *outputs)`` writes into given outputs); FlashInfer 0.7's own loader
defaults it to ``False``, so :meth:`Solution.to_dict` always writes the key explicitly (except
``to_dict(lossless=True)``, which returns what was read: the store uses it to leave an unchanged
file as it is), and files read in the ``flashinfer`` dialect without it get ``False``.

Source paths must be relative, without ``..`` and unique; the entry file of
``entry_point = "file::function"`` must be one of them. Loading a solution executes its code:
treat a dataset like any other code you run.
"""

from __future__ import annotations

import hashlib
import posixpath
from typing import Annotated, Any, Dict, List, Literal, Optional

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ._base import TraceModel, is_absolute_path, dialect_of

NonEmptyStr = Annotated[str, Field(min_length=1)]

LANGUAGES = ("python", "triton", "cpp", "cuda", "tilelang")
FLASHINFER_EXTRA_LANGUAGES = ("cutedsl", "cutile", "cutlass")


class SourceFile(TraceModel):
    path: NonEmptyStr
    content: str

    @field_validator("path")
    @classmethod
    def _safe_path(cls, v: str) -> str:
        if is_absolute_path(v):
            raise ValueError(f"source path must be relative: {v!r}")
        parts = v.replace("\\", "/").split("/")
        if ".." in parts:
            raise ValueError(f"source path must not contain '..': {v!r}")
        if posixpath.normpath(v) in ("", "."):
            raise ValueError(f"source path is empty: {v!r}")
        return v

    @field_validator("content")
    @classmethod
    def _non_empty(cls, v: str, info: ValidationInfo) -> str:
        if not v and dialect_of(info) == "fib":
            raise ValueError("source content is empty")
        return v


class BuildSpec(TraceModel):
    language: str
    target_hardware: Annotated[List[NonEmptyStr], Field(min_length=1)]
    entry_point: NonEmptyStr
    dependencies: List[NonEmptyStr] = Field(default_factory=list)
    destination_passing_style: bool = True
    binding: Optional[Literal["tvm-ffi", "torch"]] = None

    @field_validator("language")
    @classmethod
    def _language(cls, v: str, info: ValidationInfo) -> str:
        allowed = LANGUAGES if dialect_of(info) == "fib" else LANGUAGES + FLASHINFER_EXTRA_LANGUAGES
        if v not in allowed:
            raise ValueError(f"unknown language {v!r} (expected one of: {', '.join(allowed)})")
        return v

    @field_validator("entry_point")
    @classmethod
    def _entry(cls, v: str) -> str:
        if v.count("::") != 1 or v.startswith("::") or v.endswith("::"):
            raise ValueError(f"entry_point must be 'file::function', got {v!r}")
        return v

    @model_validator(mode="wrap")
    @classmethod
    def _dialect_default(cls, data: Any, handler, info: ValidationInfo):
        obj = handler(data)
        if (dialect_of(info) == "flashinfer" and isinstance(data, dict)
                and "destination_passing_style" not in data):
            obj.destination_passing_style = False
            obj.__pydantic_fields_set__.discard("destination_passing_style")  # still unset: lossless
        return obj

    @property
    def entry_file(self) -> str:
        return self.entry_point.split("::", 1)[0]

    @property
    def entry_function(self) -> str:
        return self.entry_point.split("::", 1)[1]


class Solution(TraceModel):
    name: NonEmptyStr
    definition: NonEmptyStr
    author: NonEmptyStr
    spec: BuildSpec
    sources: Annotated[List[SourceFile], Field(min_length=1)]
    description: Optional[str] = None

    @model_validator(mode="after")
    def _check_sources(self):
        seen = set()
        for i, s in enumerate(self.sources):
            norm = posixpath.normpath(s.path.replace("\\", "/"))
            if norm in seen:
                raise ValueError(f"sources[{i}]: duplicate path {s.path!r}")
            seen.add(norm)
        entry = posixpath.normpath(self.spec.entry_file)
        if entry not in seen:
            raise ValueError(f"spec.entry_point: file {self.spec.entry_file!r} is not among the sources")
        return self

    def to_dict(self, *, lossless: bool = False) -> Dict[str, Any]:
        out = super().to_dict(lossless=lossless)
        spec = out.get("spec", {})
        if not lossless and "destination_passing_style" not in spec:
            spec["destination_passing_style"] = self.spec.destination_passing_style
        return out

    def content_hash(self) -> str:
        """sha1 over what determines the built artefact (not the name), as flashinfer-bench does."""
        h = hashlib.sha1()
        for part in (self.definition, self.spec.language, self.spec.entry_point,
                     str(self.spec.binding), *self.spec.dependencies):
            h.update(part.encode())
            h.update(b"\0")
        for s in self.sources:
            h.update(s.path.encode())
            h.update(b"\0")
            h.update(s.content.encode())
            h.update(b"\0")
        return h.hexdigest()

    def with_unique_name(self) -> "Solution":
        return self.model_copy(update={"name": f"{self.name}_{self.content_hash()[:8]}"})
