"""Regenerate the embedded default dataset ``fib_runtime/data/default_dataset/``.

    python tests/data/make_default_dataset.py [--fixtures /work/shared/fixtures/flashinfer-trace]

What it writes (deterministic: the same files every run):
- the definitions and evaluation traces of the public-dataset slice (Apache-2.0, copied as is);
- the rmsnorm and GEMM workloads as is, and the 8 smallest paged-GQA decode workloads with
  *synthetic* blobs: the public blobs live in Git LFS and are not shipped, so ``kv_indptr`` /
  ``kv_indices`` are regenerated to fit each workload's recorded axes (an even split of
  ``num_kv_indices`` over the batch, page ids drawn from ``[0, num_pages)``);
- random workloads for the three sampling definitions (batch 1, 4, 16, 64), uuids derived from
  the definition name and batch size;
- the H200 evaluation traces of ``benchmarks/results/fib_bench_h200/dataset`` (our built-in
  kernels vs the FlashInfer baseline), with their baseline solutions, blobs, and the
  definitions the slice lacks: on an H200 the dispatcher then keeps FlashInfer where it measured
  faster and uses our kernels where they won, with no dataset of the user's own.

``tests/test_default_dataset.py`` checks that the committed files match this script's output.
"""

from __future__ import annotations

import argparse
import json
import shutil
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "fib_runtime" / "data" / "default_dataset"
FIXTURES = Path("/work/shared/fixtures/flashinfer-trace")
H200 = REPO / "benchmarks" / "results" / "fib_bench_h200" / "dataset"
SAMPLING_BATCHES = (1, 4, 16, 64)
GQA_KEEP = 8
NAMESPACE = uuid.UUID("6f1b0c52-8d3a-4a51-9d0e-0f1b5e5a2c11")


def sampling_workloads(defn: dict) -> list:
    lines = []
    for b in SAMPLING_BATCHES:
        u = str(uuid.uuid5(NAMESPACE, f"{defn['name']}/batch_size={b}"))
        lines.append({"definition": defn["name"], "solution": None,
                      "workload": {"uuid": u, "axes": {"batch_size": b},
                                   "inputs": {k: {"type": "random"} for k in defn["inputs"]}},
                      "evaluation": None})
    return lines


def gqa_blob(axes: dict, seed: int) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    b, n, pages = axes["batch_size"], axes["num_kv_indices"], axes["num_pages"]
    assert axes["len_indptr"] == b + 1
    per, rem = divmod(n, b)
    lens = torch.tensor([per + (1 if i < rem else 0) for i in range(b)], dtype=torch.int32)
    indptr = torch.zeros(b + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(lens, 0)
    indices = torch.randint(0, pages, (n,), generator=g, dtype=torch.int32)
    return {"kv_indptr": indptr.contiguous(), "kv_indices": indices.contiguous()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=FIXTURES)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--h200", type=Path, default=H200, help="dataset of H200 evaluation traces to merge")
    args = ap.parse_args()
    from safetensors.torch import save_file

    src, out = args.fixtures, args.out
    if out.exists():
        shutil.rmtree(out)
    for sub in ("definitions", "traces"):
        shutil.copytree(src / sub, out / sub)
    for f in sorted((src / "workloads").rglob("*.jsonl")):
        rel = f.relative_to(src)
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        lines = f.read_text().splitlines(keepends=True)
        if "gqa_paged" not in f.name:
            dst.write_text("".join(lines))
            continue
        rows = sorted(lines, key=lambda l: json.loads(l)["workload"]["axes"]["num_kv_indices"])[:GQA_KEEP]
        rows = [l for l in lines if l in rows]  # keep file order
        dst.write_text("".join(rows))
        for i, line in enumerate(rows):
            w = json.loads(line)["workload"]
            paths = {s["path"] for s in w["inputs"].values() if s["type"] == "safetensors"}
            for p in paths:
                blob = (out / p).resolve()
                blob.parent.mkdir(parents=True, exist_ok=True)
                save_file(gqa_blob(w["axes"], seed=i), str(blob))
    for f in sorted((src / "definitions" / "sampling").glob("*.json")):
        d = json.loads(f.read_text())
        dst = out / "workloads" / d["op_type"] / f"{d['name']}.jsonl"
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text("".join(json.dumps(t) + "\n" for t in sampling_workloads(d)))
    merge_traces(args.h200, out)
    (out / "README.md").write_text(README)


def merge_traces(src: Path, out: Path) -> None:
    """Evaluation traces, baseline solutions and blobs of ``src``; its definitions (and their
    recorded workloads) only where the slice has none of that name (public definitions stay)."""
    have = {f.stem for f in (out / "definitions").rglob("*.json")}
    for f in sorted((src / "definitions").rglob("*.json")):
        if f.stem not in have:
            dst = out / f.relative_to(src)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst)
    for f in sorted((src / "workloads").rglob("*.jsonl")):  # recorded workloads of new definitions
        dst = out / f.relative_to(src)
        if f.stem not in have and not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst)
    for sub in ("solutions/baseline", "traces", "blob/workloads"):
        for f in sorted((src / sub).rglob("*")):
            if f.is_file():
                dst = out / f.relative_to(src)
                assert not dst.exists(), dst
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, dst)


README = """\
# fib-runtime embedded default dataset

A small FlashInfer Trace dataset shipped inside the package (`fib list`, `fib show`, the demo).
Generated by `tests/data/make_default_dataset.py`; do not edit by hand.

- `definitions/`, `traces/`, `workloads/{gemm,rmsnorm}/`: files of the public FlashInfer Trace
  dataset (flashinfer-ai/flashinfer-bench, `flashinfer_trace/`, Apache-2.0), unchanged (the
  traces' `log` fields were emptied upstream of this copy).
- `workloads/gqa_paged/`: the 8 smallest of the public paged-GQA decode workloads. Their blobs in
  `blob/` are SYNTHETIC: the public ones live in Git LFS, so `kv_indptr` / `kv_indices` were
  regenerated to fit each workload's recorded axes.
- `workloads/sampling/`: random workloads (batch 1, 4, 16, 64) written by fib-runtime for the
  three sampling definitions.
- `traces/{baseline,fib-runtime}/`, `solutions/baseline/`, their `blob/`s and the definitions the
  slice lacks: `fib bench` on an H200 (`benchmarks/results/fib_bench_h200/`), our built-in
  kernels against the FlashInfer baseline. They are the dispatch table an H200 gets by default:
  a `baseline` winner means FlashInfer's original call runs.
"""

if __name__ == "__main__":
    main()
