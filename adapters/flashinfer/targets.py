"""Target table of the FlashInfer adapter (data, not code): ``Target(module, attr, op)``.

Three bindings per public function: the defining submodule (``flashinfer.sampling.f``, what
vLLM's ``flashinfer_sample`` reaches by attribute access), the package-level re-export
(``flashinfer.f``, a separate binding), and every ``from flashinfer.x import f`` copy in the
engines' modules (found by the instrumentor's alias sweep over ``sys.modules``). Class-level
aliases (``begin_forward = plan``, ``run_return_lse = partialmethod(run)``, ``forward``) are
separate attributes and are listed one by one. Targets missing in the installed FlashInfer
(a trimmed copy, an older release) are skipped and reported.
"""

from __future__ import annotations

from fib_runtime.adapters.base import Target

SAMPLING_FUNCTIONS = (
    "sampling_from_probs", "sampling_from_logits", "top_p_sampling_from_probs",
    "top_k_sampling_from_probs", "min_p_sampling_from_probs", "top_k_top_p_sampling_from_logits",
    "top_k_top_p_sampling_from_probs", "top_p_renorm_probs", "top_k_renorm_probs",
    "top_k_mask_logits", "softmax", "chain_speculative_sampling",
)
#: old spellings kept by FlashInfer as module-level aliases of the same function
SAMPLING_ALIASES = {"top_p_renorm_prob": "top_p_renorm_probs", "top_k_renorm_prob": "top_k_renorm_probs"}
NORM_FUNCTIONS = ("rmsnorm", "fused_add_rmsnorm")
MERGE_FUNCTIONS = ("merge_state", "merge_state_in_place", "merge_states")

# (class module, class name, {attribute: op})
WRAPPER_CLASSES = (
    ("flashinfer.cascade", "MultiLevelCascadeAttentionWrapper",
     {"plan": "wrapper_plan", "begin_forward": "wrapper_plan", "run": "cascade_run",
      "forward": "cascade_run"}),
    ("flashinfer.decode", "BatchDecodeWithPagedKVCacheWrapper",
     {"plan": "wrapper_plan", "begin_forward": "wrapper_plan", "run": "decode_run",
      "run_return_lse": "decode_run_return_lse", "forward": "alias_forward",
      "forward_return_lse": "alias_forward"}),
    ("flashinfer.prefill", "BatchPrefillWithPagedKVCacheWrapper",
     {"plan": "wrapper_plan", "begin_forward": "wrapper_plan", "run": "paged_prefill_run",
      "run_return_lse": "paged_prefill_run", "forward": "alias_forward",
      "forward_return_lse": "alias_forward"}),
    ("flashinfer.prefill", "BatchPrefillWithRaggedKVCacheWrapper",
     {"plan": "wrapper_plan", "begin_forward": "wrapper_plan", "run": "ragged_prefill_run",
      "run_return_lse": "ragged_prefill_run", "forward": "alias_forward",
      "forward_return_lse": "alias_forward"}),
    # overrides plan/run of the paged prefill wrapper: its own attributes, wrapped separately
    ("flashinfer.attention._core", "BatchAttentionWithAttentionSinkWrapper",
     {"plan": "wrapper_plan", "run": "paged_prefill_run"}),
)


def _table() -> tuple:
    rows = []
    for f in SAMPLING_FUNCTIONS:
        rows.append(Target("flashinfer.sampling", f, f))
        rows.append(Target("flashinfer", f, f, note="package re-export"))
    for alias, f in SAMPLING_ALIASES.items():
        rows.append(Target("flashinfer.sampling", alias, f, note=f"alias of {f}"))
    rows.append(Target("flashinfer.cake_sampling", "top_k_top_p_sampling_from_probs",
                       "cake_top_k_top_p_sampling_from_probs"))
    rows.append(Target("flashinfer", "cake_top_k_top_p_sampling_from_probs",
                       "cake_top_k_top_p_sampling_from_probs", note="package re-export"))
    for f in NORM_FUNCTIONS:
        rows.append(Target("flashinfer.norm", f, f))
        rows.append(Target("flashinfer", f, f, note="package re-export"))
    for f in MERGE_FUNCTIONS:
        rows.append(Target("flashinfer.cascade", f, f))
        rows.append(Target("flashinfer", f, f, note="package re-export"))
    for mod, cls, attrs in WRAPPER_CLASSES:
        for attr, op in attrs.items():
            rows.append(Target(mod, f"{cls}.{attr}", op))
    return tuple(rows)


TARGETS: tuple = _table()
