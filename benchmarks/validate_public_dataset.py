"""Validate the whole public FlashInfer Trace dataset and write the summary to
benchmarks/results/public_dataset_validate.txt.

    python benchmarks/validate_public_dataset.py [--mirror PATH/TO/flashinfer-bench.git]

Without ``--mirror`` it uses the extracts committed in tests/data (the last in-repository copy
of ``flashinfer_trace/`` at flashinfer-bench ``6569a4d6^``, flashinfer-bench's own benchmark
results at ``4def975f``, FlashInfer 0.7.2's 201 trace templates). With ``--mirror`` (a clone or
bare mirror of flashinfer-ai/flashinfer-bench) it also validates every historical version of
``flashinfer_trace/`` (every commit that touched it).
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
OUT = REPO / "benchmarks" / "results" / "public_dataset_validate.txt"


def fib(*argv) -> tuple[int, str, float]:
    from fib_runtime.cli.main import main

    buf = io.StringIO()
    t0 = time.perf_counter()
    with redirect_stdout(buf):
        rc = main([str(a) for a in argv])
    return rc, buf.getvalue(), time.perf_counter() - t0


def extract(tarball: Path, dest: Path) -> None:
    with tarfile.open(tarball) as tf:
        tf.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


def tail(text: str, n: int = 2) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", type=Path, help="git dir of flashinfer-ai/flashinfer-bench (history sweep)")
    args = ap.parse_args()
    lines = [f"# fib validate on the public FlashInfer Trace dataset ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
             f"# fib-runtime at {subprocess.run(['git', '-C', str(REPO), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()}",
             "# The public files needed no change to the core: every definition, workload, solution and",
             "# trace below loads in the fib dialect. FlashInfer's own dumps needed the flashinfer dialect",
             "# relaxed (optional reference, derived axes, scalar-bound var axes, any dtype word).",
             ""]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        extract(DATA / "public_flashinfer_trace_6569a4d6p.tar.xz", tmp)
        public = tmp / "public" / "flashinfer_trace"
        lines.append("## flashinfer-bench 6569a4d6^ (= ecafa9c2) flashinfer_trace/: last in-repository copy")
        rc, out, dt = fib("validate", public, "--skip-blobs")
        lines += [f"$ fib validate flashinfer_trace --skip-blobs    -> exit {rc} ({dt:.2f} s)", tail(out), ""]
        rc, out, dt = fib("validate", public, "--json")
        doc = json.loads(out)
        kinds = sorted({p["message"].split(" '")[0] for p in doc["problems"]})
        lines += [f"$ fib validate flashinfer_trace (blobs checked) -> exit {rc} ({dt:.2f} s)",
                  f"{doc['counts']}; {doc['errors']} errors, all of kind: {kinds}",
                  "(the blobs live in Git LFS and are absent from a checkout: reported by name, file, line, field)", ""]
        rc, out, _ = fib("list", public, "--json")
        rows = json.loads(out)["definitions"]
        ops = {}
        for r in rows:
            ops[r["op_type"]] = ops.get(r["op_type"], 0) + 1
        lines += [f"op_types: {dict(sorted(ops.items()))}", ""]

        extract(DATA / "flashinfer_bench_results_4def975f.tar.xz", tmp)
        lines.append("## flashinfer-bench 4def975f bench/test/results: solutions + evaluation traces of real runs")
        for d in sorted((tmp / "bench" / "test" / "results").glob("*/*")):
            for sub in ("definitions", "workloads"):
                (d / sub).symlink_to(public / sub)
            rc, out, _ = fib("validate", d, "--skip-blobs")
            lines.append(f"{d.parent.name}/{d.name}: exit {rc}: {tail(out, 1)} | {tail(out, 2).splitlines()[0].split(': ', 1)[1]}")
        ex = tmp / "examples" / "ffi" / "Example-FlashInfer-Trace"
        rc, out, _ = fib("validate", ex)
        lines += [f"examples/ffi/Example-FlashInfer-Trace: exit {rc}: {tail(out, 1)}", ""]

        extract(DATA / "flashinfer_templates_0.7.2.tar.xz", tmp)
        lines.append("## FlashInfer 0.7.2 flashinfer.trace: all registered templates, dumped flat")
        rc, out, _ = fib("validate", "--dialect", "flashinfer", tmp / "templates")
        lines += [f"--dialect flashinfer: exit {rc}: {tail(out, 3)}".replace("\n", " | ")]
        rc, out, _ = fib("validate", tmp / "templates")
        lines += [f"--dialect fib (flashinfer-bench's rules): exit {rc}: {tail(out, 1)}", ""]

        if args.mirror:
            lines.append("## every historical version of flashinfer_trace/ (commits touching it)")
            log = subprocess.run(["git", "-C", str(args.mirror), "log", "--format=%h %cs", "--", "flashinfer_trace"],
                                 capture_output=True, text=True, check=True).stdout.split("\n")
            bad = 0
            for entry in filter(None, log):
                commit, day = entry.split()
                dest = tmp / "hist" / commit
                dest.mkdir(parents=True)
                arch = subprocess.run(["git", "-C", str(args.mirror), "archive", commit, "flashinfer_trace"],
                                      capture_output=True)
                if arch.returncode != 0:
                    continue
                tarfile.open(fileobj=io.BytesIO(arch.stdout)).extractall(dest)
                rc, out, _ = fib("validate", dest / "flashinfer_trace", "--skip-blobs", "--json")
                doc = json.loads(out)
                bad += rc != 0
                lines.append(f"{commit} {day}: exit {rc}, {doc['counts']['definitions']} definitions, "
                             f"{doc['counts']['workloads']} workloads, {doc['errors']} errors")
            lines += [f"{len([e for e in log if e])} versions, {bad} with errors", ""]
        text = "\n".join(lines).replace(str(tmp), "<extract>") + "\n"
    OUT.write_text(text)
    print(OUT.read_text())


if __name__ == "__main__":
    sys.exit(main())
