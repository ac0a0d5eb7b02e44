// fib-runtime sampling: the kernels' launch parameters and per-row filters.
// Params (what sampling.cu fills for every launch), the row's top-k, top-p, min-p and temperature
// (row_filters), and the row's Philox seed, offset and draw (row_draw_target).
#pragma once
#include "fib/sampling/common.cuh"

namespace fib {
namespace sampling {

struct Params {
  const void* in;
  int64_t in_stride;  // elements between rows
  void* out_vals;     // renorm (float32) / mask (input dtype) output
  int64_t out_stride;
  int64_t* out_idx;   // sample output
  int B, V, chunk;
  int is_logits, mode, resident, joint;
  int hist_bytes;  // bytes of histogram space before the resident keys (0: none; top-p alone then
                   // overlays its histograms on the keys, see sample_row 4.)
  const void* top_k_arr;
  int top_k_is64, top_k_val, has_topk;
  const float* top_p_arr;
  float top_p_val;
  int has_topp;
  const float* min_p_arr;
  float min_p_val;
  int has_minp;
  const float* temp_arr;
  float temp_val;
  const int64_t* seed_arr;
  const int64_t* offset_arr;
  int64_t seed_val, offset_val;
  int seed_per_row, offset_per_row;
  // split kernel only: per-row workspace (zeroed once at allocation, left zeroed by every call),
  // chunks per row, bytes per row
  unsigned char* ws;
  int split_C, ws_row_bytes;
  // sample_row: top-k rows sample top-p by rejection when k > rej_min_k (top_k_first, 4r.) or
  // k > rej_joint_min_k (joint, 1r.); 0: never
  int rej_min_k, rej_joint_min_k;
  int split_stream_rows;  // the launch has kStreamSmem of dynamic shared memory: rows with k > kSplitMaxK
                          // run stream_row (else sample_row)
  // sample_row<DT, SUMM, true>: those top_k_first rows finish on rank 0 once a radix pass leaves at
  // most this many tokens at or above the k-th largest key's bucket (gather_tail.cuh); 0: never
  int gather_cap;
  // and rows whose delegates bound the k-th largest key go there before any radix pass when at most
  // gather_cap tokens reach that bound (the direct path; 0: after a radix pass only)
  int gather_direct;
};

// Row `row`'s top-k parameter (0 when there is none; int64 values clamped to [0, 2^31-1]).
__device__ __forceinline__ int row_top_k(const Params& p, int row) {
  if (!p.has_topk) return 0;
  if (!p.top_k_arr) return p.top_k_val;
  if (p.top_k_is64) {
    const long long kk = reinterpret_cast<const long long*>(p.top_k_arr)[row];
    return kk > 0x7fffffffLL ? 0x7fffffff : (kk < 0 ? 0 : static_cast<int>(kk));
  }
  return reinterpret_cast<const int*>(p.top_k_arr)[row];
}

// The filters a top-k kernel applies after the top-k (filter, streaming and split kernels): top-p
// (use_p: tp < 1, NaN none), min-p (use_m: mp > 0, clamped to 1), the joint order, and the logit
// scale log2(e)/T (T > 0; 1 for probs).
struct RowFilters {
  float tp, mp, scale;
  bool use_p, use_m, joint;
};
__device__ __forceinline__ RowFilters row_filters(const Params& p, int row, bool logits, float T) {
  RowFilters f;
  f.tp = p.has_topp ? (p.top_p_arr ? p.top_p_arr[row] : p.top_p_val) : 1.0f;
  const float mp = p.has_minp ? (p.min_p_arr ? p.min_p_arr[row] : p.min_p_val) : 0.0f;
  f.use_p = f.tp < 1.0f;
  f.use_m = mp > 0.0f;
  f.mp = fminf(mp, 1.0f);
  f.joint = p.joint != 0 && f.use_p;
  f.scale = logits ? __fdiv_rn(1.4426950408889634f, T) : 1.0f;
  return f;
}

__device__ __forceinline__ uint64_t row_seed(const Params& p, int row) {
  return static_cast<uint64_t>(p.seed_arr ? p.seed_arr[p.seed_per_row ? row : 0] : p.seed_val);
}
__device__ __forceinline__ uint64_t row_offset(const Params& p, int row) {
  return static_cast<uint64_t>(p.offset_arr ? p.offset_arr[p.offset_per_row ? row : 0] : p.offset_val);
}
// The row's draw in [0, tot): one Philox value from the row's (seed, offset), scaled to tot.
__device__ __forceinline__ uint64_t row_draw_target(const Params& p, int row, uint64_t tot,
                                                    uint32_t tag = kTagDraw) {
  return __umul64hi(row_random64(row_seed(p, row), row_offset(p, row), static_cast<uint32_t>(row), tag), tot);
}

}  // namespace sampling
}  // namespace fib
