"""examples/: scripts parse, the Grafana dashboard and Prometheus config name real fib_* metrics."""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

EX = Path(__file__).resolve().parent.parent / "examples"


def test_python_examples_parse():
    for f in EX.rglob("*.py"):
        ast.parse(f.read_text(), filename=str(f))


def test_shell_examples_parse():
    for f in EX.rglob("*.sh"):
        r = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)
        assert r.returncode == 0, (f, r.stderr)


def test_dashboard_uses_declared_metrics():
    from fib_runtime import metrics

    dash = json.loads((EX / "monitoring" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    names = {m.group(0) for e in exprs for m in re.finditer(r"fib_[a-z_]+", e)}
    declared = set(metrics.SPECS)
    for n in names:
        base = re.sub(r"_(bucket|sum|count)$", "", n)
        assert base in declared, n
    assert {"fib_dispatch_total", "fib_trace_records_total"} <= names
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_prometheus_config_targets_loopback():
    text = (EX / "monitoring" / "prometheus.yml").read_text()
    assert "scrape_configs:" in text
    for host in re.findall(r'"([\d.]+):\d+"', text):
        assert host.startswith("127."), host
