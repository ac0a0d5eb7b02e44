"""The dispatch table: per definition and signature, which solution wins, built from traces.

A *signature* is the tuple of a call's var-axis values in the Definition's axis order
(``rmsnorm_h4096`` at batch 37 has signature ``(37,)``). The table is built once from a
dataset's evaluation traces and never mutated; a reload builds a new one.

Selection rule (also printed by ``fib explain`` and written up in ``docs/dispatch.md``):

1. **Rows used.** Only evaluation traces whose environment's hardware class equals the
   runtime's (``normalize_hardware``; ``*`` accepts every class) and whose solution passes the
   allow/deny lists. A row counts as a *pass* when its status is ``PASSED``; any other status
   (``INCORRECT_NUMERICAL``, ``RUNTIME_ERROR``, ...) is a *failure* of that solution there.
2. **Exact signature.** If solutions passed at exactly this signature, the fastest one wins
   (median ``latency_ms`` of its PASSED rows). A solution with any failure at this signature is
   never chosen for it, even if another run passed.
3. **Bucket.** Every var-axis value ``v`` falls in the power-of-two bucket ``v.bit_length()``
   (0 | 1 | 2-3 | 4-7 | 8-15 | ...); a signature's bucket is the tuple of those. A solution with
   a failure anywhere in a bucket is *tainted* there and never chosen for an unseen signature
   in it. Within a bucket the winner is the solution that won the most exact signatures of the
   bucket, then the highest geometric-mean ``speedup_factor`` over its rows there, then the name.
4. **Nearest bucket.** If the call's own bucket has no untainted winner, the nearest bucket
   (L1 distance between bucket indices, ties to the larger bucket) that has one lends its winner,
   provided that solution is not tainted in the call's own bucket. ``FIB_BUCKET_MAX_DISTANCE``
   caps the distance (0 = no cap).
5. Otherwise: a built-in solution (``FIB_BUILTINS=default``) or the caller's original.

At each step a candidate that cannot be used in this process (quarantined, not loaded, denied)
is skipped and the next one in rank order is tried.
"""

from __future__ import annotations

import fnmatch
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

from .hardware import normalize_hardware

Sig = Tuple[int, ...]


def bucket_of(sig: Sequence[int]) -> Sig:
    """Power-of-two bucket of a signature: ``bit_length`` of each var-axis value."""
    return tuple(int(v).bit_length() for v in sig)


def bucket_range(b: int) -> Tuple[int, int]:
    """Inclusive value range of bucket index ``b`` (0 -> [0, 0], 3 -> [4, 7])."""
    return (0, 0) if b == 0 else (1 << (b - 1), (1 << b) - 1)


def matches(name: str, allow: Sequence[str], deny: Sequence[str]) -> bool:
    """allow/deny fnmatch lists: deny wins; an empty allow list allows everything."""
    if any(fnmatch.fnmatchcase(name, p) for p in deny):
        return False
    return not allow or any(fnmatch.fnmatchcase(name, p) for p in allow)


@dataclass(frozen=True)
class Selection:
    """The answer of :meth:`DefTable.select`: a solution name (or None) and why."""

    solution: Optional[str]
    rule: str  # exact | bucket | nearest | builtin | miss
    detail: str
    skipped: Tuple[Tuple[str, str], ...] = ()  # (solution, reason) passed over on the way


@dataclass(frozen=True)
class DefTable:
    """Immutable selection data of one definition (see module docstring)."""

    definition: str
    var_axes: Tuple[str, ...]
    exact: Mapping[Sig, Tuple[str, ...]]              # ranked PASSED solutions per signature
    exact_latency: Mapping[Sig, Mapping[str, float]]  # median latency (ms) per signature and solution
    failed_exact: Mapping[Sig, FrozenSet[str]]
    bucket_rank: Mapping[Sig, Tuple[str, ...]]        # ranked untainted solutions per bucket
    tainted: Mapping[Sig, FrozenSet[str]]
    buckets: Tuple[Sig, ...]                          # buckets that have a ranked winner
    rows: int = 0
    ignored: Mapping[str, int] = field(default_factory=dict)  # reason -> count

    @property
    def solutions(self) -> FrozenSet[str]:
        """Every solution that can win somewhere."""
        out = set()
        for names in self.exact.values():
            out.update(names)
        for names in self.bucket_rank.values():
            out.update(names)
        return frozenset(out)

    def select(self, sig: Sig, usable: Callable[[str], Optional[str]] = lambda n: None,
               max_distance: int = 0) -> Selection:
        """Pick the solution for ``sig``. ``usable(name)`` returns None or why it cannot be used."""
        skipped: List[Tuple[str, str]] = []
        seen: set = set()
        failed = self.failed_exact.get(sig, frozenset())

        def skip(name: str, why: str) -> None:
            if name not in seen:
                seen.add(name)
                skipped.append((name, why))

        def ok(name: str) -> bool:
            if name in seen:
                return False
            if name in failed:
                skip(name, "failed at this signature")
                return False
            why = usable(name)
            if why:
                skip(name, why)
                return False
            return True

        for name in sorted(failed):
            skip(name, "failed at this signature")
        for name in self.exact.get(sig, ()):
            if ok(name):
                lat = self.exact_latency[sig][name]
                return Selection(name, "exact", f"fastest PASSED at {self._fmt(sig)} "
                                 f"({lat:.4g} ms)", tuple(skipped))
        b = bucket_of(sig)
        own_taint = self.tainted.get(b, frozenset())
        for name in self.bucket_rank.get(b, ()):
            if ok(name):
                return Selection(name, "bucket", f"winner of bucket {self._fmt_bucket(b)}",
                                 tuple(skipped))
        for b2 in sorted(self.buckets, key=lambda x: (_dist(b, x), -sum(x))):
            d = _dist(b, b2)
            if b2 == b or (max_distance and d > max_distance):
                continue
            for name in self.bucket_rank[b2]:
                if name in own_taint:
                    skip(name, f"failed in bucket {self._fmt_bucket(b)}")
                    continue
                if ok(name):
                    return Selection(name, "nearest", f"winner of nearest bucket "
                                     f"{self._fmt_bucket(b2)} (distance {d})", tuple(skipped))
        return Selection(None, "miss", "no known-correct solution for this signature or any "
                         "usable bucket", tuple(skipped))

    def is_tainted(self, name: str, sig: Sig) -> bool:
        """Whether ``name`` has a failure in the bucket of ``sig`` (built-ins respect it too)."""
        return name in self.tainted.get(bucket_of(sig), frozenset())

    def _fmt(self, sig: Sig) -> str:
        return ", ".join(f"{a}={v}" for a, v in zip(self.var_axes, sig)) or "()"

    def _fmt_bucket(self, b: Sig) -> str:
        parts = []
        for a, i in zip(self.var_axes, b):
            lo, hi = bucket_range(i)
            parts.append(f"{a}∈[{lo},{hi}]")
        return "(" + ", ".join(parts) + ")"


