"""The ``fib`` command line. Entry point and conventions: :mod:`fib_runtime.cli.main`.

Each module of this package that defines ``register(subparsers)`` contributes commands
(``dataset_cmds``: validate / list / show; the dispatcher, tracer and bench modules add theirs).
"""
