"""Every malformed input of issue 2 gives a named one-line problem and exit 1, never a traceback.

Each case starts from a valid copy of the embedded default dataset (plus one valid solution),
breaks one thing, and runs the real command line (`python -m fib_runtime validate`) in a
subprocess, so an uncaught exception anywhere would show up as a traceback.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fib_runtime.default_dataset import default_dataset_path

DEF = "definitions/rmsnorm/rmsnorm_h4096.json"
WL = "workloads/gqa_paged/gqa_paged_decode_h32_kv8_d128_ps1.jsonl"
TR = "traces/gpt-5.2/rmsnorm/rmsnorm_h4096.jsonl"
SOL = "solutions/alice/rmsnorm/rmsnorm_h4096/alice_rmsnorm.json"

SOLUTION = {
    "name": "alice_rmsnorm", "definition": "rmsnorm_h4096", "author": "alice",
    "spec": {"language": "python", "target_hardware": ["H200"], "entry_point": "main.py::run",
             "dependencies": [], "destination_passing_style": False},
    "sources": [{"path": "main.py", "content": "def run(hidden_states, weight):\n    return hidden_states\n"}],
}


@pytest.fixture()
def root(tmp_path):
    r = tmp_path / "ds"
    shutil.copytree(default_dataset_path(), r)
    p = r / SOL
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(SOLUTION, indent=2))
    return r


def fib(*args, cwd=None):
    env = dict(os.environ, FIB_CLI_DEBUG="")
    return subprocess.run([sys.executable, "-m", "fib_runtime", *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd)


def edit_json(path: Path, fn):
    d = json.loads(path.read_text())
    fn(d)
    path.write_text(json.dumps(d, indent=2))


def edit_line(path: Path, lineno: int, fn):
    lines = path.read_text().splitlines()
    d = json.loads(lines[lineno - 1])
    fn(d)
    lines[lineno - 1] = json.dumps(d)
    path.write_text("\n".join(lines) + "\n")


def errors_of(r):
    return [l for l in r.stdout.splitlines() if l.startswith("error: ")]


def test_baseline_is_valid(root):
    r = fib("validate", root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK: 0 errors" in r.stdout


def _set_shape(d):
    d["inputs"]["hidden_states"]["shape"] = ["batch_size", "hiddn_size"]


def _unknown_dtype(d):
    d["inputs"]["weight"]["dtype"] = "float33"


def _const_no_value(d):
    del d["axes"]["hidden_size"]["value"]


def _var_never_bound(d):
    d["axes"]["seq_len"] = {"type": "var"}


def _abs_source(d):
    d["sources"][0]["path"] = "/etc/main.py"
    d["spec"]["entry_point"] = "/etc/main.py::run"


def _dotdot_source(d):
    d["sources"][0]["path"] = "../main.py"
    d["spec"]["entry_point"] = "../main.py::run"


def _blob_escape(t):
    t["workload"]["inputs"]["kv_indptr"]["path"] = "./blob/../../outside.safetensors"


def _passed_no_perf(t):
    t["evaluation"]["status"] = "PASSED"
    t["evaluation"].pop("performance", None)
    t["evaluation"]["correctness"] = {"max_relative_error": 0.0, "max_absolute_error": 0.0}


def _workload_unbound_axis(t):
    del t["workload"]["axes"]["num_pages"]


# (case id, file, line or None, edit, expected message part, expected field part)
CASES = [
    ("unknown-dtype", DEF, None, _unknown_dtype, "unknown dtype 'float33'", "inputs.weight.dtype"),
    ("undefined-axis", DEF, None, _set_shape, "names undefined axis 'hiddn_size'", "inputs.hidden_states.shape"),
    ("const-axis-without-value", DEF, None, _const_no_value, "const axis has no 'value'", "axes.hidden_size"),
    ("var-axis-never-bound", DEF, None, _var_never_bound, "var axis is never bound", "axes.seq_len"),
    ("source-path-absolute", SOL, None, _abs_source, "source path must be relative", "sources.0.path"),
    ("source-path-dotdot", SOL, None, _dotdot_source, "must not contain '..'", "sources.0.path"),
    ("blob-escapes-root", WL, 2, _blob_escape, "blob path escapes the dataset root", "workload.inputs.kv_indptr.path"),
    ("passed-without-performance", TR, 3, _passed_no_perf, "PASSED requires both", "evaluation"),
    ("workload-var-axis-unbound", WL, 1, _workload_unbound_axis, "var axis 'num_pages'", "workload.axes.num_pages"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed_case(root, case):
    _, rel, line, fn, message, field = case
    if line is None:
        edit_json(root / rel, fn)
    else:
        edit_line(root / rel, line, fn)
    r = fib("validate", root)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    errs = errors_of(r)
    assert len(errs) == 1, errs
    where = rel if line is None else f"{rel}:{line}"
    assert errs[0].startswith(f"error: {where} [{field}"), errs[0]
    assert message in errs[0]
    assert "FAILED: 1 error" in r.stdout


def test_bad_json_definition(root):
    (root / DEF).write_text('{"name": "rmsnorm_h4096", "op_type": ')
    r = fib("validate", root)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    errs = errors_of(r)
    assert len(errs) == 1 and errs[0].startswith(f"error: {DEF}:1: bad JSON: Expecting value")
    # its workloads and traces are not checked, with one warning per file instead of one per line
    warns = [l for l in r.stdout.splitlines() if l.startswith("warning: ") and "line(s)" in l]
    assert len(warns) == 2 and all("not checked: definition 'rmsnorm_h4096'" in w for w in warns)


def test_bad_json_line(root):
    p = root / TR
    lines = p.read_text().splitlines()
    lines[4] = lines[4][:40]
    p.write_text("\n".join(lines) + "\n")
    r = fib("validate", root)
    assert r.returncode == 1
    errs = errors_of(r)
    assert len(errs) == 1 and errs[0].startswith(f"error: {TR}:5: bad JSON")


def test_duplicate_definition_names(root):
    shutil.copy(root / DEF, root / "definitions/rmsnorm/copy_of_rmsnorm.json")
    r = fib("validate", root)
    assert r.returncode == 1
    errs = errors_of(r)
    assert len(errs) == 1
    assert errs[0].startswith("error: definitions/rmsnorm/rmsnorm_h4096.json [name]: duplicate definition "
                              "name 'rmsnorm_h4096' (also in definitions/rmsnorm/copy_of_rmsnorm.json)")


def test_missing_blob_file(root):
    blob = next((root / "blob").rglob("*.safetensors"))
    blob.unlink()
    r = fib("validate", root)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    errs = errors_of(r)
    assert len(errs) == 2  # kv_indptr and kv_indices live in the same blob
    assert all("missing blob file" in e and blob.name in e for e in errs)
    assert {e.split("[")[1].split("]")[0] for e in errs} == {
        "workload.inputs.kv_indptr.path", "workload.inputs.kv_indices.path"}
    # --skip-blobs checks everything but blob presence
    assert fib("validate", root, "--skip-blobs").returncode == 0


def test_blob_symlink_escaping_root(root, tmp_path):
    blob = next((root / "blob").rglob("*.safetensors"))
    outside = tmp_path / "outside.safetensors"
    shutil.move(blob, outside)
    blob.symlink_to(outside)
    r = fib("validate", root, "--skip-blobs")  # escaping is an error even without blob checks
    assert r.returncode == 1
    errs = errors_of(r)
    assert errs and all("escapes the dataset root" in e for e in errs)


def test_lfs_pointer_blob(root):
    blob = next((root / "blob").rglob("*.safetensors"))
    blob.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")
    r = fib("validate", root)
    assert r.returncode == 1
    assert all("Git LFS pointer" in e for e in errors_of(r))


def test_missing_root_is_one_line_error(tmp_path):
    r = fib("validate", tmp_path / "nope")
    assert r.returncode == 1
    assert r.stderr.strip().startswith("fib: error: dataset root does not exist")
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "nope").exists()  # never created


def test_empty_folder_is_not_ok(tmp_path):
    r = fib("validate", tmp_path)
    assert r.returncode == 1
    assert "no dataset files found" in r.stderr


def test_json_output_lists_problems(root):
    edit_json(root / DEF, _unknown_dtype)
    r = fib("validate", root, "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["errors"] == 1
    (p,) = [p for p in doc["problems"] if p["severity"] == "error"]
    assert p == {"severity": "error", "file": DEF, "line": None, "field": "inputs.weight.dtype",
                 "message": p["message"]} and "float33" in p["message"]


def test_field_paths_keep_names_that_look_like_union_tags():
    from pydantic import ValidationError

    from fib_runtime.schema import Definition, Trace
    from fib_runtime.schema._base import pydantic_problems

    with pytest.raises(ValidationError) as e:
        Trace.model_validate({"definition": "d", "workload": {
            "uuid": "u", "axes": {}, "inputs": {"scalar": {"type": "scalar"}}}})
    assert [p.field for p in pydantic_problems(e.value, "f")] == ["workload.inputs.scalar.value"]
    with pytest.raises(ValidationError) as e:
        Definition.model_validate({"name": "n", "op_type": "o", "axes": {"var": {"type": "const"}},
                                   "inputs": {}, "outputs": {}, "reference": "def run():\n    pass\n"})
    assert [p.field for p in pydantic_problems(e.value, "f")] == ["axes.var"]
