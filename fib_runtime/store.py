"""Dataset store: a FlashInfer Trace dataset root on disk, indexed and writable.

Layout (flashinfer-bench ``TraceSet``)::

    definitions/<op_type>/<name>.json
    solutions/<author>/<op_type>/<definition>/<solution>.json
    workloads/<op_type>/<definition>.jsonl          # workload-only traces
    traces/<author>/<op_type>/<definition>.jsonl    # evaluation traces
    blob/workloads/<op_type>/<definition>/<definition>_<uuid>.safetensors

A FlashInfer 0.7 dump folder (``FLASHINFER_TRACE_DUMP_DIR``: flat ``<dir>/<name>.json``, no
``definitions/`` folder) opens too; its definitions are read from the root (``ds.layout ==
"flat"``). Open it with ``dialect="flashinfer"``.

Usage::

    ds = Dataset.open("path/to/dataset")            # DatasetError if missing
    ds = Dataset.open("new/root", create=True)      # creates the layout
    ds.definitions["rmsnorm_h4096"].var_axes
    ds.workloads_for("rmsnorm_h4096"); ds.traces_for("rmsnorm_h4096")
    ds.add_trace(trace)                             # locked whole-line append

Reading is lenient: every problem (bad JSON, schema violation, duplicate name, workload for an
unknown definition, unbound var axis, blob escaping the root or missing) is collected in
``ds.problems`` with file, line and field, and the offending object is skipped. Pass
``strict=True`` to raise :class:`~fib_runtime.errors.DatasetError` instead. Loading a dataset
does not run its code; compiling a reference or loading a solution does, so only use datasets
you trust.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Union

from pydantic import ValidationError

from .errors import DatasetError, Problem
from .fileio import append_lines, atomic_write_text, read_lines
from .schema import Definition, SafetensorsInput, Solution, Trace, parse
from .schema._base import pydantic_problems

LAYOUT = ("definitions", "solutions", "workloads", "traces", "blob")
LFS_MAGIC = b"version https://git-lfs"


class Dataset:
    """An opened dataset root (see module docstring)."""

    def __init__(self, root: Union[str, os.PathLike], *, dialect: str = "fib",
                 strict: bool = False, check_blobs: bool = True):
        self.root = Path(root).resolve()
        self.dialect = dialect
        self.strict = strict
        self.check_blobs = check_blobs
        self.reload()

    # ---- opening ---------------------------------------------------------------------
    @classmethod
    def open(cls, root: Union[str, os.PathLike], *, create: bool = False, **kw) -> "Dataset":
        """Open ``root``. A missing root is an error unless ``create=True``."""
        p = Path(root).expanduser()
        if not p.exists():
            if not create:
                raise DatasetError(f"dataset root does not exist: {p} (pass create=True to make one)")
            for sub in LAYOUT:
                (p / sub).mkdir(parents=True, exist_ok=True)
        elif not p.is_dir():
            raise DatasetError(f"dataset root is not a folder: {p}")
        return cls(p, **kw)

    def reload(self) -> None:
        """(Re)read every file under the root."""
        self.problems: List[Problem] = []
        self.definitions: Dict[str, Definition] = {}
        self.solutions: Dict[str, Solution] = {}
        self._solutions_by_def: Dict[str, List[Solution]] = defaultdict(list)
        self._workloads: Dict[str, List[Trace]] = defaultdict(list)
        self._traces: Dict[str, List[Trace]] = defaultdict(list)
        self._files: Dict[str, Path] = {}
        self._raw: Dict[Path, tuple] = {}
        self._broken_definitions: Dict[str, Path] = {}  # name -> file, for definitions with errors
        self._load_definitions()
        self._load_solutions()
        self._load_jsonl("workloads", workload=True)
        self._load_jsonl("traces", workload=False)
        if self.strict and self.errors:
            raise DatasetError(f"{len(self.errors)} problem(s) in {self.root}", self.errors)

    @property
    def errors(self) -> List[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def _rel(self, p: Path) -> str:
        try:
            return str(p.relative_to(self.root))
        except ValueError:
            return str(p)

    def _problem(self, file: Path, message: str, line=None, field="", severity="error"):
        self.problems.append(Problem(self._rel(file), message, line, field, severity))

    def _read_json(self, path: Path):
        try:
            text = path.read_text(encoding="utf-8")
            return text, json.loads(text)
        except (OSError, UnicodeDecodeError) as e:
            self._problem(path, f"cannot read file: {e}")
        except json.JSONDecodeError as e:
            self._problem(path, f"bad JSON: {e.msg} at line {e.lineno} column {e.colno}", e.lineno)
        return None, None

    def _definition_files(self) -> List[Path]:
        """``definitions/**/*.json``; or, for a FlashInfer dump folder (flat ``<dir>/<name>.json``,
        no ``definitions/`` folder), the JSON files at the root. Sets ``self.layout``."""
        folder = self.root / "definitions"
        if not folder.is_dir():
            flat = sorted(p for p in self.root.glob("*.json") if p.is_file())
            if flat:
                self.layout = "flat"
                return flat
        self.layout = "canonical"
        return sorted(folder.rglob("*.json"))

    def _load_definitions(self) -> None:
        for path in self._definition_files():
            text, raw = self._read_json(path)
            if raw is None:
                self._broken_definitions.setdefault(path.stem, path)  # names follow the file
                continue
            try:
                d = parse(Definition, raw, self.dialect)
            except ValidationError as e:
                self.problems.extend(pydantic_problems(e, self._rel(path)))
                if isinstance(raw, dict) and isinstance(raw.get("name"), str):
                    self._broken_definitions[raw["name"]] = path
                continue
            if d.name in self.definitions:
                self._problem(path, f"duplicate definition name {d.name!r} (also in "
                                    f"{self._rel(self._files['def:' + d.name])})", field="name")
                continue
            self.definitions[d.name] = d
            self._files["def:" + d.name] = path
            self._raw[path] = (text, raw)

    def _load_solutions(self) -> None:
        for path in sorted((self.root / "solutions").rglob("*.json")):
            text, raw = self._read_json(path)
            if raw is None:
                continue
            try:
                s = parse(Solution, raw, self.dialect)
            except ValidationError as e:
                self.problems.extend(pydantic_problems(e, self._rel(path)))
                continue
            if s.name in self.solutions:
                self._problem(path, f"duplicate solution name {s.name!r}", field="name")
                continue
            if s.definition not in self.definitions:
                self._problem(path, f"solution for unknown definition {s.definition!r}",
                              field="definition", severity="warning")
            self.solutions[s.name] = s
            self._solutions_by_def[s.definition].append(s)
            self._files["sol:" + s.name] = path
            self._raw[path] = (text, raw)

    def _load_jsonl(self, folder: str, workload: bool) -> None:
        for path in sorted((self.root / folder).rglob("*.jsonl")):
            try:
                lines = list(read_lines(path))
            except (OSError, UnicodeDecodeError) as e:
                self._problem(path, f"cannot read file: {e}")
                continue
            skipped: Dict[str, int] = defaultdict(int)  # lines of a definition with errors
            for lineno, line in lines:
                try:
                    raw = json.loads(line)
                except json.JSONDecodeError as e:
                    self._problem(path, f"bad JSON: {e.msg} at column {e.colno}", lineno)
                    continue
                try:
                    t = parse(Trace, raw, self.dialect)
                except ValidationError as e:
                    self.problems.extend(pydantic_problems(e, self._rel(path), lineno))
                    continue
                if workload and not t.is_workload_trace:
                    self._problem(path, "a workload file holds an evaluation trace", lineno)
                    continue
                if not workload and t.is_workload_trace:
                    self._problem(path, "a trace file holds a workload-only line", lineno)
                    continue
                if t.definition in self._broken_definitions and t.definition not in self.definitions:
                    skipped[t.definition] += 1
                    continue
                if not self._check_workload(t, path, lineno):
                    continue
                (self._workloads if workload else self._traces)[t.definition].append(t)
            for name, n in skipped.items():
                self._problem(path, f"{n} line(s) not checked: definition {name!r} "
                                    f"({self._rel(self._broken_definitions[name])}) has errors",
                              severity="warning")

    def _check_workload(self, t: Trace, path: Path, lineno: int) -> bool:
        d = self.definitions.get(t.definition)
        if d is None:
            self._problem(path, f"unknown definition {t.definition!r}", lineno, "definition")
            return False
        ok = True
        for ax in d.var_axes:
            if ax not in t.workload.axes:
                self._problem(path, f"var axis {ax!r} of {d.name} is not bound", lineno, f"workload.axes.{ax}")
                ok = False
        for ax in t.workload.axes:
            if ax not in d.var_axes:
                self._problem(path, f"{ax!r} is not a var axis of {d.name}", lineno, f"workload.axes.{ax}")
                ok = False
        for name in d.inputs:
            if name not in t.workload.inputs and not getattr(d.inputs[name], "optional", False):
                self._problem(path, f"input {name!r} has no data source", lineno, f"workload.inputs.{name}")
                ok = False
        for name, spec in t.workload.inputs.items():
            if name not in d.inputs:
                self._problem(path, f"{name!r} is not an input of {d.name}", lineno, f"workload.inputs.{name}")
                ok = False
            elif isinstance(spec, SafetensorsInput):
                msg = self.blob_problem(spec.path)
                if msg is None:
                    continue
                field = f"workload.inputs.{name}.path"
                if "escapes" in msg:  # never usable: the workload is dropped
                    self._problem(path, msg, lineno, field)
                    ok = False
                elif self.check_blobs:  # missing / LFS pointer: reported, workload kept
                    self._problem(path, msg, lineno, field)
        return ok

    # ---- blobs -----------------------------------------------------------------------
    def resolve_blob(self, rel: str) -> Path:
        """Absolute path of a blob; refuses paths that leave the root (``..``, symlinks)."""
        p = (self.root / rel).resolve()
        if p != self.root and self.root not in p.parents:
            raise DatasetError(f"blob path escapes the dataset root: {rel!r}")
        return p

    def blob_problem(self, rel: str) -> Optional[str]:
        """None when the blob is usable, else why not (escapes / missing / LFS pointer)."""
        try:
            p = self.resolve_blob(rel)
        except DatasetError as e:
            return str(e)
        if not p.is_file():
            return f"missing blob file {rel!r}"
        with open(p, "rb") as f:
            if f.read(len(LFS_MAGIC)) == LFS_MAGIC:
                return f"blob {rel!r} is a Git LFS pointer (run: git lfs pull --include {rel!r})"
        return None

    # ---- queries ---------------------------------------------------------------------
    def solutions_for(self, definition: str) -> List[Solution]:
        return list(self._solutions_by_def.get(definition, ()))

    def workloads_for(self, definition: str) -> List[Trace]:
        return list(self._workloads.get(definition, ()))

    def traces_for(self, definition: str) -> List[Trace]:
        return list(self._traces.get(definition, ()))

    def all_workloads(self) -> Iterable[Trace]:
        for v in self._workloads.values():
            yield from v

    def all_traces(self) -> Iterable[Trace]:
        for v in self._traces.values():
            yield from v

    def workload(self, uuid: str) -> Optional[Trace]:
        for t in self.all_workloads():
            if t.workload.uuid == uuid:
                return t
        return None

    # ---- paths -----------------------------------------------------------------------
    def definition_path(self, d: Definition) -> Path:
        if "def:" + d.name in self._files:
            return self._files["def:" + d.name]
        if self.layout == "flat":
            return self.root / f"{d.name}.json"
        return self.root / "definitions" / d.op_type / f"{d.name}.json"

    def solution_path(self, s: Solution) -> Path:
        if "sol:" + s.name in self._files:
            return self._files["sol:" + s.name]
        op = self.definitions[s.definition].op_type if s.definition in self.definitions else "unknown"
        return self.root / "solutions" / s.author / op / s.definition / f"{s.name}.json"

    def workload_path(self, definition: str) -> Path:
        return self.root / "workloads" / self._op_type(definition) / f"{definition}.jsonl"

    def trace_path(self, definition: str, author: str) -> Path:
        return self.root / "traces" / author / self._op_type(definition) / f"{definition}.jsonl"

    def blob_path(self, definition: str, uuid: str) -> Path:
        return (self.root / "blob" / "workloads" / self._op_type(definition) / definition
                / f"{definition}_{uuid}.safetensors")

    def _op_type(self, definition: str) -> str:
        d = self.definitions.get(definition)
        if d is None:
            raise DatasetError(f"unknown definition {definition!r} in {self.root}")
        return d.op_type

    # ---- writing ---------------------------------------------------------------------
    def _write_json(self, path: Path, obj) -> Path:
        old = self._raw.get(path)
        if old is not None and old[1] == obj.to_dict(lossless=True):
            text, data = old  # unchanged: keep the file byte for byte
        else:
            data = obj.to_dict()
            text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
        atomic_write_text(path, text)
        self._raw[path] = (text, data)
        return path

    def add_definition(self, d: Definition, overwrite: bool = False) -> Path:
        if d.name in self.definitions and not overwrite and self.definitions[d.name] != d:
            raise DatasetError(f"definition {d.name!r} already exists with other content")
        path = self._write_json(self.definition_path(d), d)
        self.definitions[d.name] = d
        self._files["def:" + d.name] = path
        return path

    def add_solution(self, s: Solution, overwrite: bool = False) -> Path:
        old = self.solutions.get(s.name)
        if old is not None and not overwrite and old != s:
            raise DatasetError(f"solution {s.name!r} already exists with other content")
        path = self._write_json(self.solution_path(s), s)
        if old is not None:
            self._solutions_by_def[old.definition].remove(old)
        self.solutions[s.name] = s
        self._solutions_by_def[s.definition].append(s)
        self._files["sol:" + s.name] = path
        return path

    def add_workloads(self, traces: Iterable[Trace]) -> int:
        """Append workload-only traces to their definitions' JSONL files."""
        return self._append(traces, workload=True)

    def add_traces(self, traces: Iterable[Trace], author: Optional[str] = None) -> int:
        """Append evaluation traces to ``traces/<author>/<op_type>/<definition>.jsonl``."""
        return self._append(traces, workload=False, author=author)

    def add_trace(self, trace: Trace, author: Optional[str] = None) -> int:
        return self.add_traces([trace], author)

    def _append(self, traces: Iterable[Trace], workload: bool, author: Optional[str] = None) -> int:
        groups: Dict[Path, List[Trace]] = defaultdict(list)
        for t in traces:
            if workload != t.is_workload_trace:
                raise DatasetError("workload files take workload-only traces; trace files the others")
            if workload:
                path = self.workload_path(t.definition)
            else:
                a = author or (self.solutions[t.solution].author if t.solution in self.solutions else "unknown")
                path = self.trace_path(t.definition, a)
            groups[path].append(t)
        n = 0
        for path, ts in groups.items():
            append_lines(path, [t.to_json() for t in ts])
            for t in ts:
                (self._workloads if workload else self._traces)[t.definition].append(t)
                n += 1
        return n

    def __repr__(self) -> str:
        return (f"Dataset({str(self.root)!r}: {len(self.definitions)} definitions, "
                f"{len(self.solutions)} solutions, {sum(map(len, self._workloads.values()))} workloads, "
                f"{sum(map(len, self._traces.values()))} traces, {len(self.errors)} problems)")
