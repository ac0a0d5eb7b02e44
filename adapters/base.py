"""The instrumentor contract shared by every fib-runtime adapter.

An *adapter* patches the functions an inference engine calls (FlashInfer's samplers, vLLM's
``TopKTopPSampler``, SGLang's sampler...) so that each call goes through fib-runtime's dispatcher
and tracer. Every adapter is an :class:`Instrumentor` (the shape of OpenTelemetry's
``BaseInstrumentor``)::

    from fib_runtime.adapters.flashinfer import FlashInferInstrumentor

    inst = FlashInferInstrumentor()
    report = inst.instrument()          # patches what exists, reports what is missing
    print(report.patched, report.missing)
    inst.instrument()                   # a repeat is a logged no-op: still one wrapper layer
    inst.uninstrument()                 # every original restored (``is``-identical)

Contract:

* **Targets are data.** A subclass lists :class:`Target` rows (module, dotted attribute, op key);
  it never writes per-target patch code. A target whose module or attribute does not exist is
  skipped and reported in :attr:`InstrumentReport.missing`, never raised.
* **Idempotent.** A registry ``(owner, attr) -> original`` makes sure there is exactly one wrapper
  layer whatever the number of ``instrument()`` calls (wrapt itself nests layers).
* **Originals restored exactly.** ``uninstrument()`` puts back the very objects it replaced
  (including names other modules bound with ``from x import f``), and only where our wrapper is
  still installed (someone who patched over us keeps their patch).
* **Deferred targets.** For a module that is not imported yet, a wrapt post-import hook patches it
  when it is imported (vLLM's plugin runs before vLLM imports FlashInfer). Hooks never raise.
* **Dependency check** before anything is patched: :meth:`Instrumentor.dependencies` returns
  :class:`Dependency` rows; an out-of-range version makes ``instrument()`` patch nothing.
* **Never break the engine.** Wrappers come from :func:`make_wrapper` (:mod:`.wrapper`, whose
  names this module re-exports): any failure in our own bookkeeping (binding arguments,
  recording, metrics, the dispatcher itself) runs the original with the original arguments. A
  contextvar depth counter (the re-entrancy guard) makes nested intercepted calls (FlashInfer's
  ``top_k_top_p_sampling_from_logits`` calling ``top_p_sampling_from_probs``) go straight to the
  original: dispatched and counted once.
"""

from __future__ import annotations

import importlib
import importlib.metadata as _md
import logging
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

import wrapt

from fib_runtime.adapters.wrapper import (  # re-exported: the adapters' API
    _DEPTH,
    STATS,
    Binder,
    Call,
    _warn_once,
    in_intercepted_call,
    is_fib_wrapper,
    make_wrapper,
    note_min_top_k,
    originals_only,
    strict_mode,
)

__all__ = [
    "Target", "Dependency", "InstrumentReport", "Instrumentor", "installed_version", "check_dependency", "stats",
    # from .wrapper
    "_DEPTH", "STATS", "Binder", "Call", "_warn_once", "in_intercepted_call", "is_fib_wrapper", "make_wrapper",
    "note_min_top_k", "originals_only", "strict_mode",
]

log = logging.getLogger("fib_runtime.adapters")

# ---------------------------------------------------------------------------------------------
# data


@dataclass(frozen=True)
class Target:
    """One binding to patch.

    Args:
        module: the module that holds the binding (``"flashinfer.sampling"``).
        attr: the attribute, dotted for class members (``"BatchDecodeWithPagedKVCacheWrapper.run"``).
        op: key of the op spec the adapter builds the wrapper from (several targets may share one).
        sweep_aliases: also replace every ``from module import attr`` copy found in the adapter's
            alias scopes of ``sys.modules`` (form B bindings).
        note: free text, shown in reports.
    """

    module: str
    attr: str
    op: str
    sweep_aliases: bool = True
    note: str = ""

    @property
    def path(self) -> str:
        return f"{self.module}:{self.attr}"


