#!/bin/bash
# One device call for the cascade family: install FlashInfer/tvm-ffi from .gpu, GPU tests,
# optional Nsight Compute profile of the shared level, full benchmark. Logs under $OUT.
# usage (device): bash benchmarks/cascade_device.sh [tests] [ncu] [bench|quick]
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/apache_tvm_ffi-*.whl
mkdir -p /tmp/fi && tar xzf .gpu/flashinfer-*-trimmed-sm90a.tar.gz -C /tmp/fi
export PYTHONPATH=$PWD:/tmp/fi:/tmp/site FLASHINFER_WORKSPACE_BASE=/tmp/fiws FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(which nvcc)")")")
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/smi.txt"
for step in "$@"; do
  case "$step" in
    tests) timeout 240 python3 -m pytest -q -rf tests/gpu/test_cascade_gpu.py 2>&1 | tee "$OUT/pytest.log" | tail -15 ;;
    ncu)
      for v in normal t64; do
        timeout 90 ncu --clock-control none -k regex:cascade_level -c 1 --section SpeedOfLight --section WarpStateStats \
          --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
          python3 benchmarks/cascade_profile.py 32768 256 64 32 8 $v > "$OUT/ncu_$v.txt" 2>&1
        grep -E "Duration|Throughput|Stall|Warp Cycles|Issued|Eligible|Achieved Occupancy|Registers|Block Limit|L2 Hit|Theoretical Occ" "$OUT/ncu_$v.txt" | head -40
      done ;;
    bench) FIB_BENCH_VARIANTS=1 timeout 420 python3 benchmarks/cascade.py --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -60 ;;
    quick) FIB_BENCH_VARIANTS=1 timeout 200 python3 benchmarks/cascade.py --quick --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -30 ;;
  esac
done
