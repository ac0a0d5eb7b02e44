#!/usr/bin/env bash
# SGLang with fib-runtime choosing the sampling kernel: `--sampling-backend fib`.
#
#   MODEL=/path/to/model DATASET=/data/fib bash examples/sglang_server.sh
#   curl -s localhost:30000/metrics | grep ^fib_
#
# SGLang loads fib-runtime through its `sglang.srt.plugins` entry point in the main process
# (which adds `fib` to --sampling-backend) and in every scheduler. For an SGLang without the
# plugin system, install the autoload hook once:
#   python -m fib_runtime.adapters.sglang.install_pth
# it activates only when FIB_ENABLE_APPLY=1 (or FIB_ENABLE_TRACING=1) is set.
# --enable-metrics makes SGLang aggregate every process's counters on /metrics (multiprocess mode).
set -euo pipefail
: "${MODEL:?set MODEL}"
export FIB_ENABLE_APPLY=1
export FIB_DATASET_PATH="${DATASET:-}"
exec python -m sglang.launch_server --model-path "$MODEL" --host 127.0.0.1 --port "${PORT:-30000}" \
  --sampling-backend fib --enable-metrics "$@"
