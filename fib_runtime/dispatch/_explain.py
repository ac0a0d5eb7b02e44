"""Human explanation of a dispatch decision (``fib explain`` and :func:`fib_runtime.dispatch.explain`)."""

from __future__ import annotations

from typing import Dict

from .table import bucket_of, bucket_range

RULE = """\
selection rule (docs/dispatch.md):
  rows      evaluation traces of this hardware class; PASSED = pass, any other status = failure
  exact     fastest PASSED solution at exactly this signature (median latency_ms); a solution
            that failed at this signature is never chosen for it
  bucket    power-of-two bucket per var axis (v.bit_length()); a solution with a failure in the
            bucket is tainted there; winner = most exact wins in the bucket, then geometric-mean
            speedup_factor, then name
  nearest   else the nearest bucket (L1 distance of bucket indices, ties to the larger) lends its
            winner, unless that solution is tainted in the call's own bucket
  builtin   else a built-in solution whose supports(inputs) is true (FIB_BUILTINS=default)
  miss      else the original (fallback) runs
  unusable candidates (quarantined, denied, not in the dataset, failed to load) are skipped"""


def explain_text(rt, name: str, axes: Dict[str, int]) -> str:
    lines = []
    defn = rt.definitions.get(name)
    if defn is None:
        defn = rt._generate(name)
    if defn is None:
        return f"{name}: unknown definition (not in the dataset, not registered, no generator): " \
               f"calls run the original\n\n{RULE}"
    if not rt.definition_ok(name):
        return f"{name}: denied by FIB_ALLOW_DEFINITIONS/FIB_DENY_DEFINITIONS: calls run the original"
    missing = [a for a in defn.var_axes if a not in axes]
    extra = [a for a in axes if a not in defn.var_axes]
    if missing or extra:
        raise ValueError(f"{name}: var axes are {', '.join(defn.var_axes) or '(none)'}"
                         + (f"; missing {', '.join(missing)}" if missing else "")
                         + (f"; not var axes: {', '.join(extra)}" if extra else ""))
    sig = tuple(int(axes[a]) for a in defn.var_axes)
    b = bucket_of(sig)
    brange = ", ".join(f"{a}∈[{bucket_range(i)[0]},{bucket_range(i)[1]}]" for a, i in zip(defn.var_axes, b))
    tab = rt.table.get(name)
    lines.append(f"definition  {name}  (hardware class {rt.hardware}, table generation {rt.generation})")
    lines.append(f"signature   {', '.join(f'{a}={v}' for a, v in zip(defn.var_axes, sig)) or '()'}"
                 f"  bucket ({brange})")
    if tab is not None:
        ign = ", ".join(f"{k}: {v}" for k, v in sorted(tab.ignored.items())) or "none"
        lines.append(f"traces      {tab.rows} rows used; not counted as passes: {ign}")
        lines.append(f"            {len(tab.exact)} signatures with a PASSED winner, "
                     f"{len(tab.buckets)} buckets with a winner")
    else:
        lines.append("traces      none for this definition")
    sel = rt.select(name, sig, None)
    if sel.solution is None:
        lines.append(f"decision    ORIGINAL (fallback) [{sel.rule}]: {sel.detail}")
    else:
        lines.append(f"decision    {sel.solution}  [{sel.rule}] {sel.detail}")
        if rt.is_baseline(sel.solution):
            lines.append("            -> a baseline: the ORIGINAL call runs unchanged (outcome original_best)")
    if tab is not None:
        by_data = tab.select(sig, lambda n: None, rt.max_distance)
        if by_data.solution != sel.solution:
            lines.append(f"by traces   {by_data.solution or 'ORIGINAL'}  [{by_data.rule}] {by_data.detail}"
                         "  (before checking what is usable in this process)")
    for sname, why in sel.skipped:
        lines.append(f"  skipped   {sname}: {why}")
    if tab is not None and sig in tab.exact:
        ranked = ", ".join(f"{n} {tab.exact_latency[sig][n]:.4g} ms" for n in tab.exact[sig])
        lines.append(f"  ranking   at this signature: {ranked}")
    if tab is not None and tab.failed_exact.get(sig):
        lines.append(f"  failed    at this signature: {', '.join(sorted(tab.failed_exact[sig]))}")
    lines.append("")
    lines.append(RULE)
    return "\n".join(lines)
