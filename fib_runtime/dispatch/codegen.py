"""Code generated per definition and per decision: the hot path's key, entry and hit closures.

Per definition, :func:`_generate_entry` compiles two functions from :data:`_ENTRY_TEMPLATE`:

- ``key(x)``: the tuple the decision cache is keyed by: ``x[i].shape`` of each input that carries
  a var axis (rank and const dims included), ``x[i].dtype`` of every required tensor input and
  ``x[first].is_cuda``, every input read once;
- ``entry(x, fb)``: the same expression inlined, the cache lookup, and the call of the packed
  decision. Value-returning single-output hits and fallbacks are executed inline (one Python
  frame less per call); other kinds (destination passing, several outputs, scalar outputs) call
  their closure from :func:`_make_hit`.

Per decision, :func:`_make_hit` compiles the hit closure for the solution's calling convention
and the number of outputs: call, then compare each output's ``shape`` and ``dtype`` with
``torch.Size``/``torch.dtype`` values precomputed for the key (metadata only, no sync), or, for
destination passing, allocate the outputs with ``torch.empty`` first. Any failure goes to
``bad(x, fb, exc, result)``, which quarantines and falls back (see :mod:`.decide`). No
``inspect``, no pydantic, no locks on these paths.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from .table import DefTable


class _Entry:
    """Metadata of one definition's entry; ``call`` is the generated hot-path function."""

    __slots__ = ("name", "definition", "key", "cache", "meta", "table", "tensor_idx", "axis_src", "call")

    def __init__(self, name, definition, key_parts, table: DefTable, tensor_idx=(), axis_src=()):
        self.name = name
        self.definition = definition
        self.cache: Dict[Any, tuple] = {}      # key -> packed decision (see _ENTRY_TEMPLATE)
        self.meta: Dict[Any, Callable] = {}    # key -> decision closure (with fib_* attributes)
        self.table = table
        self.tensor_idx = tensor_idx   # indices of required tensor inputs
        self.axis_src = axis_src       # per var axis: (input index, dim)
        self.key, self.call = _generate_entry(name, key_parts, self.cache)
        self.call.entry = self


def _key_parts(defn) -> Tuple[List[str], Tuple[int, ...], Tuple[Tuple[int, int], ...]]:
    """The key expression of ``defn`` (see module docstring), as code fragments over ``x``."""
    names = list(defn.inputs)
    tensor_idx = tuple(i for i, n in enumerate(names)
                       if defn.inputs[n].shape is not None and not getattr(defn.inputs[n], "optional", False))
    src = defn.axis_sources
    axis_src = tuple((names.index(src[a][0]), src[a][1]) for a in defn.var_axes)
    shape_idx = sorted({i for i, _ in axis_src})
    parts = [f"x[{i}].shape" for i in shape_idx] + [f"x[{i}].dtype" for i in tensor_idx]
    if tensor_idx:
        parts.append(f"x[{tensor_idx[0]}].is_cuda")
    return parts, tensor_idx, axis_src


# A cached decision is packed as (fn, shape, dtype, inc, bad, general):
#   general set          -> general(x, fb)   (DPS, several outputs, scalar outputs)
#   fn None              -> a fallback decision: inc(); fb()
#   else                 -> a value-returning single-output hit, inlined here (one frame less)
_ENTRY_TEMPLATE = """
def make(cache, slow, name):
    def key(x):
        return {key}

    def entry(x, fb):
        try:
            fn, s0, d0, inc, bad, gen = cache[{key}]
        except Exception:
            return slow(name, x, fb)
        if gen is not None:
            return gen(x, fb)
        if fn is None:
            inc()
            return fb()
        try:
            r = fn(*x)
        except Exception as e:
            return bad(x, fb, e, None)
        try:
            if r.shape == s0 and r.dtype is d0:
                inc()
                return r
        except AttributeError:
            pass
        return bad(x, fb, None, r)
    return key, entry
"""


def _generate_entry(name: str, parts: List[str], cache: Dict[Any, Callable]):
    """Generate ``key(x)`` and the hot-path ``entry(x, fb)`` with the key expression inlined."""
    if not parts:
        expr = "None"
    else:
        # x[i] read once per input: bind it to a local (a0, a1...) in the expression
        used = sorted({int(p[2:p.index("]")]) for p in parts})
        expr = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
        for i in used:
            expr = expr.replace(f"x[{i}].", f"a{i}.")
        first = used[0]
        expr = expr.replace(f"a{first}.", f"(a{first} := x[{first}]).", 1)
        for i in used[1:]:
            expr = expr.replace(f"a{i}.", f"(a{i} := x[{i}]).", 1)
    code = _ENTRY_TEMPLATE.format(key=expr)
    ns: Dict[str, Any] = {}
    exec(compile(code, f"<fib entry {name}>", "exec"), ns)
    return ns["make"](cache, _runtime._slow, name)


