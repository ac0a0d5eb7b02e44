#!/bin/bash
# Device: merge_state variants vs FlashInfer vs copy, methods A/B/C (benchmarks/merge_state_device.py). Results in $OUT.
# usage (device, repo root, carry fib_runtime/kernels/_bin and .gpu): bash benchmarks/merge_state_device.sh [args]
export PYTHONUNBUFFERED=1 OUT=${OUT:-./out}; mkdir -p "$OUT"
python3 -c "import tvm_ffi" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/apache_tvm_ffi-*.whl
[ -d /tmp/fi/flashinfer ] || { ls .gpu/flashinfer-*-trimmed-sm90a.tar.gz >/dev/null 2>&1 && mkdir -p /tmp/fi && tar xzf .gpu/flashinfer-*-trimmed-sm90a.tar.gz -C /tmp/fi; }
export PYTHONPATH=$PWD:/tmp/fi:/tmp/site${PYTHONPATH:+:$PYTHONPATH} FLASHINFER_WORKSPACE_BASE=/tmp/fiws FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
command -v nvcc >/dev/null && export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(which nvcc)")")")
timeout 300 python3 benchmarks/merge_state_device.py "$@" 2>&1 | tee "$OUT/merge_state_device.stdout"
