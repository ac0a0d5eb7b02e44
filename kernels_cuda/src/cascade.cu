// fib-runtime cascade attention family: merge_state / merge_state_in_place / merge_states and
// multi-level shared-prefix paged attention (one launch per level, merge fused into the last
// level's epilogue). Bound with apache-tvm-ffi; the stream is the caller's current stream.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>

#include <fib/cascade/attention.cuh>
#include <fib/cascade/merge.cuh>

using tvm::ffi::Optional;
using tvm::ffi::TensorView;
using namespace fib::cascade;

namespace {

enum class DT { kF16, kBF16, kF32, kOther };

DT dtype_of(const TensorView& t) {
  DLDataType d = t.dtype();
  if (d.lanes != 1) return DT::kOther;
  if (d.code == kDLFloat && d.bits == 16) return DT::kF16;
  if (d.code == kDLBfloat && d.bits == 16) return DT::kBF16;
  if (d.code == kDLFloat && d.bits == 32) return DT::kF32;
  return DT::kOther;
}

cudaStream_t stream_of(const TensorView& t) {
  return static_cast<cudaStream_t>(TVMFFIEnvGetStream(t.device().device_type, t.device().device_id));
}

void check_cuda(const TensorView& t, const char* name) {
  TVM_FFI_ICHECK(t.device().device_type == kDLCUDA) << name << " must be a CUDA tensor";
}

bool is_contig(const TensorView& t) {
  if (t.numel() == 0) return true;
  int64_t expect = 1;
  for (int i = t.ndim() - 1; i >= 0; --i) {
    if (t.size(i) != 1 && t.stride(i) != expect) return false;
    expect *= t.size(i);
  }
  return true;
}

void check_contig(const TensorView& t, const char* name) {
  TVM_FFI_ICHECK(is_contig(t)) << name << " must be contiguous";
}

void check_launch(const char* what) {
  cudaError_t e = cudaGetLastError();
  TVM_FFI_ICHECK(e == cudaSuccess) << what << " launch failed: " << cudaGetErrorString(e);
}

// merge kernel variant: 0 = 2 rows/thread, 1 = 4 rows/thread, 2 = 2 rows + streaming cache hints,
// 3 = 4 rows + streaming hints, 4 = 1 row/thread, 5 = 1 row + streaming hints, 6 = 1 row, 512-thread
// blocks, 7 = persistent grid-stride (merge_state only; in place uses 4). Default: 4 (H200, 2026-12-01: 1 row/thread beat 2 and 4 rows; see benchmarks/results).
// 8+ (merge_state only; in place runs as 4): 8 = TMA bulk-copy persistent ring (sm_90: 8 KB tiles,
// 4 stages, grid = SMs x resident CTAs), 9 = 8 + L2 evict_first cache policy on every bulk copy,
// 10 = TMA one-shot (one 16 KB tile per CTA, grid = tiles), 11 = 1 row/thread with
// ld.global.nc + L2 evict_first policy + L2::256B prefetch loads, 12 = 2 rows/thread, 128-thread
// blocks, hinted loads AND evict_first stores. TMA variants fall back to 4 below sm_90 or on
// pointers not 16-byte aligned.
int g_merge_variant = 4;

template <typename T, int U, bool ST, bool BIG = false>
void launch_merge_state_u(const TensorView& va, const TensorView& sa, const TensorView& vb,
                          const TensorView& sb, const TensorView& vo, const TensorView& so,
                          cudaStream_t st) {
  int64_t rows = va.size(0) * va.size(1);
  int tpr = static_cast<int>(va.size(2) / 8);
  if (rows == 0 || tpr == 0) return;
  int rpb = (BIG && tpr <= 64 ? 512 : 256) / tpr;
  int64_t blocks = (rows + rpb * U - 1) / (rpb * U);
  merge_state_kernel<T, U, ST><<<static_cast<unsigned>(blocks), dim3(tpr, rpb), 0, st>>>(
      static_cast<const T*>(va.data_ptr()), static_cast<const float*>(sa.data_ptr()),
      static_cast<const T*>(vb.data_ptr()), static_cast<const float*>(sb.data_ptr()),
      static_cast<T*>(vo.data_ptr()), static_cast<float*>(so.data_ptr()), static_cast<int>(rows));
  check_launch("merge_state");
}

template <typename T>
void launch_merge_state_persistent(const TensorView& va, const TensorView& sa, const TensorView& vb,
                                   const TensorView& sb, const TensorView& vo, const TensorView& so,
                                   cudaStream_t st) {
  static int grid_cache = 0;
  int64_t rows = va.size(0) * va.size(1);
  int tpr = static_cast<int>(va.size(2) / 8);
  if (rows == 0 || tpr == 0) return;
  int rpb = 256 / tpr;
  if (grid_cache == 0) {
    int dev = 0, sms = 0, per = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, merge_state_persistent_kernel<T>, 256, 0);
    grid_cache = sms * (per > 0 ? per : 1);
  }
  int64_t need = (rows + rpb - 1) / rpb;
  int grid = static_cast<int>(need < grid_cache ? need : grid_cache);
  merge_state_persistent_kernel<T><<<grid, dim3(tpr, rpb), 0, st>>>(
      static_cast<const T*>(va.data_ptr()), static_cast<const float*>(sa.data_ptr()),
      static_cast<const T*>(vb.data_ptr()), static_cast<const float*>(sb.data_ptr()),
      static_cast<T*>(vo.data_ptr()), static_cast<float*>(so.data_ptr()), static_cast<int>(rows));
  check_launch("merge_state");
}

