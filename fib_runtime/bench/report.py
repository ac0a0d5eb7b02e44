"""``fib report``: leaderboards, fast_p curves, an HTML page and the dispatch table.

    from fib_runtime.bench.report import build_report
    rep = build_report("dataset/", out="report/")   # writes the files below, returns the data

Files written under ``out``:

- ``report.html``: self-contained (PNG figures inlined as base64), one section per definition;
- ``fast_p_<definition>.png``: the fast_p curve of every solution;
- ``leaderboard.md``: the same tables in Markdown;
- ``report.json``: everything in machine form;
- ``dispatch_table.json``: what the dispatcher would choose per (definition, signature).

Per definition (on one hardware class at a time: ``hardware`` if given, else this machine's class
when it has rows, else the most frequent one; rows of other classes are counted and left out):

- **Latest evaluation** per (workload, solution) counts (a ``--force`` re-run replaces the old).
- **Baseline** latency of a workload: the fastest PASSED solution of author ``baseline`` (the
  FlashInfer API). Without baseline rows the definition's reference is the yardstick (the
  ``reference_latency_ms`` of the traces), and the report says so.
- **Leaderboard**: per solution its status counts, workloads passed, geometric-mean speedup
  vs the baseline (over the workloads both passed), geometric-mean speedup vs the reference,
  fast_1, and how many workloads it is the fastest on.
- **Best per workload**: the fastest PASSED solution, its latency, the baseline latency, speedup.
- **fast_p** (KernelBench / FlashInfer-Bench): for a solution, the share of the definition's
  workloads on which it is correct *and* more than ``p`` times faster than the baseline
  (a workload the solution failed, or has no row for, counts as not fast).
- **Dispatch table**: the dispatcher's own builder (:func:`fib_runtime.dispatch.table.build_table`)
  on these traces when it is importable, else the fastest PASSED solution per signature
  (``source`` in the JSON says which).
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from ..store import Dataset

STATUSES = ("PASSED", "INCORRECT_NUMERICAL", "INCORRECT_SHAPE", "INCORRECT_DTYPE", "RUNTIME_ERROR",
            "COMPILE_ERROR", "TIMEOUT")


def _hw_class(name: str) -> str:
    try:
        from ..dispatch.hardware import normalize_hardware

        return normalize_hardware(name)
    except Exception:
        return (name or "CPU").split()[0].upper()


def _gmean(xs: List[float]) -> Optional[float]:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _this_machine() -> str:
    try:
        from ..dispatch.hardware import detect_hardware

        return detect_hardware()
    except Exception:
        return "CPU"


def _default_hardware(classes: Counter) -> str:
    """This machine's hardware class when it has rows, else the most frequent class."""
    here = _this_machine()
    return here if classes.get(here) else classes.most_common(1)[0][0]


def fast_p(speedups: List[Optional[float]], p: float) -> float:
    """Share of workloads (``None`` = failed / missing) on which speedup > p."""
    if not speedups:
        return 0.0
    return sum(1 for s in speedups if s is not None and s > p) / len(speedups)


def _trace_authors(ds: Dataset, d) -> Dict[str, str]:
    """solution -> author from the ``traces/<author>/<op_type>/<definition>.jsonl`` layout (for
    traces whose solution file is not in the dataset)."""
    out: Dict[str, str] = {}
    for path in (ds.root / "traces").glob(f"*/*/{d.name}.jsonl"):
        author = path.parent.parent.name
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        sol = json.loads(line).get("solution")
                    except ValueError:
                        continue
                    if sol:
                        out.setdefault(sol, author)
        except OSError:
            continue
    return out


def _latest(traces) -> Dict[tuple, Any]:
    out: Dict[tuple, Any] = {}
    for t in traces:
        if t.evaluation is None or not t.solution:
            continue
        k = (t.workload.uuid, t.solution)
        if k not in out or str(t.evaluation.timestamp) >= str(out[k].evaluation.timestamp):
            out[k] = t
    return out


