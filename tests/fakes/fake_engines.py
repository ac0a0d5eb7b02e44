"""Fake engine modules that bind FlashInfer / sampler names early and late.

- ``early``: ``from flashinfer.sampling import top_k_top_p_sampling_from_probs`` at import
  (form B: a copy the adapter must find in ``sys.modules``);
- ``late``: ``flashinfer.sampling.top_k_top_p_sampling_from_probs`` looked up at call time (form A);
- ``lazy``: a ``LazyImport``-style proxy resolved and cached on first call (form L, SGLang);
- a fake ``vllm.v1.sample.ops.topk_topp_sampler`` whose ``TopKTopPSampler`` binds
  ``self.forward`` per instance at construction (form S), with ``apply_top_k_top_p`` bound by
  name in a fake ``vllm.v1.sample.rejection_sampler``.

Module names start with ``vllm``/``sglang`` so they fall into the adapters' alias scopes.
"""

from __future__ import annotations

import contextlib
import sys
import types

EARLY = r'''
from flashinfer.sampling import top_k_top_p_sampling_from_probs

def sample(probs, k, p):
    return top_k_top_p_sampling_from_probs(probs, k, p)
'''

LATE = r'''
def sample(probs, k, p):
    import flashinfer
    return flashinfer.sampling.top_k_top_p_sampling_from_probs(probs, k, p)
'''

LAZY = r'''
import importlib

class LazyImport:
    def __init__(self, module_name, class_name):
        self.module_name, self.class_name, self._module = module_name, class_name, None
    def _load(self):
        if self._module is None:
            self._module = getattr(importlib.import_module(self.module_name), self.class_name)
        return self._module
    def __call__(self, *args, **kwargs):
        return self._load()(*args, **kwargs)

top_k_top_p_sampling_from_probs = LazyImport("flashinfer.sampling", "top_k_top_p_sampling_from_probs")

def sample(probs, k, p):
    return top_k_top_p_sampling_from_probs(probs, k, p, filter_apply_order="joint")
'''

TOPK_TOPP = r'''
import torch

CALLS = {"forward_native": 0, "forward_cpu": 0, "apply_top_k_top_p": 0}
PROCESSED_LOGPROBS_MODES = ("processed_logits", "processed_logprobs")

def apply_top_k_top_p(logits, k, p):
    CALLS["apply_top_k_top_p"] += 1
    if k is None and p is None:
        return logits
    if k is not None:
        kth = logits.sort(dim=-1, descending=True).values.gather(1, (k.long() - 1).clamp(min=0)[:, None])
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if p is not None:
        s, idx = logits.sort(dim=-1, descending=False)
        cum = s.softmax(-1).cumsum(-1)
        mask = cum <= 1 - p[:, None]
        mask[:, -1] = False
        logits = logits.scatter(1, idx, s.masked_fill(mask, float("-inf")))
    return logits

def apply_top_k_top_p_pytorch(logits, k, p, allow_cpu_sync=False):
    return apply_top_k_top_p(logits, k, p)

def apply_top_k_only(logits, k):
    return apply_top_k_top_p(logits, k, None)

def flashinfer_sample(logits, k, p, generators={}):
    import flashinfer
    assert not (k is None and p is None)
    if k is None:
        return flashinfer.sampling.top_p_sampling_from_probs(logits.softmax(-1), p, deterministic=True).view(-1)
    if p is None:
        return flashinfer.sampling.top_k_sampling_from_probs(logits.softmax(-1), k, deterministic=True).view(-1)
    return flashinfer.sampling.top_k_top_p_sampling_from_logits(logits, k, p, deterministic=True).view(-1)

class TopKTopPSampler(torch.nn.Module):
    def __init__(self, logprobs_mode="raw_logprobs", use_fp64_gumbel=False):
        super().__init__()
        self.logprobs_mode = logprobs_mode
        self.use_fp64_gumbel = use_fp64_gumbel
        self.forward = self.forward_cpu

    def forward_native(self, logits, generators, k, p):
        CALLS["forward_native"] += 1
        logits = apply_top_k_top_p(logits, k, p)
        probs = logits.softmax(dim=-1, dtype=torch.float32)
        q = torch.empty_like(probs).exponential_()
        for i, g in generators.items():
            q[i].exponential_(generator=g)
        return probs.div(q).argmax(dim=-1).view(-1), None

    def forward_cpu(self, logits, generators, k, p):
        CALLS["forward_cpu"] += 1
        return self.forward_native(logits, generators, k, p)

    def forward_cuda(self, logits, generators, k, p):
        return self.forward_native(logits, generators, k, p)
'''