template <typename T, int U, bool SHINT>
void launch_merge_state_hint(const TensorView& va, const TensorView& sa, const TensorView& vb,
                             const TensorView& sb, const TensorView& vo, const TensorView& so,
                             cudaStream_t st, int threads) {
  int64_t rows = va.size(0) * va.size(1);
  int tpr = static_cast<int>(va.size(2) / 8);
  if (rows == 0 || tpr == 0) return;
  int rpb = (tpr <= threads ? threads : 256) / tpr;
  int64_t blocks = (rows + rpb * U - 1) / (rpb * U);
  merge_state_hint_kernel<T, U, SHINT><<<static_cast<unsigned>(blocks), dim3(tpr, rpb), 0, st>>>(
      static_cast<const T*>(va.data_ptr()), static_cast<const float*>(sa.data_ptr()),
      static_cast<const T*>(vb.data_ptr()), static_cast<const float*>(sb.data_ptr()),
      static_cast<T*>(vo.data_ptr()), static_cast<float*>(so.data_ptr()), static_cast<int>(rows));
  check_launch("merge_state");
}

int device_cc_major() {
  static int cc = -1;
  if (cc < 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev);
  }
  return cc;
}

bool aligned16(const TensorView& t) {
  return (reinterpret_cast<uintptr_t>(t.data_ptr()) & 15) == 0;
}

// TMA variants; false when not applicable here (caller falls back).
template <typename T, int STAGES, bool HINT>
bool launch_merge_state_tma(const TensorView& va, const TensorView& sa, const TensorView& vb,
                            const TensorView& sb, const TensorView& vo, const TensorView& so,
                            cudaStream_t st, int tile_target_bytes, bool persistent) {
  if (device_cc_major() < 9) return false;
  for (const TensorView* t : {&va, &sa, &vb, &sb, &vo, &so})
    if (!aligned16(*t)) return false;
  int64_t rows = va.size(0) * va.size(1);
  int tpr = static_cast<int>(va.size(2) / 8);
  if (rows == 0 || tpr == 0) return true;
  if (rows > (int64_t{1} << 31) - 4096) return false;
  const int row_bytes = tpr * 16;
  int tile_rows = (tile_target_bytes / row_bytes) & ~3;
  if (tile_rows < 4) tile_rows = 4;
  const int smem = merge_tma_smem_bytes(STAGES, tile_rows, row_bytes);
  auto kern = merge_state_tma_kernel<T, STAGES, HINT>;
  static int smem_set = 0;  // per instantiation: largest dynamic smem opted in so far
  if (smem > 48 * 1024 && smem > smem_set) {
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
        cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    smem_set = smem;
  }
  const int64_t tiles = (rows + tile_rows - 1) / tile_rows;
  int64_t grid = tiles;
  if (persistent) {
    static int cached_smem = -1, cached_grid = 0;
    if (cached_smem != smem) {
      int dev = 0, sms = 0, per = 0;
      cudaGetDevice(&dev);
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kern, 256, smem);
      cached_grid = sms * (per > 0 ? per : 1);
      cached_smem = smem;
    }
    if (grid > cached_grid) grid = cached_grid;
  }
  if (grid > 0x7fffffff) return false;
  kern<<<static_cast<unsigned>(grid), 256, smem, st>>>(
      static_cast<const T*>(va.data_ptr()), static_cast<const float*>(sa.data_ptr()),
      static_cast<const T*>(vb.data_ptr()), static_cast<const float*>(sb.data_ptr()),
      static_cast<T*>(vo.data_ptr()), static_cast<float*>(so.data_ptr()), static_cast<int>(rows),
      tpr, tile_rows);
  check_launch("merge_state");
  return true;
}

