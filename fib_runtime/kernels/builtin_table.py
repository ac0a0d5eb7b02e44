"""Built-in solutions: our precompiled kernels, registered for FlashInfer Trace definitions.

Each ``BuiltinKernel`` names a definition prefix (``top_k_sampling_from_probs_v`` matches
``top_k_sampling_from_probs_v128256`` and every other vocabulary size), a callable (dotted path)
that takes the Definition's inputs in the Definition's order and RETURNS its outputs
(destination_passing_style = False), and ``supports(inputs) -> bool`` telling the dispatcher
whether this call can run here (CUDA tensors of a supported dtype, kernels built and loadable).
The dispatcher turns each entry into a ``Solution`` (language python, author fib-runtime).

Importing this module loads nothing; ``supports`` loads the kernel family on first use.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence


@dataclass(frozen=True)
class BuiltinKernel:
    definition_prefix: str
    callable_path: str  # "package.module:function"
    op_type: str
    description: str
    supports: Callable[[Any], bool] = field(default=lambda inputs: True, compare=False)
    family: str = ""

    def matches(self, definition_name: str) -> bool:
        return definition_name.startswith(self.definition_prefix)

    def load(self) -> Callable:
        mod, _, fn = self.callable_path.partition(":")
        return getattr(importlib.import_module(mod), fn)


def _first(inputs: Any):
    if isinstance(inputs, Mapping):
        return next(iter(inputs.values()), None)
    if isinstance(inputs, Sequence) and inputs:
        return inputs[0]
    return None


def _family_ok(name: str) -> bool:
    from .loader import load_family

    return load_family(name) is not None


def _supports_sampling(dtypes: tuple[str, ...]) -> Callable[[Any], bool]:
    def check(inputs: Any) -> bool:
        try:
            x = _first(inputs)
            if x is None or not getattr(x, "is_cuda", False) or x.dim() not in (1, 2):
                return False
            if str(x.dtype).replace("torch.", "") not in dtypes:
                return False
            if x.shape[-1] > (1 << 19) or (x.dim() == 2 and x.shape[0] > 65535):
                return False
            return _family_ok("sampling")
        except Exception:  # noqa: BLE001 - a support probe never raises
            return False

    return check


_S = "fib_runtime.kernels.sampling"
_PROBS = _supports_sampling(("float32",))
_LOGITS = _supports_sampling(("float32", "bfloat16", "float16"))


def _e(prefix: str, fn: str, desc: str, supports=_PROBS) -> BuiltinKernel:
    return BuiltinKernel(prefix, f"{_S}:{fn}", "sampling", desc, supports, "sampling")


SAMPLING_BUILTINS: list[BuiltinKernel] = [
    _e("sampling_from_probs_v", "sampling_from_probs", "fib cluster sampler, inverse CDF in fixed point, (probs)"),
    _e("sampling_from_logits_v", "sampling_from_logits",
       "fib cluster sampler from logits, no softmax pass, (logits[, temperature])", _LOGITS),
    _e("top_k_sampling_from_probs_v", "top_k_sampling_from_probs", "fib cluster radix top-k sampler (probs, top_k)"),
    _e("top_p_sampling_from_probs_v", "top_p_sampling_from_probs",
       "fib cluster fixed-point mass radix top-p sampler (probs, top_p)"),
    _e("min_p_sampling_from_probs_v", "min_p_sampling_from_probs", "fib cluster min-p sampler (probs, min_p)"),
    _e("top_k_top_p_sampling_from_probs_v", "top_k_top_p_sampling_from_probs",
       "fib cluster top-k then renormalised top-p sampler (probs, top_k, top_p)"),
    _e("top_k_top_p_sampling_from_logits_v", "top_k_top_p_sampling_from_logits",
       "fib logits-native top-k then top-p sampler (logits, top_k, top_p[, temperature])", _LOGITS),
    _e("top_k_top_p_sampling_from_probs_joint_v", "top_k_top_p_sampling_from_probs_joint",
       "fib cluster top-k and top-p of the unrenormalised row (joint order, SGLang) (probs, top_k, top_p)"),
    _e("top_k_top_p_sampling_from_logits_joint_v", "top_k_top_p_sampling_from_logits_joint",
       "fib logits-native joint-order top-k and top-p sampler (logits, top_k, top_p)", _LOGITS),
    _e("top_k_sampling_from_logits_v", "top_k_sampling_from_logits", "fib logits-native top-k sampler", _LOGITS),
    _e("top_p_sampling_from_logits_v", "top_p_sampling_from_logits", "fib logits-native top-p sampler", _LOGITS),
    _e("min_p_sampling_from_logits_v", "min_p_sampling_from_logits", "fib logits-native min-p sampler", _LOGITS),
    _e("top_k_renorm_probs_v", "top_k_renorm_probs", "fib top-k renormalised probs (probs, top_k)"),
    _e("top_p_renorm_probs_v", "top_p_renorm_probs", "fib top-p renormalised probs (probs, top_p)"),
    _e("top_k_mask_logits_v", "top_k_mask_logits", "fib top-k masked logits, -inf outside (logits, top_k)", _LOGITS),
]

# Other kernel families append their entries here (cascade: CASCADE_BUILTINS).
def _cascade_supports(kind: str) -> Callable[[Any], bool]:
    def check(inputs: Any) -> bool:
        try:
            from . import cascade

            return (cascade._supports_run if kind == "run" else cascade._supports_merge)(inputs)
        except Exception:  # noqa: BLE001 - a support probe never raises
            return False

    return check


_C = "fib_runtime.kernels.cascade"
CASCADE_BUILTINS: list[BuiltinKernel] = [
    BuiltinKernel("merge_state_h", f"{_C}:builtin_merge_state", "cascade_merge",
                  "fib merge of two attention states (base-2 LSE)", _cascade_supports("merge"), "cascade"),
    BuiltinKernel("merge_state_in_place_h", f"{_C}:builtin_merge_state_in_place", "cascade_merge",
                  "fib in-place state merge (returns the merged state)", _cascade_supports("merge"), "cascade"),
    BuiltinKernel("merge_states_h", f"{_C}:builtin_merge_states", "cascade_merge",
                  "fib n-ary attention state merge", _cascade_supports("merge"), "cascade"),
    BuiltinKernel("multi_level_cascade_run_h", f"{_C}:builtin_cascade_run", "cascade_attention",
                  "fib multi-level shared-prefix paged attention (tensor-core shared level, fused merge)",
                  _cascade_supports("run"), "cascade"),
]

BUILTINS: list[BuiltinKernel] = SAMPLING_BUILTINS + CASCADE_BUILTINS


def builtins() -> list[BuiltinKernel]:
    return list(BUILTINS)


def find(definition_name: str) -> BuiltinKernel | None:
    """The entry whose prefix matches (longest prefix wins)."""
    best = None
    for b in BUILTINS:
        if b.matches(definition_name) and (best is None or len(b.definition_prefix) > len(best.definition_prefix)):
            best = b
    return best
