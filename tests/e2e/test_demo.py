"""`fib demo` end to end on the real vLLM of the engines venv (~2-3 min on 2 cores).

Skipped without the engines venv (``bash tests/e2e/setup_engines.sh``) unless
``FIB_E2E_REQUIRED=1``; set ``FIB_E2E_SKIP_DEMO=1`` to leave it out of a run.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

VENV = Path(os.environ.get("FIB_ENGINES_VENV", "/work/venv-vllm"))
FIB = VENV / "bin" / "fib"

pytestmark = pytest.mark.slow


def test_fib_demo_switches_to_winner(tmp_path):
    if os.environ.get("FIB_E2E_SKIP_DEMO") == "1":
        pytest.skip("FIB_E2E_SKIP_DEMO=1")
    if not FIB.exists():
        if os.environ.get("FIB_E2E_REQUIRED") == "1":
            pytest.fail(f"FIB_E2E_REQUIRED=1 but no {FIB}")
        pytest.skip(f"no engines venv at {VENV}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FIB_", "PROMETHEUS_"))}
    r = subprocess.run([str(FIB), "demo", "--json", "--requests", "4", "--workdir", str(tmp_path / "demo")],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    res = json.loads(r.stdout)
    assert res["workloads"] >= 1
    assert res["table_generation"][1] > res["table_generation"][0]
    assert res["winner"] in ("demo_topk_top_k_top_p", "demo_sort_top_k_top_p")
    hits = {k: v for k, v in res["round2"].items() if k.endswith("|hit")}
    assert sum(hits.values()) > 0 and not any(k.endswith("|hit") for k in res["round1"] if res["round1"][k])