template <typename T>
void launch_merge_state(const TensorView& va, const TensorView& sa, const TensorView& vb,
                        const TensorView& sb, const TensorView& vo, const TensorView& so,
                        cudaStream_t st, int variant) {
  switch (variant) {
    case 8:
      if (launch_merge_state_tma<T, 4, false>(va, sa, vb, sb, vo, so, st, 8192, true)) return;
      break;
    case 9:
      if (launch_merge_state_tma<T, 4, true>(va, sa, vb, sb, vo, so, st, 8192, true)) return;
      break;
    case 10:
      if (launch_merge_state_tma<T, 1, false>(va, sa, vb, sb, vo, so, st, 16384, false)) return;
      break;
    case 11: return launch_merge_state_hint<T, 1, false>(va, sa, vb, sb, vo, so, st, 256);
    case 12: return launch_merge_state_hint<T, 2, true>(va, sa, vb, sb, vo, so, st, 128);
    default: break;
  }
  switch (variant) {
    case 7: return launch_merge_state_persistent<T>(va, sa, vb, sb, vo, so, st);
    case 0: return launch_merge_state_u<T, 2, false>(va, sa, vb, sb, vo, so, st);
    case 1: return launch_merge_state_u<T, 4, false>(va, sa, vb, sb, vo, so, st);
    case 2: return launch_merge_state_u<T, 2, true>(va, sa, vb, sb, vo, so, st);
    case 3: return launch_merge_state_u<T, 4, true>(va, sa, vb, sb, vo, so, st);
    case 5: return launch_merge_state_u<T, 1, true>(va, sa, vb, sb, vo, so, st);
    case 6: return launch_merge_state_u<T, 1, false, true>(va, sa, vb, sb, vo, so, st);
    default: return launch_merge_state_u<T, 1, false>(va, sa, vb, sb, vo, so, st);
  }
}

void merge_state(TensorView v_a, TensorView s_a, TensorView v_b, TensorView s_b,
                 TensorView v_merged, TensorView s_merged) {
  for (auto* t : {&v_a, &s_a, &v_b, &s_b, &v_merged, &s_merged}) {
    check_cuda(*t, "merge_state argument");
    check_contig(*t, "merge_state argument");
  }
  TVM_FFI_ICHECK(v_a.ndim() == 3 && v_b.ndim() == 3 && s_a.ndim() == 2 && s_b.ndim() == 2)
      << "merge_state: v must be [seq_len, num_heads, head_dim], s [seq_len, num_heads]";
  for (int i = 0; i < 3; ++i)
    TVM_FFI_ICHECK(v_a.size(i) == v_b.size(i) && v_a.size(i) == v_merged.size(i))
        << "merge_state: shape mismatch";
  TVM_FFI_ICHECK(s_a.size(0) == v_a.size(0) && s_a.size(1) == v_a.size(1) &&
                 s_b.size(0) == v_a.size(0) && s_b.size(1) == v_a.size(1))
      << "merge_state: s shape mismatch";
  TVM_FFI_ICHECK(v_a.size(2) % 8 == 0 && v_a.size(2) <= 2048)
      << "merge_state: head_dim must be a multiple of 8, at most 2048";
  TVM_FFI_ICHECK(dtype_of(s_a) == DT::kF32 && dtype_of(s_b) == DT::kF32 &&
                 dtype_of(s_merged) == DT::kF32)
      << "merge_state: s must be float32";
  DT d = dtype_of(v_a);
  TVM_FFI_ICHECK(dtype_of(v_b) == d && dtype_of(v_merged) == d) << "merge_state: dtype mismatch";
  cudaStream_t st = stream_of(v_a);
  if (d == DT::kF16)
    launch_merge_state<half>(v_a, s_a, v_b, s_b, v_merged, s_merged, st, g_merge_variant);
  else if (d == DT::kBF16)
    launch_merge_state<__nv_bfloat16>(v_a, s_a, v_b, s_b, v_merged, s_merged, st, g_merge_variant);
  else
    TVM_FFI_THROW(TypeError) << "merge_state: v must be float16 or bfloat16";
}