def _dist(a: Sig, b: Sig) -> int:
    return sum(abs(x - y) for x, y in zip(a, b))


@dataclass(frozen=True)
class Table:
    """All definitions' selection data plus where it came from."""

    hardware: str
    defs: Mapping[str, DefTable]
    generation: int = 0
    source: str = ""

    def get(self, name: str) -> Optional[DefTable]:
        return self.defs.get(name)


def build_def_table(definition: str, var_axes: Sequence[str], traces: Iterable,
                    hardware: str, solution_ok: Callable[[str], bool] = lambda n: True) -> DefTable:
    """Build one definition's :class:`DefTable` from its evaluation traces (see module rules)."""
    var_axes = tuple(var_axes)
    lat: Dict[Sig, Dict[str, List[float]]] = defaultdict(lambda: defaultdict(list))
    spd: Dict[Sig, Dict[str, List[float]]] = defaultdict(lambda: defaultdict(list))
    failed: Dict[Sig, set] = defaultdict(set)
    ignored: Dict[str, int] = defaultdict(int)
    rows = 0
    for t in traces:
        ev = t.evaluation
        if ev is None or not t.solution:
            continue
        if hardware != "*" and normalize_hardware(ev.environment.hardware) != hardware:
            ignored["other hardware"] += 1
            continue
        if not solution_ok(t.solution):
            ignored["solution denied"] += 1
            continue
        try:
            sig = tuple(int(t.workload.axes[a]) for a in var_axes)
        except KeyError:
            ignored["axes incomplete"] += 1
            continue
        rows += 1
        status = getattr(ev.status, "value", ev.status)
        if status == "PASSED" and ev.performance is not None:
            lat[sig][t.solution].append(float(ev.performance.latency_ms))
            spd[sig][t.solution].append(float(ev.performance.speedup_factor))
        else:
            failed[sig].add(t.solution)
            ignored[f"status {status}"] += 1
    exact: Dict[Sig, Tuple[str, ...]] = {}
    exact_latency: Dict[Sig, Dict[str, float]] = {}
    for sig, per in lat.items():
        med = {n: statistics.median(v) for n, v in per.items() if n not in failed.get(sig, ())}
        if med:
            exact[sig] = tuple(sorted(med, key=lambda n: (med[n], n)))
            exact_latency[sig] = med
    tainted: Dict[Sig, set] = defaultdict(set)
    for sig, names in failed.items():
        tainted[bucket_of(sig)].update(names)
    wins: Dict[Sig, Dict[str, int]] = defaultdict(lambda: defaultdict(int))
    logs: Dict[Sig, Dict[str, List[float]]] = defaultdict(lambda: defaultdict(list))
    for sig, ranked in exact.items():
        b = bucket_of(sig)
        wins[b][ranked[0]] += 1
        for n in ranked:
            for s in spd[sig][n]:
                logs[b][n].append(math.log(s) if s > 0 else -1e9)
    bucket_rank: Dict[Sig, Tuple[str, ...]] = {}
    for b, per in logs.items():
        names = [n for n in per if n not in tainted.get(b, ())]
        if not names:
            continue
        gm = {n: sum(per[n]) / len(per[n]) for n in names}
        bucket_rank[b] = tuple(sorted(names, key=lambda n: (-wins[b].get(n, 0), -gm[n], n)))
    return DefTable(
        definition=definition, var_axes=var_axes, exact=exact, exact_latency=exact_latency,
        failed_exact={s: frozenset(v) for s, v in failed.items()},
        bucket_rank=bucket_rank, tainted={b: frozenset(v) for b, v in tainted.items()},
        buckets=tuple(sorted(bucket_rank)), rows=rows, ignored=dict(ignored))


def build_table(dataset, hardware: str, solution_ok: Callable[[str], bool] = lambda n: True,
                definition_ok: Callable[[str], bool] = lambda n: True, generation: int = 0) -> Table:
    """Build the :class:`Table` of every definition in ``dataset`` (a :class:`~fib_runtime.store.Dataset`)."""
    defs: Dict[str, DefTable] = {}
    for name, d in dataset.definitions.items():
        if not definition_ok(name):
            continue
        defs[name] = build_def_table(name, d.var_axes, dataset.traces_for(name), hardware, solution_ok)
    return Table(hardware=hardware, defs=defs, generation=generation, source=str(getattr(dataset, "root", "")))


def empty_def_table(definition: str, var_axes: Sequence[str]) -> DefTable:
    return DefTable(definition, tuple(var_axes), {}, {}, {}, {}, {}, ())
