"""Runtime, part 2: per-key decisions, selection against the table, quarantine.

The slow path (first call per key) lands in :meth:`DecideMixin._decide`, under the runtime's
lock: find or make the definition's entry, compute the key, fall back during CUDA-graph capture,
else validate the inputs (:meth:`signature_of`), select (:meth:`select`, the rule of
:mod:`.table` plus built-ins) and cache the packed decision. Failures of a chosen solution go to
:meth:`_on_bad`: quarantine for the process, count, log once, fall back (strict: raise).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import metrics
from .codegen import _Entry, _describe_bad, _fits, _key_parts, _make_fallback, _make_hit, _pack
from .table import Selection, empty_def_table

log = logging.getLogger("fib_runtime.dispatch")


class DecideMixin:
    """Decisions of :class:`~fib_runtime.dispatch.runtime.Runtime`."""

    def _entry(self, name: str) -> "_Entry":
        f = R._ENTRIES.get(name)
        if f is not None:
            return f.entry
        e = self._make_entry(name)
        R._ENTRIES[name] = e.call
        return e

    def _make_entry(self, name: str) -> "_Entry":
        defn = self.definitions.get(name)
        if defn is None:
            defn = self._generate(name)
        if defn is None or not self.definition_ok(name):
            return _Entry(name, None, [], empty_def_table(name, ()))
        parts, tidx, asrc = _key_parts(defn)
        tab = self.table.get(name) or empty_def_table(name, defn.var_axes)
        return _Entry(name, defn, parts, tab, tidx, asrc)

    def _generate(self, name: str):
        try:
            from ..definitions import generate

            raw = generate(name)
        except Exception:
            raw = None
        if raw is None:
            return None
        from ..schema import Definition

        try:
            defn = Definition.model_validate(raw)
        except Exception as e:
            self._log_once(("gen", name), "fib-runtime: generated definition %s is invalid: %s", name, e)
            return None
        with R._STATE_LOCK:
            R._REGISTERED.setdefault(name, defn)
        self._add_definition(defn)
        return defn

    def _decide(self, name: str, inputs) -> Callable:
        with self.lock:
            e = self._entry(name)
            try:
                k = e.key(inputs)
            except Exception as ex:  # inputs do not fit the definition at all
                why = f"inputs do not fit the definition ({type(ex).__name__}: {ex})"
                return self._fallback_decision(e, "fallback_mismatch", why)
            d = e.meta.get(k)
            if d is not None and k in e.cache:
                return d
            if R._capturing():
                inc = metrics.counter("fib_dispatch_total", name, "none", "fallback_capture").inc
                return _make_fallback(inc)
            d = self._new_decision(e, k, inputs)
            e.meta[k] = d
            e.cache[k] = _pack(d)
            return d

    def _fallback_decision(self, e: _Entry, outcome: str, why: str):
        inc = metrics.counter("fib_dispatch_total", e.name, "none", outcome).inc
        d = _make_fallback(inc)
        d.fib_solution = None
        d.fib_why = why
        return d

    def signature_of(self, e: _Entry, inputs) -> Tuple[Tuple[int, ...], Dict[str, int]]:
        """Validate ``inputs`` against the definition; return (signature, var-axis values)."""
        from ..inputs import dtype_name

        defn = e.definition
        if len(inputs) != len(defn.inputs):
            raise ValueError(f"{len(inputs)} inputs, definition has {len(defn.inputs)}")
        shapes = {}
        for (iname, spec), x in zip(defn.inputs.items(), inputs):
            if spec.shape is None or x is None:
                continue
            shp = tuple(x.shape)
            shapes[iname] = shp
            if spec.dtype not in ("unknown",) and dtype_name(x.dtype) != spec.dtype:
                raise ValueError(f"input {iname!r} is {dtype_name(x.dtype)}, definition says {spec.dtype}")
        axes = defn.axes_values(shapes)
        for iname, shp in shapes.items():
            spec = defn.inputs[iname].shape
            for ax, n in zip(spec, shp):
                cv = defn.const_axes.get(ax)
                if cv is not None and cv != n:
                    raise ValueError(f"input {iname!r}: const axis {ax}={cv}, got {n}")
        sig = tuple(int(axes[a]) for a in defn.var_axes)
        return sig, axes

    def usable(self, name: str) -> Optional[str]:
        """None when solution ``name`` can run here, else why not."""
        if name in self.quarantined:
            return f"quarantined ({self.quarantined[name]})"
        if not self.solution_ok(name):
            return "denied by allow/deny lists"
        if self.is_baseline(name):  # stands for the original: nothing to load
            return None
        if name not in self.solutions:
            return "solution not in the dataset"
        if name not in self.loaded:
            err = self.load_errors.get(name)
            if self.assume_loadable and not err:
                return None
            return f"failed to load: {err}" if err else "not loaded (run `fib warmup` or enable with warmup)"
        return None

    def is_baseline(self, name: str) -> bool:
        """True for a solution by author ``baseline``: the library API the call site already calls
        (flashinfer-bench's convention; ``fib bench --baseline`` writes them)."""
        sol = self.solutions.get(name)
        return sol is not None and sol.author == "baseline"

    def select(self, name: str, sig: Tuple[int, ...], inputs=None,
               supports_memo: Optional[Dict[str, bool]] = None) -> Selection:
        """Selection for ``sig`` (traced winners, then built-ins); see :mod:`.table`."""
        tab = self.table.get(name) or empty_def_table(name, self.definitions[name].var_axes
                                                      if name in self.definitions else ())
        sel = tab.select(sig, self.usable, self.max_distance)
        if sel.solution is not None or self.builtins != "default":
            return sel
        skipped = list(sel.skipped)
        for bname in self.builtin_by_def.get(name, ()):
            why = self.usable(bname)
            if why is None and tab.is_tainted(bname, sig):
                why = "failed in this bucket"
            if why is None and supports_memo is not None and bname in supports_memo:
                if not supports_memo[bname]:
                    why = "supports(inputs) is False"
            elif why is None and inputs is not None:
                try:
                    ok = bool(self.builtin_supports[bname](inputs))
                except Exception as ex:
                    ok, why = False, f"supports(inputs) raised {type(ex).__name__}"
                if supports_memo is not None:
                    supports_memo[bname] = ok
                if not ok and why is None:
                    why = "supports(inputs) is False"
            if why:
                skipped.append((bname, why))
                continue
            return Selection(bname, "builtin", "built-in solution (no traced winner; FIB_BUILTINS=default)"
                             + ("" if inputs is not None else ", if supports(inputs)"), tuple(skipped))
        return Selection(None, "miss", sel.detail, tuple(skipped))

    def _new_decision(self, e: _Entry, k, inputs) -> Callable:
        if e.definition is None:
            why = "unknown definition" if self.definition_ok(e.name) else "definition denied"
            return self._fallback_decision(e, "fallback_miss", why)
        try:
            sig, axes = self.signature_of(e, inputs)
        except Exception as ex:
            self._log_once(("mismatch", e.name, str(ex)), "fib-runtime: %s: %s; running the original",
                           e.name, ex)
            return self._fallback_decision(e, "fallback_mismatch", str(ex))
        return self._decision_for(e, sig, axes, inputs, {})

    def _decision_for(self, e: _Entry, sig, axes, inputs, memo: Dict[str, bool]) -> Callable:
        """Decision for validated inputs with signature ``sig`` (``inputs`` may be None: then
        built-in ``supports`` answers come from ``memo``)."""
        sel = self.select(e.name, sig, inputs, memo)
        if sel.solution is None:
            quarantined = any(w.startswith("quarantined") for _, w in sel.skipped)
            d = self._fallback_decision(e, "quarantined" if quarantined else "fallback_miss", sel.detail)
        elif self.is_baseline(sel.solution):
            # The measured winner is the baseline, i.e. the original call: run it unchanged.
            d = self._fallback_decision(e, "original_best", f"{sel.solution} (baseline = the original) "
                                                            f"is the fastest: {sel.detail}")
        else:
            d = self._hit_decision(e, sel, axes, inputs)
        d.fib_selection = sel
        d.fib_sig, d.fib_axes, d.fib_supports = sig, axes, memo
        return d

    def _hit_decision(self, e: _Entry, sel: Selection, axes, inputs) -> Callable:
        from ..inputs import torch_dtype

        import torch

        defn = e.definition
        ld = self.loaded[sel.solution]
        specs = []
        for oname, spec in defn.outputs.items():
            shp = defn.shape_of(oname, axes)
            try:
                dt = torch_dtype(spec.dtype)
            except Exception:
                dt = None
            if ld.dps and (shp is None or dt is None):
                return self._fallback_decision(e, "fallback_mismatch",
                                               f"DPS solution but output {oname!r} has no shape/dtype")
            specs.append((torch.Size(shp) if shp is not None else None, dt))
        dev_idx = e.tensor_idx[0] if e.tensor_idx else 0
        inc = metrics.counter("fib_dispatch_total", e.name, sel.solution, "hit").inc
        sol_name = sel.solution

        def bad(x, fb, exc, result, _name=sol_name, _e=e):
            if (exc is None and len(specs) == 1 and type(result) in (tuple, list) and len(result) == 1
                    and _fits(result[0], specs[0])):
                inc()  # a 1-tuple for a single output: accepted, unwrapped
                return result[0]
            return self._on_bad(_e, _name, x, fb, exc, result, specs)

        d = _make_hit(ld.fn, ld.dps, specs, inc, bad, dev_idx)
        if not ld.dps and len(specs) == 1 and specs[0][0] is not None and specs[0][1] is not None:
            d.fib_pack = (ld.fn, specs[0][0], specs[0][1], inc, bad, None)
        d.fib_solution = sol_name
        d.fib_selection = sel
        return d

    # ---- failures -------------------------------------------------------------------------------
    def _on_bad(self, e: _Entry, name: str, x, fb, exc, result, specs):
        if exc is not None:
            reason, msg = "raised", f"{type(exc).__name__}: {exc}"
        else:
            reason, msg = "bad_output", _describe_bad(result, specs)
        self._quarantine(e.name, name, reason, msg)
        metrics.counter("fib_dispatch_total", e.name, name, "fallback_error").inc()
        if self.strict:
            raise R.SolutionError(f"solution {name!r} for {e.name}: {reason}: {msg}") from exc
        return fb()

    def _quarantine(self, definition: str, name: str, reason: str, msg, content_hash=None) -> None:
        with self.lock:
            if name in self.quarantined:
                return
            self.quarantined[name] = reason
            sol = self.solutions.get(name)
            self._quarantined_hash[name] = content_hash or (sol.content_hash() if sol is not None else "")
            self.loaded.pop(name, None)
            for f in list(R._ENTRIES.values()):
                ent = f.entry
                for k, d in list(ent.meta.items()):
                    if getattr(d, "fib_solution", None) == name:
                        ent.cache.pop(k, None)
                        ent.meta.pop(k, None)
        metrics.counter("fib_quarantine_total", definition, name, reason).inc()
        self._gauge_loaded()
        log.warning("fib-runtime: solution %s (%s) quarantined for this process: %s: %s; "
                    "the original runs instead", name, definition, reason, msg)

    def _log_once(self, key, fmt, *args) -> None:
        if key in self._logged:
            return
        self._logged.add(key)
        log.warning(fmt, *args)

    # ---- introspection ---------------------------------------------------------------------------
    def decisions(self) -> List[Dict[str, Any]]:
        """The decisions made so far: definition, key, solution, rule."""
        out = []
        for name, f in list(R._ENTRIES.items()):
            for k, d in list(f.entry.meta.items()):
                sel = getattr(d, "fib_selection", None)
                out.append({"definition": name, "key": repr(k), "solution": getattr(d, "fib_solution", None),
                            "rule": sel.rule if sel else "fallback",
                            "detail": sel.detail if sel else getattr(d, "fib_why", "")})
        return out


from . import runtime as R  # noqa: E402  (bottom: runtime imports this module)