template <typename T, int U, bool ST, bool BIG = false>
void launch_merge_in_place_u(const TensorView& v, const TensorView& s, const TensorView& vb,
                             const TensorView& sb, const uint8_t* mask, cudaStream_t st) {
  int64_t rows = v.size(0) * v.size(1);
  int tpr = static_cast<int>(v.size(2) / 8);
  if (rows == 0 || tpr == 0) return;
  int rpb = (BIG && tpr <= 64 ? 512 : 256) / tpr;
  int64_t blocks = (rows + rpb * U - 1) / (rpb * U);
  merge_state_in_place_kernel<T, U, ST><<<static_cast<unsigned>(blocks), dim3(tpr, rpb), 0, st>>>(
      static_cast<T*>(v.data_ptr()), static_cast<float*>(s.data_ptr()),
      static_cast<const T*>(vb.data_ptr()), static_cast<const float*>(sb.data_ptr()), mask,
      static_cast<int>(rows), static_cast<int>(v.size(1)));
  check_launch("merge_state_in_place");
}

template <typename T>
void launch_merge_in_place(const TensorView& v, const TensorView& s, const TensorView& vb,
                           const TensorView& sb, const uint8_t* mask, cudaStream_t st) {
  switch (g_merge_variant) {
    case 0: return launch_merge_in_place_u<T, 2, false>(v, s, vb, sb, mask, st);
    case 1: return launch_merge_in_place_u<T, 4, false>(v, s, vb, sb, mask, st);
    case 2: return launch_merge_in_place_u<T, 2, true>(v, s, vb, sb, mask, st);
    case 3: return launch_merge_in_place_u<T, 4, true>(v, s, vb, sb, mask, st);
    case 5: return launch_merge_in_place_u<T, 1, true>(v, s, vb, sb, mask, st);
    case 6: return launch_merge_in_place_u<T, 1, false, true>(v, s, vb, sb, mask, st);
    default: return launch_merge_in_place_u<T, 1, false>(v, s, vb, sb, mask, st);
  }
}

