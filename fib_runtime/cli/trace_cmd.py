"""``fib trace summary``: what the tracer recorded in a dataset, and what is still unevaluated.

    fib trace summary PATH [--definition GLOB] [--show N] [--json]

Per definition that has workloads: how many, how many distinct signatures (tuples of var-axis
values), a small terminal histogram of each var axis (one row per value when there are few,
else the dispatcher's power-of-two buckets ``4-7``), and the signatures with no evaluated
solution yet -- no ``PASSED`` trace of any solution for a workload with the same var-axis
values. Those are the shapes ``fib bench`` should run next. Reading the dataset runs none of its code.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from typing import Any, Dict, List, Tuple

from ..dispatch.table import bucket_range
from ..errors import DatasetError
from ..schema import EvaluationStatus
from ..store import Dataset
from .main import add_json_flag, emit_json

BAR = 30


def register(subparsers) -> None:
    p = subparsers.add_parser("trace", help="look at recorded workloads (fib trace summary PATH)",
                              description="Inspect workloads recorded by the tracer.")
    sub = p.add_subparsers(dest="trace_command", metavar="SUBCOMMAND")
    s = sub.add_parser("summary", help="per definition: #workloads, var-axis histograms, unevaluated signatures",
                       description="Summarise the workloads of a dataset.")
    s.add_argument("path", help="dataset root")
    s.add_argument("--definition", default="*", help="only definitions matching this glob")
    s.add_argument("--show", type=int, default=10, help="unevaluated signatures listed per definition")
    add_json_flag(s)
    s.set_defaults(func=cmd_summary)
    p.set_defaults(func=lambda args: (p.print_help(), 1)[1])


def summarize(ds: Dataset, pattern: str = "*") -> List[Dict[str, Any]]:
    """One dict per definition with workloads (the ``--json`` output)."""
    out = []
    for name in sorted(ds.definitions):
        if not fnmatch.fnmatchcase(name, pattern):
            continue
        wls = ds.workloads_for(name)
        if not wls:
            continue
        d = ds.definitions[name]
        axes = d.var_axes
        sigs = Counter(tuple(t.workload.axes.get(a) for a in axes) for t in wls)
        passed = {tuple(t.workload.axes.get(a) for a in axes) for t in ds.traces_for(name)
                  if t.evaluation is not None and t.evaluation.status == EvaluationStatus.PASSED}
        missing = [s for s in sigs if s not in passed]
        out.append({
            "definition": name,
            "op_type": d.op_type,
            "workloads": len(wls),
            "signatures": len(sigs),
            "axes": {a: dict(sorted(Counter(t.workload.axes.get(a) for t in wls).items(),
                                    key=lambda kv: (kv[0] is None, kv[0] or 0)))
                     for a in axes},
            "evaluated_signatures": len(sigs) - len(missing),
            "unevaluated": [dict(zip(axes, s)) for s in sorted(missing, key=_sort_key)],
        })
    return out


def _sort_key(sig: Tuple) -> Tuple:
    return tuple(-1 if v is None else v for v in sig)


def histogram(values: Dict[int, int], max_rows: int = 8) -> List[str]:
    """Rows ``label  count  bar`` for a ``{value: count}`` distribution."""
    if not values:
        return []
    if len(values) <= max_rows:
        rows = [(str(v), n) for v, n in values.items()]
    else:  # the dispatcher's power-of-two buckets (bit_length): 1, 2-3, 4-7, ...
        buckets: Counter = Counter()
        for v, n in values.items():
            buckets[int(v or 0).bit_length()] += n
        rows = []
        for b in sorted(buckets):
            lo, hi = bucket_range(b)
            rows.append((str(lo) if lo == hi else f"{lo}-{hi}", buckets[b]))
    top = max(n for _, n in rows)
    lw = max(len(label) for label, _ in rows)
    cw = max(len(str(n)) for _, n in rows)
    return [f"{label.rjust(lw)}  {str(n).rjust(cw)}  " + "█" * max(1, round(BAR * n / top))
            for label, n in rows]


def render(summary: List[Dict[str, Any]], show: int) -> str:
    if not summary:
        return "no workloads"
    lines = []
    for s in summary:
        lines.append(f"{s['definition']}  ({s['op_type']}): {s['workloads']} workloads, "
                     f"{s['signatures']} signatures, {s['evaluated_signatures']} with a PASSED trace")
        for ax, dist in s["axes"].items():
            lines.append(f"  {ax}:")
            lines += ["    " + r for r in histogram(dist)]
        un = s["unevaluated"]
        if un:
            lines.append(f"  no evaluated solution yet ({len(un)}):")
            for sig in un[:show]:
                lines.append("    " + ", ".join(f"{k}={v}" for k, v in sig.items()))
            if len(un) > show:
                lines.append(f"    ... {len(un) - show} more")
        lines.append("")
    return "\n".join(lines).rstrip()


def cmd_summary(args) -> int:
    ds = Dataset.open(args.path, check_blobs=False)
    if not ds.definitions and not any(True for _ in ds.all_workloads()):
        raise DatasetError(f"no definitions under {ds.root}")
    summary = summarize(ds, args.definition)
    if args.json:
        emit_json({"path": str(ds.root), "definitions": summary,
                   "problems": [str(p) for p in ds.errors]})
    else:
        print(render(summary, args.show))
        if ds.errors:
            print(f"\n({len(ds.errors)} problem(s) in the dataset: run `fib validate {args.path}`)")
    return 0
