"""The whole public FlashInfer Trace dataset (last in-repository copy) loads and validates.

`tests/data/public_flashinfer_trace_6569a4d6p.tar.xz` is `git archive` of flashinfer-bench
`6569a4d6^` (= ecafa9c2), folder `flashinfer_trace/` (Apache-2.0): 156 definitions in 12 op_types
and 663 workloads in 26 files. Its blobs live in Git LFS and are absent: with blob checks those
workloads are reported as missing their blobs (and nothing else); `--skip-blobs` passes.
"""

import json
import tarfile
from collections import Counter
from pathlib import Path

import pytest

from fib_runtime.cli.main import main
from fib_runtime.schema import Definition, Trace, parse
from fib_runtime.store import Dataset

TARBALL = Path(__file__).parent / "data" / "public_flashinfer_trace_6569a4d6p.tar.xz"


@pytest.fixture(scope="module")
def public(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("public")
    with tarfile.open(TARBALL) as tf:
        tf.extractall(base, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return base / "public" / "flashinfer_trace"


def test_whole_dataset_validates_without_blobs(public, capsys):
    assert main(["validate", str(public), "--skip-blobs"]) == 0
    out = capsys.readouterr().out
    assert "156 definitions, 0 solutions, 663 workloads, 0 traces" in out
    assert "OK: 0 errors, 0 warnings" in out
    ds = Dataset.open(public, check_blobs=False)
    assert Counter(d.op_type for d in ds.definitions.values()) == {
        "dsa_paged": 3, "gdn": 9, "gemm": 32, "gqa_paged": 37, "gqa_ragged": 9, "mamba_ssu": 2,
        "mla_paged": 6, "mla_ragged": 2, "moe": 19, "rmsnorm": 15, "rope": 1, "sampling": 21}


def test_missing_blobs_are_reported_by_name(public, capsys):
    assert main(["validate", str(public), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"] == {"definitions": 156, "solutions": 0, "workloads": 663, "traces": 0}
    probs = doc["problems"]
    assert len(probs) == doc["errors"] == 723
    assert all(p["message"].startswith("missing blob file './blob/workloads/") for p in probs)
    assert all(p["line"] >= 1 and p["field"].startswith("workload.inputs.") for p in probs)


def test_every_public_object_round_trips(public):
    defs = sorted((public / "definitions").rglob("*.json"))
    assert len(defs) == 156
    for p in defs:
        raw = json.loads(p.read_text())
        assert parse(Definition, raw).to_dict() == raw, p
    n = 0
    for p in sorted((public / "workloads").rglob("*.jsonl")):
        for line in p.read_text().splitlines():
            if line.strip():
                raw = json.loads(line)
                assert parse(Trace, raw).to_dict() == raw, p
                n += 1
    assert n == 663


def test_list_and_show_on_public(public, capsys):
    assert main(["list", str(public), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["definitions"]
    assert len(rows) == 156 and sum(r["workloads"] for r in rows) == 663
    assert main(["show", "top_k_top_p_sampling_from_probs_v128256", "--dataset", str(public)]) == 0
    out = capsys.readouterr().out
    assert "op_type sampling" in out and "vocab_size" in out and "128256" in out
