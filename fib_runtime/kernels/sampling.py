"""Precompiled CUDA samplers: ``fib_runtime.kernels.sampling.*``.

One kernel launch per call, no host-device sync, no allocation besides the output (pass ``out=``
to avoid that too), launched on the caller's current CUDA stream (apache-tvm-ffi hands the library
torch's current stream). Which kernel runs (resident-row cluster kernel, streaming kernel, the
two-pass kernel for large top-k sampling batches on sm_90, the split-row kernel for
small top-k sampling batches before sm_90, or the one-pass plain kernel for plain sampling at
large batches) is decided per call from B, V and the dtype; every kernel gives the same tokens for
the same inputs (docs/kernels.md), except large-k rows, which the cluster kernel and the two-pass
kernel's large-k instantiation sample by rejection (below), and plain sampling through the plain
kernel (from 64 or 128 rows): same distribution, another token. The split-row kernel keeps a
workspace per device and stream (4 MB and up, allocated on first use and grown with the batch,
also during graph capture; never freed, as captured graphs may point at it).

``min_top_k`` (the top-k sampling functions): a value the caller knows every row's ``top_k`` to
reach (an engine's host-side copy of the batch's top_k; a scalar ``top_k`` is its own;
``note_min_top_k`` attaches it to a tensor). A hint that picks a kernel: with ``min_top_k > 128``,
batches from 48 rows on sm_90 run the two-pass kernel's large-k instantiation (k >= 1024 rows 0.81x
the default kernel's time on the H100; ``FIB_SAMPLING_TWOPASS_LARGE_K=0`` turns it off); there, calls
that are not joint with several CTAs per row whose slices hold at least 32772 tokens (fp32; 16-bit 65544:
B=64 at V=128256 fp32, V=151936 either) bound the row's k-th largest instead of each slice's (0.94-0.98x on the H200; ``FIB_SAMPLING_TWOPASS_ROW_BOUND=0`` turns it off). It never changes
which tokens a row keeps; a wrong hint costs time only. top_k_first rows with ``top_k > 1024``
then take the rejection rounds' token (the cluster kernel's) instead of the sorted tail's. With
``min_top_k > 1024`` smaller batches (the cluster kernel) run its gathered-tail instantiation: the
same tokens, the rejection rounds on one CTA once the top-k select has narrowed the row to at most
4032 tokens.

Semantics (documented rules; the tests check them):
- ``probs`` are float32 ``[B, V]``; ``logits`` float32, bfloat16 or float16 ``[B, V]``; rows must be
  contiguous (stride(1) == 1), row stride is free.
- ``top_k``, ``top_p``, ``min_p``, ``temperature``: a Python scalar or a per-row tensor ``[B]``
  (top_k int32/int64, the others float32) on the input's device.
- top-k: ``0 < k < V`` filters, anything else (k <= 0, k >= V) keeps every token. Exactly k tokens
  are kept; ties at the k-th value go to the lower token index.
- top-p: keep token i iff the probability mass of strictly larger kept tokens is < top_p (tokens of
  equal value are kept or dropped together); top_p >= 1 keeps everything, top_p <= 0 keeps the
  maximum (all tokens tied at it).
- min-p: keep p_i >= min_p * max_j p_j (from logits: l_i >= l_max + T ln(min_p)).
- Orders: ``filter_apply_order="top_k_first"`` (top-k, renormalise, then top-p: FlashInfer's
  default, vLLM's semantics) or ``"joint"`` (top-p against the unrenormalised row, SGLang's).
  When min-p is combined with top-p it is applied before top-p.
- Temperature (logits only): scores l/T; T <= 0 (or NaN) is greedy (argmax, lowest index).
- NaN and infinities: NaN logits count as -inf, NaN or negative probabilities as 0. If a row has
  +inf entries the draw is uniform over them. A row with no positive weight (all -inf/NaN logits,
  all-zero probs) returns token 0 (renorm: all zeros).
- Resolution: weights are kept as floor(w / w_max * 2^44) (exact integer sums, so the draw is
  monotone and bitwise deterministic); tokens below 2^-44 of the row maximum are never drawn.
- Randomness: Philox4x32-10 keyed by (seed, offset, row); one draw per row, except top-p alone (no
  top-k on the row, no min-p, top_p >= 0.25), which draws up to four rounds of four candidates from
  the whole row and returns the first that lies in the nucleus (exact: the first accepted of
  independent draws follows the nucleus distribution), or, when all sixteen fall outside
  (probability <= (1-top_p)^16; top_p < 0.25 always), one fresh draw inside the exactly computed
  nucleus. The same rounds serve large k in the cluster kernel: top_k_first rows with top_k > 1024
  draw the candidates from the kept top-k, joint rows with top_k > 256 whose top token holds >= 1/256
  of the row's mass draw them from the whole row and also check the candidate's top-k rank and
  min-p (``FIB_SAMPLING_REJECT_MIN_K`` / ``FIB_SAMPLING_REJECT_JOINT_MIN_K``). Pass ``seed``/``offset`` as Python ints or as int64 device tensors of 1 or B entries
  (read on the device: CUDA-graph safe; the caller advances the offset, by 1 per call is enough).
  Without them a process-wide counter is used (seed from ``torch.initial_seed()``, offset
  incremented per call): fine eagerly, frozen inside a CUDA graph.
"""
from __future__ import annotations

