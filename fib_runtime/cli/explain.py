"""``fib explain``: which solution a call would get, and why.

    fib explain NAME --axes batch_size=37 [--axes M=5,N=3] [--dataset PATH] [--hardware H200]
                [--load] [--json]

Builds the dispatch table from the dataset's evaluation traces exactly as the runtime does
(``FIB_*`` allow/deny lists and ``FIB_HARDWARE`` apply) and prints the decision for the given
var-axis values: the rule that fired (exact, bucket, nearest, builtin, miss), the ranking at that
signature and every candidate skipped with its reason. By default no solution code runs: a
solution present in the dataset counts as loadable. ``--load`` imports/builds the candidates
first, so load failures show up as they would at run time. A trace winner whose solution file is
not in the dataset cannot run: the decision skips it, and the ``by traces`` line (``by_traces`` in
``--json``) shows what the trace data alone selects.
"""

from __future__ import annotations

from typing import Dict, List

from ..errors import FibError
from .main import add_json_flag, emit_json


def register(subparsers) -> None:
    p = subparsers.add_parser("explain", help="which solution a call with these var axes would get, and why",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="definition name, e.g. rmsnorm_h4096")
    p.add_argument("--axes", action="append", default=[], metavar="AXIS=VALUE[,AXIS=VALUE]",
                   help="var-axis values (repeatable)")
    p.add_argument("--dataset", default=None, help="dataset root (default FIB_DATASET_PATH, else the embedded one)")
    p.add_argument("--hardware", default=None, help="hardware class (default FIB_HARDWARE or detected; '*' = any)")
    p.add_argument("--load", action="store_true", help="build/load candidate solutions first (runs their code)")
    add_json_flag(p)
    p.set_defaults(func=cmd_explain)


def parse_axes(items: List[str]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for item in items:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            k, sep, v = part.partition("=")
            if not sep:
                raise FibError(f"--axes expects AXIS=VALUE, got {part!r}")
            try:
                out[k.strip()] = int(v)
            except ValueError:
                raise FibError(f"--axes {k}: {v!r} is not an integer") from None
    return out


def cmd_explain(args) -> int:
    from ..dispatch.runtime import Runtime
    from ..dispatch._explain import explain_text

    axes = parse_axes(args.axes)
    rt = Runtime(args.dataset, hardware=args.hardware, warmup=bool(args.load), reload_interval=0)
    rt.assume_loadable = not args.load
    try:
        text = explain_text(rt, args.name, axes)
    except ValueError as e:
        raise FibError(str(e)) from None
    if args.json:
        defn = rt.definitions.get(args.name)
        sel = by = None
        if defn is not None and all(a in axes for a in defn.var_axes):
            sig = tuple(axes[a] for a in defn.var_axes)
            sel = rt.select(args.name, sig)
            tab = rt.table.get(args.name)
            if tab is not None:
                b = tab.select(sig, lambda n: None, rt.max_distance)
                by = {"solution": b.solution, "rule": b.rule, "detail": b.detail}
        emit_json({"definition": args.name, "axes": axes, "hardware": rt.hardware,
                   "solution": sel.solution if sel else None, "rule": sel.rule if sel else "miss",
                   "detail": sel.detail if sel else "unknown definition",
                   "skipped": [list(s) for s in sel.skipped] if sel else [], "by_traces": by, "text": text})
    else:
        print(text)
    return 0
