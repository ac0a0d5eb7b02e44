"""The ``fib`` command line: one parser, subcommands contributed by modules of this package.

Usage::

    fib validate PATH [--skip-blobs] [--dialect flashinfer] [--json]
    fib list PATH [--json]
    fib show NAME [--dataset PATH] [--json]
    python -m fib_runtime ...          # same as ``fib ...``

How subcommands are found
-------------------------
:func:`main` imports every module of the ``fib_runtime.cli`` package (``pkgutil``, sorted by
name). A module that exposes ``register(subparsers)`` adds its commands there; each command sets
its handler with ``parser.set_defaults(func=handler)``. The handler takes the parsed
``argparse.Namespace`` and returns the exit status (``None`` means 0). A module that fails to
import is reported on stderr (``fib: warning: ...``) and skipped: one broken subcommand never
takes the whole CLI down. To add a command group, drop a module here::

    # fib_runtime/cli/bench.py
    def register(subparsers):
        p = subparsers.add_parser("bench", help="benchmark solutions")
        p.add_argument("path")
        add_json_flag(p)                       # from fib_runtime.cli.main
        p.set_defaults(func=_run)

    def _run(args) -> int:
        ...
        return 0

Conventions every command follows
---------------------------------
- ``--json`` (use :func:`add_json_flag`) switches to machine output: one JSON document on stdout
  (:func:`emit_json`), nothing else on stdout.
- Human output is plain text readable in a terminal; tabular data goes through :func:`table`.
- Exit status: 0 success, 1 failure (a validation problem, a missing name, a user error); 2 is
  argparse's own usage error.
- User errors are one line on stderr, ``fib: error: <message>``, never a traceback: raise
  :class:`fib_runtime.errors.FibError` (or a subclass) and :func:`main` prints it. Anything
  else is a bug and keeps its traceback (set ``FIB_CLI_DEBUG=1`` to get tracebacks for
  ``FibError`` too).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys
from typing import Any, Iterable, List, Optional, Sequence

from ..errors import FibError

PROG = "fib"


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Add the common ``--json`` flag (machine output)."""
    parser.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")


def emit_json(obj: Any) -> None:
    """Write one JSON document to stdout (the ``--json`` output of a command)."""
    json.dump(obj, sys.stdout, indent=2, ensure_ascii=False, default=str)
    sys.stdout.write("\n")


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> str:
    """Format rows as a left-aligned text table (numbers right-aligned) with a header rule."""
    rows = [["" if c is None else str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    numeric = [all(_is_number(r[i]) for r in rows) and rows != [] for i in range(len(headers))]

    def fmt(cells):
        out = []
        for i, c in enumerate(cells):
            out.append(c.rjust(widths[i]) if numeric[i] else c.ljust(widths[i]))
        return "  ".join(out).rstrip()

    lines = [fmt(list(headers)), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def error(message: str) -> int:
    """Print ``fib: error: message`` (one line) on stderr; returns 1."""
    print(f"{PROG}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 1


def discover(subparsers) -> List[str]:
    """Import every ``fib_runtime.cli`` module and let those with ``register`` add commands."""
    from . import __path__ as cli_path, __name__ as cli_pkg

    loaded = []
    for info in sorted(pkgutil.iter_modules(cli_path), key=lambda m: m.name):
        if info.name in ("main", "__main__") or info.name.startswith("_"):
            continue
        try:
            mod = importlib.import_module(f"{cli_pkg}.{info.name}")
        except Exception as e:  # a broken subcommand module must not take the CLI down
            print(f"{PROG}: warning: cannot load subcommands from {cli_pkg}.{info.name}: "
                  f"{type(e).__name__}: {e}", file=sys.stderr)
            continue
        register = getattr(mod, "register", None)
        if callable(register):
            try:
                register(subparsers)
            except Exception as e:
                print(f"{PROG}: warning: {cli_pkg}.{info.name}.register failed: "
                      f"{type(e).__name__}: {e}", file=sys.stderr)
                continue
            loaded.append(info.name)
    return loaded


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="fib-runtime: datasets, dispatch, recording and benchmarks on the FlashInfer Trace format.",
    )
    parser.add_argument("--version", action="version", version=f"fib-runtime {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    discover(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``fib`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 1
    try:
        rc = func(args)
    except FibError as e:
        if os.environ.get("FIB_CLI_DEBUG"):
            raise
        return error(str(e))
    except KeyboardInterrupt:
        return error("interrupted")
    except BrokenPipeError:  # `fib list ... | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    return 0 if rc is None else int(rc)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