void merge_state_in_place(TensorView v, TensorView s, TensorView v_other, TensorView s_other,
                          Optional<TensorView> mask) {
  for (auto* t : {&v, &s, &v_other, &s_other}) {
    check_cuda(*t, "merge_state_in_place argument");
    check_contig(*t, "merge_state_in_place argument");
  }
  TVM_FFI_ICHECK(v.ndim() == 3 && v_other.ndim() == 3 && s.ndim() == 2 && s_other.ndim() == 2)
      << "merge_state_in_place: v must be [seq_len, num_heads, head_dim], s [seq_len, num_heads]";
  for (int i = 0; i < 3; ++i)
    TVM_FFI_ICHECK(v.size(i) == v_other.size(i)) << "merge_state_in_place: shape mismatch";
  TVM_FFI_ICHECK(s.size(0) == v.size(0) && s.size(1) == v.size(1) &&
                 s_other.size(0) == v.size(0) && s_other.size(1) == v.size(1))
      << "merge_state_in_place: s shape mismatch";
  int64_t tpr = v.size(2) / 8;
  TVM_FFI_ICHECK(v.size(2) % 8 == 0 && tpr > 0 && tpr <= 256)
      << "merge_state_in_place: head_dim must be a multiple of 8, at most 2048";
  TVM_FFI_ICHECK(dtype_of(s) == DT::kF32 && dtype_of(s_other) == DT::kF32)
      << "merge_state_in_place: s must be float32";
  const uint8_t* mptr = nullptr;
  if (mask.has_value()) {
    TensorView mk = mask.value();
    check_cuda(mk, "mask");
    TVM_FFI_ICHECK(mk.ndim() == 1 && mk.size(0) == v.size(0) && mk.dtype().bits == 8 &&
                   is_contig(mk))
        << "merge_state_in_place: mask must be a contiguous bool/uint8 [seq_len] tensor";
    mptr = static_cast<const uint8_t*>(mk.data_ptr());
  }
  DT d = dtype_of(v);
  TVM_FFI_ICHECK(dtype_of(v_other) == d) << "merge_state_in_place: dtype mismatch";
  cudaStream_t st = stream_of(v);
  if (d == DT::kF16)
    launch_merge_in_place<half>(v, s, v_other, s_other, mptr, st);
  else if (d == DT::kBF16)
    launch_merge_in_place<__nv_bfloat16>(v, s, v_other, s_other, mptr, st);
  else
    TVM_FFI_THROW(TypeError) << "merge_state_in_place: v must be float16 or bfloat16";
}

template <typename TIn, typename TOut>
void launch_merge_states(const void* v, const float* s, void* vo, float* so, int64_t num_rows,
                         int num_heads, int head_dim, int num_states, int64_t v_ts, int64_t v_ss,
                         int64_t v_hs, int64_t s_ts, int64_t s_ss, int64_t o_ts, int64_t o_hs,
                         cudaStream_t st) {
  int tpr = head_dim / 8;
  if (num_rows == 0 || tpr == 0) return;
  int rpb = 256 / tpr;
  int64_t blocks = (num_rows + rpb - 1) / rpb;
  merge_states_kernel<TIn, TOut><<<static_cast<unsigned>(blocks), dim3(tpr, rpb), 0, st>>>(
      static_cast<const TIn*>(v), s, static_cast<TOut*>(vo), so, static_cast<int>(num_rows),
      num_heads, num_states, v_ts, v_ss, v_hs, s_ts, s_ss, o_ts, o_hs);
  check_launch("merge_states");
}

void merge_states(TensorView v, TensorView s, TensorView v_merged, TensorView s_merged) {
  for (auto* t : {&v, &s, &v_merged, &s_merged}) {
    check_cuda(*t, "merge_states argument");
    check_contig(*t, "merge_states argument");
  }
  TVM_FFI_ICHECK(v.ndim() == 4 && s.ndim() == 3)
      << "merge_states: v must be [seq_len, num_states, num_heads, head_dim], s [seq_len, "
         "num_states, num_heads]";
  TVM_FFI_ICHECK(v.size(0) == s.size(0) && v.size(1) == s.size(1) && v.size(2) == s.size(2))
      << "merge_states: shape mismatch";
  TVM_FFI_ICHECK(v.size(3) % 8 == 0 && v.size(3) <= 2048)
      << "merge_states: head_dim must be a multiple of 8, at most 2048";
  TVM_FFI_ICHECK(dtype_of(s) == DT::kF32 && dtype_of(s_merged) == DT::kF32)
      << "merge_states: s must be float32";
  int64_t n = v.size(0), S = v.size(1), H = v.size(2), D = v.size(3);
  DT d = dtype_of(v);
  TVM_FFI_ICHECK(dtype_of(v_merged) == d) << "merge_states: dtype mismatch";
  cudaStream_t st = stream_of(v);
  if (d == DT::kF16)
    launch_merge_states<half, half>(v.data_ptr(), static_cast<const float*>(s.data_ptr()),
                                    v_merged.data_ptr(), static_cast<float*>(s_merged.data_ptr()),
                                    n * H, H, D, S, S * H * D, H * D, D, S * H, H, H * D, D, st);
  else if (d == DT::kBF16)
    launch_merge_states<__nv_bfloat16, __nv_bfloat16>(
        v.data_ptr(), static_cast<const float*>(s.data_ptr()), v_merged.data_ptr(),
        static_cast<float*>(s_merged.data_ptr()), n * H, H, D, S, S * H * D, H * D, D, S * H, H,
        H * D, D, st);
  else
    TVM_FFI_THROW(TypeError) << "merge_states: v must be float16 or bfloat16";
}

