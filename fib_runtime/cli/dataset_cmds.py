"""``fib validate``, ``fib list`` and ``fib show``: look at a FlashInfer Trace dataset.

    fib validate [PATH] [--skip-blobs] [--dialect fib|flashinfer] [--json]
    fib list [PATH] [--dialect ...] [--json]
    fib show NAME [--dataset PATH] [--reference] [--json]

``validate`` takes a dataset root, a FlashInfer dump folder, or one file (a definition or
solution ``.json``, or a ``.jsonl`` of traces, checked on its own). It prints every problem as
``file[:line] [field]: message`` (line numbers for JSONL files, dotted field paths inside the
object), then a summary; it exits 1 when there is any error (warnings alone exit 0). ``--skip-blobs`` checks everything except whether the
safetensors blobs are present (the public dataset keeps them in Git LFS, usually absent from a
checkout); blob paths that escape the root are still errors. ``--dialect flashinfer`` reads
FlashInfer 0.7 ``flashinfer.trace`` dumps, whose folder is flat (``<dir>/<name>.json``).

``list`` and ``show`` default to ``$FIB_DATASET_PATH``, else the small dataset shipped inside
the package (:func:`fib_runtime.default_dataset.default_dataset_path`). ``show`` accepts a
definition name, a solution name or a workload uuid.

Reading a dataset runs none of its code (references and solutions are only parsed).
"""

from __future__ import annotations

import difflib
import json
import sys
from collections import Counter
from typing import Any, Dict, List

from ..default_dataset import resolve_dataset_path
from ..errors import FibError
from ..schema import DIALECTS, AxisConst
from ..store import Dataset
from .main import add_json_flag, emit_json, table


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "validate", help="check a dataset: every problem with file, line and field",
        description="Check every definition, solution, workload and trace file of a dataset.")
    p.add_argument("path", nargs="?", default=None,
                   help="dataset root or FlashInfer dump folder (default: $FIB_DATASET_PATH, "
                        "else the embedded default)")
    p.add_argument("--skip-blobs", action="store_true",
                   help="check everything except the presence of safetensors blob files")
    _dialect_flag(p)
    add_json_flag(p)
    p.set_defaults(func=cmd_validate)

    p = subparsers.add_parser(
        "list", help="definitions with op_type and #workloads, #solutions, #traces",
        description="List the definitions of a dataset.")
    p.add_argument("path", nargs="?", default=None,
                   help="dataset root (default: $FIB_DATASET_PATH, else the embedded default)")
    _dialect_flag(p)
    add_json_flag(p)
    p.set_defaults(func=cmd_list)

    p = subparsers.add_parser(
        "show", help="one definition (or solution / workload uuid) in detail",
        description="Show a definition, a solution or a workload.")
    p.add_argument("name", help="definition name, solution name or workload uuid")
    p.add_argument("--dataset", default=None,
                   help="dataset root (default: $FIB_DATASET_PATH, else the embedded default)")
    p.add_argument("--reference", action="store_true", help="also print the reference source")
    _dialect_flag(p)
    add_json_flag(p)
    p.set_defaults(func=cmd_show)


def _dialect_flag(p) -> None:
    p.add_argument("--dialect", choices=DIALECTS, default="fib",
                   help="fib: flashinfer-bench 0.1.2 (default); flashinfer: FlashInfer 0.7 trace dumps")


def _open(path, dialect: str, check_blobs: bool) -> Dataset:
    return Dataset.open(path, dialect=dialect, check_blobs=check_blobs)


def _counts(ds: Dataset) -> Dict[str, int]:
    return {
        "definitions": len(ds.definitions),
        "solutions": len(ds.solutions),
        "workloads": sum(1 for _ in ds.all_workloads()),
        "traces": sum(1 for _ in ds.all_traces()),
    }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# ---- validate ---------------------------------------------------------------------------------
