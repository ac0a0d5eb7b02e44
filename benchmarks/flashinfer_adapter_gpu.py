"""The FlashInfer adapter around the real FlashInfer on a GPU: calls made the way the engines make
them are dispatched to fib-runtime's kernels where they exist; counters prove it.

Run on the H200 (see ``shared/gpu/README.md`` for the trimmed FlashInfer; kernels prebuilt here
and carried in ``fib_runtime/kernels/_bin``)::

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/apache_tvm_ffi-*.whl
    mkdir -p /tmp/fi && tar xzf .gpu/flashinfer-*-trimmed-sm90a.tar.gz -C /tmp/fi
    tar xzf .gpu/flashinfer-*-cake-sampling-addon-sm90a.tar.gz -C /tmp/fi
    export PYTHONPATH=$PWD:/tmp/fi:/tmp/site:$PYTHONPATH FLASHINFER_WORKSPACE_BASE=/tmp/fiws \\
           FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
    python benchmarks/flashinfer_adapter_gpu.py [--out $OUT] [--quick]

What it does (every section is independent; a failing section is recorded, not fatal):
1. imports ``flashinfer.{sampling,cake_sampling,norm,cascade,decode,prefill}`` (the trimmed
   package's ``__init__`` imports nothing), enables the dispatcher (built-in kernels, no
   dataset) and instruments the adapter with the dispatcher (``FIB_ENABLE_APPLY=1``);
2. **sampling, vLLM's calls** (``flashinfer_sample``): ``top_p_sampling_from_probs(probs, p,
   deterministic=True)``, ``top_k_sampling_from_probs(probs, k, deterministic=True)``,
   ``top_k_top_p_sampling_from_logits(logits, k, p, deterministic=True)``;
   **SGLang's**: ``top_k_top_p_sampling_from_probs(probs, k, p, filter_apply_order="joint")``,
   ``top_k_renorm_probs`` -> ``top_p_renorm_probs`` -> ``min_p_sampling_from_probs``; and
   ``cake_sampling.top_k_top_p_sampling_from_probs``. Each output is checked for validity
   (every token inside the filtered support) and compared in frequency with FlashInfer's own
   (total variation distance over many draws of one row);
3. **cascade**: ``merge_state``, ``merge_state_in_place``, ``merge_states`` and
   ``MultiLevelCascadeAttentionWrapper`` ``plan``/``run`` (2 levels, shared prefix), outputs
   compared with FlashInfer's originals (``__wrapped__``);
4. **host cost** per call, adapter vs the original, for a hit;
5. prints the adapter counters (``fib_runtime.adapters.base.stats()``) and the dispatcher's
   (``fib_runtime.dispatch.stats()["dispatch"]``), and writes everything as JSON to
   ``$OUT/flashinfer_adapter_gpu.json`` (or ``--out``, default ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.append(str(REPO))  # after PYTHONPATH: an installed or mapped fib_runtime (adapters/, tracer/ inside) wins
os.environ.setdefault("FIB_ENABLE_APPLY", "1")

RESULT: dict = {"sections": {}, "errors": {}}
DEV = "cuda"


def _sync():
    import torch

    if DEV == "cuda":
        torch.cuda.synchronize()


def section(name):
    def deco(fn):
        def run(*a, **k):
            t = time.time()
            try:
                RESULT["sections"][name] = fn(*a, **k)
            except Exception as e:  # noqa: BLE001
                RESULT["errors"][name] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"
                print(f"[{name}] FAILED: {type(e).__name__}: {e}", flush=True)
            else:
                print(f"[{name}] ok ({time.time() - t:.1f} s): {json.dumps(RESULT['sections'][name])[:600]}",
                      flush=True)
        return run
    return deco


def _support_top_k(probs, k):
    import torch

    kth = probs.sort(dim=-1, descending=True).values.gather(1, (k.long() - 1).clamp(min=0)[:, None])
    return probs >= kth


def _support_top_p(probs, p):
    import torch

    vals, idx = probs.sort(dim=-1, descending=True)
    before = vals.cumsum(-1) - vals
    keep = before <= p[:, None] + 1e-6
    keep[:, 0] = True
    out = torch.zeros_like(keep)
    return out.scatter_(1, idx, keep)


def _tvd(a, b, vocab):
    import torch

    ha = torch.bincount(a.long(), minlength=vocab).double()
    hb = torch.bincount(b.long(), minlength=vocab).double()
    return float(0.5 * (ha / ha.sum() - hb / hb.sum()).abs().sum())


@section("setup")
def setup():
    import importlib

    import torch

    mods = {}
    for m in ("flashinfer.sampling", "flashinfer.cake_sampling", "flashinfer.norm", "flashinfer.cascade",
              "flashinfer.decode", "flashinfer.prefill"):
        try:
            importlib.import_module(m)
            mods[m] = "ok"
        except Exception as e:  # noqa: BLE001
            mods[m] = f"{type(e).__name__}: {e}"[:200]
    from fib_runtime import dispatch
    from fib_runtime.adapters import runtime_hooks
    from fib_runtime.adapters.flashinfer import FlashInferInstrumentor
    from fib_runtime.kernels import loader

    rt = dispatch.enable()
    dispatcher, recorder, registrar = runtime_hooks()
    rep = FlashInferInstrumentor().instrument(dispatcher, None, registrar=registrar)
    return {"device": torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu (fake flashinfer)", "torch": torch.__version__,
            "python": platform.python_version(), "modules": mods,
            "kernels": loader.availability(), "hardware": rt.hardware,
            "patched": len(rep.patched), "missing": rep.missing, "aliases": len(rep.aliases)}


def _draws(fn, n):
    import torch

    return torch.cat([fn().view(-1) for _ in range(n)])


@section("sampling")
def sampling(batch: int, vocab: int, draws: int):
    import flashinfer
    import torch

    from fib_runtime.adapters import base

    fs = flashinfer.sampling
    g = torch.Generator(device=DEV).manual_seed(0)
    logits = torch.randn(batch, vocab, device=DEV, generator=g) * 4  # "peaked"
    probs = torch.softmax(logits, -1)
    k = torch.full((batch,), 50, dtype=torch.int32, device=DEV)
    p = torch.full((batch,), 0.9, dtype=torch.float32, device=DEV)
    minp = torch.full((batch,), 0.05, dtype=torch.float32, device=DEV)
    sk, sp = _support_top_k(probs, k), _support_top_p(probs, p)
    renorm_k = probs * sk
    renorm_k = renorm_k / renorm_k.sum(-1, keepdim=True)
    s_kp_first = sk & _support_top_p(renorm_k, p)
    s_joint = sk & sp
    cases = {
        # vLLM flashinfer_sample
        "vllm.top_p_sampling_from_probs": (lambda f=fs.top_p_sampling_from_probs: f(probs, p, deterministic=True), sp),
        "vllm.top_k_sampling_from_probs": (lambda f=fs.top_k_sampling_from_probs: f(probs, k, deterministic=True), sk),
        "vllm.top_k_top_p_sampling_from_logits": (
            lambda f=fs.top_k_top_p_sampling_from_logits: f(logits, k, p, deterministic=True), s_kp_first),
        # SGLang flashinfer backend
        "sglang.top_k_top_p_sampling_from_probs_joint": (
            lambda f=fs.top_k_top_p_sampling_from_probs: f(probs.contiguous(), k, p, filter_apply_order="joint"),
            s_joint),
        "top_k_top_p_sampling_from_probs": (
            lambda f=fs.top_k_top_p_sampling_from_probs: f(probs, k, p), s_kp_first),
        "cake.top_k_top_p_sampling_from_probs": (
            lambda: flashinfer.cake_sampling.top_k_top_p_sampling_from_probs(probs, k, p), s_kp_first),
    }
    out = {}
    for name, (fn, support) in cases.items():
        before = base.stats()
        ids = fn()
        _sync()
        valid = bool(support.gather(1, ids.long().view(-1, 1)).all())
        # frequency check on row 0 against FlashInfer's own (unwrapped) function
        row_fn = fn
        a = _draws(lambda: row_fn()[:1], draws)
        orig = getattr(fn.__defaults__[0], "__wrapped__", None) if fn.__defaults__ else None
        tvd = None
        if orig is not None:
            args = {"vllm.top_p_sampling_from_probs": (probs[:1], p[:1]),
                    "vllm.top_k_sampling_from_probs": (probs[:1], k[:1]),
                    "vllm.top_k_top_p_sampling_from_logits": (logits[:1], k[:1], p[:1]),
                    "sglang.top_k_top_p_sampling_from_probs_joint": (probs[:1], k[:1], p[:1]),
                    "top_k_top_p_sampling_from_probs": (probs[:1], k[:1], p[:1])}[name]
            kw = {"filter_apply_order": "joint"} if "joint" in name else {}
            with base.originals_only():
                b = _draws(lambda: orig(*args, **kw), draws)
            tvd = _tvd(a, b, vocab)
        after = base.stats()
        op = [o for o in after if after[o].get("calls", 0) != before.get(o, {}).get("calls", 0)]
        m = int(support[0].sum())
        # two independent empirical histograms over m tokens with `draws` samples each differ by
        # about sqrt(m / (pi * draws)) in TVD even for identical samplers: read tvd against it
        noise = round(min(1.0, (m / (3.14159 * draws)) ** 0.5), 3)
        out[name] = {"valid": valid, "dtype": str(ids.dtype), "tvd_vs_flashinfer_row0": tvd,
                     "support_row0": m, "tvd_noise_level": noise,
                     "ops": {o: {kk: after[o].get(kk, 0) - before.get(o, {}).get(kk, 0)
                                 for kk in ("calls", "dispatched", "fallback", "unbound")} for o in op}}
    # SGLang min-p path: renorm k -> renorm p -> min-p
    pr = fs.top_k_renorm_probs(probs, k)
    pr = fs.top_p_renorm_probs(pr, p)
    ids = fs.min_p_sampling_from_probs(pr, minp)
    keep = pr >= minp[:, None] * pr.amax(-1, keepdim=True)
    out["sglang.min_p_path"] = {"valid": bool((keep & (pr > 0)).gather(1, ids.long().view(-1, 1)).all()),
                                "renorm_sums_to_1": bool(torch.allclose(pr.sum(-1), torch.ones(batch, device=DEV),
                                                                        atol=1e-3))}
    return out


@section("cascade")
def cascade(seq: int, heads: int, dim: int):
    import flashinfer
    import torch

    fc = flashinfer.cascade
    t = lambda *s, dt=torch.float16: torch.randn(*s, device=DEV, dtype=dt)  # noqa: E731
    va, vb = t(seq, heads, dim), t(seq, heads, dim)
    sa, sb = t(seq, heads, dt=torch.float32), t(seq, heads, dt=torch.float32)
    res = {}
    from fib_runtime.adapters import base

    ref = base.originals_only
    v, s = fc.merge_state(va, sa, vb, sb)
    with ref():
        v0, s0 = fc.merge_state(va, sa, vb, sb)
    res["merge_state"] = {"max_abs_v": float((v.float() - v0.float()).abs().max()),
                          "max_abs_s": float((s - s0).abs().max())}
    v1, s1 = va.clone(), sa.clone()
    fc.merge_state_in_place(v1, s1, vb, sb)
    v2, s2 = va.clone(), sa.clone()
    with ref():
        fc.merge_state_in_place(v2, s2, vb, sb)
    res["merge_state_in_place"] = {"max_abs_v": float((v1.float() - v2.float()).abs().max()),
                                   "max_abs_s": float((s1 - s2).abs().max())}
    vv, ss = t(seq, 5, heads, dim), t(seq, 5, heads, dt=torch.float32)
    v3, s3 = fc.merge_states(vv, ss)
    with ref():
        v4, s4 = fc.merge_states(vv, ss)
    res["merge_states"] = {"max_abs_v": float((v3.float() - v4.float()).abs().max()),
                           "max_abs_s": float((s3 - s4).abs().max())}
    # 2-level cascade: one shared prefix (level 0), per-request suffixes (level 1)
    B, P, S, ps, hq, hkv, d = 8, 256, 32, 16, 32, 8, 128
    pre_pages, suf_pages = P // ps, S // ps
    num_pages = pre_pages + B * suf_pages
    kv = torch.randn(num_pages, 2, ps, hkv, d, device=DEV, dtype=torch.float16)
    i32 = lambda x: torch.tensor(x, dtype=torch.int32, device=DEV)  # noqa: E731
    qo = [i32([0, B]), i32(list(range(B + 1)))]
    kv_indptr = [i32([0, pre_pages]), i32([i * suf_pages for i in range(B + 1)])]
    kv_indices = [i32(list(range(pre_pages))), i32(list(range(pre_pages, num_pages)))]
    last = [i32([ps]), i32([ps] * B)]
    ws = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device=DEV)
    w = fc.MultiLevelCascadeAttentionWrapper(2, ws, "NHD")
    w.plan(qo, kv_indptr, kv_indices, last, hq, hkv, d, ps)
    q = torch.randn(B, hq, d, device=DEV, dtype=torch.float16)
    before = base.stats().get("cascade_run", {})
    o = w.run(q, kv)
    after = base.stats().get("cascade_run", {})
    with ref():
        o_ref = w.run(q, kv)
    res["multi_level_cascade"] = {"max_abs": float((o.float() - o_ref.float()).abs().max()),
                                  "dispatched": after.get("dispatched", 0) - before.get("dispatched", 0),
                                  "fallback": after.get("fallback", 0) - before.get("fallback", 0)}
    return res


@section("host_cost")
def host_cost(batch: int, vocab: int, n: int):
    import flashinfer
    import torch

    fs = flashinfer.sampling
    probs = torch.softmax(torch.randn(batch, vocab, device=DEV) * 4, -1)
    k = torch.full((batch,), 50, dtype=torch.int32, device=DEV)
    p = torch.full((batch,), 0.9, dtype=torch.float32, device=DEV)
    out = {}
    from fib_runtime.adapters import base

    orig = fs.top_k_top_p_sampling_from_probs.__wrapped__
    for label, fn in (("adapter", fs.top_k_top_p_sampling_from_probs), ("flashinfer_original", orig)):
        for _ in range(20):
            fn(probs, k, p)
        _sync()
        t = time.perf_counter()
        for _ in range(n):
            fn(probs, k, p)
        host = (time.perf_counter() - t) / n
        _sync()
        wall = (time.perf_counter() - t) / n
        out[label] = {"host_us_per_call": round(host * 1e6, 2), "wall_us_per_call": round(wall * 1e6, 2)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "benchmarks" / "results"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cpu-fake", action="store_true",
                    help="smoke-test this script on the CPU against tests/fakes/fake_flashinfer")
    a = ap.parse_args()
    import torch

    global DEV
    if a.cpu_fake:
        DEV = "cpu"
        sys.path.insert(0, str(REPO / "tests"))
        from fakes import fake_flashinfer

        ctx = fake_flashinfer.installed()
        ctx.__enter__()
        import flashinfer  # the fake

        flashinfer.cascade.MultiLevelCascadeAttentionWrapper.__init__.__defaults__  # noqa: B018
        a.quick = True
    elif not torch.cuda.is_available():
        print("no CUDA device: this script runs on the GPU machine", file=sys.stderr)
        return 2
    setup()
    if "setup" not in RESULT["errors"]:
        if a.cpu_fake:
            sampling(4, 1000, 20)
            cascade(17, 4, 16)
            host_cost(4, 1000, 20)
        else:
            sampling(64 if a.quick else 128, 128256, 200 if a.quick else 2000)
            cascade(257, 32, 128)
            host_cost(64, 128256, 200 if a.quick else 1000)
    from fib_runtime import dispatch
    from fib_runtime.adapters import base

    RESULT["adapter_stats"] = base.stats()
    try:
        RESULT["dispatch_counters"] = {"|".join(k): v for k, v in dispatch.stats()["dispatch"].items()}
    except Exception as e:  # noqa: BLE001
        RESULT["dispatch_counters"] = f"{type(e).__name__}: {e}"
    print("adapter counters:")
    for op, c in sorted(RESULT["adapter_stats"].items()):
        print(f"  {op:45s} {c}")
    print("dispatcher counters (definition|solution|outcome):")
    for k, v in sorted(RESULT["dispatch_counters"].items()) if isinstance(RESULT["dispatch_counters"], dict) else []:
        print(f"  {k:90s} {v}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "flashinfer_adapter_gpu.json"
    path.write_text(json.dumps(RESULT, indent=2, default=str))
    print("wrote", path)
    return 0 if not RESULT["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
