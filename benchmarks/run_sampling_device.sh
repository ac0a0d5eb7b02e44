#!/bin/bash
# One device call for the sampling kernels, stage by stage (STAGES, in order):
#   lkprof  benchmarks/sampling_twopass_lk_profile.py on the profile build PROF (-DFIB_SAMPLING_PROFILE), or on each of PROFS
#   gprof   benchmarks/sampling_gather_profile.py on PROF (the cluster kernel's gathered tail)
#   ab      benchmarks/sampling_twopass.py --largek (or AB_POINTS, e.g. --lk1) --ab --hint --no-cake, builds BUILDS alternating, twice
#   gab     benchmarks/sampling_gather.py, builds BUILDS alternating, twice
#   envab   the ab points (or ENVAB_POINTS) on LIB without and with each AB_ENVS setting ("FIB_SAMPLING_REJECT_MIN_K=256 ..."), alternating, REPS times (2)
#   ncu     Nsight Compute source counters on the -lineinfo build LI (NCU_POINTS "V,B,k,probs|logits ...")
#   b64     benchmarks/sampling_twopass.py --b64 (knobs, cake) on LIB, then without cake under each B64_ENVS setting
#           ("FIB_SAMPLING_TWOPASS2_MIN_B=48" unless given)
#   tpprof  benchmarks/sampling_twopass.py's phase profile (PROFILE points) on the profile build PROF
#   pdl     benchmarks/sampling_pdl.py on LIB with FIB_SAMPLING_PDL on and off (a torch kernel ahead of each call)
#   plainpdl  benchmarks/sampling_plain.py --quick on LIB with FIB_SAMPLING_PDL on, off, on
#   pdlknobs  benchmarks/sampling_pdl.py --knobs on LIB (k=50 kernels by knob behind a softmax, and back to back)
#   sweep   benchmarks/sampling_knob_sweep.py on LIB: SWEEP_POINTS by SWEEP_KNOBS (time and token per kernel knob)
#   tests   the sampling GPU test files on LIB (-x), once per TEST_ENVS setting ("none FIB_SAMPLING_REJECT_MIN_K=256")
#   grid    benchmarks/sampling.py on LIB, or on each build of GRID_LIBS
# Builds are folders holding libfib_sampling.so, made here before the call and carried beside .gpu/
# (../shared/gpu's three files), e.g. (each ~7 min on 2 cores; .tar.xz files under .device/ are unpacked there):
#   python kernels_cuda/build.py --arch 90 --family sampling --out-dir .device/a
#   python kernels_cuda/build.py --arch 90 --family sampling --out-dir .device/prof --nvcc-flag=-DFIB_SAMPLING_PROFILE
#   python kernels_cuda/build.py --arch 90 --family sampling --out-dir .device/li --nvcc-flag=-lineinfo
#   run(command="STAGES='lkprof ab' PROF=.device/prof BUILDS='.device/a .device/b' bash benchmarks/run_sampling_device.sh",
#       carry=[".gpu", ".device"])
# Results: $OUT/r.tgz and $OUT/log, packed after every stage. Timeouts: T_<STAGE> seconds.
set -u
REPO=$PWD; R=${OUT:-/tmp/ret}; W=/tmp/w; mkdir -p $W $R
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $W/log; }
pack() { tar czf $R/r.tgz -C $W . ; cp $W/log $R/log; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
STAGES=${STAGES:-lkprof}
for t in .device/*.tar.xz; do [ -f "$t" ] && tar xJf "$t" -C .device; done
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/apache_tvm_ffi-*.whl >$W/setup.log 2>&1
mkdir -p /tmp/fi && tar xzf .gpu/flashinfer-*-trimmed-sm90a.tar.gz -C /tmp/fi && tar xzf .gpu/flashinfer-*-cake-sampling-addon-sm90a.tar.gz -C /tmp/fi
export PYTHONPATH=$REPO:/tmp/fi:/tmp/site FLASHINFER_WORKSPACE_BASE=/tmp/fiws FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(which nvcc)")")")
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv >>$W/setup.log 2>&1
say "setup done"; tail -2 $W/setup.log | tee -a $W/log
LIB=$REPO/${LIB:-fib_runtime/kernels/_bin}; PROF=${PROF:-.device/prof}; LI=${LI:-.device/li}
if has lkprof; then
  for pb in ${PROFS:-$PROF}; do  # (several profile builds: one folder of results each)
    pw=$W/lkprof_$(basename $pb); mkdir -p $pw
    FIB_KERNELS_DIR=$REPO/$pb timeout ${T_LKPROF:-150} python3 benchmarks/sampling_twopass_lk_profile.py --out $pw > $pw/lkprof.log 2>&1
    say "lkprof $pb rc=$?"; grep -v Warn $pw/lkprof.log | grep -v ctas | tail -40 | tee -a $W/log; pack
  done
fi
if has gprof; then
  FIB_KERNELS_DIR=$REPO/$PROF timeout ${T_GPROF:-120} python3 benchmarks/sampling_gather_profile.py --out $W > $W/gprof.log 2>&1
  say "gprof rc=$?"; grep -v Warn $W/gprof.log | tail -30 | tee -a $W/log; pack
fi
if has envab; then
  # LIB without and with each AB_ENVS setting (e.g. FIB_SAMPLING_REJECT_MIN_K=256), alternating, REPS times (2)
  for rep in $(seq ${REPS:-2}); do
    for e in none ${AB_ENVS:-}; do
      tag=_env_${e//[=]/_}_run$rep
      ( [ $e != none ] && export "$e"; FIB_KERNELS_DIR=$LIB timeout ${T_AB:-150} python3 benchmarks/sampling_twopass.py \
          ${ENVAB_POINTS:-${AB_POINTS:---largek}} --ab --hint --no-cake --skip-identity --tag "$tag" --out $W > $W/envab$tag.log 2>&1 )
      say "envab $e run $rep rc=$?"; pack
    done
  done
fi
if has b64; then
  for e in none ${B64_ENVS:-FIB_SAMPLING_TWOPASS2_MIN_B=48}; do
    tag=_b64_${e//[=]/_}; nc=; [ $e != none ] && nc=--no-cake
    ( [ $e != none ] && export "$e"; FIB_KERNELS_DIR=$LIB timeout ${T_B64:-150} python3 benchmarks/sampling_twopass.py \
        --b64 --ab --hint --skip-identity $nc --tag "$tag" --out $W > $W/b64$tag.log 2>&1 )
    say "b64 $e rc=$?"; grep "^|" $W/b64$tag.log | tail -26 | tee -a $W/log; pack
  done
fi
if has pdl; then
  for e in on off; do
    ( [ $e = off ] && export FIB_SAMPLING_PDL=0; FIB_KERNELS_DIR=$LIB timeout ${T_PDL:-120} python3 benchmarks/sampling_pdl.py \
        --tag _$e --out $W > $W/pdl_$e.log 2>&1 )
    say "pdl $e rc=$?"; pack
  done
  python3 benchmarks/sampling_pdl.py --compare $W/sampling_pdl_on_*.json $W/sampling_pdl_off_*.json > $W/pdl_compare.md 2>&1
  cat $W/pdl_compare.md | tee -a $W/log; pack
fi
if has plainpdl; then  # (sampling_plain.py --quick on LIB with FIB_SAMPLING_PDL on, off, on)
  for e in on off on2; do
    ( [ $e = off ] && export FIB_SAMPLING_PDL=0; FIB_KERNELS_DIR=$LIB timeout ${T_PDL:-120} python3 benchmarks/sampling_plain.py \
        --quick --out $W/plain_$e > $W/plain_$e.log 2>&1 )
    say "plainpdl $e rc=$?"; pack
  done
fi
if has pdlknobs; then  # (the kernels by knob behind a softmax and back to back: sampling_pdl.py --knobs)
  FIB_KERNELS_DIR=$LIB timeout ${T_PDL:-120} python3 benchmarks/sampling_pdl.py --knobs --out $W > $W/pdlknobs.log 2>&1
  say "pdlknobs rc=$?"; grep -v "^time\|Warn" $W/pdlknobs.log | tail -70 | tee -a $W/log; pack
fi
if has sweep; then  # (sampling_knob_sweep.py: SWEEP_POINTS "B,V,k,kind ..." by SWEEP_KNOBS "0,4,8,...")
  FIB_KERNELS_DIR=$LIB timeout ${T_SWEEP:-120} python3 benchmarks/sampling_knob_sweep.py --points $SWEEP_POINTS \
      --knobs $SWEEP_KNOBS --tag "${SWEEP_TAG:-}" --out $W > $W/sweep${SWEEP_TAG:-}.log 2>&1
  say "sweep rc=$?"; grep -v "Warn" $W/sweep${SWEEP_TAG:-}.log | tail -20 | tee -a $W/log; pack
fi
if has tpprof; then
  FIB_KERNELS_DIR=$REPO/$PROF timeout ${T_TPPROF:-120} python3 benchmarks/sampling_twopass.py --tag _tpprof --out $W > $W/tpprof.log 2>&1
  say "tpprof rc=$?"; grep "^profile" $W/tpprof.log | tail -40 | tee -a $W/log; pack
fi
for st in ab gab; do
  has $st || continue
  for rep in 1 2; do
    for b in ${BUILDS:-}; do
      tag=_$(basename $b)_run$rep
      if [ $st = ab ]; then
        FIB_KERNELS_DIR=$REPO/$b timeout ${T_AB:-150} python3 benchmarks/sampling_twopass.py ${AB_POINTS:---largek} --ab --hint --no-cake \
          --skip-identity --tag "$tag" --out $W > $W/${st}$tag.log 2>&1
      else
        FIB_KERNELS_DIR=$REPO/$b timeout ${T_GAB:-150} python3 benchmarks/sampling_gather.py --out $W/gab$tag > $W/${st}$tag.log 2>&1
      fi
      say "$st $b run $rep rc=$?"; pack
    done
  done
done
if has ncu; then
  # Nsight Compute source counters of one launch per point ("V,B,k,probs|logits"), on the -lineinfo
  # build LI (same SASS as the release build); map them to source lines here with
  # benchmarks/ncu_source_lines.py and `nvdisasm -gi` of LI's cubin
  NCU=${NCU:-$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)}
  for pt in ${NCU_POINTS:-128256,64,2048,probs 128256,16,2048,probs}; do
    IFS=, read -r nv nb nk ns <<< "$pt"; tag=${nv}_${nb}_${nk}_${ns}
    FIB_KERNELS_DIR=$REPO/$LI timeout ${T_NCU:-120} $NCU --clock-control none -k regex:"sampler_kernel|twopass_kernel" \
      --launch-skip 3 --launch-count 1 --section WarpStateStats --section SourceCounters --warp-sampling-interval 0 \
      -o $W/ncu_$tag python3 benchmarks/sampling_ncu_source.py $nv $nb $nk $ns > $W/ncu_$tag.log 2>&1
    say "ncu $pt rc=$?"
    $NCU -i $W/ncu_$tag.ncu-rep --page source --csv --print-source sass > $W/ncu_$tag.csv 2>>$W/ncu_$tag.log
    rm -f $W/ncu_$tag.ncu-rep; pack
  done
fi
if has tests; then
  for e in ${TEST_ENVS:-none}; do  # (each setting, e.g. "none FIB_SAMPLING_REJECT_MIN_K=256": one log each)
    tl=$W/tests${e//[=]/_}.log; [ $e = none ] && tl=$W/tests.log
    ( [ $e != none ] && export "$e"; FIB_KERNELS_DIR=$LIB timeout ${T_TESTS:-300} python3 -m pytest -q -rfE -p no:cacheprovider -x \
      tests/gpu/test_sampling_kernels_gpu.py tests/gpu/test_sampling_api_gpu.py tests/gpu/test_sampling_support_gpu.py \
      tests/gpu/test_sampling_plain_gpu.py tests/gpu/test_sampling_stats_gpu.py > $tl 2>&1 )
    say "tests $e rc=$?"; grep -E "passed|failed|error" $tl | tail -2 | tee -a $W/log; grep -E "^(FAILED|ERROR)" $tl | head -20 | tee -a $W/log; pack
  done
fi
if has grid; then
  for gl in ${GRID_LIBS:-$LIB}; do  # (several builds: one folder each, grid_<name>)
    gw=$W/grid_$(basename $gl); mkdir -p $gw; [ "$gl" = "$LIB" ] || gl=$REPO/$gl
    FIB_KERNELS_DIR=$gl timeout ${T_GRID:-300} python3 benchmarks/sampling.py --out $gw > $gw/grid.log 2>&1
    say "grid $gl rc=$?"; grep -B2 -A12 "Acceptance summary" $gw/*.md 2>/dev/null | head -20 | tee -a $W/log; pack
  done
fi
say done
