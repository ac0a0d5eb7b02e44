"""merge_state bandwidth on the H200: every fib variant vs FlashInfer vs a same-size copy,
under three timing methods.

Problem: v [4096, 32, 128] fp16/bf16 (x2 inputs, x1 output) + fp32 LSE [4096, 32] (x3):
102.2 MB moved per call.

Methods (device time, CUDA graphs, medians over replays):
  A  dirty flush: each call preceded by a 256 MiB ``zero_`` inside the graph, minus a graph of the
     flushes alone (benchmarks/cascade.py's method; the zero_ leaves ~60 MB of dirty L2 lines that
     are written back while the kernel under test runs).
  B  clean flush: same, but the flush READS a 256 MiB buffer (sum into a preallocated scalar), so
     L2 holds clean lines when the call starts.
  C  steady state: a graph of N back-to-back calls rotating over SETS distinct input/output sets
     (working set >= 3x L2), no flush; per call = (t(2N calls) - t(N calls)) / N.

Before timing, every variant (old and new), fp16 and bf16, is checked against a float64
reference on several shapes (also odd ones and unaligned LSE pointers), out of place and in
place (with and without mask).

Writes $OUT/merge_state_device.json and .md (OUT defaults to ./out).
Usage: python benchmarks/merge_state_device.py [--quick] [--variants 4,8,9] [--no-fi] [--check-only]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ANCHOR_COPY_GBS = 4285.0
DEV = "cuda"  # the checks run elsewhere only in the CPU self-test (fake library)
ALL_VARIANTS = list(range(13))
VARIANT_DESC = {
    0: "2 rows/thread",
    1: "4 rows/thread",
    2: "2 rows + streaming (ldcs/stcs)",
    3: "4 rows + streaming",
    4: "1 row/thread (default)",
    5: "1 row + streaming",
    6: "1 row, 512-thread blocks",
    7: "persistent grid-stride",
    8: "TMA bulk ring, persistent, 8 KB tiles x 4 stages",
    9: "TMA bulk ring + L2 evict_first on bulk copies",
    10: "TMA one-shot, 16 KB tile per CTA",
    11: "1 row, ld.nc + L2 evict_first + L2::256B loads",
    12: "2 rows, 128-thr blocks, hinted loads + evict_first stores",
}
SHAPE = (4096, 32, 128)
CHECK_SHAPES = [(4096, 32, 128), (7, 3, 64), (1000, 8, 256), (13, 7, 200), (5, 1, 2048), (1, 1, 8),
                (0, 4, 128)]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer replays (smoke run)")
    ap.add_argument("--variants", default=None, help="comma list of variants to time (default: all)")
    ap.add_argument("--no-fi", action="store_true", help="skip FlashInfer")
    ap.add_argument("--check-only", action="store_true", help="correctness checks only")
    ap.add_argument("--out", default=os.environ.get("OUT", "./out"))
    ap.add_argument("--sets", type=int, default=4, help="distinct input/output sets for method C")
    ap.add_argument("--calls", type=int, default=16, help="N: calls per method-C graph (and 2N)")
    ap.add_argument("--reps", type=int, default=25, help="graph replays per measurement")
    a = ap.parse_args(argv)
    a.variants = ALL_VARIANTS if a.variants is None else [int(x) for x in a.variants.split(",") if x != ""]
    if a.quick:
        a.reps = min(a.reps, 8)
        a.calls = min(a.calls, 8)
    return a


# ----------------------------------------------------------------------------- reference


def reference(va, sa, vb, sb):
    """float64 FlashInfer merge (base-2 LSE); (-inf, -inf) -> v 0, s -inf."""
    import torch

    a, b = sa.double(), sb.double()
    m = torch.maximum(a, b)
    mm = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(m), m)
    ea, eb = torch.exp2(a - mm), torch.exp2(b - mm)
    d = ea + eb
    safe = torch.where(d > 0, d, torch.ones_like(d))
    wa = torch.where(d > 0, ea / safe, torch.zeros_like(d))
    wb = torch.where(d > 0, eb / safe, torch.zeros_like(d))
    v = wa[..., None] * va.double() + wb[..., None] * vb.double()
    s = torch.where(d > 0, torch.log2(safe) + mm, torch.full_like(d, -math.inf))
    return v, s


def make_inputs(shape, dtype, seed, dev=None, special=True):
    import torch

    dev = dev or DEV
    g = torch.Generator(device=dev).manual_seed(seed)
    n, h, d = shape
    va = torch.randn(n, h, d, device=dev, generator=g).to(dtype)
    vb = torch.randn(n, h, d, device=dev, generator=g).to(dtype)
    sa = torch.randn(n, h, device=dev, generator=g) * 8
    sb = torch.randn(n, h, device=dev, generator=g) * 8
    if special and n * h >= 4:
        fa, fb = sa.view(-1), sb.view(-1)
        k = n * h
        fa[0] = -math.inf  # one side empty
        fb[1 % k] = -math.inf
        fa[2 % k] = -math.inf  # both empty
        fb[2 % k] = -math.inf
        fa[3 % k] = 200.0  # far apart
        fb[3 % k] = -200.0
    return va, sa, vb, sb


def tol(dtype):
    import torch

    return (1e-3, 2e-3) if dtype == torch.float16 else (8e-3, 1.6e-2)


def max_violation(out, ref, atol, rtol):
    """max over elements of |out - ref| / (atol + rtol |ref|) (<= 1 passes); inf positions must match."""
    import torch

    if out.numel() == 0:
        return 0.0
    o, r = out.double(), ref.double()
    both_inf = torch.isinf(o) & torch.isinf(r) & (torch.sign(o) == torch.sign(r))
    diff = torch.where(both_inf, torch.zeros_like(o), (o - r).abs())
    diff = torch.nan_to_num(diff, nan=math.inf)
    return float((diff / (atol + rtol * torch.nan_to_num(r.abs(), posinf=0.0))).max())


def _sync():
    import torch

    if DEV == "cuda":
        torch.cuda.synchronize()


def check_all(lib, variants, log):
    import torch

    results, ok_all = [], True
    for dtype in (torch.float16, torch.bfloat16):
        atol, rtol = tol(dtype)
        dname = str(dtype).replace("torch.", "")
        for si, shape in enumerate(CHECK_SHAPES):
            va, sa, vb, sb = make_inputs(shape, dtype, seed=100 + si)
            rv, rs = reference(va, sa, vb, sb)
            base = None
            for var in variants:
                lib.set_merge_variant(var)
                vo = torch.full_like(va, float("nan"))
                so = torch.full_like(sa, float("nan"))
                lib.merge_state(va, sa, vb, sb, vo, so)
                _sync()
                ev = max_violation(vo, rv, atol, rtol)
                es = max_violation(so, rs, 1e-4, 1e-5)
                if base is None:
                    base = (vo, so)
                same = bool(torch.equal(vo.view(torch.int16), base[0].view(torch.int16))
                            and torch.equal(torch.nan_to_num(so), torch.nan_to_num(base[1])))
                ok = ev <= 1 and es <= 1
                ok_all &= ok
                results.append(dict(kind="out_of_place", dtype=dname, shape=list(shape), variant=var,
                                    v_violation=ev, s_violation=es, ok=ok, bitwise_same_as_first=same))
                if not ok:
                    log(f"  FAIL {dname} {shape} variant {var}: v {ev:.3g} s {es:.3g} (<=1 passes)")
            # unaligned LSE pointers (offset 4 bytes): TMA variants must fall back, all must be right
            if shape[0] * shape[1] > 0:
                n, h, _ = shape
                sa_u = torch.empty(n * h + 1, device=DEV)[1:].view(n, h)
                sb_u = torch.empty(n * h + 1, device=DEV)[1:].view(n, h)
                so_u = torch.empty(n * h + 1, device=DEV)[1:].view(n, h)
                sa_u.copy_(sa)
                sb_u.copy_(sb)
                for var in variants:
                    lib.set_merge_variant(var)
                    vo = torch.full_like(va, float("nan"))
                    lib.merge_state(va, sa_u, vb, sb_u, vo, so_u)
                    _sync()
                    ev = max_violation(vo, rv, atol, rtol)
                    es = max_violation(so_u, rs, 1e-4, 1e-5)
                    ok = ev <= 1 and es <= 1
                    ok_all &= ok
                    results.append(dict(kind="out_of_place_unaligned_s", dtype=dname, shape=list(shape),
                                        variant=var, v_violation=ev, s_violation=es, ok=ok))
                    if not ok:
                        log(f"  FAIL unaligned-s {dname} {shape} variant {var}: v {ev:.3g} s {es:.3g}")
            # in place, with and without mask
            mask = (torch.arange(shape[0], device=DEV) % 3 != 1).to(torch.uint8)
            for var in variants:
                lib.set_merge_variant(var)
                for use_mask in (False, True):
                    v = va.clone()
                    s = sa.clone()
                    lib.merge_state_in_place(v, s, vb, sb, mask if use_mask else None)
                    _sync()
                    if use_mask:
                        keep = mask.bool()
                        ev_ref = torch.where(keep[:, None, None], rv, va.double())
                        es_ref = torch.where(keep[:, None], rs, sa.double())
                    else:
                        ev_ref, es_ref = rv, rs
                    ev = max_violation(v, ev_ref, atol, rtol)
                    es = max_violation(s, es_ref, 1e-4, 1e-5)
                    ok = ev <= 1 and es <= 1
                    ok_all &= ok
                    results.append(dict(kind="in_place_mask" if use_mask else "in_place", dtype=dname,
                                        shape=list(shape), variant=var, v_violation=ev, s_violation=es,
                                        ok=ok))
                    if not ok:
                        log(f"  FAIL in-place{'+mask' if use_mask else ''} {dname} {shape} variant {var}: "
                            f"v {ev:.3g} s {es:.3g}")
            del va, sa, vb, sb, rv, rs
    if DEV == "cuda":
        torch.cuda.empty_cache()
    return ok_all, results


# ----------------------------------------------------------------------------- timing


class Flusher:
    def __init__(self):
        import torch

        self.zbuf = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
        self.rbuf = torch.ones(64 * 1024 * 1024, dtype=torch.float32, device="cuda")  # 256 MiB
        self.rout = torch.empty((), dtype=torch.float32, device="cuda")

    def dirty(self):
        self.zbuf.zero_()

    def clean(self):
        import torch

        torch.sum(self.rbuf, 0, out=self.rout)  # reads 256 MiB: L2 ends up holding clean lines


def _replay_times(graphs, reps):
    import torch

    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    acc = [[] for _ in graphs]
    for _ in range(reps):
        for g, a in zip(graphs, acc):
            e0.record()
            g.replay()
            e1.record()
            torch.cuda.synchronize()
            a.append(e0.elapsed_time(e1) * 1000.0)
    return [statistics.median(a) for a in acc]


def flush_graph_time_us(fn, flush, n_calls, reps):
    """Methods A / B: median device us per call of fn with flush() before each call."""
    import torch

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
    t, tf = _replay_times([g, gf], reps)
    return max(0.0, (t - tf) / n_calls)


def steady_graph_time_us(fn, n_calls, reps):
    """Method C: back-to-back calls (fn rotates its sets), (t(2N) - t(N)) / N."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(4):
            fn()
    torch.cuda.synchronize()
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1, stream=s):
        for _ in range(n_calls):
            fn()
    with torch.cuda.graph(g2, stream=s):
        for _ in range(2 * n_calls):
            fn()
    torch.cuda.synchronize()
    t1, t2 = _replay_times([g1, g2], reps)
    return max(0.0, (t2 - t1) / n_calls)


