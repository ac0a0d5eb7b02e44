"""``fib metrics``: expose fib-runtime's Prometheus metrics for processes without an endpoint.

    fib metrics serve [--port 9464] [--host 127.0.0.1] [--dir PROMETHEUS_MULTIPROC_DIR]
    fib metrics show  [--dir PROMETHEUS_MULTIPROC_DIR]

Engine workers write their metrics to the mmap files of ``PROMETHEUS_MULTIPROC_DIR``
(prometheus_client's multiprocess mode; fib-runtime flushes into it every
``FIB_RELOAD_INTERVAL`` seconds and at exit). ``serve`` aggregates those files at every scrape
(``MultiProcessCollector``) and serves them over HTTP at ``/metrics``, bound to 127.0.0.1 unless
``--host`` says otherwise; ``show`` prints the same text once. Engines that already expose
``/metrics`` in multiprocess mode (vLLM, SGLang) show fib-runtime's metrics there without this.
"""

from __future__ import annotations

import os
import sys
import time

from ..errors import FibError


def register(subparsers) -> None:
    p = subparsers.add_parser("metrics", help="serve or print fib-runtime's Prometheus metrics",
                              description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="metrics_command", metavar="SUBCOMMAND")
    s = sub.add_parser("serve", help="serve the metrics of PROMETHEUS_MULTIPROC_DIR over HTTP")
    s.add_argument("--port", type=int, default=9464, help="TCP port (0: any free port; default 9464)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--dir", default=None, help="multiprocess folder (default $PROMETHEUS_MULTIPROC_DIR)")
    s.set_defaults(func=cmd_serve)
    sh = sub.add_parser("show", help="print the aggregated metrics once (Prometheus text format)")
    sh.add_argument("--dir", default=None, help="multiprocess folder (default $PROMETHEUS_MULTIPROC_DIR)")
    sh.set_defaults(func=cmd_show)
    p.set_defaults(func=lambda args: (p.print_help(), 1)[1])


def _registry(folder):
    folder = folder or os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not folder:
        raise FibError("no metrics folder: pass --dir or set PROMETHEUS_MULTIPROC_DIR (the folder the "
                       "engine processes write their metrics to)")
    if not os.path.isdir(folder):
        raise FibError(f"metrics folder does not exist: {folder}")
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    reg = CollectorRegistry()
    MultiProcessCollector(reg, path=folder)
    return reg, folder


def cmd_show(args) -> int:
    from prometheus_client import generate_latest

    reg, _ = _registry(args.dir)
    sys.stdout.write(generate_latest(reg).decode())
    return 0


def cmd_serve(args) -> int:
    from prometheus_client import start_http_server

    reg, folder = _registry(args.dir)
    got = start_http_server(args.port, addr=args.host, registry=reg)
    port = args.port
    server = got[0] if isinstance(got, tuple) else None
    if server is not None:
        port = server.server_port
    print(f"serving {folder} at http://{args.host}:{port}/metrics", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