// ------------------------------------------------------------------ cascade levels

template <typename T, int D, int WM, int WK, int MT>
void launch_level_t(const LevelParams& p, dim3 grid, int stages_alloc, cudaStream_t st) {
  static bool attr_set = false;
  auto kern = cascade_level_kernel<T, D, WM, WK, MT>;
  if (!attr_set) {
    int mx = level_smem<D, WM, WK, MT>(LevelCfg<D, WM, MT>::STAGES);
    cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, mx);
    attr_set = true;
  }
  int smem = level_smem<D, WM, WK, MT>(stages_alloc);
  kern<<<grid, 32 * WM * WK, smem, st>>>(p);
  check_launch("cascade_level");
}

template <typename T, int D, int WM, int WK, int MT>
int occupancy_t(int stages_alloc) {
  auto kern = cascade_level_kernel<T, D, WM, WK, MT>;
  int mx = level_smem<D, WM, WK, MT>(LevelCfg<D, WM, MT>::STAGES);
  cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, mx);
  int n = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, 32 * WM * WK,
                                                level_smem<D, WM, WK, MT>(stages_alloc));
  return n;
}

// tile_rows: 16 (1 warp-row x 4 key-split warps), 32 (2 x 2), 64 (4 x 1), 128 (4 warps x 2 m-tiles)
template <typename T, int D>
void dispatch_rows(int tile_rows, const LevelParams& p, dim3 grid, int stages_alloc, cudaStream_t st) {
  if constexpr (D <= 128) {
    if (tile_rows == 128) return launch_level_t<T, D, 4, 1, 2>(p, grid, stages_alloc, st);
  }
  if (tile_rows == 64) return launch_level_t<T, D, 4, 1, 1>(p, grid, stages_alloc, st);
  if (tile_rows == 32) return launch_level_t<T, D, 2, 2, 1>(p, grid, stages_alloc, st);
  if (tile_rows == 16) return launch_level_t<T, D, 1, 4, 1>(p, grid, stages_alloc, st);
  TVM_FFI_THROW(ValueError) << "cascade_level: unsupported tile_rows " << tile_rows << " for head_dim " << D;
}

template <typename T, int D>
int occupancy_rows(int tile_rows, int stages_alloc) {
  if constexpr (D <= 128) {
    if (tile_rows == 128) return occupancy_t<T, D, 4, 1, 2>(stages_alloc);
  }
  if (tile_rows == 64) return occupancy_t<T, D, 4, 1, 1>(stages_alloc);
  if (tile_rows == 32) return occupancy_t<T, D, 2, 2, 1>(stages_alloc);
  return occupancy_t<T, D, 1, 4, 1>(stages_alloc);
}

template <typename T>
void dispatch_d(int d, int tile_rows, const LevelParams& p, dim3 grid, int stages_alloc,
                cudaStream_t st) {
  if (d == 64)
    dispatch_rows<T, 64>(tile_rows, p, grid, stages_alloc, st);
  else if (d == 128)
    dispatch_rows<T, 128>(tile_rows, p, grid, stages_alloc, st);
  else if (d == 256)
    dispatch_rows<T, 256>(tile_rows, p, grid, stages_alloc, st);
  else
    TVM_FFI_THROW(ValueError) << "cascade_level: head_dim must be 64, 128 or 256";
}

