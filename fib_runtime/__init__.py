"""fib-runtime: day-0 kernels for LLM serving engines, on the FlashInfer Trace format."""

__version__ = "0.1.0"
