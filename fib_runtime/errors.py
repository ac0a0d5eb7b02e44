"""Errors raised by fib-runtime, each naming the file, line and field it is about.

Every problem found while reading a dataset is a :class:`Problem`: a file, an optional line
(JSONL), a dotted field path and a one-line message. ``fib validate`` prints them; strict
loaders raise :class:`DatasetError` carrying them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset file."""

    file: str
    message: str
    line: Optional[int] = None
    field: str = ""
    severity: str = "error"  # "error" | "warning"

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        field = f" [{self.field}]" if self.field else ""
        return f"{where}{field}: {self.message}"


class FibError(Exception):
    """Base class of fib-runtime errors."""


class SchemaError(FibError, ValueError):
    """An object does not follow the FlashInfer Trace schema."""

    def __init__(self, problems: Iterable[Problem] | str):
        if isinstance(problems, str):
            problems = [Problem(file="<object>", message=problems)]
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


class DatasetError(FibError):
    """A dataset root or one of its files cannot be used."""

    def __init__(self, message: str, problems: Iterable[Problem] = ()):
        self.problems = list(problems)
        super().__init__(message)


class InputError(FibError, ValueError):
    """A workload's inputs cannot be turned into tensors (missing blob, random index tensor...)."""