@dataclass(frozen=True)
class Dependency:
    """A library an adapter patches, and the versions it supports (``min <= v < max``)."""

    module: str
    dists: tuple[str, ...] = ()
    min: Optional[str] = None
    max: Optional[str] = None  # exclusive

    def __str__(self) -> str:
        spec = ",".join(x for x in (self.min and f">={self.min}", self.max and f"<{self.max}") if x)
        return f"{(self.dists or (self.module,))[0]}{spec}"


@dataclass
class InstrumentReport:
    """What one ``instrument()`` call did."""

    adapter: str
    patched: list[str] = field(default_factory=list)     # target paths wrapped now
    already: list[str] = field(default_factory=list)     # already wrapped by us (idempotence)
    deferred: list[str] = field(default_factory=list)    # module not imported yet: hook set
    missing: list[str] = field(default_factory=list)     # "path (reason)"
    aliases: list[str] = field(default_factory=list)     # "module.name" copies replaced
    refused: Optional[str] = None                        # dependency check failed: nothing done

    def as_dict(self) -> dict:
        return dict(self.__dict__)


# ---------------------------------------------------------------------------------------------
# version helpers


def _vtuple(v: str) -> tuple:
    out = []
    for part in v.replace("+", ".").split("."):
        num = "".join(ch for ch in part if ch.isdigit()) if part[:1].isdigit() else ""
        if not num:
            break
        out.append(int(num))
    return tuple(out)


def installed_version(dep: Dependency) -> Optional[str]:
    """Version from the distribution metadata, else the module's ``__version__``, else None."""
    for dist in dep.dists:
        try:
            return _md.version(dist)
        except _md.PackageNotFoundError:
            continue
    mod = sys.modules.get(dep.module)
    return getattr(mod, "__version__", None) if mod is not None else None


def check_dependency(dep: Dependency) -> Optional[str]:
    """None when ``dep`` is satisfied (or its version cannot be read), else the reason."""
    v = installed_version(dep)
    if v is None:
        return None  # unknown version (e.g. a trimmed FlashInfer copy): allowed, targets decide
    tv = _vtuple(v)
    if dep.min and tv < _vtuple(dep.min):
        return f"{dep} required, {v} installed"
    if dep.max and tv >= _vtuple(dep.max):
        return f"{dep} required, {v} installed"
    return None


# ---------------------------------------------------------------------------------------------
# the instrumentor


def _resolve_owner(module: Any, attr: str) -> tuple[Any, str]:
    owner = module
    parts = attr.split(".")
    for p in parts[:-1]:
        owner = getattr(owner, p)
    return owner, parts[-1]


