"""Drive a real vLLM OpenAI server (CPU build) with the fib-runtime plugin, for the e2e test.

Used by ``tests/e2e/test_vllm_e2e.py``; also runnable by hand::

    python tests/e2e/vllm_server.py --venv /work/venv-vllm --work /tmp/fib-e2e

It builds the tiny model (``build_tiny_model.py``), a test dataset with one python solution for
the sampler's definition, starts ``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1
from the engines venv, sends bounded traffic and stops the server by its pid (SIGTERM, then
SIGKILL of the process group it started). Everything lands under ``--work``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SOLUTION_NAME = "e2e_python_top_k_top_p_from_logits"

SOLUTION_SOURCE = '''import os

import torch


def _hint_seen(top_k):
    """(test probe) the min_top_k that fib's vLLM hook noted on this very tensor, if any"""
    path = os.environ.get("FIB_E2E_HINT_MARKER")
    if not path:
        return
    try:
        from fib_runtime.kernels import sampling as S
        h = S._hints.get(id(top_k))
        if h is not None and h[0] is top_k:
            with open(path, "a") as f:
                f.write(f"{h[1]} {int(top_k.min())}\\n")
    except Exception as e:
        with open(path, "a") as f:
            f.write(f"error {e!r}\\n")


def run(logits, top_k, top_p):
    """top-k, renormalise, then top-p; sample. Value-returning (int64 [batch])."""
    _hint_seen(top_k)
    probs = torch.softmax(logits.to(torch.float32), dim=-1)
    batch, vocab = probs.shape
    k = top_k.to(torch.int64)
    k = torch.where((k <= 0) | (k >= vocab), torch.full_like(k, vocab), k)
    vals, idx = torch.sort(probs, dim=-1, descending=True, stable=True)
    rank = torch.arange(vocab, device=probs.device)[None, :]
    vals = torch.where(rank < k[:, None], vals, torch.zeros_like(vals))
    vals = vals / vals.sum(dim=-1, keepdim=True)
    before = torch.cumsum(vals, dim=-1) - vals
    keep = before <= top_p.to(torch.float32)[:, None]
    keep[:, 0] = True
    vals = torch.where(keep, vals, torch.zeros_like(vals))
    choice = torch.multinomial(vals, 1)
    return idx.gather(1, choice).reshape(-1)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_model(python: str, out: Path) -> dict:
    res = subprocess.run([python, str(HERE / "build_tiny_model.py"), str(out)], check=True,
                         capture_output=True, text=True, timeout=300)
    return json.loads(res.stdout.strip().splitlines()[-1])


