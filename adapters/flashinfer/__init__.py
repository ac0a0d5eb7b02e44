"""FlashInfer adapter: route FlashInfer's sampling, norm, cascade and attention-wrapper calls
through fib-runtime's dispatcher and tracer.

    from fib_runtime.adapters import flashinfer as fi_adapter

    report = fi_adapter.instrument()        # default dispatcher/recorder from fib_runtime
    import flashinfer
    flashinfer.sampling.top_k_top_p_sampling_from_probs(probs, 50, 0.9)   # dispatched
    fi_adapter.uninstrument()

Each call maps to a FlashInfer Trace Definition named after the public convention
(``top_k_top_p_sampling_from_probs_v128256``, ``fused_add_rmsnorm_h4096``,
``merge_state_h32_d128``, ``gqa_paged_decode_h32_kv8_d128_ps1``,
``multi_level_cascade_run_h32_kv8_d128_ps16``): the tracer records it under that name and the
dispatcher looks its solutions up by it. What is patched is listed in :mod:`.targets`; how each
call is bound (and when it is left to FlashInfer, e.g. a call with a ``generator``) in
:mod:`.ops`. Side effects: ``instrument()`` replaces module and class attributes (and
``from flashinfer... import f`` copies in ``flashinfer``/``vllm``/``sglang``/``sgl_kernel``
modules); FlashInfer modules not imported yet are patched by a post-import hook when they are.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from fib_runtime.adapters.base import Dependency, InstrumentReport, Instrumentor, Target

from . import ops
from .targets import TARGETS

__all__ = ["FlashInferInstrumentor", "instrument", "uninstrument", "TARGETS"]


class FlashInferInstrumentor(Instrumentor):
    name = "flashinfer"
    alias_scopes = ("flashinfer", "vllm", "sglang", "sgl_kernel")

    def dependencies(self) -> Sequence[Dependency]:
        return (Dependency("flashinfer", ("flashinfer-python", "flashinfer"), min="0.6", max="0.9"),)

    def targets(self) -> Sequence[Target]:
        return TARGETS

    def spec(self, op: str) -> Any:
        return ops.SPECS[op]


def instrument(dispatcher: Optional[Callable] = None, recorder: Optional[Callable] = None,
               **kw: Any) -> InstrumentReport:
    """Instrument FlashInfer (see :meth:`Instrumentor.instrument`). With neither hook given,
    fib_runtime's own dispatcher/recorder/registrar are used as the environment enables them."""
    if dispatcher is None and recorder is None:
        from fib_runtime.adapters import runtime_hooks

        dispatcher, recorder, registrar = runtime_hooks()
        kw.setdefault("registrar", registrar)
    return FlashInferInstrumentor().instrument(dispatcher, recorder, **kw)


def uninstrument() -> None:
    FlashInferInstrumentor().uninstrument()
