"""Cascade attention on the H200: fib's kernels vs FlashInfer's cascade wrapper vs FlashInfer's
plain batch decode, plus merge_state bandwidth.

Grid: P in {1024, 8192, 32768} x B in {16, 64, 256} x S in {64, 512}, heads 32/32 and 32/8,
fp16, head_dim 128, page 16, one query token per request.

Timing: device time from CUDA graphs. Each timed call is preceded by an L2 flush (256 MiB
zero_) inside the graph; a graph of the flushes alone is subtracted; median over replays.
Per level: fib's shared level, unique level (merge fused), FlashInfer's two prefill levels and
its merge_state_in_place. Floors: bytes moved once / copy bandwidth (measured in this run,
anchor 4285 GB/s) and FLOPs / 790 TFLOP/s.

merge_state here uses the flushed-graph method of the attention levels; benchmarks/merge_state_device.py
times it under three methods (dirty flush, clean flush, steady state) next to a same-size copy.

Writes benchmarks/results/cascade_h200.json and .md (or --out DIR).
Usage: python benchmarks/cascade.py [--quick] [--out DIR]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fib_runtime.kernels import cascade as fc  # noqa: E402

PEAK_TFLOPS = 790.0
ANCHOR_COPY_GBS = 4285.0
DEV = "cuda"


def fi_modules():
    try:
        import flashinfer.cascade
        import flashinfer.decode
        import flashinfer.prefill

        return flashinfer
    except Exception as exc:  # noqa: BLE001
        print(f"flashinfer unavailable: {exc}")
        return None


_FLUSH = None


def flush():
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=DEV)
    _FLUSH.zero_()


def graph_time_us(fn, n_calls=2, reps=10):
    """Median device µs per call of fn (with an L2 flush before each call inside the graph)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            flush()
            fn()
    torch.cuda.synchronize()
    g, gf = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for _ in range(n_calls):
            flush()
            fn()
    with torch.cuda.graph(gf, stream=s):
        for _ in range(n_calls):
            flush()
    torch.cuda.synchronize()
    ts, tf = [], []
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        for graph, acc in ((g, ts), (gf, tf)):
            e0.record()
            graph.replay()
            e1.record()
            torch.cuda.synchronize()
            acc.append(e0.elapsed_time(e1) * 1000.0)
    return max(0.0, (statistics.median(ts) - statistics.median(tf)) / n_calls)


def copy_bandwidth():
    n = 1 << 32
    a = torch.empty(n, dtype=torch.uint8, device=DEV)
    b = torch.empty_like(a)
    a.fill_(1)
    for _ in range(2):
        b.copy_(a)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(5):
        e0.record()
        b.copy_(a)
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) / 1000.0)
    t = statistics.median(ts)
    del a, b
    torch.cuda.empty_cache()
    return 2 * n / t / 1e9


