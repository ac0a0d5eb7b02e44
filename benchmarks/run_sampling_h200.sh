#!/bin/bash
# One device call for issue 5 (sampling): install tvm-ffi + FlashInfer from .gpu/, smoke check,
# GPU tests, benchmark. Everything it writes lands in $OUT. Carry: .gpu fib_runtime/kernels/_bin
#   STAGES="smoke test bench probe largek" (default: smoke test bench; probe: benchmarks/warp_filter_probe.cu;
#   largek: benchmarks/sampling_large_k.py with LARGEK_CONFIGS),
#   T_TEST / T_BENCH / T_PROBE: timeouts, BENCH_ARGS, PYTEST_ARGS
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fib_out}
mkdir -p "$OUT"
STAGES=${STAGES:-smoke test bench}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/apache_tvm_ffi-*.whl >"$OUT/setup.log" 2>&1
mkdir -p /tmp/fi && tar xzf .gpu/flashinfer-*-trimmed-sm90a.tar.gz -C /tmp/fi &&
  tar xzf .gpu/flashinfer-*-cake-sampling-addon-sm90a.tar.gz -C /tmp/fi
export PYTHONPATH=$PWD:/tmp/fi:/tmp/site:${PYTHONPATH:-}
export FLASHINFER_WORKSPACE_BASE=/tmp/fiws FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(which nvcc)")")")
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv >>"$OUT/setup.log" 2>&1

if [[ " $STAGES " == *" smoke "* ]]; then
  timeout 120 python3 - <<'EOF' 2>&1 | tee "$OUT/smoke.log"
import time, torch
from fib_runtime.kernels import loader, sampling as S
print("availability", loader.availability())
for B, V in [(1, 128256), (64, 128256), (512, 128256), (512, 32000), (989, 262208), (3, 111)]:
    print(B, V, S._launch_config(B, V))
x = torch.randn(4, 1000, device="cuda") * 3
m = S.top_k_mask_logits(x, 10)
ref = x >= x.topk(10, dim=-1).values[:, -1:]
print("mask ok", bool(torch.equal(torch.isfinite(m), ref)))
s = S.top_k_top_p_sampling_from_logits(x, 10, 0.9, seed=1, offset=0)
torch.cuda.synchronize(); print("sample", s.tolist())
mod = loader.load_family("sampling")
st = torch.cuda.Stream()
with torch.cuda.stream(st):
    print("stream ok", int(mod.current_stream(x)) == st.cuda_stream, int(mod.current_stream(x)), st.cuda_stream)
lg = torch.randn(512, 128256, device="cuda") * 4
k = torch.full((512,), 50, dtype=torch.int32, device="cuda"); p = torch.full((512,), 0.9, device="cuda")
for _ in range(3): S.top_k_top_p_sampling_from_logits(lg, k, p, seed=1, offset=0)
torch.cuda.synchronize(); e0 = torch.cuda.Event(True); e1 = torch.cuda.Event(True); e0.record()
for i in range(10): S.top_k_top_p_sampling_from_logits(lg, k, p, seed=1, offset=i)
e1.record(); e1.synchronize(); print(f"eager B=512 V=128256: {e0.elapsed_time(e1) / 10 * 1e3:.1f} us/call")
EOF
  if [ "${PIPESTATUS[0]}" != "0" ]; then echo "SMOKE FAILED"; exit 1; fi
fi
if [[ " $STAGES " == *" test "* ]]; then
  set -o pipefail
  timeout "${T_TEST:-240}" python3 -m pytest tests/gpu/test_sampling_*_gpu.py -q -s -rfE --durations=10 \
    -p no:cacheprovider ${PYTEST_ARGS:-} >"$OUT/pytest.log" 2>&1
  echo "pytest rc=$?"
  grep -E "passed|failed|error" "$OUT/pytest.log" | tail -3
  grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -40
fi
if [[ " $STAGES " == *" bench "* ]]; then
  timeout "${T_BENCH:-300}" python3 benchmarks/sampling.py --out "$OUT" ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
  echo "bench rc=$?"
  tail -40 "$OUT/bench.log"
fi
if [[ " $STAGES " == *" probe "* ]]; then
  nvcc -O3 -std=c++17 -arch=sm_90a -Xptxas=-v -o /tmp/warp_filter_probe benchmarks/warp_filter_probe.cu \
    >"$OUT/warp_filter_probe_build.log" 2>&1 &&
    timeout "${T_PROBE:-240}" /tmp/warp_filter_probe >"$OUT/warp_filter_probe_h200.json" 2>"$OUT/warp_filter_probe.err"
  echo "probe rc=$?"
  tail -5 "$OUT/warp_filter_probe_h200.json"
fi
if [[ " $STAGES " == *" largek "* ]]; then
  timeout "${T_LARGEK:-300}" python3 benchmarks/sampling_large_k.py --out "$OUT" --configs "${LARGEK_CONFIGS:-}" \
    >"$OUT/large_k.log" 2>&1
  echo "largek rc=$?"
  grep "^|" "$OUT/large_k.log" | head -400
fi
