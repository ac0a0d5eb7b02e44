"""Solutions the benchmark adds to a run: the FlashInfer baseline, the reference, our kernels.

- **Baseline** (author ``baseline``): for a definition tagged ``fi_api:flashinfer.<module>.<fn>``,
  a python solution calling that FlashInfer API, with the adaptations the definition needs:
  outputs cast to the declared dtypes (FlashInfer samplers return int32, definitions int64),
  ``eps=1e-5`` for the norms, in-place APIs (``fused_add_rmsnorm``) run on copies,
  ``filter_apply_order="joint"`` for ``*_joint`` definitions, ``MultiLevelCascadeAttentionWrapper``
  built and planned per workload (cascade ``multi_level_cascade_run_*``), and for top-k + top-p from fp32
  probabilities FlashInfer's fastest path ``flashinfer.cake_sampling`` when present (it routes
  what it cannot serve to the regular kernel itself). Setup that FlashInfer needs once per
  workload (``top_k_max`` for cake, the copies of in-place inputs) is done in ``run_prepare``,
  outside the timed region. A definitions module may provide ``baseline_source(definition)``
  returning python source with a ``run`` (e.g. wrappers that must ``plan``), used first.
- **Reference** (author ``reference``): the definition's own ``reference`` source as a solution,
  so the report has its row next to the others.
- **Built-in kernels** (author ``fib-runtime``): the dispatcher's
  :func:`fib_runtime.solutions.builtin.for_definition` (one-line python sources importing each
  callable of ``fib_runtime.kernels.builtin_table``), benchmarked like any other solution.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import List, Optional

from ..schema import Solution

_GENERIC = '''import importlib
import torch

_API = {api!r}
_KWARGS = {kwargs}
_OUT_DTYPES = {out_dtypes}
_INPLACE = {inplace}      # indices of inputs the API writes (run on copies)
_RESULT_ARGS = {result_args}  # in-place API: which (copied) inputs hold the outputs
_F = None


def _api():
    global _F
    if _F is None:
        mod, _, attr = _API.rpartition(".")
        _F = getattr(importlib.import_module(mod), attr)
    return _F


def _finish(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    outs = tuple(o.to(getattr(torch, dt)) if o.dtype != getattr(torch, dt) else o
                 for o, dt in zip(outs, _OUT_DTYPES))
    return outs if len(outs) > 1 else outs[0]


def _call(args):
    out = _api()(*args, **_KWARGS)
    if _RESULT_ARGS:
        out = tuple(args[i] for i in _RESULT_ARGS)
    return _finish(out)


def run(*args):
    args = list(args)
    for i in _INPLACE:
        args[i] = args[i].clone()
    return _call(args)


def run_prepare(*args):
    args = list(args)
    for i in _INPLACE:
        args[i] = args[i].clone()
    return lambda *_ignored: _call(args)
'''

_CAKE = '''import importlib
import torch

_F = None
_REGULAR = None


def _api():
    global _F, _REGULAR
    if _F is None:
        try:
            _F = importlib.import_module("flashinfer.cake_sampling").top_k_top_p_sampling_from_probs
        except Exception:
            _REGULAR = importlib.import_module("flashinfer.sampling").top_k_top_p_sampling_from_probs
            _F = _REGULAR
    return _F


def _call(probs, top_k, top_p, top_k_max=None):
    f = _api()
    if f is _REGULAR:
        out = f(probs, top_k, top_p)
    else:
        out = f(probs, top_k, top_p, top_k_max=top_k_max)
    return out.to(torch.int64)


def run(probs, top_k, top_p):
    return _call(probs, top_k, top_p, int(top_k.max()) if top_k.numel() else 1)


def run_prepare(probs, top_k, top_p):
    kmax = int(top_k.max()) if top_k.numel() else 1
    return lambda p, k, q: _call(p, k, q, kmax)
'''


def flashinfer_available() -> bool:
    try:
        return importlib.util.find_spec("flashinfer") is not None
    except (ImportError, ValueError):
        return False


def _solution(name: str, definition, author: str, source: str, description: str,
              hardware=("cuda",), filename: str = "main.py", entry: str = "run") -> Solution:
    return Solution.model_validate({
        "name": name, "definition": definition.name, "author": author,
        "spec": {"language": "python", "target_hardware": list(hardware),
                 "entry_point": f"{filename}::{entry}", "dependencies": [],
                 "destination_passing_style": False},
        "sources": [{"path": filename, "content": source}],
        "description": description,
    })


def baseline_source(definition) -> Optional[str]:
    """Python source calling the definition's ``fi_api`` FlashInfer API, or None."""
    hook = _definitions_hook(definition)
    if hook:
        return hook
    apis = [a for a in definition.tag_values("fi_api") if a.startswith("flashinfer.")]
    if not apis:
        return None
    api = apis[0]
    fn = api.rpartition(".")[2]
    names = list(definition.inputs)
    if (fn == "top_k_top_p_sampling_from_probs" and "joint" not in definition.name
            and definition.inputs.get("probs") is not None and definition.inputs["probs"].dtype == "float32"
            and names == ["probs", "top_k", "top_p"]):
        return _CAKE
    if fn == "run" and "MultiLevelCascadeAttentionWrapper" in api:
        return _cascade_run_source(definition)
    if api.count(".") > 2 and api.split(".")[-2][:1].isupper():
        return None  # another wrapper class method: needs its own hook
    kwargs = {}
    inplace: List[int] = []
    result_args: List[int] = []
    if "rmsnorm" in fn:
        kwargs["eps"] = 1e-5
    if fn == "fused_add_rmsnorm":
        inplace = [names.index("hidden_states"), names.index("residual")]
        result_args = [names.index("hidden_states")]
    if fn.endswith("_in_place"):  # merge_state_in_place(v, s, v_other, s_other) writes v, s
        inplace = result_args = [0, 1]
    if "joint" in definition.name and "top_k_top_p" in fn:
        kwargs["filter_apply_order"] = "joint"
    out_dtypes = [s.dtype for s in definition.outputs.values()]
    return _GENERIC.format(api=api, kwargs=repr(kwargs),
                           out_dtypes=out_dtypes, inplace=inplace, result_args=result_args)