def make_problem(P, B, S, Hq, Hkv, D=128, ps=16, dtype=torch.float16, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    shared_pages = -(-P // ps)
    uniq_pages = -(-S // ps)
    total = shared_pages + B * uniq_pages
    cache = torch.randn(total, 2, ps, Hkv, D, device=DEV, dtype=dtype, generator=g)
    i32 = lambda x: torch.tensor(x, dtype=torch.int32, device=DEV)  # noqa: E731
    sh_idx = list(range(shared_pages))
    un_idx = list(range(shared_pages, total))
    levels = dict(
        qo=[i32([0, B]), i32(list(range(B + 1)))],
        kv_indptr=[i32([0, shared_pages]), i32([b * uniq_pages for b in range(B + 1)])],
        kv_indices=[i32(sh_idx), i32(un_idx)],
        last=[i32([P - (shared_pages - 1) * ps]), i32([S - (uniq_pages - 1) * ps] * B)],
    )
    # flat table for plain decode: each request = shared pages + its own pages
    flat_idx, flat_ptr = [], [0]
    for b in range(B):
        flat_idx += sh_idx  # NB: prefix last page is full when P % ps == 0 (true for this grid)
        flat_idx += un_idx[b * uniq_pages:(b + 1) * uniq_pages]
        flat_ptr.append(len(flat_idx))
    flat = dict(indptr=i32(flat_ptr), indices=i32(flat_idx), last=i32([S - (uniq_pages - 1) * ps] * B))
    qs = [torch.randn(B, Hq, D, device=DEV, dtype=dtype, generator=g) for _ in range(2)]
    return cache, levels, flat, qs


def ref_attention_rows(cache, levels, q, rows, D, Hq, Hkv, ps):
    """fp32 reference for a few requests (rows): prefix + own suffix."""
    G = Hq // Hkv
    kc, vc = cache[:, 0].float(), cache[:, 1].float()
    sh = levels["kv_indices"][0].long()
    P = (sh.numel() - 1) * ps + int(levels["last"][0][0])
    outs = []
    for b in rows:
        ptr = levels["kv_indptr"][1]
        up = levels["kv_indices"][1][int(ptr[b]):int(ptr[b + 1])].long()
        S = (up.numel() - 1) * ps + int(levels["last"][1][b]) if up.numel() else 0
        K = torch.cat([kc[sh].reshape(-1, Hkv, D)[:P], kc[up].reshape(-1, Hkv, D)[:S]]).repeat_interleave(G, 1)
        V = torch.cat([vc[sh].reshape(-1, Hkv, D)[:P], vc[up].reshape(-1, Hkv, D)[:S]]).repeat_interleave(G, 1)
        lg = torch.einsum("hd,nhd->hn", q[b].float(), K) / math.sqrt(D)
        outs.append(torch.einsum("hn,nhd->hd", torch.softmax(lg, -1), V))
    return torch.stack(outs)


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def bench_config(fi, P, B, S, Hq, Hkv, D=128, ps=16, copy_gbs=ANCHOR_COPY_GBS, with_decode=True, reps=8):
    dtype = torch.float16
    cache, lv, flat, qs = make_problem(P, B, S, Hq, Hkv, D, ps, dtype)
    ws = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device=DEV)
    ours = fc.MultiLevelCascadeAttentionWrapper(2, ws, "NHD")
    t0 = time.perf_counter()
    ours.plan(lv["qo"], lv["kv_indptr"], lv["kv_indices"], lv["last"], Hq, Hkv, D, ps)
    plan_ms = (time.perf_counter() - t0) * 1e3
    row = dict(P=P, B=B, S=S, Hq=Hq, Hkv=Hkv, D=D, page_size=ps, plan=ours.plan_info(), plan_ms=plan_ms)
    # correctness first
    o = ours.run(qs[0], cache)
    ref = ref_attention_rows(cache, lv, qs[0], [0, B // 2, B - 1], D, Hq, Hkv, ps)
    row["err_vs_fp32"] = rel(o[[0, B // 2, B - 1]], ref)
    fw = None
    if fi is not None:
        fws = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=DEV)
        fw = fi.cascade.MultiLevelCascadeAttentionWrapper(2, fws, "NHD")
        fw.plan(lv["qo"], lv["kv_indptr"], lv["kv_indices"], lv["last"], Hq, Hkv, D, ps)
        o_fi = fw.run(qs[0], cache)
        row["err_vs_flashinfer"] = rel(o, o_fi)
        row["fi_err_vs_fp32"] = rel(o_fi[[0, B // 2, B - 1]], ref)

    k, v = cache[:, 0], cache[:, 1]
    out = torch.empty_like(qs[0])
    it = [0]

    def ours_call():
        it[0] ^= 1
        ours.run(qs[it[0]], cache)

    def ours_l0():
        ours._launch_level(0, qs[0], k, v, out, None)

    def ours_l1():
        ours._launch_level(1, qs[0], k, v, out, None)
        ours._launch_final_merge(out, None)

    n_calls = 2 if P * B < 32768 * 64 else 1
    row["ours_us"] = graph_time_us(ours_call, n_calls, reps)
    row["ours_shared_us"] = graph_time_us(ours_l0, n_calls, reps)
    row["ours_unique_merge_us"] = graph_time_us(ours_l1, n_calls, reps)
    if os.environ.get("FIB_BENCH_VARIANTS") == "1" and B * (Hq // Hkv) >= 128:
        # variant: 64-row tiles (4 warps x 16 rows) for the shared level instead of 128
        fc.TUNING["max_tile_rows"] = 64
        try:
            wide = fc.MultiLevelCascadeAttentionWrapper(2, ws, "NHD")
            wide.plan(lv["qo"], lv["kv_indptr"], lv["kv_indices"], lv["last"], Hq, Hkv, D, ps)
        finally:
            fc.TUNING["max_tile_rows"] = 128
        o_w = wide.run(qs[0], cache)
        row["t64_err_vs_ours"] = rel(o_w, o)
        row["t64_plan"] = wide.plan_info()
        row["ours_shared_t64_us"] = graph_time_us(lambda: wide._launch_level(0, qs[0], k, v, out, None), n_calls, reps)
        row["ours_t64_us"] = graph_time_us(lambda: wide.run(qs[0], cache), n_calls, reps)
    if fw is not None:
        def fi_call():
            it[0] ^= 1
            fw.run(qs[it[0]], cache)

        w0, w1 = fw._batch_prefill_wrappers
        ol, ll = w1.run(qs[0], cache, return_lse=True)
        o0, l0 = w0.run(qs[0], cache, return_lse=True)
        oc, lc = ol.clone(), ll.clone()

        def fi_l0():
            w0.run(qs[0], cache, return_lse=True)

        def fi_l1():
            w1.run(qs[0], cache, return_lse=True)

        def fi_merge():
            oc.copy_(ol)  # keep inputs fixed; the copy is subtracted below
            lc.copy_(ll)
            fi.cascade.merge_state_in_place(oc, lc, o0, l0)

        def fi_copy_only():
            oc.copy_(ol)
            lc.copy_(ll)

        row["fi_cascade_us"] = graph_time_us(fi_call, n_calls, reps)
        row["fi_shared_us"] = graph_time_us(fi_l0, n_calls, reps)
        row["fi_unique_us"] = graph_time_us(fi_l1, n_calls, reps)
        row["fi_merge_us"] = max(0.0, graph_time_us(fi_merge, n_calls, reps) - graph_time_us(fi_copy_only, n_calls, reps))
        if with_decode:
            dws = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=DEV)
            dw = fi.decode.BatchDecodeWithPagedKVCacheWrapper(dws, "NHD")
            dw.plan(flat["indptr"], flat["indices"], flat["last"], Hq, Hkv, D, ps, q_data_type=dtype)
            od = dw.run(qs[0], cache)
            row["decode_err_vs_ours"] = rel(o, od)

            def dec_call():
                it[0] ^= 1
                dw.run(qs[it[0]], cache)

            slow = P * B >= 8192 * 256
            row["fi_decode_us"] = graph_time_us(dec_call, 1, 3 if slow else reps)
            del dws, dw
        del fws, fw
    # floors
    kv_shared = P * Hkv * D * 2 * 2
    kv_unique = B * S * Hkv * D * 2 * 2
    qo = 2 * B * Hq * D * 2
    fl_shared = 4.0 * B * Hq * P * D
    fl_unique = 4.0 * B * Hq * S * D
    row["bytes_once"] = kv_shared + kv_unique + qo
    row["flops"] = fl_shared + fl_unique
    row["floor_mem_us"] = row["bytes_once"] / (copy_gbs * 1e3)
    row["floor_compute_us"] = row["flops"] / (PEAK_TFLOPS * 1e6)
    row["floor_us"] = max(row["floor_mem_us"], row["floor_compute_us"])
    for key, kvb, fl in (("ours_shared", kv_shared, fl_shared), ("ours_unique_merge", kv_unique, fl_unique),
                         ("fi_shared", kv_shared, fl_shared), ("fi_unique", kv_unique, fl_unique)):
        t = row.get(key + "_us")
        if t:
            row[key + "_GBs"] = kvb / (t * 1e3)
            row[key + "_TFLOPs"] = fl / (t * 1e6)
            row[key + "_floor_us"] = max(kvb / (copy_gbs * 1e3), fl / (PEAK_TFLOPS * 1e6))
    if row.get("fi_cascade_us"):
        row["speedup_vs_fi_cascade"] = row["fi_cascade_us"] / row["ours_us"]
    if row.get("fi_decode_us"):
        row["speedup_vs_fi_decode"] = row["fi_decode_us"] / row["ours_us"]
    row["ours_over_floor"] = row["ours_us"] / row["floor_us"]
    del cache, qs, ws, ours
    torch.cuda.empty_cache()
    return row


def bench_merge(fi, copy_gbs, reps=20):
    n, h, d = 4096, 32, 128
    res = {}
    for dtype in (torch.float16, torch.bfloat16):
        va = [torch.randn(n, h, d, device=DEV).to(dtype) for _ in range(2)]
        vb = [torch.randn(n, h, d, device=DEV).to(dtype) for _ in range(2)]
        sa = [torch.randn(n, h, device=DEV) for _ in range(2)]
        sb = [torch.randn(n, h, device=DEV) for _ in range(2)]
        vo = torch.empty_like(va[0])
        so = torch.empty_like(sa[0])
        lib = fc._lib()
        it = [0]

        def ours():
            it[0] ^= 1
            i = it[0]
            lib.merge_state(va[i], sa[i], vb[i], sb[i], vo, so)

        def ours_py():
            it[0] ^= 1
            i = it[0]
            fc.merge_state(va[i], sa[i], vb[i], sb[i])

        def ours_inplace():
            it[0] ^= 1
            i = it[0]
            fc.merge_state_in_place(va[i], sa[i], vb[i], sb[i])

        nbytes = 3 * n * h * d * 2 + 3 * n * h * 4
        name = str(dtype).replace("torch.", "")
        r = dict(shape=[n, h, d], bytes=nbytes, floor_us=nbytes / (copy_gbs * 1e3))
        default_variant = int(lib.set_merge_variant(-1))  # -1: query only
        r["default_variant"] = default_variant
        if dtype == torch.float16:
            for var in range(8):
                lib.set_merge_variant(var)
                r[f"ours_v{var}_us"] = graph_time_us(ours, 4, reps)
                r[f"ours_in_place_v{var}_us"] = graph_time_us(ours_inplace, 4, reps)
            lib.set_merge_variant(default_variant)
        r["ours_us"] = graph_time_us(ours, 4, reps)
        r["ours_api_us"] = graph_time_us(ours_py, 4, reps)
        r["ours_in_place_us"] = graph_time_us(ours_inplace, 4, reps)
        if fi is not None:
            def fim():
                it[0] ^= 1
                i = it[0]
                fi.cascade.merge_state(va[i], sa[i], vb[i], sb[i])

            def fim_ip():
                it[0] ^= 1
                i = it[0]
                fi.cascade.merge_state_in_place(va[i], sa[i], vb[i], sb[i])

            r["fi_us"] = graph_time_us(fim, 4, reps)
            r["fi_in_place_us"] = graph_time_us(fim_ip, 4, reps)
        for k in list(r):
            if k.endswith("_us") and k != "floor_us":
                r[k.replace("_us", "_GBs")] = nbytes / (r[k] * 1e3)
                r[k.replace("_us", "_vs_copy")] = nbytes / (r[k] * 1e3) / copy_gbs
        res[name] = r
        # host cost of the python API (wall clock, back-to-back)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            fc.merge_state(va[0], sa[0], vb[0], sb[0])
        torch.cuda.synchronize()
        r["ours_api_wall_us"] = (time.perf_counter() - t0) / 200 * 1e6
    return res


def env_info():
    info = dict(date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                device=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda,
                python=platform.python_version(), sms=torch.cuda.get_device_properties(0).multi_processor_count)
    try:
        info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm",
                                         "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except Exception:  # noqa: BLE001
        pass
    try:
        import flashinfer

        info["flashinfer"] = getattr(flashinfer, "__version__", "0.7.2.post1 (trimmed)")
    except Exception:  # noqa: BLE001
        info["flashinfer"] = None
    try:
        import tvm_ffi

        info["tvm_ffi"] = tvm_ffi.__version__
    except Exception:  # noqa: BLE001
        pass
    return info


def write_md(res, path):
    e = res["env"]
    L = [f"# Cascade attention on {e['device']} — fib vs FlashInfer",
         "",
         f"{e['date']}; driver/clocks {e.get('driver')}; torch {e['torch']} (CUDA {e['cuda']}); "
         f"FlashInfer {e.get('flashinfer')}; tvm-ffi {e.get('tvm_ffi')}; copy bandwidth this run "
         f"{res['copy_GBs']:.0f} GB/s.",
         "",
         "Device µs per call from CUDA graphs with an L2 flush before each call (flush graph subtracted), "
         "fp16, head_dim 128, page 16, 1 query/request. floor = max(bytes once / copy BW, FLOPs / 790 TFLOP/s).",
         "",
         "| P | B | S | Hq/Hkv | ours µs | FI cascade µs | FI decode µs | ×FI cascade | ×FI decode | floor µs | ours/floor "
         "| ours shared µs (GB/s, TFLOP/s) | ours unique+merge µs (GB/s) | FI shared µs (GB/s, TFLOP/s) | FI unique µs | FI merge µs "
         "| err vs fp32 | err vs FI |",
         "|" + "---|" * 18]
    for r in res["configs"]:
        def f(k, fmt="{:.1f}"):
            v = r.get(k)
            return fmt.format(v) if isinstance(v, (int, float)) else "–"
        L.append(
            f"| {r['P']} | {r['B']} | {r['S']} | {r['Hq']}/{r['Hkv']} | {f('ours_us')} | {f('fi_cascade_us')} | "
            f"{f('fi_decode_us', '{:.0f}')} | {f('speedup_vs_fi_cascade', '{:.2f}')} | {f('speedup_vs_fi_decode', '{:.1f}')} | "
            f"{f('floor_us')} | {f('ours_over_floor', '{:.2f}')} | {f('ours_shared_us')} ({f('ours_shared_GBs', '{:.0f}')}, "
            f"{f('ours_shared_TFLOPs', '{:.0f}')}) | {f('ours_unique_merge_us')} ({f('ours_unique_merge_GBs', '{:.0f}')}) | "
            f"{f('fi_shared_us')} ({f('fi_shared_GBs', '{:.0f}')}, {f('fi_shared_TFLOPs', '{:.0f}')}) | {f('fi_unique_us')} | "
            f"{f('fi_merge_us')} | {f('err_vs_fp32', '{:.1e}')} | {f('err_vs_flashinfer', '{:.1e}')} |")
    L += ["", "## merge_state, [4096, 32, 128] + fp32 LSE (3 × v + 3 × s moved)", "",
          "| dtype | ours kernel µs | ours API µs | ours in-place µs | FI µs | FI in-place µs | floor µs | ours / copy BW | FI / copy BW |",
          "|---|---|---|---|---|---|---|---|---|"]
    for name, r in res["merge_state"].items():
        g = lambda k, fmt="{:.1f}": fmt.format(r[k]) if k in r else "–"  # noqa: E731
        L.append(f"| {name} | {g('ours_us')} | {g('ours_api_us')} | {g('ours_in_place_us')} | {g('fi_us')} | "
                 f"{g('fi_in_place_us')} | {g('floor_us')} | {g('ours_vs_copy', '{:.3f}')} | {g('fi_vs_copy', '{:.3f}')} |")
    fp16 = res["merge_state"].get("float16", {})
    if "ours_v0_us" in fp16:
        L += ["", "merge kernel variants (fp16; 0: 2 rows/thread, 1: 4 rows, 2: 2 rows + streaming hints, "
              "3: 4 rows + streaming hints, 4: 1 row, 5: 1 row + streaming hints, 6: 1 row, 512-thread blocks, 7: persistent grid-stride (in place: as 4); default " + str(fp16.get("default_variant")) + "):", "",
              "| variant | merge_state µs | / copy BW | merge_state_in_place µs | / copy BW |", "|---|---|---|---|---|"]
        for var in range(8):
            a, b = fp16[f"ours_v{var}_us"], fp16[f"ours_in_place_v{var}_us"]
            L.append(f"| {var} | {a:.1f} | {fp16['bytes'] / (a * 1e3) / res['copy_GBs']:.3f} | {b:.1f} | "
                     f"{fp16['bytes'] / (b * 1e3) / res['copy_GBs']:.3f} |")
    slower = [r for r in res["configs"] if r.get("speedup_vs_fi_cascade") is not None and r["speedup_vs_fi_cascade"] < 1]
    L += ["", f"Configurations slower than FlashInfer's cascade: {len(slower)} of {len(res['configs'])}."]
    Path(path).write_text("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a few configs only")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    ap.add_argument("--reps", type=int, default=8)
    args = ap.parse_args()
    fi = fi_modules()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = dict(env=env_info())
    res["copy_GBs"] = copy_bandwidth()
    print(f"copy bandwidth {res['copy_GBs']:.0f} GB/s", flush=True)
    res["merge_state"] = bench_merge(fi, res["copy_GBs"])
    print(json.dumps(res["merge_state"], indent=1), flush=True)
    grid = [(P, B, S, hq, hkv) for (hq, hkv) in ((32, 32), (32, 8)) for P in (1024, 8192, 32768)
            for B in (16, 64, 256) for S in (64, 512)]
    if args.quick:
        grid = [(32768, 256, 64, 32, 32), (32768, 256, 64, 32, 8), (1024, 16, 512, 32, 8), (8192, 64, 512, 32, 32)]
    res["configs"] = []
    for (P, B, S, hq, hkv) in grid:
        t0 = time.time()
        try:
            r = bench_config(fi, P, B, S, hq, hkv, copy_gbs=res["copy_GBs"], with_decode=not args.no_decode,
                             reps=args.reps)
        except Exception as exc:  # noqa: BLE001
            r = dict(P=P, B=B, S=S, Hq=hq, Hkv=hkv, error=f"{type(exc).__name__}: {exc}")
        r["bench_s"] = time.time() - t0
        res["configs"].append(r)
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items() if k != "plan"}),
              flush=True)
        (out_dir / "cascade_h200.json").write_text(json.dumps(res, indent=1))
    (out_dir / "cascade_h200.json").write_text(json.dumps(res, indent=1))
    write_md(res, out_dir / "cascade_h200.md")
    print((out_dir / "cascade_h200.md").read_text())


if __name__ == "__main__":
    main()
