"""Target table of the SGLang adapter (data): ``Target(module, attr, op)``.

Binding forms (engines.md §6-8):
- ``sglang.srt.layers.sampler``: on CUDA ``top_k_top_p_sampling_from_probs`` and
  ``min_p_sampling_from_probs`` are ``LazyImport`` proxies (form L; the proxy itself is wrapped,
  so it works before and after it resolves), ``top_{k,p}_renorm_prob`` are ``from sgl_kernel
  import`` copies (form B); the pytorch backend's ``top_k_top_p_min_p_sampling_from_probs_torch``
  and ``sampling_from_probs_torch`` are module globals looked up at call time. On CPU the CUDA
  names are absent: reported missing, not raised.
- ``sglang.kernels.ops.sampling.renorm``: speculative decoding's ``LazyImport`` renorms.
- ``sglang.srt.layers.attention.flashinfer_backend``: ``merge_state`` (form B from
  ``flashinfer.cascade``). Its wrapper classes are FlashInfer's own: their ``plan`` /
  ``begin_forward`` / ``run`` / ``forward`` / ``forward_return_lse`` / ``run_return_lse`` are
  patched on the class by the FlashInfer adapter (which :func:`register` also instruments).
  ``fast_decode_plan`` is deliberately left alone: SGLang compares
  ``wrapper.begin_forward.func == fast_decode_plan`` after CUDA-graph capture.
- ``sglang.srt.layers.layernorm``: ``rmsnorm`` / ``fused_add_rmsnorm`` from ``sgl_kernel`` (B).
- ``sglang.srt.sampling.sampling_batch_info``: ``SamplingBatchInfo.from_schedule_batch`` (a
  classmethod), ``filter_batch`` and ``merge_batch``, observed only (ops.BatchTopKSpec).
"""

from __future__ import annotations

from fib_runtime.adapters.base import Target

SAMPLER = "sglang.srt.layers.sampler"
RENORM = "sglang.kernels.ops.sampling.renorm"
ATTN = "sglang.srt.layers.attention.flashinfer_backend"
NORM = "sglang.srt.layers.layernorm"
BATCH = "sglang.srt.sampling.sampling_batch_info"

TARGETS: tuple = (
    Target(SAMPLER, "top_k_top_p_sampling_from_probs", "top_k_top_p_sampling_from_probs",
           note="LazyImport (CUDA)"),
    Target(SAMPLER, "min_p_sampling_from_probs", "min_p_sampling_from_probs", note="LazyImport (CUDA)"),
    Target(SAMPLER, "top_k_renorm_prob", "top_k_renorm_probs", note="from sgl_kernel (CUDA)"),
    Target(SAMPLER, "top_p_renorm_prob", "top_p_renorm_probs", note="from sgl_kernel (CUDA)"),
    Target(SAMPLER, "top_k_top_p_min_p_sampling_from_probs_torch", "sglang_torch_top_k_top_p_min_p",
           note="pytorch backend"),
    Target(SAMPLER, "sampling_from_probs_torch", "sglang_torch_sampling_from_probs",
           note="no top-k/p/min-p"),
    Target(RENORM, "top_k_renorm_prob", "top_k_renorm_probs", note="LazyImport (CUDA)"),
    Target(RENORM, "top_p_renorm_prob", "top_p_renorm_probs", note="LazyImport (CUDA)"),
    Target(ATTN, "merge_state", "merge_state", note="from flashinfer.cascade"),
    Target(NORM, "rmsnorm", "rmsnorm", note="from sgl_kernel (CUDA)"),
    Target(NORM, "fused_add_rmsnorm", "fused_add_rmsnorm", note="from sgl_kernel (CUDA)"),
    # observed, not dispatched: a host bound of the batch's smallest top_k, noted on top_ks
    Target(BATCH, "SamplingBatchInfo.from_schedule_batch", "sglang_batch_top_k_new"),
    Target(BATCH, "SamplingBatchInfo.filter_batch", "sglang_batch_top_k_filter"),
    Target(BATCH, "SamplingBatchInfo.merge_batch", "sglang_batch_top_k_merge"),
)
