"""`fib list` and `fib show`: tables for people, --json for machines, one-line errors."""

import json
import shutil

import pytest

from fib_runtime.cli.main import main
from fib_runtime.default_dataset import default_dataset_path

SOLUTION = {
    "name": "alice_rmsnorm", "definition": "rmsnorm_h4096", "author": "alice",
    "spec": {"language": "python", "target_hardware": ["H200"], "entry_point": "main.py::run"},
    "sources": [{"path": "main.py", "content": "def run(hidden_states, weight):\n    return hidden_states\n"}],
}


@pytest.fixture()
def root(tmp_path):
    r = tmp_path / "ds"
    shutil.copytree(default_dataset_path(), r)
    p = r / "solutions/alice/rmsnorm/rmsnorm_h4096/alice_rmsnorm.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(SOLUTION, indent=2))
    return r


def test_list_table(root, capsys):
    assert main(["list", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["DEFINITION", "OP_TYPE", "WORKLOADS", "SOLUTIONS", "TRACES"]
    row = next(l for l in lines if l.startswith("rmsnorm_h4096 "))
    assert row.split() == ["rmsnorm_h4096", "rmsnorm", "14", "1", "14"]
    assert any("13 definitions, 9 solutions, 90 workloads, 108 traces" in l for l in lines)


def test_list_json(root, capsys):
    assert main(["list", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in doc["definitions"]}
    assert rows["gemm_n128_k2048"] == {"name": "gemm_n128_k2048", "op_type": "gemm",
                                       "workloads": 25, "solutions": 0, "traces": 25}
    assert doc["errors"] == 0


def test_list_warns_about_problems(root, capsys):
    (root / "definitions/gemm/gemm_n128_k2048.json").write_text("{")
    assert main(["list", str(root)]) == 0
    err = capsys.readouterr().err
    assert "problem" in err and "fib validate" in err


def test_show_definition(root, capsys):
    assert main(["show", "gqa_paged_decode_h32_kv8_d128_ps1", "--dataset", str(root)]) == 0
    out = capsys.readouterr().out
    assert "op_type gqa_paged" in out
    assert "sm_scale    scalar" in out  # shape null is shown as a scalar
    assert "len_indptr == batch_size + 1" in out
    assert "workloads: 8 (batch_size=" in out


def test_show_definition_json_and_reference(root, capsys):
    assert main(["show", "rmsnorm_h4096", "--dataset", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    raw = json.loads((root / "definitions/rmsnorm/rmsnorm_h4096.json").read_text())
    assert doc["definition"] == raw and doc["solutions"] == ["alice_rmsnorm"] and doc["traces"] == 14
    assert main(["show", "rmsnorm_h4096", "--dataset", str(root), "--reference"]) == 0
    assert "def run(" in capsys.readouterr().out


def test_show_solution_and_workload(root, capsys):
    assert main(["show", "alice_rmsnorm", "--dataset", str(root)]) == 0
    out = capsys.readouterr().out
    assert "solution of rmsnorm_h4096" in out and "destination_passing_style: True" in out
    line = (root / "workloads/gqa_paged/gqa_paged_decode_h32_kv8_d128_ps1.jsonl").read_text().splitlines()[0]
    uuid = json.loads(line)["workload"]["uuid"]
    assert main(["show", uuid, "--dataset", str(root)]) == 0
    out = capsys.readouterr().out
    assert "safetensors" in out and "kv_indptr" in out and "sm_scale" in out


def test_show_unknown_name(root, capsys):
    assert main(["show", "rmsnorm", "--dataset", str(root)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("fib: error: no definition, solution or workload uuid 'rmsnorm'")
    assert "did you mean" in err and "rmsnorm_h4096" in err and "\n" not in err


def test_show_uses_env_dataset(root, monkeypatch, capsys):
    monkeypatch.setenv("FIB_DATASET_PATH", str(root))
    assert main(["show", "alice_rmsnorm"]) == 0
    monkeypatch.setenv("FIB_DATASET_PATH", str(root / "missing"))
    assert main(["list"]) == 1
    assert "dataset root does not exist" in capsys.readouterr().err
    assert not (root / "missing").exists()


def test_validate_single_files(root, capsys):
    assert main(["validate", str(root / "definitions/rmsnorm/rmsnorm_h4096.json")]) == 0
    assert main(["validate", str(root / "traces/gpt-5/gemm/gemm_n128_k2048.jsonl")]) == 0
    assert "25 traces" in capsys.readouterr().out
    sol = root / "solutions/alice/rmsnorm/rmsnorm_h4096/alice_rmsnorm.json"
    assert main(["validate", str(sol), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"] == {"solutions": 1}
    bad = root / "traces/gpt-5/gemm/gemm_n128_k2048.jsonl"
    lines = bad.read_text().splitlines()
    lines[1] = lines[1].replace('"PASSED"', '"FINE"')
    bad.write_text("\n".join(lines) + "\n")
    assert main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"error: {bad}:2 [evaluation.status]: ")