REJECTION = r'''
from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

def mask(logits, k, p):
    return apply_top_k_top_p(logits, k, p)
'''


def _module(name: str, src: str, package: bool = False) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__file__ = f"<fake {name}>"
    if package:
        m.__path__ = []
    sys.modules[name] = m
    if src:
        exec(compile(src, m.__file__, "exec"), m.__dict__)
    return m


@contextlib.contextmanager
def flashinfer_engines():
    """The three fake engines (early, late, lazy); flashinfer (fake or real) must be importable."""
    names = ["vllm_fib_fake_early", "sglang_fib_fake_late", "sglang_fib_fake_lazy"]
    saved = {n: sys.modules.get(n) for n in names}
    try:
        early = _module(names[0], EARLY)
        late = _module(names[1], LATE)
        lazy = _module(names[2], LAZY)
        yield types.SimpleNamespace(early=early, late=late, lazy=lazy)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


VLLM_MODULES = ("vllm", "vllm.v1", "vllm.v1.sample", "vllm.v1.sample.ops",
                "vllm.v1.sample.ops.topk_topp_sampler", "vllm.v1.sample.rejection_sampler",
                "vllm.v1.worker", "vllm.v1.worker.gpu", "vllm.v1.worker.gpu.sample",
                "vllm.v1.worker.gpu_input_batch", "vllm.v1.worker.gpu.sample.states")

# vLLM's input batch (model runner v1) and sampling states (v2), as far as the adapter observes
# them: the host copies of the per-request top_k and the device tensors the sampler gets
INPUT_BATCH = r'''
import types
import numpy as np
import torch

class InputBatch:
    def __init__(self, ks, vocab=1000):
        self.vocab_size = vocab
        self.top_k_cpu = np.array([k if 0 < k < vocab else vocab for k in ks] + [7] * 4, dtype=np.int32)
        self.top_k = torch.from_numpy(self.top_k_cpu.copy())
        self.num_reqs = len(ks)
        self.no_top_k = all(not 0 < k < vocab for k in ks)

    def _make_sampling_metadata(self):
        n = self.num_reqs
        return types.SimpleNamespace(top_k=None if self.no_top_k else self.top_k[:n])
'''

SAMPLING_STATES = r'''
import types
import numpy as np
import torch

class SamplingStates:
    def __init__(self, ks, vocab=1000):
        self.vocab_size = vocab
        np_ = np.array(ks, dtype=np.int32)
        self.top_k = types.SimpleNamespace(np=np_, gpu=torch.from_numpy(np_.copy()))

    def get_top_k_top_p(self, expanded_idx_mapping, idx_mapping_np):
        do_top_k = np.any(self.top_k.np[idx_mapping_np] != self.vocab_size)
        return (self.top_k.gpu[expanded_idx_mapping] if do_top_k else None), None
'''


@contextlib.contextmanager
def fake_vllm(version: str = "0.32.0", with_sampler: bool = True):
    """A fake ``vllm`` tree with the sampler modules (when ``with_sampler``)."""
    saved = {n: sys.modules.get(n) for n in VLLM_MODULES}
    try:
        for n in VLLM_MODULES[:4] + VLLM_MODULES[6:9]:
            _module(n, "", package=True)
        sys.modules["vllm"].__version__ = version
        if with_sampler:
            _module(VLLM_MODULES[4], TOPK_TOPP)
            _module(VLLM_MODULES[5], REJECTION)
            _module(VLLM_MODULES[9], INPUT_BATCH)
            _module(VLLM_MODULES[10], SAMPLING_STATES)
        yield types.SimpleNamespace(
            topk=sys.modules.get(VLLM_MODULES[4]), rejection=sys.modules.get(VLLM_MODULES[5]),
            input_batch=sys.modules.get(VLLM_MODULES[9]), states=sys.modules.get(VLLM_MODULES[10]),
            install_sampler=lambda: (_module(VLLM_MODULES[4], TOPK_TOPP),
                                     _module(VLLM_MODULES[5], REJECTION)))
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


