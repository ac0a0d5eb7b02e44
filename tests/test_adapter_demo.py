"""`fib demo` pieces that need no engine: its dataset validates, its solutions sample correctly."""

from __future__ import annotations

import torch

from fib_runtime.cli import demo
from fib_runtime.reference import compile_reference


def test_demo_dataset_and_solutions(tmp_path):
    name = demo.write_dataset(tmp_path, 97)
    from fib_runtime.store import Dataset

    ds = Dataset.open(tmp_path)
    assert not [p for p in ds.errors if getattr(p, "severity", "error") == "error"], ds.errors
    d = ds.definitions[name]
    assert len(ds.solutions_for(name)) == 2
    logits = torch.randn(6, 97) * 3
    k = torch.tensor([1, 5, 97, 0, 20, 2], dtype=torch.int32)
    p = torch.tensor([1.0, 0.9, 0.5, 0.2, 1.0, 0.0])
    ref = compile_reference(d)
    for sol in ds.solutions_for(name):
        ns: dict = {}
        exec(sol.sources[0].content, ns)
        for _ in range(20):
            out = ns["run"](logits, k, p)
            assert out.dtype == torch.int64 and out.shape == (6,)
            assert int(out[0]) == int(logits[0].argmax())        # top_k = 1
            assert int(out[5]) == int(logits[5].argmax())        # top_p = 0: first token only
            top5 = set(logits[1].topk(5).indices.tolist())
            assert int(out[1]) in top5
    assert ref(logits, k, p).shape == (6,)


def test_progress_lines(capsys):
    pr = demo.Progress(2)
    pr.step("one")
    pr.done("note")
    pr.step("two")
    pr.done()
    err = capsys.readouterr().err
    assert "[1/2] one ... done" in err and "note" in err and "[2/2] two" in err


def test_dispatch_rows_parse():
    lines = ['fib_dispatch_total{definition="d",outcome="hit",solution="s"} 3.0', "fib_table_generation 2.0"]
    assert demo._dispatch_rows(lines) == {("d", "s", "hit"): 3.0}
    assert demo._gauge(lines, "fib_table_generation") == 2.0