def _raw(owner: Any, name: str) -> Any:
    """The attribute as stored (descriptor for classes, walking the MRO), or raise AttributeError."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
        raise AttributeError(name)
    return getattr(owner, name)


class Instrumentor:
    """Base of every adapter; subclasses provide :meth:`targets`, :meth:`spec` and
    :meth:`dependencies`. One instance per subclass (a singleton, like OpenTelemetry's).
    """

    name = "base"
    #: module-name prefixes searched for ``from x import f`` copies of patched functions
    alias_scopes: tuple[str, ...] = ()
    _instances: dict = {}

    def __new__(cls, *a: Any, **k: Any):
        inst = Instrumentor._instances.get(cls)
        if inst is None:
            inst = super().__new__(cls)
            inst._init_state()
            Instrumentor._instances[cls] = inst
        return inst

    def _init_state(self) -> None:
        self._lock = threading.RLock()
        self._instrumented = False
        self._generation = 0
        # (id(owner), attr) -> (owner, attr, original, wrapper, owned) ; owned: attr was in owner.__dict__
        self._patches: dict[tuple[int, str], tuple[Any, str, Any, Any, bool]] = {}
        self._wrappers: dict[str, Callable] = {}
        self._dispatcher = None
        self._recorder = None
        self._registrar = None
        self.last_report: Optional[InstrumentReport] = None

    # -- to override ---------------------------------------------------------------------------
    def dependencies(self) -> Sequence[Dependency]:
        return ()

    def targets(self) -> Sequence[Target]:
        raise NotImplementedError

    def spec(self, op: str) -> Any:
        """The op spec for ``op``: an object with ``bind(instance, args, kwargs) -> Call | None``
        (and optionally ``transparent = True``), or with ``observe(instance, args, kwargs,
        result)`` instead, see :func:`make_wrapper`."""
        raise NotImplementedError

    def wrapper_for(self, target: Target) -> Callable:
        """The wrapt wrapper for ``target`` (one per op, shared by its targets and aliases)."""
        w = self._wrappers.get(target.op)
        if w is None:
            sp = self.spec(target.op)
            w = make_wrapper(target.op, getattr(sp, "bind", None), self._dispatcher, self._recorder,
                             registrar=self._registrar, transparent=bool(getattr(sp, "transparent", False)),
                             observe=getattr(sp, "observe", None))
            self._wrappers[target.op] = w
        return w

    def _after_patch(self, target: Target, owner: Any, attr: str) -> None:
        """Hook for subclasses (e.g. fix existing instances). Must not raise."""

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def is_instrumented(self) -> bool:
        return self._instrumented

    def instrument(
        self,
        dispatcher: Optional[Callable] = None,
        recorder: Optional[Callable] = None,
        *,
        registrar: Optional[Callable] = None,
        defer: bool = True,
        check_dependencies: bool = True,
    ) -> InstrumentReport:
        """Patch every target that exists; set post-import hooks for modules not imported yet.

        Args:
            dispatcher: ``dispatch(definition_name, inputs, fallback)``; None = no dispatch.
            recorder: ``record(definition_name, inputs)``; None = no tracing.
            registrar: ``register(definition_dict)``, once per generated definition name.
            defer: register post-import hooks for targets whose module is not imported yet
                (otherwise they are imported now, if importable).
            check_dependencies: refuse to patch when a dependency's version is out of range.
        """
        with self._lock:
            report = InstrumentReport(self.name)
            if self._instrumented:
                log.warning("fib-runtime: %s already instrumented (no-op)", self.name)
                report.already = [t.path for t in self.targets()]
                return report
            if check_dependencies:
                for dep in self.dependencies():
                    reason = check_dependency(dep)
                    if reason:
                        report.refused = reason
                        log.warning("fib-runtime: %s not instrumented: %s", self.name, reason)
                        self.last_report = report
                        return report
            self._dispatcher, self._recorder, self._registrar = dispatcher, recorder, registrar
            self._wrappers.clear()
            self._generation += 1
            self._instrumented = True
            by_module: dict[str, list[Target]] = {}
            for t in self.targets():
                by_module.setdefault(t.module, []).append(t)
            for modname, ts in by_module.items():
                mod = sys.modules.get(modname)
                if mod is None and not defer:
                    try:
                        mod = importlib.import_module(modname)
                    except Exception as e:  # noqa: BLE001 - any import failure = missing
                        report.missing += [f"{t.path} (import failed: {type(e).__name__})" for t in ts]
                        continue
                if mod is None:
                    self._defer(modname, ts)
                    report.deferred += [t.path for t in ts]
                    continue
                self._patch_module(mod, ts, report)
            self._sweep_aliases(report)
            self.last_report = report
            if report.missing:
                log.info("fib-runtime: %s: %d targets missing: %s", self.name, len(report.missing),
                         ", ".join(report.missing))
            return report

    def uninstrument(self) -> None:
        """Restore every original we replaced (only where our wrapper is still in place)."""
        with self._lock:
            if not self._instrumented:
                log.warning("fib-runtime: %s is not instrumented (no-op)", self.name)
                return
            self._instrumented = False
            self._generation += 1  # disarms pending post-import hooks
            for owner, attr, original, wrapper, owned in list(self._patches.values()):
                try:
                    current = vars(owner).get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
                    if current is not wrapper:
                        continue  # someone patched over us: leave theirs
                    if owned:
                        setattr(owner, attr, original)
                    else:
                        delattr(owner, attr)
                except Exception:  # pragma: no cover - defensive
                    log.warning("fib-runtime: could not restore %r.%s", owner, attr, exc_info=True)
            self._patches.clear()
            self._wrappers.clear()
            self._on_uninstrument()

    def _on_uninstrument(self) -> None:
        """Hook for subclasses (e.g. restore instances). Must not raise."""

    # -- patching ------------------------------------------------------------------------------
    def _defer(self, modname: str, ts: list[Target]) -> None:
        gen = self._generation

        def hook(mod: Any) -> None:
            try:
                with self._lock:
                    if gen != self._generation or not self._instrumented:
                        return
                    rep = InstrumentReport(self.name)
                    self._patch_module(mod, ts, rep)
                    self._sweep_aliases(rep)
                    if self.last_report is not None:
                        self.last_report.patched += rep.patched
                        self.last_report.missing += rep.missing
                        self.last_report.aliases += rep.aliases
            except Exception:  # an exception here would fail the engine's import
                log.warning("fib-runtime: deferred patch of %s failed", modname, exc_info=True)

        wrapt.register_post_import_hook(hook, modname)

    def _patch_module(self, mod: Any, ts: Iterable[Target], report: InstrumentReport) -> None:
        for t in ts:
            try:
                owner, attr = _resolve_owner(mod, t.attr)
                raw = _raw(owner, attr)
            except AttributeError:
                report.missing.append(f"{t.path} (absent)")
                continue
            if raw is None or not (callable(raw) or hasattr(raw, "__get__")):
                report.missing.append(f"{t.path} (not callable: {type(raw).__name__})")
                continue  # e.g. SGLang sets a kernel name to None where a platform has none
            try:
                if self._patch_one(owner, attr, raw, t):
                    report.patched.append(t.path)
                else:
                    report.already.append(t.path)
                self._after_patch(t, owner, attr)
            except Exception as e:  # noqa: BLE001
                report.missing.append(f"{t.path} (patch failed: {e!r})")

    def _patch_one(self, owner: Any, attr: str, raw: Any, t: Target) -> bool:
        key = (id(owner), attr)
        if is_fib_wrapper(raw):
            return False  # one layer only, whoever installed it
        if key in self._patches and self._patches[key][3] is raw:
            return False
        owned = (attr in vars(owner)) if isinstance(owner, type) else True
        wrapper = wrapt.FunctionWrapper(raw, self.wrapper_for(t))
        setattr(owner, attr, wrapper)
        self._patches[key] = (owner, attr, raw, wrapper, owned)
        return True

    def _sweep_aliases(self, report: InstrumentReport) -> None:
        """Replace module-level copies (``from x import f``) of patched plain functions."""
        if not self.alias_scopes:
            return
        swept = {id(orig): w for (_o, _a, orig, w, _own) in list(self._patches.values())
                 if not isinstance(_o, type)}
        if not swept:
            return
        scopes = self.alias_scopes
        for modname, mod in list(sys.modules.items()):
            if mod is None or not modname.startswith(scopes):
                continue
            try:
                d = vars(mod)
            except TypeError:
                continue
            for name, value in list(d.items()):
                w = swept.get(id(value))
                if w is None or value is w:
                    continue
                key = (id(mod), name)
                if key in self._patches:
                    continue
                try:
                    setattr(mod, name, w)
                except Exception:  # pragma: no cover
                    continue
                self._patches[key] = (mod, name, value, w, True)
                report.aliases.append(f"{modname}.{name}")

    # -- introspection -------------------------------------------------------------------------
    def patched_paths(self) -> list[str]:
        return sorted(f"{getattr(o, '__name__', o)}.{a}" for (o, a, *_r) in self._patches.values())

    def original_of(self, owner: Any, attr: str) -> Any:
        entry = self._patches.get((id(owner), attr))
        return entry[2] if entry else None


def stats() -> dict[str, dict[str, int]]:
    """Snapshot of the interception counters: ``{op: {"calls": n, "dispatched": n, ...}}``."""
    return STATS.snapshot()
