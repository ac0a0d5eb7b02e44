// fib-runtime sampling: histograms and the radix select summed over the cluster.
// Count and mass histograms of key digits (mass: u64 fixed-point weights in four 12-bit limbs),
// their coarse sums, the logit bins of the cluster kernel's delegate histogram, and
// cluster_select: the bin holding the k-th largest (or the target mass) of histograms summed
// across the cluster's CTAs over DSMEM.
#pragma once
#include "fib/sampling/params.cuh"

#include <type_traits>

namespace fib {
namespace sampling {

constexpr int kHistBufWords = 4 * kBins;           // one histogram buffer: 4 planes of u32
constexpr int kHistBufBytes = kHistBufWords * 4;  // 32 KB (also holds 2048 u64 candidates)
// Mass histogram: a u64 weight (< 2^45) is added as four 12-bit limbs into four u32 planes, so
// every update is a native shared-memory atomic and per-bin sums stay exact (< 2^32 per plane up
// to 2^20 tokens per CTA).
struct Mass {};
__device__ __forceinline__ uint64_t mass_at(const uint32_t* m, int b) {
  return static_cast<uint64_t>(m[b]) + (static_cast<uint64_t>(m[b + kBins]) << 12) +
         (static_cast<uint64_t>(m[b + 2 * kBins]) << 24) + (static_cast<uint64_t>(m[b + 3 * kBins]) << 36);
}
__device__ __forceinline__ void mass_add(uint32_t* m, int b, uint64_t w) {
  const uint32_t l0 = static_cast<uint32_t>(w) & 0xfffu, l1 = static_cast<uint32_t>(w >> 12) & 0xfffu;
  const uint32_t l2 = static_cast<uint32_t>(w >> 24) & 0xfffu, l3 = static_cast<uint32_t>(w >> 36);
  if (l0) atomicAdd(&m[b], l0);
  if (l1) atomicAdd(&m[b + kBins], l1);
  if (l2) atomicAdd(&m[b + 2 * kBins], l2);
  if (l3) atomicAdd(&m[b + 3 * kBins], l3);
}
template <class T>
__device__ __forceinline__ uint64_t hist_at(const T* buf, int b) {
  if constexpr (std::is_same<T, Mass>::value) {
    return mass_at(reinterpret_cast<const uint32_t*>(buf), b);
  } else {
    return static_cast<uint64_t>(buf[b]);
  }
}
constexpr int kGroups = kBins / 32;  // 64 coarse groups of 32 bins
constexpr int kCand = kBins;         // candidate path: at most 2048 kept tokens (fits one hist buffer)

// Logit bins of the cluster kernel's delegate histogram (sampler_kernel<kF32, true>, logits rows).
// The 11-bit key digit keeps 2 mantissa bits: logits of one binade fall in 4 bins (randn * 4 at
// V=32000: the bin of the 50th largest, [8, 10), holds 175-211 tokens, and ranking them cost
// 1.6-2.1 us). These bins keep 6 mantissa bits over |x| in [2^-6, 2^10): 1024 bins per sign,
// monotone in the key (smaller magnitudes share the innermost bin of their sign, larger ones the
// outermost), and every bin starts at a key with 17 low zero bits, so the listing's bound stays
// exact for the 16-bit vector maxima. Rows outside the window stay exact, only with more
// candidates (or the radix path, whose bound is this one rounded down to an 11-bit digit).
constexpr int kLogitF0 = (127 - 6) << 6;  // (exponent << 6 | 6 mantissa bits) of 2^-6
__device__ __forceinline__ int logit_bin(uint32_t key) {
  const uint32_t h = key >> 16;  // sign, exponent, 7 mantissa bits (f2key order)
  if (h >= 0x8000u) return 1024 + min(max(static_cast<int>((h - 0x8000u) >> 1) - kLogitF0, 0), 1023);
  return 1023 - min(max(static_cast<int>((0x7fffu - h) >> 1) - kLogitF0, 0), 1023);
}
// The smallest key whose logit_bin is >= b (0 <= b < 2048).
__device__ __forceinline__ uint32_t logit_bin_floor(int b) {
  if (b >= 1024) {
    const int j = b - 1024;
    return j == 0 ? 0x80000000u : (0x8000u + (static_cast<uint32_t>(kLogitF0 + j) << 1)) << 16;
  }
  if (b == 0) return 0u;
  return (0x7ffeu - 2u * static_cast<uint32_t>(kLogitF0 + 1023 - b)) << 16;
}

// Prob bins: the same for probs rows of that instantiation. The 11-bit key digit keeps 2 mantissa
// bits, so a flat row's bound is coarse (B=64 V=32000 flat from probs was the slowest k=50 point the
// cluster kernel runs: its rows with the most candidates). These keep 6 mantissa bits over
// [2^-31, 2) (32 binades x 64 = 2048 bins; smaller values share bin 0, larger ones bin 2047),
// monotone in the key, each bin starting at a key with 17 low zero bits (probs keys are
// 0x80000000 | the float's bits: key >> 17 is 0x4000 | exponent << 6 | 6 mantissa bits).
constexpr int kProbF0 = (127 - 31) << 6;  // (exponent << 6 | 6 mantissa bits) of 2^-31
__device__ __forceinline__ int prob_bin(uint32_t key) {
  return min(max(static_cast<int>((key >> 17) & 0x3fffu) - kProbF0, 0), 2047);
}
// The smallest key whose prob_bin is >= b (0 <= b < 2048).
__device__ __forceinline__ uint32_t prob_bin_floor(int b) {
  return b == 0 ? 0x80000000u : (0x80000000u | (static_cast<uint32_t>(kProbF0 + b) << 17));
}

// Coarse sums of a local histogram (32 bins per group), written before the cluster barrier so
// that other CTAs read 64 + 32 values per rank instead of 2048.
template <class T>
__device__ __forceinline__ void build_coarse(const T* buf, uint64_t* csum) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  if constexpr (std::is_same<T, uint32_t>::value) {
    // counts (a CTA's keys: < 2^32): one warp reduction instruction per group, all in flight
    uint32_t v[kGroups / kWarps];
#pragma unroll
    for (int q = 0; q < kGroups / kWarps; ++q) v[q] = buf[(wid * (kGroups / kWarps) + q) * 32 + lane];
#pragma unroll
    for (int q = 0; q < kGroups / kWarps; ++q) v[q] = __reduce_add_sync(0xffffffffu, v[q]);
    if (lane == 0)
#pragma unroll
      for (int q = 0; q < kGroups / kWarps; ++q) csum[wid * (kGroups / kWarps) + q] = v[q];
  } else {
#pragma unroll
    for (int q = 0; q < kGroups / kWarps; ++q) {
      const int g = wid * (kGroups / kWarps) + q;
      uint64_t v = hist_at(buf, g * 32 + lane);
      v = warp_sum_u64(v);
      if (lane == 0) csum[g] = v;
    }
  }
}

// The sum over the S ranks of load(r) with all kMaxCluster loads issued before the first add
// (ranks past S load rank 0's value and add 0). A loop `for (r < S) v += load(r)` adds inside a
// branch per rank, which waits out each load before the next is issued: H200, 8 DSMEM loads
// ~1 us in a row (the profile of cluster_select).
template <class L>
__device__ __forceinline__ uint64_t sum_ranks(uint32_t S, L&& load) {
  uint64_t t[kMaxCluster];
#pragma unroll
  for (uint32_t r = 0; r < static_cast<uint32_t>(kMaxCluster); ++r) t[r] = load(r < S ? r : 0u);
  uint64_t v = 0;
#pragma unroll
  for (uint32_t r = 0; r < static_cast<uint32_t>(kMaxCluster); ++r) v += r < S ? t[r] : 0ull;
  return v;
}

__device__ __forceinline__ uint64_t warp_incl_suffix_u64(uint64_t v, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    uint64_t o = __shfl_down_sync(0xffffffffu, v, d);
    if (lane + d < 32) v += o;
  }
  return v;
}