import itertools
import os
import threading
from typing import Any

import torch

from .loader import load_family, reason

__all__ = [
    "KernelUnavailable",
    "available",
    "sampling_from_probs",
    "sampling_from_logits",
    "top_k_sampling_from_probs",
    "top_p_sampling_from_probs",
    "min_p_sampling_from_probs",
    "top_k_top_p_sampling_from_probs",
    "top_k_sampling_from_logits",
    "top_p_sampling_from_logits",
    "min_p_sampling_from_logits",
    "top_k_top_p_sampling_from_logits",
    "top_k_renorm_probs",
    "top_p_renorm_probs",
    "top_k_mask_logits",
    "note_min_top_k",
]

# the library's flags word: mode (bits 0-1) | logits input | joint order (kernels_cuda host_args.h)
_SAMPLE, _RENORM, _MASK = 0, 1, 2
_LOGITS, _JOINT = 4, 8
_HINT_SHIFT, _HINT_MAX = 16, 0x7FFFFFFF  # the min_top_k hint's bits
_EXPLICIT_STREAM = os.environ.get("FIB_SAMPLING_EXPLICIT_STREAM", "0") == "1"
# 0 = automatic; 1..8: cluster kernel with N CTAs per row; -1: streaming kernel for top-k sampling;
# -2: one-pass plain kernel for calls without top-k (plain.cuh; 999 keeps the cluster kernel there);
# 1000 + S: one-pass filter kernel with S CTAs per row (1000: automatic S); 2000: split-row kernel
# (chunks of 8192 tokens, one CTA each; the pre-Hopper policy at small batches with a scalar top_k <= 128)
# 3000 + S: two-pass top-k kernel with S CTAs per row (3000: automatic S; sm_90; twopass.cuh);
# 4000 + S: the same with two CTAs per SM (64 registers; 4000: S = 1); 3000 / 4000 knobs run its
# default instantiation, 5000 + S / 6000 + S its large-k instantiation (the automatic choice runs
# that one for a scalar top_k > 128 or min_top_k > 128 unless FIB_SAMPLING_TWOPASS_LARGE_K=0)
_CLUSTER = int(os.environ.get("FIB_SAMPLING_CLUSTER", "0") or 0)


class KernelUnavailable(RuntimeError):
    """The precompiled sampling kernels cannot run here (see loader.availability())."""


_fn: Any = None
_fn_alloc: Any = None  # sample_alloc: the output allocated in C++ through torch's allocator
_fn_lock = threading.Lock()
_seed: int | None = None
_counter = itertools.count(1)