def copy_bandwidth_4g():
    """benchmarks/cascade.py's reference: 4 GiB device copy, read+write GB/s, median of 5."""
    import torch

    n = 1 << 32
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
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
    del a, b
    torch.cuda.empty_cache()
    return 2 * n / statistics.median(ts) / 1e9


class Rotor:
    """Calls body(i) with i cycling over range(k) (graph capture freezes the sequence)."""

    def __init__(self, k, body):
        self.k, self.body, self.i = k, body, -1

    def __call__(self):
        self.i = (self.i + 1) % self.k
        self.body(self.i)


def time_all_methods(make_fn, n_sets_ab, n_sets_c, fl, args):
    return dict(
        A=flush_graph_time_us(make_fn(n_sets_ab), fl.dirty, 4, args.reps),
        B=flush_graph_time_us(make_fn(n_sets_ab), fl.clean, 4, args.reps),
        C=steady_graph_time_us(make_fn(n_sets_c), args.calls, args.reps),
    )


def bench(lib, fi, args, log):
    import torch

    n, h, d = SHAPE
    nbytes = 3 * n * h * d * 2 + 3 * n * h * 4
    fl = Flusher()
    out = dict(shape=list(SHAPE), bytes=nbytes, rows={})
    # same-size copy: nbytes/2 read + nbytes/2 written
    half = nbytes // 2
    csrc = [torch.ones(half, dtype=torch.uint8, device="cuda") for _ in range(args.sets)]
    cdst = [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(args.sets)]

    def mk_copy(k):
        return Rotor(k, lambda i: cdst[i].copy_(csrc[i]))

    out["rows"]["copy (same bytes)"] = dict(dtype="-", us=time_all_methods(mk_copy, 2, args.sets, fl, args))
    del csrc, cdst
    default_variant = int(lib.set_merge_variant(-1))
    out["default_variant"] = default_variant
    for dtype in (torch.float16, torch.bfloat16):
        dname = str(dtype).replace("torch.", "")
        sets = [make_inputs(SHAPE, dtype, seed=7 + i, special=False) for i in range(args.sets)]
        outs = [(torch.empty_like(s[0]), torch.empty_like(s[1])) for s in sets]
        t0 = time.perf_counter()
        for var in args.variants:
            lib.set_merge_variant(var)

            def mk(k):
                return Rotor(k, lambda i: lib.merge_state(*sets[i], *outs[i]))

            out["rows"][f"{dname} v{var}"] = dict(dtype=dname, variant=var, desc=VARIANT_DESC.get(var, ""),
                                                 us=time_all_methods(mk, 2, args.sets, fl, args))
        lib.set_merge_variant(default_variant)

        def mk_ip(k):
            return Rotor(k, lambda i: lib.merge_state_in_place(sets[i][0], sets[i][1], sets[i][2], sets[i][3], None))

        out["rows"][f"{dname} in place (v{default_variant})"] = dict(
            dtype=dname, variant=default_variant, desc="merge_state_in_place", us=time_all_methods(mk_ip, 2, args.sets, fl, args))
        if fi is not None:
            try:
                def mk_fi(k):
                    return Rotor(k, lambda i: fi.cascade.merge_state(*sets[i]))

                def mk_fi_ip(k):
                    return Rotor(k, lambda i: fi.cascade.merge_state_in_place(*sets[i]))

                out["rows"][f"{dname} FlashInfer"] = dict(dtype=dname, desc="flashinfer.cascade.merge_state",
                                                         us=time_all_methods(mk_fi, 2, args.sets, fl, args))
                out["rows"][f"{dname} FlashInfer in place"] = dict(
                    dtype=dname, desc="flashinfer.cascade.merge_state_in_place",
                    us=time_all_methods(mk_fi_ip, 2, args.sets, fl, args))
            except Exception as exc:  # noqa: BLE001
                log(f"FlashInfer timing failed: {exc!r}")
        log(f"{dname}: timed in {time.perf_counter() - t0:.1f} s")
        del sets, outs
        torch.cuda.empty_cache()
    del fl
    torch.cuda.empty_cache()
    return out