def cmd_validate(args) -> int:
    path = resolve_dataset_path(args.path)
    if path.is_file():
        return _validate_file(path, args)
    ds = _open(path, args.dialect, check_blobs=not args.skip_blobs)
    counts = _counts(ds)
    errors = [p for p in ds.problems if p.severity == "error"]
    warnings = [p for p in ds.problems if p.severity != "error"]
    empty = not any(counts.values()) and not ds.problems
    not_fib = _not_loadable_by_fib(ds) if ds.dialect != "fib" else []
    if args.json:
        emit_json({
            "root": str(ds.root), "dialect": ds.dialect, "layout": ds.layout,
            "blobs_checked": not args.skip_blobs, "counts": counts,
            "errors": len(errors), "warnings": len(warnings), "ok": not errors and not empty,
            "not_loadable_by_flashinfer_bench": not_fib,
            "problems": [
                {"severity": p.severity, "file": p.file, "line": p.line, "field": p.field,
                 "message": p.message} for p in ds.problems],
        })
    else:
        for p in ds.problems:
            print(f"{p.severity}: {p}")
        c = counts
        print(f"{ds.root}: {_plural(c['definitions'], 'definition')}, {_plural(c['solutions'], 'solution')}, "
              f"{_plural(c['workloads'], 'workload')}, {_plural(c['traces'], 'trace')} "
              f"(dialect {ds.dialect}{', blobs not checked' if args.skip_blobs else ''})")
        by_kind = Counter(_kind(p.message) for p in errors)
        detail = f" ({', '.join(f'{n} {k}' for k, n in by_kind.most_common())})" if errors else ""
        verdict = "FAILED" if errors or empty else "OK"
        print(f"{verdict}: {_plural(len(errors), 'error')}{detail}, {_plural(len(warnings), 'warning')}")
        if not_fib:
            print(f"note: {len(not_fib)} of {len(ds.definitions)} definitions follow FlashInfer's rules but "
                  f"not flashinfer-bench's (check with: fib validate {ds.root})")
    if empty:
        print(f"fib: error: no dataset files found under {ds.root} (expected definitions/, "
              f"workloads/, ... or a flat folder of definition .json files)", file=sys.stderr)
        return 1
    return 1 if errors else 0


def _validate_file(path, args) -> int:
    """One file on its own: a definition or solution (.json) or a JSONL of traces.

    Only the file's own rules are checked; those that need the rest of a dataset (workload axes
    against their definition, blobs, duplicate names) are not.
    """
    from pydantic import ValidationError

    from ..errors import Problem
    from ..fileio import read_lines
    from ..schema import Definition, Solution, Trace, parse
    from ..schema._base import pydantic_problems

    problems: List[Problem] = []
    counts: Counter = Counter()
    name = str(path)

    def check(model, raw, line=None):
        try:
            parse(model, raw, args.dialect)
            counts[model.__name__.lower() + "s"] += 1
        except ValidationError as e:
            problems.extend(pydantic_problems(e, name, line))

    try:
        if path.suffix == ".jsonl":
            for lineno, text in read_lines(path):
                try:
                    raw = json.loads(text)
                except json.JSONDecodeError as e:
                    problems.append(Problem(name, f"bad JSON: {e.msg} at column {e.colno}", lineno))
                    continue
                check(Trace, raw, lineno)
        else:
            text = path.read_text(encoding="utf-8")
            try:
                raw = json.loads(text)
            except json.JSONDecodeError as e:
                problems.append(Problem(name, f"bad JSON: {e.msg} at line {e.lineno} column {e.colno}", e.lineno))
            else:
                check(Solution if isinstance(raw, dict) and "spec" in raw else Definition, raw)
    except (OSError, UnicodeDecodeError) as e:
        raise FibError(f"cannot read {path}: {e}") from None
    if args.json:
        emit_json({"file": name, "dialect": args.dialect, "counts": dict(counts), "errors": len(problems),
                   "ok": not problems, "problems": [
                       {"severity": p.severity, "file": p.file, "line": p.line, "field": p.field,
                        "message": p.message} for p in problems]})
    else:
        for p in problems:
            print(f"error: {p}")
        what = ", ".join(_plural(n, k[:-1]) for k, n in sorted(counts.items())) or "nothing valid"
        print(f"{name}: {what} (dialect {args.dialect}; checked on its own, without its dataset)")
        print(f"{'FAILED' if problems else 'OK'}: {_plural(len(problems), 'error')}")
    return 1 if problems else 0


