"""Entries and storage plans: what one kept call stores for each input, and its host copies.

:class:`DefState` is everything the hot path needs about one definition, computed once: the
(input, dim) carrying each var axis (the signature), the const-axis checks, and a
:class:`_Plan` per input saying how it is stored under the definition's dump policy --
``scalar`` (a Python value, ``shape: null``), ``dump`` (a tensor for the safetensors blob) or
``random``. :func:`prepare` checks a call against the definition (dtype, rank, const axes,
axis agreement) without touching tensor data; :func:`copy_inputs` makes the host copies of a
kept call (CUDA: a non-blocking copy into a pinned buffer plus an event on the current
stream, so the engine's stream is never synchronised; CPU: a clone, since the caller may
overwrite its buffers in place) and returns the :class:`Entry` the writer thread turns into a
blob and a line.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from fib_runtime.schema import Definition

from .config import Policy, TraceConfig

_INT_DTYPES = ("int64", "int32", "int16", "int8", "bool", "uint8", "uint32")
#: integer inputs that carry what users wrote (token ids), never dumped by the ``ints`` policy:
#: they are recorded as ``random`` unless a policy names them or asks for ``all``.
CONTENT_INPUTS = ("input_ids", "token_ids", "tokens", "prompt_token_ids", "output_token_ids",
                  "prompt_tokens", "output_tokens")


#: per-row float parameters of sampling definitions, dumped by the ``ints`` policy too: they are
#: ``[batch_size]`` (a few bytes), and their real values decide the kernel's path (``top_p=1``
#: disables top-p), which random draws in the valid range never reproduce.
SAMPLING_PARAMS = ("top_p", "min_p", "temperature")


def _is_content(name: str) -> bool:
    n = name.lower()
    return n in CONTENT_INPUTS or n.endswith("token_ids")


class _Plan:
    """How one input is stored: ``kind`` in ``scalar`` / ``dump`` / ``random``."""

    __slots__ = ("name", "index", "kind", "rank", "dtype", "shape", "optional", "is_int")

    def __init__(self, name, index, spec, dump: bool, tdtype):
        self.name, self.index = name, index
        self.shape = None if spec.shape is None else tuple(spec.shape)
        self.rank = None if spec.shape is None else len(spec.shape)
        self.dtype = tdtype
        self.optional = bool(getattr(spec, "optional", False))
        self.is_int = spec.dtype in _INT_DTYPES
        self.kind = "scalar" if spec.shape is None else ("dump" if dump else "random")


class DefState:
    """Everything the hot path needs about one definition, computed once."""

    def __init__(self, name: str, defn: Optional[Definition], config: TraceConfig):
        self.name = name
        self.defn = defn
        self.closed: Dict[tuple, str] = {}
        self.counts: Dict[tuple, int] = {}
        self.buckets: Dict[tuple, int] = {}
        self.kept = 0
        if defn is None:
            self.selected = False
            return
        self.selected = config.selected(name)
        self.policy: Policy = config.policy_for(name)
        self.op_type = defn.op_type
        self.var_axes = defn.var_axes
        names = list(defn.inputs)
        # every (input, dim) carrying each var axis, in input order (the first one is the key)
        self.axis_srcs: List[List[Tuple[str, int, int]]] = [[] for _ in self.var_axes]
        self.const_checks: List[Tuple[str, int, int, int]] = []
        for i, (tname, spec) in enumerate(defn.inputs.items()):
            for d, ax in enumerate(spec.shape or ()):
                if ax in defn.const_axes:
                    self.const_checks.append((tname, i, d, defn.const_axes[ax]))
                elif ax in self.var_axes:
                    self.axis_srcs[self.var_axes.index(ax)].append((tname, i, d))
        firsts = [s[0] for s in self.axis_srcs if s]
        if len(firsts) < len(self.axis_srcs):  # an axis only outputs carry: no signature
            def _unbound(x):
                raise ValueError(f"{name}: a var axis is carried by no input")

            self.sig_dict = self.sig_tuple = _unbound
        elif len(firsts) == 1:
            (n0, i0, d0), = firsts
            self.sig_dict = lambda x: (x[n0].shape[d0],)
            self.sig_tuple = lambda x: (x[i0].shape[d0],)
        elif len(firsts) == 2:
            (n0, i0, d0), (n1, i1, d1) = firsts
            self.sig_dict = lambda x: (x[n0].shape[d0], x[n1].shape[d1])
            self.sig_tuple = lambda x: (x[i0].shape[d0], x[i1].shape[d1])
        else:
            self.sig_dict = lambda x: tuple(x[n].shape[d] for n, _, d in firsts)
            self.sig_tuple = lambda x: tuple(x[i].shape[d] for _, i, d in firsts)
        dump = self.policy.dump
        from fib_runtime.inputs import torch_dtype

        self.plans: List[_Plan] = []
        for i, (tname, spec) in enumerate(defn.inputs.items()):
            if dump == "all":
                dmp = True
            elif dump == "none":
                dmp = False
            elif dump == "ints":
                dmp = ((spec.dtype in _INT_DTYPES and not _is_content(tname))
                       or (defn.op_type == "sampling" and tname in SAMPLING_PARAMS))
            else:
                dmp = tname in dump
            try:
                tdt = torch_dtype(spec.dtype)
            except Exception:
                tdt = None
            self.plans.append(_Plan(tname, i, spec, dmp, tdt))
        self.input_names = names

    def slow_sig(self, inputs) -> tuple:
        """Signature when the first carrier of an axis is missing (an optional input)."""
        by_name = type(inputs) is dict
        out = []
        for srcs in self.axis_srcs:
            for n, i, d in srcs:
                v = inputs.get(n) if by_name else (inputs[i] if i < len(inputs) else None)
                if v is not None and hasattr(v, "shape"):
                    out.append(int(v.shape[d]))
                    break
            else:
                raise ValueError("var axis not bound by any input")
        return tuple(out)


class Entry:
    """One kept call on its way to the writer."""

    __slots__ = ("state", "axes", "items", "events", "est_bytes")

    def __init__(self, state, axes, items, events, est_bytes):
        self.state, self.axes, self.items, self.events, self.est_bytes = state, axes, items, events, est_bytes


def prepare(st: DefState, sig, inputs):
    """Check the call against the definition; ``(axes, estimated bytes)`` or None."""
    by_name = type(inputs) is dict
    get = inputs.get if by_name else (lambda i: inputs[i] if i < len(inputs) else None)
    for tname, i, d, val in st.const_checks:
        v = get(tname if by_name else i)
        if v is not None and hasattr(v, "shape") and int(v.shape[d]) != val:
            return None
    axes = dict(zip(st.var_axes, (int(x) for x in sig)))
    for ax, srcs in zip(st.var_axes, st.axis_srcs):
        for tname, i, d in srcs:
            v = get(tname if by_name else i)
            if isinstance(v, torch.Tensor) and int(v.shape[d]) != axes[ax]:
                return None
    est = 1024
    for p in st.plans:
        v = get(p.name if by_name else p.index)
        if v is None:
            if p.optional:
                continue
            return None
        if isinstance(v, torch.Tensor):
            if p.kind == "scalar":
                if v.numel() != 1:
                    return None
                continue
            if v.dim() != p.rank or (p.dtype is not None and v.dtype != p.dtype):
                return None
            if p.kind == "dump":
                est += v.numel() * v.element_size()
        elif isinstance(v, (bool, int, float)):
            if p.kind == "dump" and p.rank:
                est += 8 * _numel(st, p, axes)
        else:
            return None
    return axes, est

def copy_inputs(st: DefState, axes, inputs, est) -> Entry:
    """Host copies of the dumped tensors (non-blocking for CUDA) and the storage plan."""
    by_name = type(inputs) is dict
    items = []
    events = {}
    for p in st.plans:
        v = inputs.get(p.name) if by_name else (inputs[p.index] if p.index < len(inputs) else None)
        if v is None:
            continue
        if p.kind == "scalar":
            items.append((p.name, "scalar", _host(v, events) if isinstance(v, torch.Tensor) else v))
        elif isinstance(v, torch.Tensor):
            if p.kind == "dump":
                items.append((p.name, "dump", _host(v, events)))
            elif p.rank == 0 and p.is_int:  # 0-d int tensor: keep its value
                items.append((p.name, "scalar", _host(v, events)))
            else:
                items.append((p.name, "random", None))
        else:  # a Python number given for a tensor input
            if p.rank == 0:
                items.append((p.name, "scalar", v))
            elif p.kind == "dump":
                shape = tuple(int({**st.defn.const_axes, **axes}[a]) for a in p.shape)
                items.append((p.name, "fill", (shape, v, p.dtype)))
            else:
                items.append((p.name, "random", None))
    return Entry(st, axes, items, list(events.values()), est)


def _numel(st: DefState, p: _Plan, axes) -> int:
    vals = {**st.defn.const_axes, **axes}
    n = 1
    for a in p.shape:
        n *= int(vals[a])
    return n


def _host(t, events: dict):
    """A host copy of ``t`` that the writer can read once ``events`` have completed."""
    t = t.detach()
    dev = t.device
    if dev.type == "cpu":
        return t.clone(memory_format=torch.contiguous_format)
    if dev.type == "cuda":
        buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        buf.copy_(t, non_blocking=True)
        if dev not in events:
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(dev))
            events[dev] = ev
        else:  # one event per device, recorded after the last copy
            events[dev].record(torch.cuda.current_stream(dev))
        return buf
    return t.to("cpu")