_HIT_TEMPLATE = """
def make(fn, inc, bad{params}):
    def hit(x, fb):
{alloc}        try:
            r = fn(*x{outs})
        except Exception as e:
            return bad(x, fb, e, None)
{check}
    return hit
"""


def _make_hit(fn, dps: bool, specs: List[Tuple[Any, Any]], inc, bad, dev_idx: int):
    """Closure for a hit. ``specs``: per output (torch.Size or None, torch.dtype or None)."""
    n = len(specs)
    params, alloc, outs = [], "", ""
    env: Dict[str, Any] = {}
    for i, (shp, dt) in enumerate(specs):
        params += [f"s{i}", f"d{i}"]
        env[f"s{i}"], env[f"d{i}"] = shp, dt
    if dps:
        import torch

        env["empty"] = torch.empty
        params.append("empty")
        for i in range(n):
            alloc += f"        o{i} = empty(s{i}, dtype=d{i}, device=x[{dev_idx}].device)\n"
        outs = "".join(f", o{i}" for i in range(n))
        ret = "o0" if n == 1 else "(" + ", ".join(f"o{i}" for i in range(n)) + ")"
        check = f"        inc()\n        return {ret}\n"
    elif n == 1:
        conds = _conds("r", specs[0], 0)
        check = (f"        try:\n"
                 f"            if {conds}:\n"
                 f"                inc()\n"
                 f"                return r\n"
                 f"        except AttributeError:\n"
                 f"            if type(r) in (tuple, list) and len(r) == 1:\n"
                 f"                r = r[0]\n"
                 f"                if {_conds('r', specs[0], 0, safe=True)}:\n"
                 f"                    inc()\n"
                 f"                    return r\n"
                 f"        return bad(x, fb, None, r)\n")
    else:
        conds = " and ".join(_conds(f"r[{i}]", s, i) for i, s in enumerate(specs))
        check = (f"        try:\n"
                 f"            if (type(r) is tuple or type(r) is list) and len(r) == {n} and {conds}:\n"
                 f"                inc()\n"
                 f"                return r\n"
                 f"        except Exception:\n"
                 f"            pass\n"
                 f"        return bad(x, fb, None, r)\n")
    code = _HIT_TEMPLATE.format(params="".join(", " + p for p in params), alloc=alloc,
                                outs=outs, check=check)
    ns: Dict[str, Any] = {}
    exec(compile(code, "<fib decision>", "exec"), ns)
    return ns["make"](fn, inc, bad, *[env[p] for p in params])


def _conds(r: str, spec, i: int, safe: bool = False) -> str:
    shp, dt = spec
    c = []
    if shp is not None:
        c.append(f"getattr({r}, 'shape', None) == s{i}" if safe else f"{r}.shape == s{i}")
    if dt is not None:
        c.append(f"getattr({r}, 'dtype', None) is d{i}" if safe else f"{r}.dtype is d{i}")
    if not c:
        c.append(f"{r} is not None")
    return " and ".join(c)


def _make_fallback(inc):
    def fallback_decision(x, fb):
        inc()
        return fb()

    fallback_decision.fib_pack = (None, None, None, inc, None, None)
    return fallback_decision


def _pack(d) -> tuple:
    p = getattr(d, "fib_pack", None)
    return p if p is not None else (None, None, None, None, None, d)


def _fits(r, spec) -> bool:
    shp, dt = spec
    return (shp is None or getattr(r, "shape", None) == shp) and (dt is None or getattr(r, "dtype", None) is dt)


def _describe_bad(result, specs) -> str:
    want = ", ".join(f"{tuple(s) if s is not None else 'scalar'}:{str(d).removeprefix('torch.') if d else '?'}"
                     for s, d in specs)
    if isinstance(result, (tuple, list)):
        got = ", ".join(f"{tuple(getattr(r, 'shape', ()))}:{str(getattr(r, 'dtype', type(r).__name__)).removeprefix('torch.')}"
                        for r in result)
        return f"returned {len(result)} outputs [{got}], expected {len(specs)} [{want}]"
    shp = getattr(result, "shape", None)
    got = f"{tuple(shp)}:{str(getattr(result, 'dtype', '')).removeprefix('torch.')}" if shp is not None \
        else type(result).__name__
    return f"returned {got}, expected [{want}]"


from . import runtime as _runtime  # noqa: E402  (bottom: runtime imports this module)