void cascade_level(TensorView q, TensorView k, TensorView v, TensorView qo_indptr,
                   TensorView kv_indptr, TensorView kv_indices, TensorView last_page_len,
                   TensorView work_info, int64_t tile_rows,
                   int64_t num_splits, int64_t kv_chunk, int64_t stages_alloc, bool causal,
                   double sm_scale, TensorView ws_o, TensorView ws_lse, int64_t slot_base,
                   int64_t num_prev_slots, bool final_mode, TensorView out,
                   Optional<TensorView> lse) {
  TVM_FFI_ICHECK(q.ndim() == 3 && out.ndim() == 3) << "cascade_level: q/out must be 3-D";
  TVM_FFI_ICHECK(k.ndim() == 4 && v.ndim() == 4)
      << "cascade_level: k/v must be [pages, page_size, kv_heads, head_dim] views";
  int64_t D = q.size(2);
  TVM_FFI_ICHECK(k.size(3) == D && q.stride(2) == 1 && k.stride(3) == 1 && v.stride(3) == 1 &&
                 out.stride(2) == 1)
      << "cascade_level: head_dim must be the contiguous last axis";
  for (int i = 0; i < 4; ++i)
    TVM_FFI_ICHECK(k.stride(i) == v.stride(i) && k.size(i) == v.size(i))
        << "cascade_level: k and v must have the same shape and strides";
  DT d = dtype_of(q);
  TVM_FFI_ICHECK(dtype_of(k) == d && dtype_of(v) == d && dtype_of(out) == d)
      << "cascade_level: q, k, v, out must have one dtype";
  int64_t Hq = q.size(1), Hkv = k.size(2);
  TVM_FFI_ICHECK(Hkv > 0 && Hq % Hkv == 0) << "cascade_level: num_qo_heads % num_kv_heads != 0";
  LevelParams p;
  p.q = q.data_ptr();
  p.q_stride_n = q.stride(0);
  p.q_stride_h = q.stride(1);
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.kv_stride_page = k.stride(0);
  p.kv_stride_tok = k.stride(1);
  p.kv_stride_head = k.stride(2);
  p.qo_indptr = static_cast<const int32_t*>(qo_indptr.data_ptr());
  p.kv_indptr = static_cast<const int32_t*>(kv_indptr.data_ptr());
  p.kv_indices = static_cast<const int32_t*>(kv_indices.data_ptr());
  p.last_page_len = static_cast<const int32_t*>(last_page_len.data_ptr());
  TVM_FFI_ICHECK(work_info.ndim() == 2 && work_info.size(1) == 8 && is_contig(work_info) &&
                 work_info.dtype().bits == 32)
      << "cascade_level: work_info must be a contiguous int32 [items, 8] tensor";
  p.work_info = static_cast<const int32_t*>(work_info.data_ptr());
  p.num_qo_heads = static_cast<int>(Hq);
  p.group_size = static_cast<int>(Hq / Hkv);
  p.page_size = static_cast<int>(k.size(1));
  p.sm_scale_log2 = static_cast<float>(sm_scale * 1.4426950408889634);
  p.causal = causal ? 1 : 0;
  p.kv_chunk = static_cast<int>(kv_chunk);
  p.ws_o = static_cast<float*>(ws_o.data_ptr());
  p.ws_lse = static_cast<float*>(ws_lse.data_ptr());
  p.ws_rows = q.size(0) * Hq;
  p.slot_base = static_cast<int>(slot_base);
  p.num_prev_slots = static_cast<int>(num_prev_slots);
  p.final_mode = final_mode ? 1 : 0;
  p.out = out.data_ptr();
  p.lse = lse.has_value() ? static_cast<float*>(lse.value().data_ptr()) : nullptr;
  p.o_stride_n = out.stride(0);
  p.o_stride_h = out.stride(1);
  int64_t n_items = work_info.size(0);
  if (n_items == 0 || num_splits == 0) return;
  TVM_FFI_ICHECK(kv_chunk > 0 && kv_chunk % 64 == 0) << "cascade_level: kv_chunk % 64 != 0";
  dim3 grid(static_cast<unsigned>(n_items), static_cast<unsigned>(Hkv),
            static_cast<unsigned>(num_splits));
  cudaStream_t st = stream_of(q);
  int sa = static_cast<int>(stages_alloc);
  if (d == DT::kF16)
    dispatch_d<half>(static_cast<int>(D), static_cast<int>(tile_rows), p, grid, sa, st);
  else if (d == DT::kBF16)
    dispatch_d<__nv_bfloat16>(static_cast<int>(D), static_cast<int>(tile_rows), p, grid, sa, st);
  else
    TVM_FFI_THROW(TypeError) << "cascade_level: dtype must be float16 or bfloat16";
}