// Cluster-wide bucket selection over the histograms `buf` (+ their coarse sums `csum`) of all S
// CTAs: finds bin b with above(b) < target <= above(b) + v(b), above(b) = sum of bins > b.
// Writes *sh_b (-1 when none), *sh_above, *sh_v; returns the cluster total. Called by all threads.
// csum_all: the S coarse tables already pushed into this CTA (rank-major), read locally.
// LOCAL: buf and csum hold the histogram summed over the cluster already (S unused): local reads only.
template <class T, bool LOCAL = false>
__device__ __forceinline__ uint64_t cluster_select(T* buf, uint64_t* csum, uint32_t S, uint64_t target, int* sh_b,
                                                   uint64_t* sh_above, uint64_t* sh_v, uint64_t* scratch,
                                                   int* sh_grp, uint64_t* sh_gabove,
                                                   const uint64_t* csum_all = nullptr) {
  const int tid = threadIdx.x, lane = tid & 31;
  if (tid == 0) {
    *sh_b = -1;
    *sh_grp = -1;
  }
  uint64_t g = 0, suf = 0;
  if (tid < kGroups) {
    if constexpr (LOCAL) {
      g = csum[tid];
    } else if (csum_all) {  // pushed: local reads
      g = sum_ranks(S, [&](uint32_t r) { return csum_all[r * kGroups + tid]; });
    } else {
      g = sum_ranks(S, [&](uint32_t r) { return cl_remote(csum, r)[tid]; });
    }
    suf = warp_incl_suffix_u64(g, lane);
    if (lane == 0) scratch[tid >> 5] = suf;
  }
  __syncthreads();
  const uint64_t total = scratch[0] + scratch[1];
  if (tid < kGroups) {
    const uint64_t above = suf - g + (tid < 32 ? scratch[1] : 0ull);
    if (g > 0 && above < target && target <= above + g) {
      *sh_grp = tid;
      *sh_gabove = above;
    }
  }
  __syncthreads();
  const int grp = *sh_grp;
  if (grp >= 0 && tid < 32) {
    const int bin = grp * 32 + lane;
    uint64_t v;
    if constexpr (LOCAL) v = hist_at(buf, bin);
    else v = sum_ranks(S, [&](uint32_t r) { return hist_at(cl_remote(buf, r), bin); });
    const uint64_t sx = warp_incl_suffix_u64(v, lane);
    const uint64_t above = *sh_gabove + sx - v;
    if (v > 0 && above < target && target <= above + v) {
      *sh_b = bin;
      *sh_above = above;
      *sh_v = v;
    }
  }
  __syncthreads();
  return total;
}

}  // namespace sampling
}  // namespace fib
