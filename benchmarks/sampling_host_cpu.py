#!/usr/bin/env python3
"""Host cost of the sampling wrapper + binding on the CPU (no GPU needed).

The real library launches kernels, so it cannot run here. This script compiles a stand-in
tvm-ffi library with the real `sample` signatures and empty bodies (the binding's marshalling is
what it measures) and times `fib_runtime.kernels.sampling` calls through it, beside the wrapper
of a baseline revision (`--baseline-rev`, default 8914678: the 20-argument binding with the
arguments normalised in Python) on its own old signature. Wall time per call (median of
interleaved rounds; noisy on shared hosts) and, where valgrind exists, instructions per call
(callgrind: repeatable). What it leaves out: the library's C++ launch logic and the CUDA launch
itself (measured on the GPU host by benchmarks/sampling.py, `host_cost_us`).

    python benchmarks/sampling_host_cpu.py [--out benchmarks/results/sampling_host_cpu.json]
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STANDIN = r'''
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>
using namespace tvm::ffi;
int64_t old_sig(TensorView input, Optional<TensorView> out_idx, Optional<TensorView> out_vals, int64_t mode,
                int64_t is_logits, Optional<TensorView> top_k, int64_t top_k_val, Optional<TensorView> top_p,
                double top_p_val, Optional<TensorView> min_p, double min_p_val, Optional<TensorView> temperature,
                double temp_val, int64_t joint, Optional<TensorView> seed, int64_t seed_val,
                Optional<TensorView> offset, int64_t offset_val, int64_t cluster, int64_t stream) {
  return input.size(0) + top_k.has_value() + seed.has_value();
}
static int64_t touch(const AnyView& a) {
  if (auto t = a.try_cast<TensorView>()) return t->ndim();
  return a.type_index();
}
int64_t new_sig(TensorView input, TensorView out, int64_t flags, AnyView top_k, AnyView top_p, AnyView min_p,
                AnyView temperature, AnyView seed, AnyView offset, int64_t cluster, int64_t stream) {
  return input.size(0) + out.ndim() + touch(top_k) + touch(top_p) + touch(min_p) + touch(temperature) +
         touch(seed) + touch(offset);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(old_sig, old_sig);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(new_sig, new_sig);
'''
CASES = ("tensors_out", "tensors_alloc_default_rng", "scalars_int_seed")


def build_standin(d: Path) -> Path:
    cfg = shutil.which("tvm-ffi-config") or str(Path(sys.executable).parent / "tvm-ffi-config")
    flags = subprocess.run([cfg, "--cxxflags", "--ldflags", "--libs"], capture_output=True, text=True,
                           check=True).stdout.split()
    src, so = d / "standin.cc", d / "standin.so"
    src.write_text(STANDIN)
    subprocess.run(["g++", "-O2", "-shared", "-fPIC", "-std=c++17", str(src), "-o", str(so), *flags], check=True)
    return so


def wrappers(so: Path, rev: str, d: Path):
    import tvm_ffi

    import fib_runtime.kernels.sampling as cur

    lib = tvm_ffi.load_module(str(so))
    cur._fn = lib.new_sig
    out = {"current": cur}
    src = subprocess.run(["git", "show", f"{rev}:fib_runtime/kernels/sampling.py"], cwd=REPO, capture_output=True,
                         text=True)
    if src.returncode == 0:
        p = d / "baseline_sampling.py"
        p.write_text(src.stdout)
        spec = importlib.util.spec_from_file_location("fib_runtime.kernels._baseline_sampling", p)
        base = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(base)
        base._fn = lib.old_sig
        out["baseline"] = base
    return out


def case_fn(S, name):
    from sampling import host_call_cases  # (benchmarks/sampling.py: the same call forms as on the GPU)

    return host_call_cases(S, "cpu")[name]


def wall(fns: dict, n=20000, rounds=9) -> dict:
    res = {k: [] for k in fns}
    for _ in range(rounds):  # interleaved, so drift hits every variant alike
        for k, f in fns.items():
            t = time.perf_counter()
            for _ in range(n):
                f()
            res[k].append((time.perf_counter() - t) / n * 1e9)
    return {k: round(statistics.median(v)) for k, v in res.items()}


def one(args):  # child process for callgrind: run one (wrapper, case) n times
    d = Path(args.tmp)
    S = wrappers(d / "standin.so", args.baseline_rev, d)[args.one[0]]
    f = case_fn(S, args.one[1])
    for _ in range(int(args.one[2])):
        f()


def instructions(tmp: Path, rev: str, which: str, case: str, n: int) -> int | None:
    def run(k):
        r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                            __file__, "--tmp", str(tmp), "--baseline-rev", rev, "--one", which, case, str(k)],
                           capture_output=True, text=True)
        for line in r.stderr.splitlines():
            if "Collected" in line:
                return int(line.split()[-1])
        return None
    a, b = run(0), run(n)
    return None if a is None or b is None else (b - a) // n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "sampling_host_cpu.json"))
    ap.add_argument("--baseline-rev", default="8914678")
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--tmp")
    ap.add_argument("--one", nargs=3)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "benchmarks"))
    if args.one:
        return one(args)
    import torch
    import tvm_ffi

    tmp = Path(tempfile.mkdtemp(prefix="fib_host_"))
    so = build_standin(tmp)
    ws = wrappers(so, args.baseline_rev, tmp)
    res = {"meta": {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "host": platform.processor() or platform.machine(), "python": platform.python_version(),
                    "torch": torch.__version__, "tvm_ffi": getattr(tvm_ffi, "__version__", "?"),
                    "baseline_rev": args.baseline_rev, "what": __doc__.split("\n\n")[1].replace("\n", " ")},
           "wall_ns_per_call": {}, "instructions_per_call": {}}
    for case in CASES:
        w = wall({k: case_fn(S, case) for k, S in ws.items()})
        res["wall_ns_per_call"][case] = w
        print(f"wall ns/call {case}: {w}", flush=True)
    if not args.no_callgrind and shutil.which("valgrind"):
        for case in CASES:
            res["instructions_per_call"][case] = {k: instructions(tmp, args.baseline_rev, k, case, 2000) for k in ws}
            print(f"instructions/call {case}: {res['instructions_per_call'][case]}", flush=True)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
