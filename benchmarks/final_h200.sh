#!/bin/bash
# One H200 call that checks the integrated product: the FlashInfer adapter on the real FlashInfer
# (engine-style sampling + cascade calls dispatched to our kernels), `fib bench` + `fib report`
# on workloads recorded by a traced run, then the GPU tests of the dispatcher and tracer.
#
#   run(command="bash benchmarks/final_h200.sh 180", carry=[".gpu", "fib_runtime/kernels/_bin"])
#
# $1: seconds for the bench part. Everything is packed into $OUT/final.tgz (+ final.log) after
# every stage, so a call cut short still returns what finished.
set -u
BENCH_BUDGET=${1:-180}
RET=${OUT:-/tmp/final_ret}; OUT=/tmp/final_work; mkdir -p "$OUT" "$RET"
REPO=$PWD
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/final.log"; }
pack() { (cd "$OUT" && tar czf "$RET/final.tgz" . && cp final.log "$RET/"); }

say "setup (FlashInfer, tvm-ffi, pydantic, fib_runtime with adapters/tracer mapped)"
mkdir -p "$OUT/bench"
OUT="$OUT/bench" bash benchmarks/run_fib_bench_gpu.sh --quick --budget 60 --stages "setup" 2>&1 | tail -5 | tee -a "$OUT/final.log"
export PYTHONPATH=/tmp/fibsrc:/tmp/fi:/tmp/site PYTHONSAFEPATH=1
export FLASHINFER_WORKSPACE_BASE=/tmp/fiws FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(which nvcc)")")")
export FIB_CACHE_PATH=/tmp/fib-cache MPLBACKEND=Agg

say "flashinfer adapter on the real FlashInfer"
mkdir -p "$OUT/adapter"
(cd /tmp && timeout 100 python3 -P "$REPO/benchmarks/flashinfer_adapter_gpu.py" --quick --out "$OUT/adapter") \
    > "$OUT/adapter.log" 2>&1; say "adapter rc=$?"; tail -30 "$OUT/adapter.log"; pack

say "fib bench: record + bench + report (budget $BENCH_BUDGET s)"
OUT="$OUT/bench" bash benchmarks/run_fib_bench_gpu.sh --quick --budget "$BENCH_BUDGET" \
    --stages "record bench report" 2>&1 | tail -30 | tee -a "$OUT/final.log"; pack

say "GPU tests: dispatcher + tracer"
(cd /tmp && timeout 75 python3 -P -m pytest -q -p no:cacheprovider --rootdir "$REPO" -c "$REPO/pyproject.toml" \
    "$REPO/tests/gpu/test_dispatch_gpu.py" "$REPO/tests/gpu/test_tracer_gpu.py") > "$OUT/gpu_tests.log" 2>&1
say "gpu tests rc=$?"; tail -15 "$OUT/gpu_tests.log"; pack
ls -la "$RET"
