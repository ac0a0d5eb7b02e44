#!/usr/bin/env bash
# Record what production traffic really sends to the sampler (and norm/cascade calls) as FlashInfer
# Trace workloads, then look at them and benchmark solutions on them.
#
#   MODEL=/path/to/model bash examples/record_traffic.sh
set -euo pipefail
: "${MODEL:?set MODEL}"
TRACE="${TRACE:-$PWD/fib-trace}"
mkdir -p "$TRACE"

# 1. serve with tracing on (dispatch off: record the stock engine). Only rank 0 records by default;
#    each signature is kept once (FIB_TRACE_KEEP_FIRST_K), floats as "random", ints as blobs.
FIB_ENABLE_TRACING=1 FIB_TRACE_PATH="$TRACE" \
  python -m vllm.entrypoints.openai.api_server --model "$MODEL" --host 127.0.0.1 --port 8000 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
until curl -sf localhost:8000/health >/dev/null; do sleep 2; done

# 2. your traffic (here: a few requests with different batch shapes and sampling parameters)
for n in 1 4 16; do
  curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \
    -d '{"model":"'"$MODEL"'","prompt":["hello"],"n":'"$n"',"max_tokens":16,"top_p":0.9,"top_k":40}' >/dev/null
done
kill -TERM $SERVER; wait $SERVER || true   # flushes the tracer (SIGTERM / atexit)
trap - EXIT

# 3. what was recorded, whether it validates, and the solutions benchmarked on it
fib trace summary "$TRACE"
fib validate "$TRACE"
fib bench "$TRACE" --builtin --baseline auto     # writes evaluation traces into $TRACE/traces/
fib report "$TRACE"
