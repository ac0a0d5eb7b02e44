"""Helpers of ``benchmarks/run_fib_bench_gpu.sh`` (issue 8 on the H200; issue 9 on two GPUs).

    python3 benchmarks/fib_bench_gpu.py record DATASET [--quick]     # traced run -> workloads
    python3 benchmarks/fib_bench_gpu.py zoo DATASET                   # runner self-check datasets
    python3 benchmarks/fib_bench_gpu.py check-zoo DATASET OUT.json    # zoo statuses vs expected
    python3 benchmarks/fib_bench_gpu.py summary DATASET REPORT_DIR OUT.json
    python3 benchmarks/fib_bench_gpu.py compare DS_1GPU DS_NGPU OUT.json   # issue 9

``record`` is the traced run: the FlashInfer adapter is instrumented with the tracer on
(``FIB_ENABLE_TRACING=1``, dispatch off), and FlashInfer's sampling and cascade APIs are called
the way vLLM/SGLang call them (per-row tensors of top-k/top-p, peaked logits, several batch
sizes); the tracer writes the workloads and the definitions. A definition the adapter did not
record (an API missing from the trimmed FlashInfer, an adapter gap) is recorded through
``fib_runtime.tracer.record`` directly with the same tensors, and that is said in
``record.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

SAMPLING_KINDS = ["top_k_sampling_from_probs", "top_p_sampling_from_probs", "top_k_top_p_sampling_from_probs",
                  "top_k_top_p_sampling_from_logits", "min_p_sampling_from_probs", "sampling_from_probs"]


def _sampling_calls(V, batches, dev):
    import torch

    g = torch.Generator(device=dev).manual_seed(V)
    for B in batches:
        logits = torch.randn(B, V, device=dev, generator=g) * 4
        probs = torch.softmax(logits, dim=-1)
        k = torch.randint(1, 1025, (B,), device=dev, dtype=torch.int32, generator=g)
        k[: max(1, B // 4)] = 50
        p = torch.rand(B, device=dev, generator=g) * 0.5 + 0.5
        minp = torch.rand(B, device=dev, generator=g) * 0.2
        yield "top_k_sampling_from_probs", (probs, k)
        yield "top_p_sampling_from_probs", (probs, p)
        yield "top_k_top_p_sampling_from_probs", (probs, k, p)
        yield "top_k_top_p_sampling_from_logits", (logits, k, p)
        yield "min_p_sampling_from_probs", (probs, minp)
        yield "sampling_from_probs", (probs,)


CASCADE_DTYPE = "float16"  # the trimmed FlashInfer ships fp16/head_dim-128 cascade + prefill prebuilt (no JIT)


def _cascade_problem(B, P, S, Hq=32, Hkv=8, D=128, ps=16, dev="cuda"):
    import torch

    sh = -(-P // ps)
    un = -(-S // ps)
    total = sh + B * un
    dt = getattr(torch, CASCADE_DTYPE)
    k = torch.randn(total, ps, Hkv, D, device=dev, dtype=dt)
    v = torch.randn(total, ps, Hkv, D, device=dev, dtype=dt)
    i32 = lambda x: torch.tensor(x, dtype=torch.int32, device=dev)  # noqa: E731
    levels = dict(
        qo=[i32([0, B]), i32(list(range(B + 1)))],
        kv_indptr=[i32([0, sh]), i32([b * un for b in range(B + 1)])],
        kv_indices=[i32(list(range(sh))), i32(list(range(sh, total)))],
        last=[i32([P - (sh - 1) * ps]), i32([S - (un - 1) * ps] * B)],
    )
    q = torch.randn(B, Hq, D, device=dev, dtype=dt)
    return q, k, v, levels


def record(ds_root: str, quick: bool, dev: str = "cuda", vocabs=None, tiny: bool = False) -> dict:
    """The traced run (module docstring). ``dev``/``vocabs``/``tiny``: CPU rehearsal with a fake
    FlashInfer (tests/test_bench_gpu_script.py)."""
    os.environ["FIB_ENABLE_TRACING"] = "1"
    os.environ["FIB_ENABLE_APPLY"] = "0"
    os.environ["FIB_TRACE_PATH"] = ds_root
    import torch

    import fib_runtime.tracer as tracer
    from fib_runtime.definitions import cascade as cdefs
    from fib_runtime.definitions import sampling as sdefs

    info = {"adapter": None, "direct": [], "errors": []}
    tracer.enable(ds_root, rate_limit=None, max_bytes=8 << 30, queue_size=4096, max_pending_bytes=16 << 30)
    try:
        from fib_runtime.adapters import flashinfer as fia

        rep = fia.instrument()
        info["adapter"] = str(rep)[:2000]
    except Exception as e:  # noqa: BLE001
        info["errors"].append(f"adapter instrument: {type(e).__name__}: {e}")
    import flashinfer.cascade as fc
    import flashinfer.sampling as fs

    vocabs = vocabs or ([128256] if quick else [128256, 151936])
    batches = [1, 7] if tiny else [1, 64, 512] if quick else [1, 16, 64, 256, 512]
    calls = []  # (definition dict, inputs) for the direct fallback
    for V in vocabs:
        for kind, args in _sampling_calls(V, batches, dev):
            calls.append((sdefs.definition(kind, V), args))
            try:
                getattr(fs, kind)(*args)
            except Exception as e:  # noqa: BLE001
                info["errors"].append(f"flashinfer.sampling.{kind}(V={V}): {type(e).__name__}: {e}"[:300])
    for L in ([1, 16] if tiny else [1, 128, 2048] if quick else [1, 16, 128, 1024, 8192]):
        va, vb = (torch.randn(L, 32, 128, device=dev, dtype=getattr(torch, CASCADE_DTYPE)) for _ in range(2))
        sa, sb = (torch.randn(L, 32, device=dev, dtype=torch.float32) * 4 for _ in range(2))
        calls.append((cdefs.generate("merge_state_h32_d128", dtype=CASCADE_DTYPE), (va, sa, vb, sb)))
        try:
            fc.merge_state(va, sa, vb, sb)
        except Exception as e:  # noqa: BLE001
            info["errors"].append(f"merge_state(L={L}): {type(e).__name__}: {e}"[:300])
    ws = torch.empty(128 << 20, dtype=torch.uint8, device=dev)
    for B, P, S in ([(2, 64, 32)] if tiny else [(16, 4096, 256), (128, 8192, 512)] if quick else
                    [(1, 4096, 128), (16, 4096, 256), (64, 8192, 512), (256, 16384, 512)]):
        q, k, v, lv = _cascade_problem(B, P, S, dev=dev)
        sm = 1.0 / math.sqrt(128)
        flat = [q, k, v]
        for i in range(2):
            flat += [lv["qo"][i], lv["kv_indptr"][i], lv["kv_indices"][i], lv["last"][i]]
        flat.append(sm)
        calls.append((cdefs.generate("multi_level_cascade_run_h32_kv8_d128_ps16", dtype=CASCADE_DTYPE), tuple(flat)))
        try:
            w = fc.MultiLevelCascadeAttentionWrapper(2, ws, "NHD")
            w.plan(lv["qo"], lv["kv_indptr"], lv["kv_indices"], lv["last"], 32, 8, 128, 16,
                   causal=False, sm_scale=sm, q_data_type=q.dtype, kv_data_type=k.dtype)
            w.run(q, (k, v))
        except Exception as e:  # noqa: BLE001
            info["errors"].append(f"cascade run(B={B}): {type(e).__name__}: {e}"[:300])
    if dev.startswith("cuda"):
        torch.cuda.synchronize()
    tracer.flush()
    stats_adapter = tracer.stats()
    # which definitions did the adapter path record?
    from fib_runtime.store import Dataset

    ds = Dataset.open(ds_root)
    have = {n for n in ds.definitions if ds.workloads_for(n)}
    for d, args in calls:
        if d is None or d["name"] in have:
            continue
        try:
            tracer.register_definition(d)
            tracer.record(d, args)
            info["direct"].append(d["name"])
        except Exception as e:  # noqa: BLE001
            info["errors"].append(f"direct record {d['name']}: {type(e).__name__}: {e}"[:300])
    tracer.flush()
    tracer.disable()
    try:
        from fib_runtime.adapters import flashinfer as fia

        fia.uninstrument()
    except Exception:  # noqa: BLE001
        pass
    ds = Dataset.open(ds_root)
    info["tracer_stats_after_adapter"] = stats_adapter
    info["direct"] = sorted(set(info["direct"]))
    info["workloads"] = {n: len(ds.workloads_for(n)) for n in sorted(ds.definitions)}
    info["problems"] = [str(p) for p in ds.errors][:50]
    return info


def make_zoo(ds_root: str) -> dict:
    """Small definitions + the zoo (every status) for a GPU self-check of the runner."""
    import uuid

    from fib_runtime.bench.zoo import zoo
    from fib_runtime.definitions import norm, sampling
    from fib_runtime.schema import Definition, Trace
    from fib_runtime.store import Dataset

    ds = Dataset.open(ds_root, create=True)
    expected = {}
    for raw, batches in ((norm.definition("rmsnorm", 4096), (7,)),
                         (sampling.definition("top_k_top_p_sampling_from_probs", 128256), (64,))):
        d = Definition.model_validate(raw)
        ds.add_definition(d)
        ds.add_workloads([Trace.model_validate({"definition": d.name, "workload": {
            "uuid": str(uuid.uuid4()), "axes": {"batch_size": b}, "inputs": {n: {"type": "random"} for n in d.inputs}}})
            for b in batches])
        for s, st in zoo(d).values():
            ds.add_solution(s)
            expected[s.name] = st
    return expected


def check_zoo(ds_root: str, expected_path: str, out: str) -> int:
    from fib_runtime.store import Dataset

    expected = json.loads(Path(expected_path).read_text())
    ds = Dataset.open(ds_root)
    rows, bad = [], 0
    for name in sorted(ds.definitions):
        for t in ds.traces_for(name):
            want = expected.get(t.solution)
            got = t.evaluation.status.value
            ok = want is None or want == got
            bad += 0 if ok else 1
            rows.append({"definition": name, "solution": t.solution, "axes": t.workload.axes, "expected": want,
                         "got": got, "ok": ok, "device": t.evaluation.environment.libs.get("device"),
                         "latency_ms": t.evaluation.performance.latency_ms if t.evaluation.performance else None,
                         "extra": (t.evaluation.correctness.extra if t.evaluation.correctness else None),
                         "log_tail": (t.evaluation.log or "")[-300:] if not ok else ""})
    Path(out).write_text(json.dumps({"mismatches": bad, "rows": rows}, indent=1, default=str))
    print(f"zoo self-check: {len(rows)} evaluations, {bad} status mismatch(es)")
    for r in rows:
        if not r["ok"]:
            print(f"  MISMATCH {r['solution']} {r['axes']}: expected {r['expected']}, got {r['got']}: {r['log_tail'][-160:]!r}")
    return bad


def summary(ds_root: str, report_dir: str, out: str) -> None:
    rep = json.loads((Path(report_dir) / "report.json").read_text())
    table = json.loads((Path(report_dir) / "dispatch_table.json").read_text())
    lines, res = [], {"definitions": {}, "dispatch_source": table.get("source"), "hardware": rep.get("hardware")}
    for info in rep["definitions"]:
        d = info["definition"]
        board = {r["solution"]: r for r in info["leaderboard"]}
        ours = [r for r in info["leaderboard"] if r["author"] == "fib-runtime"]
        winners = {}
        for e in table.get("definitions", {}).get(d, {}).get("exact", []):
            winners[str(e["signature"])] = e["winner"]
        ours_wins = sum(1 for w in winners.values() if w.startswith("fib-runtime"))
        res["definitions"][d] = {
            "workloads": info["workloads"], "yardstick": info["yardstick"],
            "ours": [{k: r.get(k) for k in ("solution", "passed", "workloads", "status_counts",
                                               "speedup_vs_baseline", "speedup_vs_reference", "fast_1", "wins")}
                     for r in ours],
            "baseline": [{k: board[s].get(k) for k in ("solution", "passed", "status_counts")}
                         for s in info["baseline_solutions"] if s in board],
            "dispatch_winners": winners, "signatures_won_by_ours": ours_wins}
        sp = ours[0].get("speedup_vs_" + info["yardstick"]) if ours else None
        lines.append(f"{d:<48} wl={info['workloads']:<3} ours={'/'.join(str(r['passed']) for r in ours) or '-':<5} "
                     f"gmean-speedup-vs-{info['yardstick']}={sp if sp is None else round(sp, 3)!s:<7} "
                     f"dispatch: ours win {ours_wins}/{len(winners)}")
    Path(out).write_text(json.dumps(res, indent=1, default=str))
    print("\n".join(lines))


def compare(ds1: str, dsn: str, out: str, t1: float, tn: float, s1: str = "", sn: str = "") -> None:
    from fib_runtime.store import Dataset

    def statuses(root):
        ds = Dataset.open(root)
        st, dev = {}, {}
        for n in ds.definitions:
            for t in ds.traces_for(n):
                st[(n, t.workload.uuid, t.solution)] = t.evaluation.status.value
                dev[t.evaluation.environment.libs.get("device", "?")] = dev.get(t.evaluation.environment.libs.get("device", "?"), 0) + 1
        return st, dev

    a, da = statuses(ds1)
    b, db = statuses(dsn)
    same = [k for k in a if b.get(k) == a[k]]
    diff = [{"key": list(k), "one_gpu": a[k], "n_gpu": b.get(k)} for k in a if b.get(k) != a[k]]
    sums = {}
    for tag, path in (("1gpu", s1), ("ngpu", sn)):
        try:
            sums[tag] = json.loads(Path(path).read_text())
        except Exception:  # noqa: BLE001
            sums[tag] = {}
    t1 = sums["1gpu"].get("wall_s", t1)
    tn = sums["ngpu"].get("wall_s", tn)
    complete = not sums["1gpu"].get("not_started") and not sums["ngpu"].get("not_started")
    res = {"evaluations_1gpu": len(a), "evaluations_ngpu": len(b), "same_status": len(same), "differences": diff,
           "devices_1gpu": da, "devices_ngpu": db, "wall_s_1gpu": t1, "wall_s_ngpu": tn,
           "speedup_wall": (t1 / tn) if tn else None, "both_runs_complete": complete,
           "summary_1gpu": sums["1gpu"], "summary_ngpu": sums["ngpu"]}
    Path(out).write_text(json.dumps(res, indent=1, default=str))
    print(f"1 GPU: {len(a)} evals in {t1:.1f} s on {da}; N GPUs: {len(b)} evals in {tn:.1f} s on {db}; "
          f"same status {len(same)}/{len(a)}; wall speedup {res['speedup_wall']}"
          + ("" if complete else " (a run hit its wall-clock limit: compare the common part only)"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("record"); p.add_argument("dataset"); p.add_argument("--quick", action="store_true")
    p.add_argument("--out")
    p = sub.add_parser("zoo"); p.add_argument("dataset"); p.add_argument("expected")
    p = sub.add_parser("check-zoo"); p.add_argument("dataset"); p.add_argument("expected"); p.add_argument("out")
    p = sub.add_parser("summary"); p.add_argument("dataset"); p.add_argument("report"); p.add_argument("out")
    p = sub.add_parser("compare"); p.add_argument("ds1"); p.add_argument("dsn"); p.add_argument("out")
    p.add_argument("t1", type=float); p.add_argument("tn", type=float)
    p.add_argument("--summaries", nargs=2, default=("", ""))
    a = ap.parse_args(argv)
    if a.cmd == "record":
        t0 = time.time()
        try:
            info = record(a.dataset, a.quick)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            return 1
        info["wall_s"] = round(time.time() - t0, 1)
        if a.out:
            Path(a.out).write_text(json.dumps(info, indent=1, default=str))
        print(json.dumps({k: info[k] for k in ("workloads", "direct", "errors")}, indent=1)[:4000])
        return 0 if any(info["workloads"].values()) else 1
    if a.cmd == "zoo":
        Path(a.expected).write_text(json.dumps(make_zoo(a.dataset), indent=1))
        return 0
    if a.cmd == "check-zoo":
        return 1 if check_zoo(a.dataset, a.expected, a.out) else 0
    if a.cmd == "summary":
        summary(a.dataset, a.report, a.out)
        return 0
    if a.cmd == "compare":
        compare(a.ds1, a.dsn, a.out, a.t1, a.tn, *a.summaries)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
