"""fib report: leaderboards, fast_p vs the (faked) FlashInfer baseline, PNG + HTML, dispatch table."""

from __future__ import annotations

import base64
import json
import re
import shutil
import sys
import time
import types
from pathlib import Path

import pytest

from fib_runtime.bench import BenchConfig, run_bench
from fib_runtime.bench.extras import baseline_source
from fib_runtime.bench.report import build_report, fast_p
from fib_runtime.bench.zoo import zoo
from fib_runtime.store import Dataset

FIXTURES = Path("/work/shared/fixtures/flashinfer-trace")
for _p in Path(__file__).resolve().parents:
    if (_p / "shared" / "fixtures" / "flashinfer-trace").is_dir():
        FIXTURES = _p / "shared" / "fixtures" / "flashinfer-trace"
        break


def _fake_flashinfer(monkeypatch):
    """flashinfer.norm.rmsnorm in torch, deliberately slow: the baseline our zoo beats."""
    import torch

    def rmsnorm(input, weight, eps=1e-6):
        time.sleep(0.003)
        x = input.float()
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(input.dtype)

    pkg = types.ModuleType("flashinfer")
    pkg.__path__ = []
    norm = types.ModuleType("flashinfer.norm")
    norm.rmsnorm = rmsnorm
    pkg.norm = norm
    monkeypatch.setitem(sys.modules, "flashinfer", pkg)
    monkeypatch.setitem(sys.modules, "flashinfer.norm", norm)


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    if not FIXTURES.is_dir():
        pytest.skip("fixture dataset not available")
    mp = pytest.MonkeyPatch()
    _fake_flashinfer(mp)
    tmp = tmp_path_factory.mktemp("report")
    root = tmp / "ds"
    shutil.copytree(FIXTURES, root)
    wl = root / "workloads" / "rmsnorm" / "rmsnorm_h4096.jsonl"
    wl.write_text("\n".join(wl.read_text().splitlines()[:3]) + "\n")
    ds = Dataset.open(root)
    for s, _ in zoo(ds.definitions["rmsnorm_h4096"], include=["correct", "wrong", "raises"]).values():
        ds.add_solution(s)
    summary = run_bench(ds, definitions=["rmsnorm_h4096"], cfg=BenchConfig(warmup=1, iterations=3, trials=1, cpu_threads=1),
                        devices="cpu:0", inline=True, progress=False, baseline="on")
    mp.undo()
    out = tmp / "report"
    data = build_report(root, out)
    return root, out, data, summary


def test_baseline_solution_generated():
    from fib_runtime.definitions import norm
    from fib_runtime.schema import Definition

    src = baseline_source(Definition.model_validate(norm.definition("fused_add_rmsnorm", 128)))
    assert "flashinfer.norm.fused_add_rmsnorm" in src and "'eps': 1e-05" in src and "_INPLACE = [0, 1]" in src
    compile(src, "<baseline>", "exec")


def test_baseline_ran_as_author_baseline(reported):
    root, out, data, summary = reported
    base = [t for t in summary.traces if t.solution == "flashinfer_baseline_rmsnorm_h4096"]
    assert len(base) == 3 and all(t.evaluation.status.value == "PASSED" for t in base)
    assert (root / "traces" / "baseline" / "rmsnorm" / "rmsnorm_h4096.jsonl").is_file()
    assert (root / "solutions" / "baseline").is_dir()


def test_leaderboard_and_fast_p(reported):
    root, out, data, summary = reported
    info = next(i for i in data["definitions"] if i["definition"] == "rmsnorm_h4096")
    assert info["yardstick"] == "baseline" and info["hardware"] == "CPU"
    board = {r["solution"]: r for r in info["leaderboard"]}
    ok = board["zoo_correct_rmsnorm_h4096"]
    assert ok["passed"] == 3 and ok["status_counts"] == {"PASSED": 3}
    assert ok["speedup_vs_baseline"] > 1.0 and ok["fast_1"] == 1.0      # beats the 3 ms fake baseline
    assert board["zoo_wrong_rmsnorm_h4096"]["status_counts"] == {"INCORRECT_NUMERICAL": 3}
    assert board["zoo_wrong_rmsnorm_h4096"]["fast_1"] == 0.0
    assert board["zoo_raises_rmsnorm_h4096"]["status_counts"] == {"RUNTIME_ERROR": 3}
    assert all(r["best"] in ("zoo_correct_rmsnorm_h4096", "reference_rmsnorm_h4096") or r["best"]
               for r in info["best_per_workload"])
    assert fast_p([2.0, None, 0.5, 3.0], 1.0) == 0.5
    assert fast_p([2.0, None, 0.5, 3.0], 0.0) == 0.75


def test_png_html_md_json_written(reported):
    pytest.importorskip("matplotlib")  # in the `test` extra; without it the report has no figures
    root, out, data, summary = reported
    png = out / "fast_p_rmsnorm_h4096.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    html = (out / "report.html").read_text()
    assert "<h2 id='rmsnorm_h4096'>" in html and "zoo_correct_rmsnorm_h4096" in html
    m = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)
    assert m and base64.b64decode(m.group(1))[:4] == b"\x89PNG"
    assert "src='fast_p" not in html                                 # self-contained
    assert "Leaderboard" in html and "Dispatch table" in html
    md = (out / "leaderboard.md").read_text()
    assert "## rmsnorm_h4096" in md and "speedup vs baseline" in md
    assert json.loads((out / "report.json").read_text())["hardware"] == "CPU"


def test_dispatch_table(reported):
    root, out, data, summary = reported
    table = json.loads((out / "dispatch_table.json").read_text())
    assert table["hardware"] == "CPU"
    entries = table["definitions"]["rmsnorm_h4096"]["exact"]
    assert len(entries) == 3
    passed = {"zoo_correct_rmsnorm_h4096", "flashinfer_baseline_rmsnorm_h4096"}
    for e in entries:
        assert e["winner"] in passed and set(e["ranked"]) <= passed
        assert e["winner"] == "zoo_correct_rmsnorm_h4096"            # the fastest PASSED one


def test_cli_report(reported, tmp_path, capsys):
    from fib_runtime.cli.main import main

    root, out, data, summary = reported
    assert main(["report", str(root), "--out", str(tmp_path / "r2"), "--definitions", "rmsnorm_*"]) == 0
    assert "rmsnorm_h4096" in capsys.readouterr().out
    assert (tmp_path / "r2" / "report.html").is_file() and (tmp_path / "r2" / "dispatch_table.json").is_file()
