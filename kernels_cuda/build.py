#!/usr/bin/env python3
"""Ahead-of-time build of the fib-runtime CUDA kernel families.

Each family is one translation unit ``kernels_cuda/src/<family>.cu`` (its headers live in
``kernels_cuda/include/fib/<family>/`` and ``kernels_cuda/include/fib/common/``).  Every ``*.cu``
file in ``src/`` is a family: adding a file is all it takes to join the build.

Output: ``fib_runtime/kernels/_bin/libfib_<family>.so``, bound with apache-tvm-ffi
(``TVM_FFI_DLL_EXPORT_TYPED_FUNC``), machine code for sm_80, sm_89, sm_90 plus PTX for
compute_90 (newer GPUs JIT the PTX once in the driver).  The library links libtvm_ffi and a
static cudart only: no libtorch, no libpython, so one binary serves every Python and torch.

Usage::

    python kernels_cuda/build.py                 # all families, parallel, skip up-to-date
    python kernels_cuda/build.py --family sampling --force -j 4
    python kernels_cuda/build.py --list          # print the family names
    python kernels_cuda/build.py --arch 90       # one GPU's machine code only (a device test build)

Exit status: 0 on success, also when nvcc is missing ("kernels unavailable": the package still
installs and the loader reports the families unavailable); 1 when a compile fails, or when
``--strict`` is given and nvcc is missing.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
SRC = ROOT / "src"
INCLUDE = ROOT / "include"
OUT_DIR = REPO / "fib_runtime" / "kernels" / "_bin"

# (virtual arch, real code) pairs; the last one embeds PTX for forward compatibility.
GENCODE = [
    ("compute_80", "sm_80"),
    ("compute_89", "sm_89"),
    ("compute_90", "sm_90"),
    ("compute_90", "compute_90"),
]
KNOWN_ARCHS = ("80", "89", "90")


def gencode(archs: str | None) -> list[tuple[str, str]]:
    """The (virtual, real) pairs for ``--arch`` / ``FIB_CUDA_ARCHS`` ("90", "80,sm_90", ...): machine
    code for those architectures and no PTX (a build for the GPU at hand, ~3x faster to compile than
    the shipped set); None or empty: the shipped set, GENCODE."""
    if not archs:
        return list(GENCODE)
    out = []
    for a in archs.replace(" ", "").split(","):
        a = a.removeprefix("sm_").removeprefix("compute_")
        if a not in KNOWN_ARCHS:
            raise ValueError(f"unknown CUDA architecture {a!r} in --arch/FIB_CUDA_ARCHS; known: {', '.join(KNOWN_ARCHS)}")
        if (f"compute_{a}", f"sm_{a}") not in out:
            out.append((f"compute_{a}", f"sm_{a}"))
    return out
BASE_FLAGS = [
    "-O3",
    "-std=c++17",
    "--shared",
    "-Xcompiler",
    "-fPIC,-fvisibility=hidden",
    "-cudart",
    "static",
    "--expt-relaxed-constexpr",
    # never -use_fast_math: subnormal pivots and exp/log accuracy matter (FlashInfer #769/#774)
    "-DNDEBUG",
]


def families() -> list[str]:
    """Every ``src/*.cu`` is one family (sorted, so the order is stable)."""
    return sorted(p.stem for p in SRC.glob("*.cu"))


def output_path(family: str) -> Path:
    return OUT_DIR / f"libfib_{family}.so"


def find_nvcc() -> str | None:
    if "NVCC" in os.environ:  # explicit choice: used alone ("" or a missing path = no nvcc)
        c = os.environ["NVCC"]
        return c if c and Path(c).is_file() and os.access(c, os.X_OK) else None
    cands = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands.append(str(Path(os.environ[var]) / "bin" / "nvcc"))
    cands += ["/usr/local/cuda/bin/nvcc", shutil.which("nvcc")]
    for c in cands:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    return None


def tvm_ffi_paths() -> tuple[list[str], str]:
    """(include dirs, lib dir) of the installed apache-tvm-ffi."""
    try:
        from tvm_ffi import libinfo  # type: ignore
    except Exception as exc:  # pragma: no cover - tested through the "unavailable" path
        raise RuntimeError(f"apache-tvm-ffi is not importable ({exc}); pip install apache-tvm-ffi") from exc
    incs = []
    for fn in ("find_include_path", "find_dlpack_include_path"):
        p = getattr(libinfo, fn)()
        if p not in incs:
            incs.append(p)
    libdir = str(Path(libinfo.find_libtvm_ffi()).parent)
    return incs, libdir


def family_sources(family: str) -> list[Path]:
    files = [SRC / f"{family}.cu"]
    for sub in (INCLUDE / "fib" / family, INCLUDE / "fib" / "common"):
        if sub.is_dir():
            files += sorted(p for p in sub.rglob("*") if p.is_file())
    return files


# ptxas's own threads (--split-compile: the kernels of one target assembled in parallel). The machine
# code is the same as one thread's (the sm_90 SASS of the sampling family compared equal, 2026-12-07),
# so like nvcc --threads it stays out of the fingerprint. The sm_90 ptxas pass is the build's critical
# path (~735 s of ~1010 on one core, kernels_cuda/README.md): with 2 threads the sampling family's
# --arch 90 build took 766 s against ~900 (nvcc's own --split-compile also splits cicc, which changed
# the SASS of 34 of 35 kernels: not used).
PTXAS_SPLIT_MAX = 8


def ptxas_split(n: int) -> list[str]:
    return [f"--ptxas-options=--split-compile={n}"] if n > 1 else []


def command(nvcc: str, family: str, out: Path, threads: int, archs: list[tuple[str, str]] | None = None,
            extra: list[str] | None = None, split: int = 1) -> list[str]:
    incs, libdir = tvm_ffi_paths()
    cmd = [nvcc, *BASE_FLAGS, *(extra or [])]
    for virt, real in archs or GENCODE:
        cmd.append(f"-gencode=arch={virt},code={real}")
    if threads > 1:
        cmd += ["--threads", str(threads)]
    cmd += ptxas_split(split)
    cmd += [f"-I{INCLUDE}"] + [f"-I{i}" for i in incs]
    cmd += [str(SRC / f"{family}.cu"), "-o", str(out), f"-L{libdir}", "-ltvm_ffi"]
    return cmd


def fingerprint(family: str, cmd: list[str]) -> str:
    h = hashlib.sha256()
    # the command minus what does not change the binary (nvcc --threads N, ptxas's threads, the
    # temporary output name)
    skip = {i for i, c in enumerate(cmd) if c == "--threads"}
    skip |= {i + 1 for i in skip}
    skip |= {i for i, c in enumerate(cmd) if c.startswith("--ptxas-options=--split-compile=")}
    h.update(json.dumps([c for i, c in enumerate(cmd) if i not in skip]).encode())
    for f in family_sources(family):
        h.update(str(f.relative_to(ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def stamp_path(family: str) -> Path:
    return OUT_DIR / f".libfib_{family}.so.sha256"


def up_to_date(family: str, fp: str) -> bool:
    out, st = output_path(family), stamp_path(family)
    return out.is_file() and st.is_file() and st.read_text().strip() == fp


def build_one(nvcc: str, family: str, threads: int, force: bool, verbose: bool,
              archs: list[tuple[str, str]] | None = None, extra: list[str] | None = None,
              split: int = 1) -> tuple[str, str, float, str]:
    """Returns (family, status, seconds, log) with status in built/up-to-date/failed."""
    out = output_path(family)
    cmd = command(nvcc, family, out, threads, archs, extra, split)
    fp = fingerprint(family, cmd)
    if not force and up_to_date(family, fp):
        return family, "up-to-date", 0.0, ""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    cmd[cmd.index(str(out))] = str(tmp)
    if verbose:
        print(" ".join(cmd), flush=True)
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.time() - t0
    log = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        return family, "failed", dt, log
    os.replace(tmp, out)  # atomic: a concurrent loader never sees a half-written file
    stamp_path(family).write_text(fp + "\n")
    return family, "built", dt, log


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", action="append", help="build only this family (repeatable)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2, help="parallel nvcc threads in all")
    ap.add_argument("--force", action="store_true", help="rebuild even when up to date")
    ap.add_argument("--strict", action="store_true", help="exit 1 when nvcc is missing")
    ap.add_argument("--list", action="store_true", help="print the family names and exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the nvcc commands and warnings")
    ap.add_argument("--arch", default=os.environ.get("FIB_CUDA_ARCHS", ""),
                    help="comma list of 80/89/90: machine code for these only, no PTX (default, or env "
                         "FIB_CUDA_ARCHS: sm_80, sm_89, sm_90 + PTX compute_90)")
    ap.add_argument("--nvcc-flag", action="append", default=[], metavar="FLAG",
                    help="one more nvcc flag, as --nvcc-flag=-DFIB_SAMPLING_PROFILE or --nvcc-flag=-lineinfo "
                         "(repeatable; profile and A/B builds, with --out-dir; part of the build's fingerprint)")
    ap.add_argument("--out-dir", type=Path,
                    help="build into this folder instead of fib_runtime/kernels/_bin (load it with FIB_KERNELS_DIR)")
    ap.add_argument("--src-dir", type=Path, help=argparse.SUPPRESS)  # tests: another kernels_cuda tree
    args = ap.parse_args(argv)
    global ROOT, SRC, INCLUDE, OUT_DIR
    if args.src_dir:
        ROOT = args.src_dir.resolve()
        SRC, INCLUDE = ROOT / "src", ROOT / "include"
    if args.out_dir:
        OUT_DIR = args.out_dir.resolve()

    try:
        archs = gencode(args.arch)
    except ValueError as exc:
        print(f"fib kernels: {exc}", file=sys.stderr)
        return 1
    fams = families()
    if args.list:
        print("\n".join(fams))
        return 0
    if args.family:
        unknown = [f for f in args.family if f not in fams]
        if unknown:
            print(f"fib kernels: unknown family {unknown}; known: {fams}", file=sys.stderr)
            return 1
        fams = [f for f in fams if f in args.family]
    if not fams:
        print("fib kernels: no kernel families in kernels_cuda/src; nothing to build")
        return 0

    nvcc = find_nvcc()
    if nvcc is None:
        msg = ("fib kernels unavailable: nvcc not found (set NVCC or CUDA_HOME); "
               "the package installs without CUDA kernels and falls back at run time")
        print(msg, file=sys.stderr if args.strict else sys.stdout)
        return 1 if args.strict else 0
    try:
        tvm_ffi_paths()
    except RuntimeError as exc:
        print(f"fib kernels unavailable: {exc}", file=sys.stderr if args.strict else sys.stdout)
        return 1 if args.strict else 0

    jobs = max(1, args.jobs)
    workers = min(len(fams), jobs)
    # nvcc --threads parallelises over the gencode targets of one file. Every family may use all the
    # jobs: the families overlap only at the start (cascade: ~90 s of the sampling family's ~850 s on
    # 2 cores with 1 thread each), then the long one would leave cores idle.
    threads = max(1, min(len(archs), jobs))
    # and ptxas may use every job too: while the other targets' passes run, its threads share the
    # cores with them; once they end, the sm_90 pass (the longest) uses the cores they leave
    split = min(jobs, PTXAS_SPLIT_MAX)
    failed = False
    t0 = time.time()
    with cf.ThreadPoolExecutor(max_workers=workers) as ex:
        futs = [ex.submit(build_one, nvcc, f, threads, args.force, args.verbose, archs, args.nvcc_flag, split)
                for f in fams]
        for fut in cf.as_completed(futs):
            fam, status, dt, log = fut.result()
            if status == "failed":
                failed = True
                print(f"fib kernels: {fam}: FAILED after {dt:.1f} s\n{log}", file=sys.stderr)
            else:
                extra = f" in {dt:.1f} s" if status == "built" else ""
                print(f"fib kernels: {fam}: {status}{extra} -> {output_path(fam)}")
                if args.verbose and log.strip():
                    print(log)
    print(f"fib kernels: done in {time.time() - t0:.1f} s ({len(fams)} families, {workers} in parallel, "
          f"up to {threads} nvcc threads and {split} ptxas threads each)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