SGL_SAMPLER = r'''
import torch
from sglang.srt.server_args import SAMPLING_BACKEND_CHOICES

_CUSTOM_SAMPLER_FACTORIES = {}
BACKEND = {"name": "pytorch"}

class LazyImport:
    def __init__(self, module_name, class_name):
        self.module_name, self.class_name, self._module = module_name, class_name, None
    def __call__(self, *args, **kwargs):
        import importlib
        if self._module is None:
            self._module = getattr(importlib.import_module(self.module_name), self.class_name)
        return self._module(*args, **kwargs)

top_k_top_p_sampling_from_probs = LazyImport("flashinfer.sampling", "top_k_top_p_sampling_from_probs")

def top_k_top_p_min_p_sampling_from_probs_torch(probs, top_ks, top_ps, min_ps, need_min_p_sampling,
                                                sampling_seed, positions, *, return_filtered_probs=False,
                                                max_top_k=None):
    probs_sort, probs_idx = probs.sort(dim=-1, descending=True)
    probs_sum = torch.cumsum(probs_sort, dim=-1)
    probs_sort[torch.arange(probs_sort.shape[-1]).view(1, -1) >= top_ks.view(-1, 1)] = 0.0
    probs_sort[(probs_sum - probs_sort) > top_ps.view(-1, 1)] = 0.0
    idx = torch.multinomial(probs_sort, 1)
    return torch.gather(probs_idx.to(torch.int32), 1, idx).view(-1)

def sampling_from_probs_torch(probs, sampling_seed=None, positions=None):
    return torch.multinomial(probs, 1).view(-1).to(torch.int32)

class Sampler(torch.nn.Module):
    def _sample_from_probs(self, probs, sampling_info, positions, simple_sampling_case):
        if simple_sampling_case:
            return sampling_from_probs_torch(probs), None
        if BACKEND["name"] == "flashinfer":
            return top_k_top_p_sampling_from_probs(probs, sampling_info.top_ks, sampling_info.top_ps,
                                                   filter_apply_order="joint"), None
        if BACKEND["name"] == "pytorch":
            return top_k_top_p_min_p_sampling_from_probs_torch(
                probs, sampling_info.top_ks, sampling_info.top_ps, sampling_info.min_ps,
                sampling_info.need_min_p_sampling, sampling_info.sampling_seed, positions), None
        raise ValueError("Invalid sampling backend")

def register_sampler_backend(backend, factory):
    SAMPLING_BACKEND_CHOICES.add(backend)
    _CUSTOM_SAMPLER_FACTORIES[backend] = factory

def create_sampler(backend=None):
    if backend in _CUSTOM_SAMPLER_FACTORIES:
        return _CUSTOM_SAMPLER_FACTORIES[backend]()
    return Sampler()
'''

SGL_MODULES = ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.server_args",
               "sglang.srt.layers.sampler")


@contextlib.contextmanager
def fake_sglang(version: str = "0.5.23"):
    """A fake ``sglang`` with the sampler module (LazyImport proxy, torch samplers, backend registry)."""
    saved = {n: sys.modules.get(n) for n in SGL_MODULES}
    try:
        for n in SGL_MODULES[:3]:
            _module(n, "", package=True)
        sys.modules["sglang"].__version__ = version
        _module("sglang.srt.server_args", "SAMPLING_BACKEND_CHOICES = {'flashinfer', 'pytorch'}")
        sampler = _module("sglang.srt.layers.sampler", SGL_SAMPLER)
        sys.modules["sglang.srt.layers"].sampler = sampler
        yield types.SimpleNamespace(sampler=sampler, server_args=sys.modules["sglang.srt.server_args"])
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
