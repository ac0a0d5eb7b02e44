// fib-runtime sampling: the shared tail on a sorted candidate set.
// min-p on the sorted set, then exact top-p on integer prefix sums (ties kept together) and one
// Philox draw (finish_sorted): every kernel that sorts its candidates returns the same token.
#pragma once
#include "fib/sampling/params.cuh"

namespace fib {
namespace sampling {

// min-p on a sorted candidate set G[0..nc) (nc <= 2048): how many to keep (at least 1). All threads.
__device__ __forceinline__ int min_p_keep(const uint64_t* G, int nc, const WeightCtx& wc, bool logits, float T,
                                          float mp) {
  const uint32_t tk = f2key(min_p_threshold(wc, logits, T, mp));
  int c = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = 4 * threadIdx.x + q;
    c += __syncthreads_count(j < nc && static_cast<uint32_t>(G[j] >> 32) >= tk);
  }
  return c < 1 ? 1 : c;
}

// finish_sorted for nc <= 64 candidates, by warp 0 alone (no block barriers):
// same weights, same exact top-p rule (ties kept together), same inverse-CDF draw, same token.
__device__ __forceinline__ void finish_sorted64(const Params& p, const uint64_t* G, int nc, const WeightCtx& wc,
                                                bool use_p, float tp, uint64_t joint_base, bool joint, int row,
                                                const uint64_t* rnd = nullptr) {
  if (threadIdx.x >= 32) return;
  FIB_PROF(28);
  const int l = threadIdx.x;
  const bool va = l < nc, vb = l + 32 < nc;
  const uint64_t wa = va ? weight_of(static_cast<uint32_t>(G[l] >> 32), wc) : 0ull;
  const uint64_t wb = vb ? weight_of(static_cast<uint32_t>(G[l + 32] >> 32), wc) : 0ull;
  const uint64_t ia = warp_incl_scan_u64(wa, l), ib = warp_incl_scan_u64(wb, l);
  const uint64_t tot_a = __shfl_sync(0xffffffffu, ia, 31), tot_b = __shfl_sync(0xffffffffu, ib, 31);
  const uint64_t exa = ia - wa, exb = tot_a + ib - wb;  // exclusive prefixes in token order j
  const uint64_t total_k = tot_a + tot_b;
  FIB_PROF(29);
  int nkeep = nc;
  if (use_p && total_k > 0) {
    const uint64_t base = joint ? joint_base : total_k;
    const double tt = ceil(static_cast<double>(tp) * static_cast<double>(base));
    const uint64_t target = tt < 1.0 ? 1ull : static_cast<uint64_t>(tt);
    int J = __popc(__ballot_sync(0xffffffffu, va && exa < target)) + __popc(__ballot_sync(0xffffffffu, vb && exb < target));
    if (J >= 1 && J < nc) {
      const uint32_t kl = static_cast<uint32_t>(G[J - 1] >> 32);
      J += __popc(__ballot_sync(0xffffffffu, va && l >= J && static_cast<uint32_t>(G[l] >> 32) == kl)) +
           __popc(__ballot_sync(0xffffffffu, vb && l + 32 >= J && static_cast<uint32_t>(G[l + 32] >> 32) == kl));
    }
    nkeep = J < 1 ? 1 : J;
  }
  // the kept total: the inclusive prefix of entry nkeep - 1 (one shuffle, not a warp sum; nkeep 0:
  // lane 31's, 0 as no entry is valid)
  const int lk = (nkeep - 1) & 31;
  const uint64_t pa = __shfl_sync(0xffffffffu, ia, lk), pb = __shfl_sync(0xffffffffu, ib, lk);
  const uint64_t tot = nkeep <= 32 ? pa : tot_a + pb;
  FIB_PROF(30);
  if (tot == 0) {
    if (l == 0) p.out_idx[row] = 0;
    return;
  }
  const uint64_t tgt = rnd ? __umul64hi(*rnd, tot) : row_draw_target(p, row, tot);
  if (l < nkeep && wa > 0 && exa <= tgt && tgt < exa + wa)
    p.out_idx[row] = static_cast<int64_t>(0xffffffffu - static_cast<uint32_t>(G[l]));
  if (l + 32 < nkeep && wb > 0 && exb <= tgt && tgt < exb + wb)
    p.out_idx[row] = static_cast<int64_t>(0xffffffffu - static_cast<uint32_t>(G[l + 32]));
  FIB_PROF(31);
}

// G[0..nc) = candidates (key << 32 | ~index) sorted descending (value desc, index asc), nc <= 2048.
// top-p on the sorted prefix sums (exact, ties kept together), then the inverse-CDF draw.
// base = joint ? full-row weight total : 0 (0: the kept total, i.e. top_k_first).
// rnd: the row's kTagDraw random (row_random64) when the caller computed it early, else nullptr.
__device__ __forceinline__ void finish_sorted(const Params& p, const uint64_t* G, int nc, const WeightCtx& wc,
                                              bool use_p, float tp, uint64_t joint_base, bool joint, int row,
                                              uint64_t* sh_scratch, uint64_t* sh_tot, const uint64_t* rnd = nullptr) {
  if (nc <= 64) {  // (block-uniform) one warp, no block barriers: the same token
    finish_sorted64(p, G, nc, wc, use_p, tp, joint_base, joint, row, rnd);
    return;
  }
  const int tid = threadIdx.x;
  uint64_t w[4], ex[4];
  uint64_t ls = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = 4 * tid + q;
    w[q] = (j < nc) ? weight_of(static_cast<uint32_t>(G[j] >> 32), wc) : 0ull;
    ls += w[q];
  }
  uint64_t total_k;
  uint64_t run = block_excl_scan_u64(ls, sh_scratch, &total_k);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    ex[q] = run;
    run += w[q];
  }
  int nkeep = nc;
  if (use_p && total_k > 0) {
    const uint64_t base = joint ? joint_base : total_k;
    double tt = ceil(static_cast<double>(tp) * static_cast<double>(base));
    const uint64_t target = tt < 1.0 ? 1ull : static_cast<uint64_t>(tt);
    int J = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) J += __syncthreads_count((4 * tid + q) < nc && ex[q] < target);
    if (J >= 1 && J < nc) {
      const uint32_t kl = static_cast<uint32_t>(G[J - 1] >> 32);
      int ext = 0;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int j = 4 * tid + q;
        ext += __syncthreads_count(j >= J && j < nc && static_cast<uint32_t>(G[j] >> 32) == kl);
      }
      J += ext;
    }
    nkeep = J < 1 ? 1 : J;
  }
  if (tid == 0) *sh_tot = total_k;
  __syncthreads();
#pragma unroll
  for (int q = 0; q < 4; ++q)
    if (4 * tid + q == nkeep) *sh_tot = ex[q];
  __syncthreads();
  const uint64_t tot = *sh_tot;
  if (tot == 0) {
    if (tid == 0) p.out_idx[row] = 0;
    return;
  }
  const uint64_t tgt = rnd ? __umul64hi(*rnd, tot) : row_draw_target(p, row, tot);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = 4 * tid + q;
    if (j < nkeep && w[q] > 0 && ex[q] <= tgt && tgt < ex[q] + w[q])
      p.out_idx[row] = static_cast<int64_t>(0xffffffffu - static_cast<uint32_t>(G[j]));
  }
}

}  // namespace sampling
}  // namespace fib