// Merge workspace slots [0, num_slots) of every row into out ([total_q, Hq, D]) and lse.
void merge_slots(TensorView ws_o, TensorView ws_lse, int64_t num_slots, TensorView out,
                 Optional<TensorView> lse) {
  int64_t n = out.size(0), H = out.size(1), D = out.size(2);
  TVM_FFI_ICHECK(out.stride(2) == 1) << "merge_slots: out last axis must be contiguous";
  int64_t rows = n * H;
  float* lp = lse.has_value() ? static_cast<float*>(lse.value().data_ptr()) : nullptr;
  cudaStream_t st = stream_of(out);
  DT d = dtype_of(out);
  const float* wo = static_cast<const float*>(ws_o.data_ptr());
  const float* wl = static_cast<const float*>(ws_lse.data_ptr());
  if (d == DT::kF16)
    launch_merge_states<float, half>(wo, wl, out.data_ptr(), lp, rows, H, D, num_slots, H * D,
                                     rows * D, D, H, rows, out.stride(0), out.stride(1), st);
  else if (d == DT::kBF16)
    launch_merge_states<float, __nv_bfloat16>(wo, wl, out.data_ptr(), lp, rows, H, D, num_slots,
                                              H * D, rows * D, D, H, rows, out.stride(0),
                                              out.stride(1), st);
  else
    TVM_FFI_THROW(TypeError) << "merge_slots: out must be float16 or bfloat16";
}

// Active CTAs per SM of a level configuration (planning helper), its smem bytes, the SM count.
int64_t level_occupancy(int64_t is_bf16, int64_t head_dim, int64_t tile_rows, int64_t stages_alloc) {
  int sa = static_cast<int>(stages_alloc), tr = static_cast<int>(tile_rows);
  if (is_bf16) {
    if (head_dim == 64) return occupancy_rows<__nv_bfloat16, 64>(tr, sa);
    if (head_dim == 128) return occupancy_rows<__nv_bfloat16, 128>(tr, sa);
    return occupancy_rows<__nv_bfloat16, 256>(tr, sa);
  }
  if (head_dim == 64) return occupancy_rows<half, 64>(tr, sa);
  if (head_dim == 128) return occupancy_rows<half, 128>(tr, sa);
  return occupancy_rows<half, 256>(tr, sa);
}

int64_t level_smem_bytes(int64_t head_dim, int64_t tile_rows, int64_t stages_alloc) {
  int sa = static_cast<int>(stages_alloc);
  int rows = static_cast<int>(tile_rows);
  int wk = rows >= 64 ? 1 : 64 / rows;
  int d = static_cast<int>(head_dim);
  int tile_kv = (rows == 128 && d == 128) ? 32 : 64;
  int kv = sa * 2 * tile_kv * d * 2, stg = wk * rows * (d + 4) * 4;
  return rows * d * 2 + (kv > stg ? kv : stg) + wk * rows * 4;
}

int64_t max_stages(int64_t head_dim, int64_t tile_rows) {
  if (tile_rows == 128 && head_dim == 128) return 4;
  return (head_dim <= 128 && tile_rows != 128) ? 3 : 2;
}

int64_t set_merge_variant(int64_t v) {
  int old = g_merge_variant;
  if (v >= 0 && v <= 12) g_merge_variant = static_cast<int>(v);
  return old;
}

int64_t sm_count() {
  int dev = 0, n = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
  return n;
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge_state, merge_state);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge_state_in_place, merge_state_in_place);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge_states, merge_states);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(cascade_level, cascade_level);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge_slots, merge_slots);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(level_occupancy, level_occupancy);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(level_smem_bytes, level_smem_bytes);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(max_stages, max_stages);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(sm_count, sm_count);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(set_merge_variant, set_merge_variant);
