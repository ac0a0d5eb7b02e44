"""Real dataset files validate and round-trip losslessly (parsed JSON equal, unchanged files byte-equal).

Sources: the fixture slice of the public FlashInfer Trace dataset (tests/data/fixtures), the
embedded default dataset, and the solutions/traces of flashinfer-bench's own benchmark runs
(tests/data/flashinfer_bench_results_4def975f.tar.xz, with the public definitions).
"""

import json
import shutil
from pathlib import Path

import pytest

from fib_runtime.default_dataset import default_dataset_path
from fib_runtime.schema import Definition, Solution, Trace, parse
from fib_runtime.store import Dataset

DATA = Path(__file__).parent / "data"
FIXTURES = DATA / "fixtures" / "flashinfer-trace"


def _json_files(root: Path, folder: str):
    return sorted((root / folder).rglob("*.json"))


def _jsonl_lines(root: Path, folder: str):
    for p in sorted((root / folder).rglob("*.jsonl")):
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if line.strip():
                yield p, i, line


def test_fixtures_validate_except_blobs():
    ds = Dataset.open(FIXTURES, check_blobs=False)
    assert ds.problems == []
    assert len(ds.definitions) == 7
    assert sum(1 for _ in ds.all_workloads()) == 101
    assert sum(1 for _ in ds.all_traces()) == 39
    # with blob checks, the only problems are the LFS blobs the slice does not ship
    ds = Dataset.open(FIXTURES)
    assert ds.problems and all(p.message.startswith("missing blob file") for p in ds.problems)
    assert all(p.file.startswith("workloads/gqa_paged/") and p.line and p.field.endswith(".path")
               for p in ds.problems)


@pytest.mark.parametrize("root", [FIXTURES, default_dataset_path()], ids=["fixtures", "embedded"])
def test_every_object_round_trips(root):
    n = 0
    for p in _json_files(root, "definitions"):
        raw = json.loads(p.read_text())
        d = parse(Definition, raw)
        assert d.to_dict() == raw, p
        assert json.dumps(d.to_dict()) == json.dumps(raw), f"key order changed: {p}"
        assert parse(Definition, d.to_dict()) == d
        n += 1
    for folder in ("workloads", "traces"):
        for p, i, line in _jsonl_lines(root, folder):
            raw = json.loads(line)
            t = parse(Trace, raw)
            assert t.to_dict() == raw, f"{p}:{i}"
            assert json.dumps(t.to_dict()) == json.dumps(raw), f"key order changed: {p}:{i}"
            assert json.loads(t.to_json()) == raw
            assert parse(Trace, json.loads(t.to_json())) == t
            n += 1
    assert n > 50


def test_unchanged_definition_files_are_byte_equal(tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(FIXTURES, root)
    before = {p: p.read_bytes() for p in _json_files(root, "definitions")}
    ds = Dataset.open(root, check_blobs=False)
    for d in ds.definitions.values():
        ds._write_json(ds.definition_path(d), d)
        ds.add_definition(d)  # the public API goes through _write_json too
    for p, b in before.items():
        assert p.read_bytes() == b, p
    # a changed definition is rewritten, pretty-printed, and reads back equal
    d = ds.definitions["rmsnorm_h4096"]
    changed = d.model_copy(update={"description": "changed"})
    ds.add_definition(changed, overwrite=True)
    text = ds.definition_path(d).read_text()
    assert text.startswith("{\n  \"name\": \"rmsnorm_h4096\"") and text.endswith("}\n")
    again = Dataset.open(root, check_blobs=False)
    assert again.definitions["rmsnorm_h4096"].description == "changed"
    assert again.definitions["rmsnorm_h4096"].to_dict() == changed.to_dict()


def test_appended_traces_read_back_equal(tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(FIXTURES, root)
    ds = Dataset.open(root, check_blobs=False)
    old = ds.traces_for("gemm_n128_k2048")
    ds.add_traces(old[:3], author="copy")
    path = root / "traces" / "copy" / "gemm" / "gemm_n128_k2048.jsonl"
    assert [json.loads(l) for l in path.read_text().splitlines()] == [t.to_dict() for t in old[:3]]
    again = Dataset.open(root, check_blobs=False)
    assert again.problems == []
    assert len(again.traces_for("gemm_n128_k2048")) == len(old) + 3


@pytest.fixture(scope="module")
def bench_results(tmp_path_factory):
    """flashinfer-bench run results (solutions + traces) joined with the public definitions."""
    import tarfile

    base = tmp_path_factory.mktemp("fb")
    for name in ("public_flashinfer_trace_6569a4d6p.tar.xz", "flashinfer_bench_results_4def975f.tar.xz"):
        with tarfile.open(DATA / name) as tf:
            tf.extractall(base, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    public = base / "public" / "flashinfer_trace"
    roots = []
    for author_dir in sorted((base / "bench" / "test" / "results").glob("*/*")):
        for sub in ("definitions", "workloads"):
            (author_dir / sub).symlink_to(public / sub)
        roots.append(author_dir)
    roots.append(base / "examples" / "ffi" / "Example-FlashInfer-Trace")
    return roots


def test_flashinfer_bench_results_validate(bench_results):
    n_sol = n_tr = 0
    for root in bench_results:
        ds = Dataset.open(root, check_blobs=False)
        assert ds.errors == [], (root, ds.errors[:3])
        n_sol += len(ds.solutions)
        n_tr += sum(1 for _ in ds.all_traces())
    assert n_sol == 103 and n_tr == 242


def test_flashinfer_bench_results_round_trip(bench_results, tmp_path):
    statuses = set()
    for root in bench_results:
        for p in _json_files(root, "solutions"):
            raw = json.loads(p.read_text())
            s = parse(Solution, raw)
            assert s.to_dict(lossless=True) == raw, p
            assert json.dumps(s.to_dict(lossless=True)) == json.dumps(raw), p
            # the written form always carries destination_passing_style (fib default True)
            spec = s.to_dict()["spec"]
            assert spec["destination_passing_style"] == raw["spec"].get("destination_passing_style", True)
        for p, i, line in _jsonl_lines(root, "traces"):
            raw = json.loads(line)
            t = parse(Trace, raw)
            assert t.to_dict() == raw, f"{p}:{i}"
            statuses.add(t.evaluation.status.value)
    assert {"PASSED", "INCORRECT_NUMERICAL"} <= statuses
    # unchanged solution files stay byte-equal through the store
    root = tmp_path / "copy"
    shutil.copytree(bench_results[0], root, symlinks=True)
    ds = Dataset.open(root, check_blobs=False)
    before = {p: p.read_bytes() for p in _json_files(root, "solutions")}
    for s in ds.solutions.values():
        ds.add_solution(s)
    assert {p: p.read_bytes() for p in before} == before


def test_equality_is_content_not_key_order():
    raw = json.loads((FIXTURES / "definitions/rmsnorm/rmsnorm_h4096.json").read_text())
    a = parse(Definition, raw)
    b = parse(Definition, dict(reversed(list(raw.items()))))
    assert a == b and json.dumps(a.to_dict()) != json.dumps(b.to_dict())  # equal, each keeps its order
    assert a != parse(Definition, {**raw, "x_unknown": 1})  # unknown keys are content
    assert a != a.model_copy(update={"description": "other"})
