"""``fib report``: leaderboards, fast_p curves (PNG), a self-contained HTML page, the dispatch table.

    fib report DATASET [--out DIR] [--definitions NAME|GLOB ...] [--hardware H200] [--json]

Writes ``DIR/report.html`` (figures inlined), ``DIR/fast_p_<definition>.png``,
``DIR/leaderboard.md``, ``DIR/report.json`` and ``DIR/dispatch_table.json`` (default DIR:
``report``). See :mod:`fib_runtime.bench.report` for the rules.
"""

from __future__ import annotations

from .main import add_json_flag, emit_json, table


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="leaderboards, fast_p curves, HTML report and dispatch table",
                              description="Summarise a dataset's evaluation traces.")
    p.add_argument("dataset", help="dataset root")
    p.add_argument("--out", default="report", help="output folder (default: ./report)")
    p.add_argument("--definitions", nargs="+", metavar="NAME", help="definition names or globs")
    p.add_argument("--hardware", help="hardware class to report (default: the most frequent per definition)")
    add_json_flag(p)
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    from ..bench.report import build_report

    data = build_report(args.dataset, args.out, definitions=args.definitions, hardware=args.hardware)
    if args.json:
        emit_json(data)
        return 0
    rows = []
    for info in data["definitions"]:
        top = info["leaderboard"][0] if info["leaderboard"] else None
        rows.append([info["definition"], info["hardware"], info["workloads"], len(info["solutions"]),
                     info["yardstick"], top["solution"] if top else "-", top["wins"] if top else 0])
    print(table(rows, ["definition", "hardware", "workloads", "solutions", "vs", "most wins", "wins"]))
    print(f"report written to {args.out}/report.html (dispatch table: {args.out}/dispatch_table.json)")
    return 0
