"""fib-runtime: day-0 kernels for LLM serving engines, on the FlashInfer Trace format.

The dispatcher's public API is exported lazily, so ``import fib_runtime`` stays cheap (no torch,
no pydantic, no prometheus_client)::

    import fib_runtime

    @fib_runtime.apply(lambda A, B: f"gemm_n{B.shape[0]}_k{B.shape[1]}")
    def gemm_bf16(A, B):
        return torch.matmul(A, B)          # the fallback

    fib_runtime.enable("path/to/dataset")  # or FIB_ENABLE_APPLY=1
    fib_runtime.reload()                   # re-read the dataset now (also polled every 2 s)
    fib_runtime.stats()                    # in-process counters and state

(``fib_runtime.dispatch`` is the dispatcher package; its ``dispatch()`` is the adapters' entry.)
"""

__version__ = "0.1.0"

_LAZY = {
    "apply": "fib_runtime.dispatch",
    "enable": "fib_runtime.dispatch",
    "disable": "fib_runtime.dispatch",
    "reload": "fib_runtime.dispatch",
    "stats": "fib_runtime.dispatch",
    "explain": "fib_runtime.dispatch",
    "register_definition": "fib_runtime.dispatch",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):  # PEP 562
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'fib_runtime' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