def _not_loadable_by_fib(ds: Dataset) -> List[str]:
    """Names of definitions that parse in ``ds.dialect`` but that flashinfer-bench would reject."""
    from pydantic import ValidationError

    from ..schema import Definition, parse

    out = []
    for name, d in ds.definitions.items():
        try:
            parse(Definition, d.to_dict(lossless=True), "fib")
        except ValidationError:
            out.append(name)
    return out


def _kind(message: str) -> str:
    """A short name for a problem, for the summary line (``missing blob``, ``bad JSON``...)."""
    for key, label in _KINDS:
        if key in message:
            return label
    return "other"


_KINDS = (
    ("missing blob", "missing blob"), ("Git LFS pointer", "LFS pointer"),
    ("escapes the dataset root", "blob escape"), ("bad JSON", "bad JSON"),
    ("unknown dtype", "unknown dtype"), ("undefined axis", "undefined axis"),
    ("never bound", "unbound var axis"), ("is not bound", "unbound var axis"),
    ("no 'value'", "const axis without value"), ("duplicate", "duplicate"),
    ("required field", "missing field"), ("unknown definition", "unknown definition"),
    ("function 'run'", "reference without run"), ("names overlap", "input/output overlap"),
    ("unknown language", "unknown language"), ("source path", "unsafe source path"),
    ("content is empty", "empty source"), ("requires", "evaluation status rule"),
    ("must not have", "evaluation status rule"), ("must have neither", "evaluation status rule"),
)


# ---- list -------------------------------------------------------------------------------------
def cmd_list(args) -> int:
    ds = _open(resolve_dataset_path(args.path), args.dialect, check_blobs=False)
    rows = []
    for name in sorted(ds.definitions, key=lambda n: (ds.definitions[n].op_type, n)):
        d = ds.definitions[name]
        rows.append({"name": name, "op_type": d.op_type,
                     "workloads": len(ds.workloads_for(name)),
                     "solutions": len(ds.solutions_for(name)),
                     "traces": len(ds.traces_for(name))})
    if args.json:
        emit_json({"root": str(ds.root), "definitions": rows, "errors": len(ds.errors)})
    else:
        print(table([[r["name"], r["op_type"], r["workloads"], r["solutions"], r["traces"]] for r in rows],
                    ["DEFINITION", "OP_TYPE", "WORKLOADS", "SOLUTIONS", "TRACES"]))
        c = _counts(ds)
        print(f"\n{ds.root}: {_plural(c['definitions'], 'definition')}, {_plural(c['solutions'], 'solution')}, "
              f"{_plural(c['workloads'], 'workload')}, {_plural(c['traces'], 'trace')}")
    if ds.errors:
        print(f"fib: warning: {_plural(len(ds.errors), 'problem')} in {ds.root}; objects with problems "
              f"are not listed (run: fib validate {ds.root})", file=sys.stderr)
    return 0


# ---- show -------------------------------------------------------------------------------------
def cmd_show(args) -> int:
    ds = _open(resolve_dataset_path(args.dataset), args.dialect, check_blobs=False)
    name = args.name
    if name in ds.definitions:
        return _show_definition(ds, name, args)
    if name in ds.solutions:
        return _show_solution(ds, name, args)
    w = ds.workload(name)
    if w is not None:
        return _show_workload(ds, w, args)
    names = sorted(ds.definitions) + sorted(ds.solutions)
    close = [n for n in names if name in n][:5] or difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean: {', '.join(close)}?" if close else " (see: fib list)"
    raise FibError(f"no definition, solution or workload uuid {name!r} in {ds.root}{hint}")


def _shape(spec) -> str:
    if spec.shape is None:
        return "scalar"
    return "[" + ", ".join(spec.shape) + "]"