def _sample_fn():
    global _fn, _fn_alloc
    if _fn is None:
        with _fn_lock:
            if _fn is None:
                mod = load_family("sampling")
                if mod is None:
                    raise KernelUnavailable(f"fib sampling kernels unavailable: {reason('sampling')}")
                try:
                    _fn_alloc = mod.sample_alloc
                except AttributeError:
                    _fn_alloc = None
                _fn = mod.sample
    return _fn


def available() -> bool:
    return load_family("sampling") is not None


def _default_seed_offset() -> tuple[int, int]:
    global _seed
    if _seed is None:
        _seed = torch.initial_seed() & 0x7FFFFFFFFFFFFFFF
    return _seed, next(_counter)


_Tensor = torch.Tensor
_int32, _int64, _float32 = torch.int32, torch.int64, torch.float32
_contiguous = torch.contiguous_format


def _call(x: torch.Tensor, flags: int, top_k=None, top_p=None, min_p=None, temperature=None, seed=None,
          offset=None, generator=None, out=None):
    """One launch. The arguments go to the library as they are (None, numbers, tensors: it reads and
    checks them in C++, kernels_cuda/include/fib/sampling/host_args.h); only what it refuses is
    converted here, and the library is called once more."""
    fn = _fn if _fn is not None else _sample_fn()
    if _hints and type(top_k) is _Tensor and not flags >> _HINT_SHIFT:
        h = _hints.get(id(top_k))
        if h is not None and h[0] is top_k:
            flags |= _hint(h[1])
    if seed is None or offset is None:
        if generator is not None:
            ds, do = generator.initial_seed(), next(_counter)
        else:
            ds, do = _default_seed_offset()
        if seed is None:
            seed = ds
        if offset is None:
            offset = do
    stream = torch.cuda.current_stream(x.device).cuda_stream if _EXPLICIT_STREAM else -1
    if out is None:
        mode = flags & 3
        if mode == _SAMPLE and _fn_alloc is not None:
            # the library allocates the tokens through torch's allocator (cheaper than torch.empty
            # from Python); what it refuses is converted below, allocated here, and sent to fn
            try:
                return _fn_alloc(x, flags, top_k, top_p, min_p, temperature, seed, offset, _CLUSTER, stream)
            except (TypeError, ValueError):
                pass
        # (torch.empty(x.shape[:-1]) costs ~5 us more than an int size on the host)
        if mode == _SAMPLE:
            out = torch.empty(len(x) if x.dim() == 2 else (), dtype=_int64, device=x.device)
        else:
            out = torch.empty_like(x, dtype=_float32 if mode == _RENORM else x.dtype, memory_format=_contiguous)
    try:
        fn(x, out, flags, top_k, top_p, min_p, temperature, seed, offset, _CLUSTER, stream)
    except (TypeError, ValueError):
        # slow path: a strided row, a parameter tensor of another dtype or layout, a numpy or float
        # scalar where an int belongs; a second refusal is the caller's error and propagates
        if isinstance(x, _Tensor) and x.dim() >= 1 and x.stride(-1) != 1:
            x = x.contiguous()
        fn(x, out, flags, _tensor_or(top_k, int, (_int32, _int64)), _tensor_or(top_p, float, (_float32,)),
           _tensor_or(min_p, float, (_float32,)), _tensor_or(temperature, float, (_float32,)),
           _tensor_or(seed, int, (_int64,)), _tensor_or(offset, int, (_int64,)), _CLUSTER, stream)
    return out


def _tensor_or(v, scalar, dtypes):
    """A per-row parameter as the library takes it: None, a Python int/float, or a contiguous tensor
    of one of `dtypes` (converted to the first)."""
    if v is None:
        return None
    if isinstance(v, _Tensor):
        if v.dtype not in dtypes:
            v = v.to(dtypes[0])
        return v if v.is_contiguous() else v.contiguous()
    return scalar(v)