_CASCADE_RUN = '''import importlib
import torch

_LEVELS = {levels}
_HQ, _HKV, _D, _PS = {hq}, {hkv}, {d}, {ps}


def _wrapper(args):
    fc = importlib.import_module("flashinfer.cascade")
    q, k, v = args[0], args[1], args[2]
    ws = torch.empty(128 << 20, dtype=torch.uint8, device=q.device)
    w = fc.MultiLevelCascadeAttentionWrapper(_LEVELS, ws, "NHD")
    lv = [args[3 + 4 * i: 7 + 4 * i] for i in range(_LEVELS)]
    w.plan([x[0] for x in lv], [x[1] for x in lv], [x[2] for x in lv], [x[3] for x in lv],
           _HQ, _HKV, _D, _PS, causal=False, sm_scale=float(args[-1]), q_data_type=q.dtype, kv_data_type=k.dtype)
    return w


def run(*args):
    return _wrapper(args).run(args[0], (args[1], args[2]))


def run_prepare(*args):
    w = _wrapper(args)  # plan() once per workload, outside the timed region
    return lambda *a: w.run(a[0], (a[1], a[2]))
'''


def _cascade_run_source(definition) -> Optional[str]:
    ax = definition.const_axes
    levels = sum(1 for n in definition.inputs if n.startswith("qo_indptr_"))
    try:
        return _CASCADE_RUN.format(levels=levels, hq=ax["num_qo_heads"], hkv=ax["num_kv_heads"],
                                   d=ax["head_dim"], ps=ax["page_size"])
    except KeyError:
        return None


def _definitions_hook(definition) -> Optional[str]:
    import pkgutil

    try:
        import fib_runtime.definitions as defs
    except Exception:
        return None
    for info in pkgutil.iter_modules(defs.__path__):
        try:
            mod = importlib.import_module(f"fib_runtime.definitions.{info.name}")
        except Exception:
            continue
        hook = getattr(mod, "baseline_source", None)
        if callable(hook):
            try:
                src = hook(definition)
            except Exception:
                src = None
            if src:
                return src
    return None


def baseline_solution(definition) -> Optional[Solution]:
    src = baseline_source(definition)
    if src is None:
        return None
    api = (definition.tag_values("fi_api") or ["flashinfer"])[0]
    return _solution(f"flashinfer_baseline_{definition.name}", definition, "baseline", src,
                     f"FlashInfer baseline: {api} (generated by fib bench)")


def reference_solution(definition) -> Solution:
    return _solution(f"reference_{definition.name}", definition, "reference", definition.reference,
                     "The definition's PyTorch reference, run as a solution", hardware=("cpu", "cuda"),
                     filename="reference.py", entry=definition.reference_entry)


def builtin_solutions(definitions) -> List[Solution]:
    """Solutions of our precompiled kernels (the dispatcher's built-in list) for ``definitions``."""
    try:
        from fib_runtime.solutions import builtin
    except Exception:
        return []
    out = []
    for d in definitions:
        try:
            out += [s for s, _supports in builtin.for_definition(d.name)]
        except Exception:
            continue
    return out