def build_dataset(root: Path, vocab: int) -> str:
    """definitions/ + solutions/ + traces/ with one PASSED python solution on CPU."""
    sys.path.insert(0, str(REPO))
    from fib_runtime.definitions import sampling

    d = sampling.definition("top_k_top_p_sampling_from_logits", vocab)
    name = d["name"]
    (root / "definitions" / "sampling").mkdir(parents=True, exist_ok=True)
    (root / "definitions" / "sampling" / f"{name}.json").write_text(json.dumps(d, indent=2))
    sol = {"name": SOLUTION_NAME, "definition": name, "author": "e2e",
           "description": "python top-k/top-p sampler from logits (e2e test)",
           "spec": {"language": "python", "target_hardware": ["CPU"], "entry_point": "main.py::run",
                    "dependencies": [], "destination_passing_style": False},
           "sources": [{"path": "main.py", "content": SOLUTION_SOURCE}]}
    sdir = root / "solutions" / "e2e" / "sampling" / name
    sdir.mkdir(parents=True, exist_ok=True)
    (sdir / f"{SOLUTION_NAME}.json").write_text(json.dumps(sol, indent=2))
    tdir = root / "traces" / "e2e" / "sampling"
    tdir.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, b in enumerate((1, 2, 4, 8, 16)):
        lines.append(json.dumps({
            "definition": name, "solution": SOLUTION_NAME,
            "workload": {"uuid": f"00000000-0000-4000-8000-{i:012d}", "axes": {"batch_size": b},
                         "inputs": {"logits": {"type": "random"}, "top_k": {"type": "random"},
                                    "top_p": {"type": "random"}}},
            "evaluation": {"status": "PASSED",
                           "environment": {"hardware": "CPU", "libs": {"torch": "2.13.0"}},
                           "timestamp": "2026-12-01T00:00:00", "log": "",
                           "correctness": {"max_relative_error": 0.0, "max_absolute_error": 0.0,
                                           "extra": {"tvd": 0.01}},
                           "performance": {"latency_ms": 0.05, "reference_latency_ms": 0.1,
                                           "speedup_factor": 2.0}}}))
    (tdir / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    return name


def http(url: str, body: Optional[dict] = None, timeout: float = 60) -> tuple:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Server:
    """One vLLM API server process (its own session, so its children can be stopped with it)."""

    def __init__(self, python: str, model: Path, work: Path, env: dict, port: Optional[int] = None):
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = work / f"server_{self.port}.log"
        full = dict(os.environ)
        full.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
                     "VLLM_HOST_IP": "127.0.0.1", "TOKENIZERS_PARALLELISM": "false",
                     "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "OMP_NUM_THREADS": "1"})
        full.update(env)
        self.cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                    "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32",
                    "--enforce-eager", "--max-model-len", "256", "--max-num-seqs", "16",
                    "--seed", "0"]
        self.log = open(self.log_path, "w")
        self.t0 = time.time()
        self.proc = subprocess.Popen(self.cmd, env=full, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=str(work))
        self.ready_s: Optional[float] = None

    def wait_ready(self, timeout: float = 240) -> float:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode}; log: {self.tail()}")
            try:
                if http(self.base + "/health", timeout=5)[0] == 200:
                    self.ready_s = time.time() - self.t0
                    return self.ready_s
            except Exception:
                pass
            time.sleep(1.0)
        raise TimeoutError(f"vLLM not ready after {timeout} s; log: {self.tail()}")

    def tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text()[-n:]
        except Exception:
            return ""

    def stop(self, timeout: float = 60) -> float:
        t = time.time()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the Python pid: vLLM shuts its children down
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group this server started
                self.proc.wait(timeout=10)
        # leftover children of this session only (by its process group id)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.log.close()
        return time.time() - t


def completions(base: str, model: str, **body) -> dict:
    status, text = http(base + "/v1/completions", dict(model=model, **body), timeout=120)
    if status != 200:
        raise AssertionError(f"HTTP {status}: {text[:2000]}")
    return json.loads(text)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", default=os.environ.get("FIB_ENGINES_VENV", "/work/venv-vllm"))
    ap.add_argument("--work", default="/tmp/fib-e2e")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    py = str(Path(a.venv) / "bin" / "python")
    info = build_model(py, work / "model")
    name = build_dataset(work / "dataset", info["vocab_size"])
    (work / "prom").mkdir(exist_ok=True)
    s = Server(py, work / "model", work, {
        "FIB_ENABLE_APPLY": "1", "FIB_ENABLE_TRACING": "1", "FIB_DATASET_PATH": str(work / "dataset"),
        "FIB_TRACE_PATH": str(work / "trace"), "FIB_PLUGIN_MARKER": str(work / "marker.txt"),
        "FIB_HARDWARE": "CPU", "PROMETHEUS_MULTIPROC_DIR": str(work / "prom")})
    try:
        print("ready after", round(s.wait_ready(), 1), "s")
        r = completions(s.base, str(work / "model"), prompt=["hello world"] * 4, max_tokens=8,
                        temperature=0.8, top_p=0.9, top_k=20)
        print(json.dumps(r)[:400])
        print([ln for ln in http(s.base + "/metrics")[1].splitlines() if ln.startswith("fib_")])
        print(name)
    finally:
        print("stopped in", round(s.stop(), 1), "s")


if __name__ == "__main__":
    main()