# per-row top_k tensors whose smallest entry a caller noted (note_min_top_k): id -> (tensor, value)
_hints: dict = {}
# the hints that pick a kernel: above this (kTpSeedMaxK, twopass.cuh), the two-pass kernel's
# large-k instantiation
LARGE_K_ABOVE = 128
_HINTS_MAX = 16


def note_min_top_k(top_k: torch.Tensor, min_top_k: int) -> torch.Tensor:
    """Note that every entry of this per-row ``top_k`` tensor is at least ``min_top_k``: later calls
    that get this tensor object and no ``min_top_k`` of their own take it as their hint. For
    callers whose calls are built elsewhere (the adapters broadcast a scalar top_k into a tensor
    before the dispatcher calls the kernel). The last 16 tensors are kept (held: an id is never
    taken for another tensor's); returns ``top_k``."""
    _hint(min_top_k)  # (checks the value)
    if len(_hints) >= _HINTS_MAX:
        _hints.pop(next(iter(_hints)), None)
    _hints[id(top_k)] = (top_k, int(min_top_k))
    return top_k


def _hint(min_top_k) -> int:
    """The flags bits of the ``min_top_k`` hint (bits 16-46; 0: none)."""
    if not min_top_k:
        return 0
    m = int(min_top_k)
    if m < 0:
        raise ValueError(f"min_top_k must be >= 0, not {min_top_k!r}")
    return min(m, _HINT_MAX) << _HINT_SHIFT


def _joint(order: str) -> int:
    if order == "top_k_first":
        return 0
    if order == "joint":
        return _JOINT
    raise ValueError(f"filter_apply_order must be 'top_k_first' or 'joint', not {order!r}")


# ---------------------------------------------------------------- from probabilities
def sampling_from_probs(probs, *, seed=None, offset=None, generator=None, out=None):
    """Draw one token per row from ``probs`` [B, V] (float32, need not be normalised)."""
    return _call(probs, _SAMPLE, seed=seed, offset=offset, generator=generator, out=out)


def top_k_sampling_from_probs(probs, top_k, *, min_top_k=None, seed=None, offset=None, generator=None, out=None):
    return _call(probs, _SAMPLE | _hint(min_top_k), top_k=top_k, seed=seed, offset=offset, generator=generator,
                 out=out)


def top_p_sampling_from_probs(probs, top_p, *, seed=None, offset=None, generator=None, out=None):
    return _call(probs, _SAMPLE, top_p=top_p, seed=seed, offset=offset, generator=generator, out=out)


def min_p_sampling_from_probs(probs, min_p, *, seed=None, offset=None, generator=None, out=None):
    return _call(probs, _SAMPLE, min_p=min_p, seed=seed, offset=offset, generator=generator, out=out)


def top_k_top_p_sampling_from_probs(probs, top_k, top_p, *, filter_apply_order="top_k_first", min_top_k=None,
                                    seed=None, offset=None, generator=None, out=None):
    return _call(probs, _SAMPLE | _joint(filter_apply_order) | _hint(min_top_k), top_k=top_k, top_p=top_p,
                 seed=seed, offset=offset, generator=generator, out=out)


# ---------------------------------------------------------------- from logits (no softmax pass)
def sampling_from_logits(logits, temperature=None, *, seed=None, offset=None, generator=None, out=None):
    """Draw from softmax(logits / temperature) without materialising the probabilities."""
    return _call(logits, _SAMPLE | _LOGITS, temperature=temperature, seed=seed, offset=offset, generator=generator,
                 out=out)


def top_k_sampling_from_logits(logits, top_k, temperature=None, *, min_top_k=None, seed=None, offset=None,
                               generator=None, out=None):
    return _call(logits, _SAMPLE | _LOGITS | _hint(min_top_k), top_k=top_k, temperature=temperature, seed=seed,
                 offset=offset, generator=generator, out=out)