def _show_definition(ds: Dataset, name: str, args) -> int:
    d = ds.definitions[name]
    workloads = ds.workloads_for(name)
    solutions = ds.solutions_for(name)
    traces = ds.traces_for(name)
    statuses = Counter(t.evaluation.status.value for t in traces if t.evaluation is not None)
    if args.json:
        emit_json({"kind": "definition", "file": str(ds.definition_path(d)), "definition": d.to_dict(),
                   "workloads": len(workloads), "solutions": [s.name for s in solutions],
                   "traces": len(traces), "trace_status": dict(statuses)})
        return 0
    out: List[str] = [f"{d.name}  (op_type {d.op_type})", f"file: {ds.definition_path(d)}"]
    if d.description:
        out.append(f"description: {d.description}")
    if d.tags:
        out.append(f"tags: {', '.join(d.tags)}")
    out.append("")
    out.append(table([[ax, a.type, a.value if isinstance(a, AxisConst) else "", a.description or ""]
                      for ax, a in d.axes.items()], ["AXIS", "TYPE", "VALUE", "DESCRIPTION"]))
    out.append("")
    rows = [["in", n, _shape(s), s.dtype, _extra_flags(s)] for n, s in d.inputs.items()]
    rows += [["out", n, _shape(s), s.dtype, _extra_flags(s)] for n, s in d.outputs.items()]
    out.append(table(rows, ["", "TENSOR", "SHAPE", "DTYPE", "NOTES"]))
    if d.constraints:
        out.append("\nconstraints:")
        out += [f"  {c}" for c in d.constraints]
    out.append("")
    out.append(f"workloads: {len(workloads)}" + _axis_ranges(d, workloads))
    out.append(f"solutions: {len(solutions)}" + (f" ({', '.join(s.name for s in solutions)})" if solutions else ""))
    out.append(f"traces: {len(traces)}" + (f" ({', '.join(f'{k} {v}' for k, v in statuses.most_common())})"
                                           if statuses else ""))
    if args.reference:
        out += ["", f"reference (entry {d.reference_entry!r}):", d.reference.rstrip()]
    print("\n".join(out))
    return 0


def _extra_flags(spec) -> str:
    extra = spec.model_extra or {}
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in extra.items()) if extra else ""


def _axis_ranges(d, workloads) -> str:
    if not workloads:
        return ""
    parts = []
    for ax in d.var_axes:
        vals = [w.workload.axes[ax] for w in workloads if ax in w.workload.axes]
        if vals:
            lo, hi = min(vals), max(vals)
            parts.append(f"{ax}={lo}" if lo == hi else f"{ax}={lo}..{hi}")
    return f" ({', '.join(parts)})" if parts else ""


def _show_solution(ds: Dataset, name: str, args) -> int:
    s = ds.solutions[name]
    traces = [t for t in ds.traces_for(s.definition) if t.solution == name]
    statuses = Counter(t.evaluation.status.value for t in traces if t.evaluation is not None)
    if args.json:
        emit_json({"kind": "solution", "file": str(ds.solution_path(s)), "solution": s.to_dict(),
                   "traces": len(traces), "trace_status": dict(statuses)})
        return 0
    sp = s.spec
    out = [f"{s.name}  (solution of {s.definition}, author {s.author})", f"file: {ds.solution_path(s)}"]
    if s.description:
        out.append(f"description: {s.description}")
    out += [f"language: {sp.language}   entry_point: {sp.entry_point}   "
            f"destination_passing_style: {sp.destination_passing_style}   binding: {sp.binding}",
            f"target_hardware: {', '.join(sp.target_hardware)}",
            f"dependencies: {', '.join(sp.dependencies) or '-'}", ""]
    out.append(table([[f.path, len(f.content.splitlines())] for f in s.sources], ["SOURCE", "LINES"]))
    out.append(f"\ntraces: {len(traces)}" + (f" ({', '.join(f'{k} {v}' for k, v in statuses.most_common())})"
                                             if statuses else ""))
    print("\n".join(out))
    return 0


def _show_workload(ds: Dataset, t, args) -> int:
    if args.json:
        emit_json({"kind": "workload", "trace": t.to_dict()})
        return 0
    w = t.workload
    out = [f"workload {w.uuid} of {t.definition}",
           "axes: " + (", ".join(f"{k}={v}" for k, v in w.axes.items()) or "-"), ""]
    rows = []
    for n, src in w.inputs.items():
        info: Any = ""
        if src.type == "scalar":
            info = src.value
        elif src.type == "safetensors":
            problem = ds.blob_problem(src.path)
            info = f"{src.path} [{src.tensor_key}]" + (f"  ({problem})" if problem else "")
        rows.append([n, src.type, info])
    out.append(table(rows, ["INPUT", "TYPE", "SOURCE"]))
    print("\n".join(out))
    return 0
