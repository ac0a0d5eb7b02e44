"""CLI of the dispatcher: fib explain, fib warmup, fib metrics show/serve."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fib_runtime import metrics
from fib_runtime.cli.main import main
from fib_runtime.dispatch import disable

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "flashinfer-trace"
if not FIXTURES.is_dir():
    FIXTURES = Path("/work/shared/fixtures/flashinfer-trace")


@pytest.fixture(autouse=True)
def clean(tmp_path, monkeypatch):
    monkeypatch.setenv("FIB_CACHE_PATH", str(tmp_path / "cache"))
    for v in ("FIB_HARDWARE", "FIB_ALLOW_SOLUTIONS", "FIB_DENY_SOLUTIONS", "FIB_ALLOW_DEFINITIONS",
              "FIB_DENY_DEFINITIONS"):
        monkeypatch.delenv(v, raising=False)
    disable()
    metrics.reset()
    yield
    disable()
    metrics.reset()


@pytest.fixture
def fixtures(tmp_path):
    if not FIXTURES.is_dir():
        pytest.skip("fixture traces not available")
    root = tmp_path / "ds"
    shutil.copytree(FIXTURES, root)
    return root


def test_explain_text_and_json(fixtures, capsys):
    assert main(["explain", "gemm_n128_k2048", "--axes", "M=6", "--dataset", str(fixtures),
                 "--hardware", "A800"]) == 0
    out = capsys.readouterr().out
    # the fixture solutions are not in the dataset: the call gets the original, the trace winner is shown
    assert "decision    ORIGINAL" in out
    assert "by traces   gpt-5_gemm_n128_k2048_cuda_optimized_r8_c0_high  [exact]" in out
    assert "gpt-5_gemm_n128_k2048_cuda_optimized_r8_c0_high: solution not in the dataset" in out
    assert "selection rule" in out and "power-of-two bucket" in out
    assert main(["explain", "gemm_n128_k2048", "--axes", "M=492", "--dataset", str(fixtures),
                 "--hardware", "A800", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["solution"] is None and doc["rule"] == "miss"
    assert main(["explain", "rmsnorm_h4096", "--axes", "batch_size=37", "--dataset", str(fixtures),
                 "--hardware", "A800", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["solution"] is None
    assert doc["by_traces"]["solution"] == "gpt-5.2_rmsnorm_h4096_cuda_optimized_r1_c0_high"
    assert doc["by_traces"]["rule"] == "bucket"  # batch 37 is in [32,63], which holds batch 34 and 63


def test_explain_user_errors(fixtures, capsys):
    assert main(["explain", "gemm_n128_k2048", "--axes", "batch=3", "--dataset", str(fixtures)]) == 1
    assert "var axes are M" in capsys.readouterr().err
    assert main(["explain", "gemm_n128_k2048", "--axes", "M=x", "--dataset", str(fixtures)]) == 1
    assert "not an integer" in capsys.readouterr().err
    assert main(["explain", "no_such_def", "--dataset", str(fixtures)]) == 0
    assert "unknown definition" in capsys.readouterr().out


def test_warmup_json(fixtures, capsys):
    sol = {"name": "py_gemm", "definition": "gemm_n128_k2048", "author": "t",
           "spec": {"language": "python", "target_hardware": ["A800"], "entry_point": "m.py::run",
                    "dependencies": [], "destination_passing_style": False},
           "sources": [{"path": "m.py", "content": "import torch\n\ndef run(A, B):\n    return A @ B.T\n"}]}
    p = fixtures / "solutions" / "t" / "gemm" / "gemm_n128_k2048" / "py_gemm.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(sol))
    assert main(["warmup", "--dataset", str(fixtures), "--hardware", "A800", "--all", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = {r["solution"]: r for r in doc["solutions"]}
    assert names["py_gemm"]["status"] == "ok" and names["py_gemm"]["language"] == "python"


WORKER = """
import torch
from fib_runtime import metrics
metrics.counter("fib_dispatch_total", "d", "s", "hit").inc()
metrics.inc_trace_bytes(7)
assert metrics.flush()
"""


def test_metrics_show_and_serve(tmp_path, capsys):
    mp = tmp_path / "mp"
    mp.mkdir()
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(mp), PYTHONPATH=str(REPO))
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    # show: aggregated text, in a subprocess (the multiprocess value class is picked at import)
    r = subprocess.run([sys.executable, "-m", "fib_runtime.cli.main", "metrics", "show", "--dir", str(mp)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert 'fib_dispatch_total{definition="d",outcome="hit",solution="s"} 2.0' in r.stdout
    assert "fib_trace_bytes_total 14.0" in r.stdout
    assert main(["metrics", "show", "--dir", str(tmp_path / "missing")]) == 1
    # serve: bound to 127.0.0.1, any free port
    proc = subprocess.Popen([sys.executable, "-m", "fib_runtime.cli.main", "metrics", "serve", "--port", "0",
                             "--dir", str(mp)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving") and "http://127.0.0.1:" in line, (line, proc.stderr.read() if proc.poll() else "")
        url = line.split(" at ", 1)[1].strip()
        body = ""
        for _ in range(50):
            try:
                body = urllib.request.urlopen(url, timeout=5).read().decode()
                break
            except OSError:
                time.sleep(0.1)
        assert 'fib_dispatch_total{definition="d",outcome="hit",solution="s"} 2.0' in body
    finally:
        proc.terminate()
        proc.wait(timeout=10)