def top_p_sampling_from_logits(logits, top_p, temperature=None, *, seed=None, offset=None, generator=None,
                               out=None):
    return _call(logits, _SAMPLE | _LOGITS, top_p=top_p, temperature=temperature, seed=seed, offset=offset,
                 generator=generator, out=out)


def min_p_sampling_from_logits(logits, min_p, temperature=None, *, seed=None, offset=None, generator=None,
                               out=None):
    return _call(logits, _SAMPLE | _LOGITS, min_p=min_p, temperature=temperature, seed=seed, offset=offset,
                 generator=generator, out=out)


def top_k_top_p_sampling_from_logits(logits, top_k, top_p, temperature=None, *, filter_apply_order="top_k_first",
                                     min_top_k=None, seed=None, offset=None, generator=None, out=None):
    return _call(logits, _SAMPLE | _LOGITS | _joint(filter_apply_order) | _hint(min_top_k), top_k=top_k,
                 top_p=top_p, temperature=temperature, seed=seed, offset=offset, generator=generator, out=out)


def top_k_top_p_sampling_from_probs_joint(probs, top_k, top_p, **kw):
    """``filter_apply_order="joint"`` (SGLang's order): the ``*_joint_v{V}`` definitions' entry."""
    return top_k_top_p_sampling_from_probs(probs, top_k, top_p, filter_apply_order="joint", **kw)


def top_k_top_p_sampling_from_logits_joint(logits, top_k, top_p, temperature=None, **kw):
    """``filter_apply_order="joint"`` from logits: the ``*_joint_v{V}`` definitions' entry."""
    return top_k_top_p_sampling_from_logits(logits, top_k, top_p, temperature, filter_apply_order="joint", **kw)


# ---------------------------------------------------------------- renorm / mask helpers
def top_k_renorm_probs(probs, top_k, *, out=None):
    """probs with everything outside the top-k set to 0, renormalised (float32)."""
    return _call(probs, _RENORM, top_k=top_k, seed=0, offset=0, out=out)


def top_p_renorm_probs(probs, top_p, *, out=None):
    """probs restricted to the top-p nucleus, renormalised (float32)."""
    return _call(probs, _RENORM, top_p=top_p, seed=0, offset=0, out=out)


def top_k_mask_logits(logits, top_k, *, out=None):
    """logits with everything outside the top-k set to -inf (same dtype)."""
    return _call(logits, _MASK | _LOGITS, top_k=top_k, seed=0, offset=0, out=out)


def _build_config() -> dict:
    """Debug: the library's compile-time switches that change which kernel path a row takes, e.g.
    {"twopass_spec": 0, "twopass_reject_tail": 0, "profile": 0} (docs/sampling-journal.md); {} for a library
    built before the export existed."""
    mod = load_family("sampling")
    if mod is None:
        raise KernelUnavailable(reason("sampling"))
    if not hasattr(mod, "build_config"):
        return {}
    return {a: int(b) for a, b in (kv.split("=") for kv in str(mod.build_config()).split(","))}


def _launch_config(B: int, V: int, dtype_code: int = 0, cluster: int = 0, device: int = 0) -> dict:
    """Debug: the geometry the library would pick (S CTAs per row, slice, resident, smem)."""
    mod = load_family("sampling")
    if mod is None:
        raise KernelUnavailable(reason("sampling"))
    s, chunk, res, smem, sms, major, kind = (
        int(v) for v in str(mod.launch_config(B, V, dtype_code, cluster, device)).split(","))
    return {"cluster": s, "chunk": chunk, "resident": bool(res), "smem": smem, "sms": sms, "cc_major": major,
            "kernel_for_top_k_sampling": {0: "cluster", 1: "stream", 2: "filter", 3: "split", 4: "plain", 5: "twopass",
                                          6: "twopass2"}.get(kind, str(kind)),
            "stream_for_top_k_sampling": kind == 1}
