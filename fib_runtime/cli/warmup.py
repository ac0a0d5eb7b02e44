"""``fib warmup``: build and load solutions ahead of serving (fills ``FIB_CACHE_PATH``).

    fib warmup [--dataset PATH] [--hardware H] [--all] [--definition GLOB] [--strict] [--json]

By default builds what the dispatcher would build at enable time: every solution that can win
somewhere in the dispatch table (this hardware class, allow/deny lists applied) plus the built-in
solutions. ``--all`` builds every solution of the dataset. cuda/cpp solutions are compiled once
per content hash into the cache (under a file lock), so a later ``enable`` in every worker
process only loads the ``.so``. Runs the solutions' code (imports, compilers). Exit status 1
when a solution fails to build and ``--strict`` is given.
"""

from __future__ import annotations

import fnmatch
import time

from .main import add_json_flag, emit_json, table


def register(subparsers) -> None:
    p = subparsers.add_parser("warmup", help="build/load solutions ahead of serving (fills FIB_CACHE_PATH)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default=None, help="dataset root (default FIB_DATASET_PATH, else the embedded one)")
    p.add_argument("--hardware", default=None, help="hardware class (default FIB_HARDWARE or detected; '*' = any)")
    p.add_argument("--all", action="store_true", help="build every solution of the dataset, not only candidates")
    p.add_argument("--definition", default="*", help="only solutions of definitions matching this glob")
    p.add_argument("--strict", action="store_true", help="exit 1 when a solution fails to build")
    add_json_flag(p)
    p.set_defaults(func=cmd_warmup)


def cmd_warmup(args) -> int:
    from ..dispatch.runtime import Runtime
    from ..solutions import SolutionLoadError, load_solution

    t0 = time.perf_counter()
    rt = Runtime(args.dataset, hardware=args.hardware, warmup=True, reload_interval=0, strict=False)
    rows = []
    names = set(rt.loaded) | set(rt.load_errors)
    if args.all:
        names |= set(rt.solutions)
    for name in sorted(names):
        sol = rt.solutions.get(name)
        if sol is None or not fnmatch.fnmatchcase(sol.definition, args.definition):
            continue
        ld, err = rt.loaded.get(name), rt.load_errors.get(name)
        if ld is None and err is None:  # --all: not a candidate, build it now
            try:
                ld = load_solution(sol, rt.cache_dir)
            except SolutionLoadError as e:
                err = str(e)
        rows.append({"solution": name, "definition": sol.definition, "language": sol.spec.language,
                     "status": "ok" if ld is not None else "error",
                     "seconds": round(ld.seconds, 3) if ld is not None else None,
                     "artifact": ld.artifact if ld is not None else "", "error": err or ""})
    failed = [r for r in rows if r["status"] != "ok"]
    if args.json:
        emit_json({"dataset": str(rt.dataset_path), "hardware": rt.hardware, "cache": str(rt.cache_dir),
                   "solutions": rows, "failed": len(failed), "seconds": round(time.perf_counter() - t0, 3)})
    else:
        print(f"dataset {rt.dataset_path}  hardware {rt.hardware}  cache {rt.cache_dir}")
        if rows:
            print(table([(r["solution"], r["definition"], r["language"], r["status"],
                          "" if r["seconds"] is None else r["seconds"]) for r in rows],
                        ["solution", "definition", "language", "status", "seconds"]))
        else:
            print("nothing to build: no solution can win in this table (see `fib explain`)")
        for r in failed:
            print(f"  {r['solution']}: {r['error']}")
        print(f"{len(rows) - len(failed)} ok, {len(failed)} failed in {time.perf_counter() - t0:.2f} s")
    return 1 if failed and args.strict else 0