def analyse_definition(ds: Dataset, name: str, hardware: Optional[str] = None) -> Optional[Dict[str, Any]]:
    d = ds.definitions[name]
    all_traces = [t for t in ds.traces_for(name) if t.evaluation is not None]
    if not all_traces:
        return None
    classes = Counter(_hw_class(t.evaluation.environment.hardware) for t in all_traces)
    hw = hardware or _default_hardware(classes)
    traces = [t for t in all_traces if _hw_class(t.evaluation.environment.hardware) == hw]
    latest = _latest(traces)
    authors = {**_trace_authors(ds, d), **{s.name: s.author for s in ds.solutions_for(name)}}
    workloads = {w.workload.uuid: w.workload for w in ds.workloads_for(name)}
    for (u, _), t in latest.items():
        workloads.setdefault(u, t.workload)
    sols = sorted({s for (_, s) in latest})
    lat: Dict[tuple, float] = {}
    ref_lat: Dict[str, List[float]] = defaultdict(list)
    status: Dict[tuple, str] = {}
    devices = Counter()
    for (u, s), t in latest.items():
        ev = t.evaluation
        status[(u, s)] = ev.status.value
        devices[ev.environment.libs.get("device", "?")] += 1
        if ev.status.value == "PASSED" and ev.performance is not None:
            lat[(u, s)] = float(ev.performance.latency_ms)
            if ev.performance.reference_latency_ms:
                ref_lat[u].append(float(ev.performance.reference_latency_ms))
    base_sols = [s for s in sols if authors.get(s) == "baseline"]
    baseline: Dict[str, float] = {}
    for u in workloads:
        vals = [lat[(u, s)] for s in base_sols if (u, s) in lat]
        if vals:
            baseline[u] = min(vals)
    yardstick = "baseline" if baseline else "reference"
    if not baseline:
        baseline = {u: sorted(v)[len(v) // 2] for u, v in ref_lat.items()}
    uuids = sorted(workloads, key=lambda u: (tuple(workloads[u].axes.get(a, 0) for a in d.var_axes), u))

    def speedup(u, s) -> Optional[float]:
        if (u, s) not in lat or u not in baseline:
            return None
        return baseline[u] / max(lat[(u, s)], 1e-9)

    best: Dict[str, Optional[str]] = {}
    for u in uuids:
        cands = [(lat[(u, s)], s) for s in sols if (u, s) in lat]
        best[u] = min(cands)[1] if cands else None
    board = []
    for s in sols:
        counts = Counter(status[(u, s)] for u in uuids if (u, s) in status)
        sp = [speedup(u, s) for u in uuids]
        refsp = [latest[(u, s)].evaluation.performance.speedup_factor for u in uuids
                 if (u, s) in lat and latest[(u, s)].evaluation.performance is not None]
        board.append({
            "solution": s, "author": authors.get(s, "?"),
            "status_counts": {k: counts[k] for k in STATUSES if counts[k]},
            "evaluated": sum(counts.values()), "passed": counts["PASSED"], "workloads": len(uuids),
            "speedup_vs_" + yardstick: _gmean([x for x in sp if x is not None]),
            "speedup_vs_reference": _gmean(refsp),
            "fast_1": fast_p(sp, 1.0), "wins": sum(1 for u in uuids if best[u] == s),
            "speedups": sp,
        })
    board.sort(key=lambda r: (-r["wins"], -(r["speedup_vs_" + yardstick] or 0), r["solution"]))
    rows = []
    for u in uuids:
        b = best[u]
        rows.append({"workload": u, "axes": dict(workloads[u].axes), "best": b, "author": authors.get(b) if b else None,
                     "latency_ms": lat.get((u, b)) if b else None, "yardstick_ms": baseline.get(u),
                     "speedup": speedup(u, b) if b else None,
                     "statuses": {s: status[(u, s)] for s in sols if (u, s) in status}})
    return {"definition": name, "op_type": d.op_type, "hardware": hw, "other_hardware": {k: v for k, v in classes.items() if k != hw},
            "yardstick": yardstick, "baseline_solutions": base_sols, "var_axes": list(d.var_axes),
            "workloads": len(uuids), "solutions": sols, "leaderboard": board, "best_per_workload": rows,
            "devices": dict(devices)}


def dispatch_table(ds: Dataset, hardware: str) -> Dict[str, Any]:
    """The dispatcher's table for ``hardware`` (its builder if importable; else fastest PASSED)."""
    try:
        from ..dispatch.table import build_table

        tab = build_table(ds, hardware)
        out = {"source": "fib_runtime.dispatch.table.build_table", "hardware": hardware, "definitions": {}}
        for name, dt in sorted(tab.defs.items()):
            if not dt.exact and not dt.bucket_rank:
                continue
            out["definitions"][name] = {
                "var_axes": list(dt.var_axes),
                "exact": [{"signature": list(sig), "winner": ranked[0], "ranked": list(ranked),
                           "latency_ms": {n: dt.exact_latency[sig][n] for n in ranked}}
                          for sig, ranked in sorted(dt.exact.items())],
                "buckets": [{"bucket": list(b), "winner": r[0], "ranked": list(r)}
                            for b, r in sorted(dt.bucket_rank.items())],
            }
        return out
    except Exception as e:  # noqa: BLE001 - fall back to our own rule
        reason = f"{type(e).__name__}: {e}"
    out = {"source": f"fib report fallback (fastest PASSED per signature; dispatcher builder unavailable: {reason})",
           "hardware": hardware, "definitions": {}}
    for name, d in sorted(ds.definitions.items()):
        per: Dict[tuple, Dict[str, float]] = defaultdict(dict)
        for (u, s), t in _latest(ds.traces_for(name)).items():
            ev = t.evaluation
            if _hw_class(ev.environment.hardware) != hardware or ev.status.value != "PASSED":
                continue
            sig = tuple(int(t.workload.axes[a]) for a in d.var_axes)
            per[sig][s] = min(per[sig].get(s, math.inf), ev.performance.latency_ms)
        if per:
            out["definitions"][name] = {"var_axes": list(d.var_axes), "exact": [
                {"signature": list(sig), "winner": min(v, key=v.get), "ranked": sorted(v, key=v.get),
                 "latency_ms": v} for sig, v in sorted(per.items())]}
    return out


def _plot_fast_p(info: Dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return False
    ps = [0.0] + [10 ** (x / 40.0) for x in range(-80, 81)]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    drawn = 0
    for r in info["leaderboard"]:
        if r["author"] == "baseline" and info["yardstick"] == "baseline":
            continue
        ys = [fast_p(r["speedups"], p) for p in ps[1:]]
        ax.plot(ps[1:], ys, label=f"{r['solution'][:48]} ({r['author']})", linewidth=1.6, drawstyle="steps-post")
        drawn += 1
    ax.set_xscale("log")
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(f"p (speedup over {'FlashInfer baseline' if info['yardstick'] == 'baseline' else 'reference'})")
    ax.set_ylabel("fast_p (share of workloads)")
    ax.set_title(f"{info['definition']} on {info['hardware']} ({info['workloads']} workloads)", fontsize=10)
    if drawn:
        ax.legend(fontsize=7, loc="upper right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return True


def _fmt(x, nd=3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        return f"{x:.{nd}g}" if abs(x) < 1e4 else f"{x:.3e}"
    return str(x)


def _md_table(headers, rows) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _board_rows(info):
    key = "speedup_vs_" + info["yardstick"]
    both = info["yardstick"] != "reference"
    return [[r["solution"], r["author"], f"{r['passed']}/{r['workloads']}",
             ", ".join(f"{k}:{v}" for k, v in r["status_counts"].items()), r[key]]
            + ([r["speedup_vs_reference"]] if both else []) + [r["fast_1"], r["wins"]] for r in info["leaderboard"]]


def _board_headers(info):
    both = info["yardstick"] != "reference"
    return (["solution", "author", "passed", "statuses", f"speedup vs {info['yardstick']} (gmean)"]
            + (["speedup vs reference (gmean)"] if both else []) + ["fast_1", "wins"])


def _best_rows(info):
    ax = info["var_axes"]
    return [[r["workload"][:8], ", ".join(f"{a}={r['axes'].get(a)}" for a in ax), r["best"], r["author"],
             r["latency_ms"], r["yardstick_ms"], r["speedup"]] for r in info["best_per_workload"]]


def _best_headers(info):
    return ["workload", "axes", "best solution", "author", "latency ms", f"{info['yardstick']} ms", "speedup"]


def _html_table(headers, rows) -> str:
    h = "".join(f"<th>{html.escape(str(x))}</th>" for x in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


_CSS = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;"
        "margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}"
        "th{background:#f0f0f0}h2{border-bottom:2px solid #444;margin-top:2em}.note{color:#555;font-size:13px}")


def build_report(dataset: Union[str, Path, Dataset], out: Union[str, Path] = "report",
                 definitions: Optional[List[str]] = None, hardware: Optional[str] = None) -> Dict[str, Any]:
    import fnmatch

    ds = dataset if isinstance(dataset, Dataset) else Dataset.open(dataset)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    infos = []
    for name in sorted(ds.definitions):
        if definitions and not any(name == p or fnmatch.fnmatchcase(name, p) for p in definitions):
            continue
        info = analyse_definition(ds, name, hardware)
        if info is None:
            continue
        png = out / f"fast_p_{name}.png"
        info["fast_p_png"] = png.name if _plot_fast_p(info, png) else None
        infos.append(info)
    hw_all = Counter(i["hardware"] for i in infos)
    hw = hardware or (_default_hardware(hw_all) if hw_all else _this_machine())
    table = dispatch_table(ds, hw)
    (out / "dispatch_table.json").write_text(json.dumps(table, indent=2, default=str) + "\n")
    data = {"dataset": str(ds.root), "hardware": hw, "definitions": infos, "dispatch_table": "dispatch_table.json"}
    (out / "report.json").write_text(json.dumps(data, indent=2, default=str) + "\n")

    md = [f"# fib bench report\n\nDataset `{ds.root}`, hardware class {hw}.\n"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>fib bench report</title>"
             f"<style>{_CSS}</style></head><body><h1>fib bench report</h1>"
             f"<p class='note'>Dataset {html.escape(str(ds.root))}; hardware class {html.escape(hw)}; "
             f"{len(infos)} definition(s). fast_p = share of workloads on which a solution is correct "
             f"and more than p times faster than the FlashInfer baseline (the reference where no baseline ran).</p>"]
    for info in infos:
        note = ("speedups vs the FlashInfer baseline (" + ", ".join(info["baseline_solutions"]) + ")"
                if info["yardstick"] == "baseline" else "no baseline rows: speedups vs the definition's reference")
        md.append(f"## {info['definition']}\n\n{info['workloads']} workloads on {info['hardware']}; {note}.\n")
        md.append(_md_table(_board_headers(info), _board_rows(info)) + "\n")
        md.append("Best solution per workload:\n\n" + _md_table(_best_headers(info), _best_rows(info)) + "\n")
        parts.append(f"<h2 id='{html.escape(info['definition'])}'>{html.escape(info['definition'])}</h2>"
                     f"<p class='note'>op_type {html.escape(info['op_type'])}; {info['workloads']} workloads on "
                     f"{html.escape(info['hardware'])}; {html.escape(note)}; devices "
                     f"{html.escape(', '.join(f'{k}: {v}' for k, v in sorted(info['devices'].items())))}.</p>")
        parts.append("<h3>Leaderboard</h3>" + _html_table(_board_headers(info), _board_rows(info)))
        if info.get("fast_p_png"):
            b64 = base64.b64encode((out / info["fast_p_png"]).read_bytes()).decode()
            parts.append(f"<h3>fast_p</h3><img alt='fast_p curve of {html.escape(info['definition'])}' "
                         f"src='data:image/png;base64,{b64}'>")
        parts.append("<h3>Best solution per workload</h3>" + _html_table(_best_headers(info), _best_rows(info)))
        dt = table["definitions"].get(info["definition"])
        if dt:
            rows = [[", ".join(f"{a}={v}" for a, v in zip(dt["var_axes"], e["signature"])), e["winner"],
                     (e.get("latency_ms") or {}).get(e["winner"])] for e in dt["exact"]]
            parts.append("<h3>Dispatch table</h3>" + _html_table(["signature", "winner", "latency ms"], rows))
            md.append("Dispatch table:\n\n" + _md_table(["signature", "winner", "latency ms"], rows) + "\n")
    parts.append(f"<p class='note'>Dispatch table source: {html.escape(table['source'])}</p></body></html>")
    (out / "report.html").write_text("".join(parts), encoding="utf-8")
    (out / "leaderboard.md").write_text("\n".join(md), encoding="utf-8")
    return data
