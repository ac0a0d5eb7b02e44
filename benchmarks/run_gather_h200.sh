#!/bin/bash
# One device call for the cluster kernel's gathered tail (gather_tail.cuh) and the sampling grid:
#   t1   its GPU tests with FIB_SAMPLING_GATHER_CAP=4032 (token identity, the stats of knob 7004,
#        reject_tail, the min_top_k hint);
#   gb   benchmarks/sampling_gather.py (k=2048 small batches, hint vs no hint, token identity);
#   grid benchmarks/sampling.py (gather cap 4032 where t1 passed, else 0; GRID_GATHER overrides);
#   rest the sampling GPU test files with the same cap (-x).
# Build here first:  python kernels_cuda/build.py --arch 90 (or copy a build into LIB's folder), then
#   run(command="STAGES='t1 gb grid' bash benchmarks/run_gather_h200.sh", carry=[".gpu", "fib_runtime/kernels/_bin"])
# with .gpu/ holding ../shared/gpu's three files. Results: $OUT/r.tgz (+ log), packed after every stage.
# env: LIB (kernels folder, default fib_runtime/kernels/_bin), T_TEST1, T_GB, T_GRID, T_REST, GRID_GATHER, STAGES
set -u
REPO=$PWD; R=${OUT:-/tmp/ret}; W=/tmp/w; mkdir -p $W $R
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $W/log; }
pack() { tar czf $R/r.tgz -C $W . ; cp $W/log $R/log; }
STAGES=${STAGES:-t1 gb grid rest}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/apache_tvm_ffi-*.whl >$W/setup.log 2>&1
mkdir -p /tmp/fi && tar xzf .gpu/flashinfer-*-trimmed-sm90a.tar.gz -C /tmp/fi && tar xzf .gpu/flashinfer-*-cake-sampling-addon-sm90a.tar.gz -C /tmp/fi
export PYTHONPATH=$REPO:/tmp/fi:/tmp/site FLASHINFER_WORKSPACE_BASE=/tmp/fiws FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(which nvcc)")")")
export FIB_KERNELS_DIR=$REPO/${LIB:-fib_runtime/kernels/_bin}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv >>$W/setup.log 2>&1
say "setup done; lib $FIB_KERNELS_DIR"; cat $W/setup.log | tail -3 | tee -a $W/log
T1OK=0
if [[ " $STAGES " == *" t1 "* ]]; then
  FIB_SAMPLING_GATHER_CAP=4032 timeout ${T_TEST1:-200} python3 -m pytest -q -s -rfE -p no:cacheprovider \
    tests/gpu/test_sampling_kernels_gpu.py tests/gpu/test_sampling_stats_gpu.py \
    -k "gathered_tail or reject_tail or min_top_k_hint or (large_k_rejection and (gather4 or cluster4))" > $W/t1.log 2>&1
  rc=$?; say "t1 rc=$rc"; grep -E "passed|failed|error" $W/t1.log | tail -2 | tee -a $W/log; grep -E "^(FAILED|ERROR)" $W/t1.log | head -20 | tee -a $W/log
  [ $rc = 0 ] && T1OK=1; pack
fi
if [[ " $STAGES " == *" gb "* ]]; then
  FIB_SAMPLING_GATHER_CAP=4032 timeout ${T_GB:-120} python3 benchmarks/sampling_gather.py --out $W > $W/gb.log 2>&1
  say "gb rc=$?"; cat $W/gb.log | grep -v Warn | tail -45 | tee -a $W/log; pack
fi
G=${GRID_GATHER:-auto}; [ $G = auto ] && { [ $T1OK = 1 ] && G=4032 || G=0; }
if [[ " $STAGES " == *" grid "* ]]; then
  mkdir -p $W/grid
  FIB_SAMPLING_GATHER_CAP=$G timeout ${T_GRID:-280} python3 benchmarks/sampling.py --out $W/grid > $W/grid.log 2>&1
  say "grid (gather cap $G) rc=$?"; grep -A12 "acceptance\|^{" $W/grid.log | tail -30 | tee -a $W/log; pack
fi
if [[ " $STAGES " == *" rest "* ]]; then
  FIB_SAMPLING_GATHER_CAP=$G timeout ${T_REST:-100} python3 -m pytest -q -rfE -p no:cacheprovider -x \
    tests/gpu/test_sampling_kernels_gpu.py tests/gpu/test_sampling_api_gpu.py tests/gpu/test_sampling_support_gpu.py \
    tests/gpu/test_sampling_plain_gpu.py tests/gpu/test_sampling_stats_gpu.py > $W/rest.log 2>&1
  say "rest (gather cap $G) rc=$?"; grep -E "passed|failed|error" $W/rest.log | tail -2 | tee -a $W/log; grep -E "^(FAILED|ERROR)" $W/rest.log | head -20 | tee -a $W/log; pack
fi
say done