def annotate(res, copy_gbs):
    nbytes = res["bytes"]
    copy = res["rows"]["copy (same bytes)"]["us"]
    for r in res["rows"].values():
        r["GBs"] = {m: (nbytes / (u * 1e3) if u > 0 else None) for m, u in r["us"].items()}
        r["vs_copy4g"] = {m: (g / copy_gbs if g else None) for m, g in r["GBs"].items()}
        r["vs_copy_same"] = {m: (copy[m] / r["us"][m] if r["us"][m] > 0 else None) for m in r["us"]}
    res["floor_us"] = nbytes / (copy_gbs * 1e3)
    res["target_us_0p9"] = nbytes / (0.9 * copy_gbs * 1e3)


def markdown(res, info, checks_ok, n_checks):
    L = [f"# merge_state bandwidth, {info.get('device')} ({info.get('date')})", ""]
    L.append(f"Shape {res['shape']} + fp32 LSE, {res['bytes'] / 1e6:.1f} MB moved per call; "
             f"4 GiB copy {info['copy_gbs']:.0f} GB/s in this run (anchor {ANCHOR_COPY_GBS:.0f}); floor "
             f"{res['floor_us']:.1f} us, 0.9 target {res['target_us_0p9']:.1f} us. Default variant "
             f"{res['default_variant']}. Checks: {'all passed' if checks_ok else 'FAILURES'} ({n_checks}).")
    L.append("")
    L.append("A = dirty flush (256 MiB zero_ before each call), B = clean flush (256 MiB read), "
             "C = steady state (back-to-back, rotating sets > 3x L2). Cells: us / ratio to 4 GiB copy BW / "
             "ratio to same-size copy under the same method.")
    L.append("")
    L.append("| row | what | A us | A /copy4G | A /copy | B us | B /copy4G | B /copy | C us | C /copy4G | C /copy |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    f = lambda x, p=3: "-" if x is None else f"{x:.{p}f}"  # noqa: E731
    for name, r in res["rows"].items():
        cells = []
        for m in "ABC":
            cells += [f(r["us"][m], 1), f(r["vs_copy4g"][m]), f(r["vs_copy_same"][m])]
        L.append(f"| {name} | {r.get('desc', 'torch copy_')} | " + " | ".join(cells) + " |")
    L.append("")
    return "\n".join(L)


def main(argv=None):
    args = parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    logf = open(out_dir / "merge_state_device.log", "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    import torch

    if not torch.cuda.is_available():
        log("no CUDA device: nothing to do")
        return 2
    from fib_runtime.kernels import cascade as fc

    lib = fc._lib()
    t_start = time.perf_counter()
    info = dict(date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                device=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda,
                sms=torch.cuda.get_device_properties(0).multi_processor_count,
                l2_bytes=getattr(torch.cuda.get_device_properties(0), "L2_cache_size", None),
                variants=args.variants, sets=args.sets, calls=args.calls, reps=args.reps)
    fi = None
    if not args.no_fi:
        try:
            import flashinfer.cascade  # noqa: F401
            import flashinfer

            fi = flashinfer
            info["flashinfer"] = getattr(flashinfer, "__version__", "present")
        except Exception as exc:  # noqa: BLE001
            log(f"flashinfer unavailable: {exc!r}")
            info["flashinfer"] = None
    # old variants were 0..7: ask the library which ones it accepts
    accepted = []
    prev = int(lib.set_merge_variant(-1))
    for v in args.variants:
        lib.set_merge_variant(v)
        if int(lib.set_merge_variant(-1)) == v:
            accepted.append(v)
        lib.set_merge_variant(prev)
    if accepted != args.variants:
        log(f"library rejects variants {sorted(set(args.variants) - set(accepted))}: stale .so?")
        args.variants = accepted
    t0 = time.perf_counter()
    checks_ok, checks = check_all(lib, args.variants, log)
    lib.set_merge_variant(prev)
    log(f"checks: {'all passed' if checks_ok else 'FAILURES'} ({len(checks)} cases, {time.perf_counter() - t0:.1f} s)")
    res = dict(info=info, checks_ok=checks_ok, checks=checks)
    if not args.check_only:
        t0 = time.perf_counter()
        info["copy_gbs"] = copy_bandwidth_4g()
        log(f"4 GiB copy: {info['copy_gbs']:.0f} GB/s")
        b = bench(lib, fi, args, log)
        annotate(b, info["copy_gbs"])
        res["bench"] = b
        log(f"timing: {time.perf_counter() - t0:.1f} s")
        md = markdown(b, info, checks_ok, len(checks))
        (out_dir / "merge_state_device.md").write_text(md)
        print(md)
    info["total_s"] = time.perf_counter() - t_start
    (out_dir / "merge_state_device.json").write_text(json.dumps(res, indent=1))
    log(f"total {info['total_s']:.1f} s; wrote {out_dir}/merge_state_device.json")
    return 0 if checks_ok else 1


if __name__ == "__main__":
    sys.exit(main())
