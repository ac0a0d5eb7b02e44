"""Generators of FlashInfer Trace Definitions for the ops fib-runtime intercepts.

The adapters, the tracer and the dispatcher share one key per call: the Definition name, built
from the public naming convention (``{op}_{variant}_{const tokens}``). This package builds the
Definition itself (a dict in the public format, with a float32 PyTorch ``reference``) for any
const-axis values, so a workload recorded at an unusual vocab or hidden size has a definition to
validate and benchmark against.

    from fib_runtime.definitions import generate
    generate("top_k_top_p_sampling_from_probs_v151936")   # dict, or None if unknown
    generate("fused_add_rmsnorm_h2048")

Modules: :mod:`.sampling` (``*_v{V}``), :mod:`.norm` (``*_h{H}``), and ``.cascade`` (written by
the cascade kernels' owner; used when present).
"""

from __future__ import annotations

import re
from typing import Optional

from . import norm, sampling

__all__ = ["generate", "sampling", "norm"]

_NORM = re.compile(r"^(rmsnorm|fused_add_rmsnorm)_h(\d+)$")


def generate(definition_name: str, **kw) -> Optional[dict]:
    """The Definition dict for ``definition_name``, or None when no generator knows the name."""
    parsed = sampling.parse_name(definition_name)
    if parsed is not None:
        return sampling.definition(*parsed)
    m = _NORM.match(definition_name)
    if m:
        return norm.definition(m.group(1), int(m.group(2)), **kw)
    try:
        from . import cascade  # type: ignore  # owned by the cascade kernels' author
    except Exception:
        return None
    gen = getattr(cascade, "generate", None)
    if callable(gen):
        try:
            return gen(definition_name, **kw)
        except Exception:
            return None
    return None
