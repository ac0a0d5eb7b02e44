"""The embedded default dataset: valid with its blobs, usable, and in sync with its generator."""

import subprocess
import sys
from pathlib import Path

import pytest

from fib_runtime.default_dataset import ENV_VAR, default_dataset_path, resolve_dataset_path
from fib_runtime.inputs import materialize
from fib_runtime.reference import compile_reference
from fib_runtime.store import Dataset

HERE = Path(__file__).parent


def test_path_and_env(monkeypatch, tmp_path):
    p = default_dataset_path()
    assert p.is_dir() and (p / "definitions").is_dir()
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert resolve_dataset_path(None) == p
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert resolve_dataset_path(None) == tmp_path
    assert resolve_dataset_path("x/y") == Path("x/y")


def test_embedded_is_strictly_valid():
    ds = Dataset.open(default_dataset_path(), strict=True)  # blobs checked too
    assert ds.problems == []
    assert {d.op_type for d in ds.definitions.values()} == {"sampling", "rmsnorm", "gemm", "gqa_paged",
                                                                "cascade_merge", "cascade_attention"}
    for name, d in ds.definitions.items():
        assert ds.workloads_for(name), f"{name} has no workloads"


def test_every_definition_runs_its_reference_on_one_workload():
    import torch

    ds = Dataset.open(default_dataset_path())
    for name, d in ds.definitions.items():
        rows = ds.workloads_for(name) or ds.traces_for(name)  # H200 definitions: workloads of their traces
        w = min(rows, key=lambda t: sum(t.workload.axes.values())).workload
        args = materialize(d, w, dataset_root=ds.root, seed=0)
        out = compile_reference(d)(*args.values())
        outs = out if isinstance(out, tuple) else (out,)
        assert len(outs) == len(d.outputs)
        for o, (oname, spec) in zip(outs, d.outputs.items()):
            assert tuple(o.shape) == d.shape_of(oname, w.axes), (name, oname)
        if d.op_type == "sampling":
            assert outs[0].dtype == torch.int64
            assert int(outs[0].min()) >= 0 and int(outs[0].max()) < d.const_value("vocab_size")


def test_generator_reproduces_committed_files(tmp_path):
    out = tmp_path / "regen"
    r = subprocess.run([sys.executable, str(HERE / "data" / "make_default_dataset.py"),
                        "--fixtures", str(HERE / "data" / "fixtures" / "flashinfer-trace"), "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    committed = default_dataset_path()
    files = lambda root: sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())
    assert files(out) == files(committed)
    for rel in files(out):
        assert (out / rel).read_bytes() == (committed / rel).read_bytes(), rel


@pytest.mark.parametrize("argv", [["list"], ["show", "top_p_sampling_from_probs_v151936"],
                                  ["validate"]])
def test_commands_default_to_embedded(argv, monkeypatch, capsys):
    from fib_runtime.cli.main import main

    monkeypatch.delenv(ENV_VAR, raising=False)
    assert main(argv) == 0
    assert str(default_dataset_path()) in capsys.readouterr().out or argv[0] == "show"
