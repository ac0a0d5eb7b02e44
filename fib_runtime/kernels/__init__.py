"""Precompiled CUDA kernels of fib-runtime.

- ``loader``: ``load_family(name)`` / ``availability()`` for the AOT-built ``_bin/libfib_<family>.so``
  (apache-tvm-ffi modules; never raise).
- ``sampling``: top-k / top-p / min-p / top-k+top-p samplers and renorm/mask helpers.
- ``builtin_table``: the built-in solutions the dispatcher registers.

Importing this package is cheap: no library is loaded until first use.
"""
from .loader import availability, load_family

__all__ = ["availability", "load_family"]
