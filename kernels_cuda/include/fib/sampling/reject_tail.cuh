// fib-runtime sampling: the rejection tail for large k on an exact top-k set (sm_90 two-pass kernel).
//
// The cluster kernel samples top_k_first rows with k > p.rej_min_k by rejection (sampler.cuh, 4r.:
// reject_rounds over its resident keys): candidates drawn from the kept top-k by the inverse CDF in
// token order, accepted when the tokens of a strictly larger key hold less than the nucleus target,
// four per round, kRejRounds rounds, then (all outside) the exact nucleus and a fresh draw (tag
// kTagRetry) in token order. The filter and two-pass kernels hold the same top-k as a set of
// composites G (key << 32 | ~index, any order) and sorted it (2048 entries at k = 2048: 11.6 us of a
// B=512 V=128256 row, two CTAs per SM) for the prefix sums of the sorted tail (finish_sorted).
// reject_tail runs the cluster kernel's rounds on G instead: the same fixed-point weights, the same
// Philox draws and the same token order (a counting sort of G by index: 2048 buckets of idx >> sh,
// ranks within a bucket by counting), hence the same token as the cluster kernel for the same
// inputs, seed and offset. Only the fallback sorts G by value (for the nucleus boundary).
#pragma once
#include "fib/sampling/sort.cuh"

namespace fib {
namespace sampling {

// The largest top-k set reject_tail takes (4 entries per thread; the filter and two-pass kernels'
// kFilterMaxK, the cluster kernel's gathered tail)
constexpr int kRejTailMaxK = 4 * kThreads;
// u64 entries of the shared scratch reject_tail needs (T: kRejTailMaxK, the bucket offsets: kBins
// u32, the candidates and the per-warp sums)
constexpr int kRejTailScratch = kRejTailMaxK + kBins / 2 + 4 + 4 * kWarps;

// 1: the loop that ranks an entry within its bucket (1-2 entries on average) is not unrolled: unrolled
// it took ~790 SASS instructions of the two-pass kernel's tail, run once per row and fetched cold
// (its warps stalled on instruction fetch; Nsight Compute, H100, B=64 V=128256 k=2048); rolled, the
// large-k rows of that kernel took ~0.8% less time (docs/sampling-journal.md, "The estimate's wait")
#ifndef FIB_REJ_RANK_ROLLED
#define FIB_REJ_RANK_ROLLED 1
#endif

__device__ __forceinline__ uint32_t comp_index(uint64_t v) { return 0xffffffffu - static_cast<uint32_t>(v); }

// T[0..nc) = G[0..nc) in ascending token index (nc <= kRejTailMaxK = 4 per thread, unique indices
// below V). off: kBins u32. Counting sort by bucket idx >> sh (at most kBins buckets), then each
// entry's place in its bucket is the number of the bucket's entries with a lower index. All
// threads; block barriers.
__device__ __forceinline__ void sort_by_index(const uint64_t* G, int nc, int V, uint64_t* T, uint32_t* off,
                                              uint64_t* s_scratch) {
  const int tid = threadIdx.x;
  int sh = 0;
  while ((static_cast<uint32_t>(V - 1) >> (sh + 11)) != 0u) ++sh;
#pragma unroll
  for (int j = 0; j < kBins / kThreads; ++j) off[j * kThreads + tid] = 0u;
  __syncthreads();
  uint64_t v[4];
  uint32_t slot[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = 4 * tid + q;
    v[q] = j < nc ? G[j] : 0ull;
    slot[q] = j < nc ? atomicAdd(&off[comp_index(v[q]) >> sh], 1u) : 0u;
  }
  __syncthreads();
  // bucket counts -> exclusive offsets (thread tid: buckets 4 tid .. 4 tid + 3)
  uint32_t c[4];
  uint32_t ls = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    c[q] = off[4 * tid + q];
    ls += c[q];
  }
  uint64_t tot = 0;
  uint32_t run = static_cast<uint32_t>(block_excl_scan_u64(ls, s_scratch, &tot));
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    off[4 * tid + q] = run;
    run += c[q];
  }
  __syncthreads();
  // provisional places (the order within a bucket is the atomics'), then the ranks by index
  uint32_t b0[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = 4 * tid + q;
    b0[q] = j < nc ? off[comp_index(v[q]) >> sh] : 0u;
    if (j < nc) T[b0[q] + slot[q]] = v[q];
  }
  __syncthreads();
  uint32_t at[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = 4 * tid + q;
    at[q] = b0[q];
    if (j < nc) {
      const uint32_t b = comp_index(v[q]) >> sh, me = comp_index(v[q]);
      const uint32_t end = (b + 1 < static_cast<uint32_t>(kBins)) ? off[b + 1] : static_cast<uint32_t>(nc);
#if FIB_REJ_RANK_ROLLED
#pragma unroll 1
#endif
      for (uint32_t i = b0[q]; i < end; ++i) at[q] += comp_index(T[i]) < me ? 1u : 0u;
    }
  }
  __syncthreads();  // (every provisional entry read)
#pragma unroll
  for (int q = 0; q < 4; ++q)
    if (4 * tid + q < nc) T[at[q]] = v[q];
  __syncthreads();
}

#if FIB_TWOPASS_FUSED_TAIL
// sort_by_index with the merge's append fused in: T = scr[0..nc) = the entries >= t of the set s
// (the segments of the two-pass kernel's merge, any order; at most kRejTailMaxK of them, t exact)
// in ascending token index, read straight from the segments: one pass counts the buckets, one
// places each entry at its bucket's cursor, then the ranks by index within the buckets as in
// sort_by_index (the same T, so the same token). The off table sits where reject_tail keeps it
// (scr + kRejTailMaxK), T past no segment of s. Returns nc (every thread). All threads; barriers.
// Its scan and ranking repeat sort_by_index's on purpose while the switch is off (the shipped
// source stays as it ran); once kept, sort_by_index becomes this over G as one segment, t = 0.
#ifndef FIB_SORT_MEMBERS_NOINLINE
#define FIB_SORT_MEMBERS_NOINLINE 0
#endif
template <class Set>
#if FIB_SORT_MEMBERS_NOINLINE
__device__ __noinline__
#else
__device__
#endif
int sort_members_by_index(const Set& s, uint64_t t, int V, uint64_t* scr, uint64_t* s_scratch) {
  const int tid = threadIdx.x;
  uint64_t* const T = scr;
  uint32_t* const off = reinterpret_cast<uint32_t*>(scr + kRejTailMaxK);
  int sh = 0;
  while ((static_cast<uint32_t>(V - 1) >> (sh + 11)) != 0u) ++sh;
#pragma unroll
  for (int j = 0; j < kBins / kThreads; ++j) off[j * kThreads + tid] = 0u;
  __syncthreads();
  s.each([&](uint64_t v, bool valid) {
    if (valid && v >= t) atomicAdd(&off[comp_index(v) >> sh], 1u);
  });
  __syncthreads();
  uint32_t c[4];
  uint32_t ls = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    c[q] = off[4 * tid + q];
    ls += c[q];
  }
  uint64_t tot = 0;
  uint32_t run = static_cast<uint32_t>(block_excl_scan_u64(ls, s_scratch, &tot));
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    off[4 * tid + q] = run;
    run += c[q];
  }
  __syncthreads();
  // provisional places at the buckets' cursors; afterwards off[b] is bucket b's end
  s.each([&](uint64_t v, bool valid) {
    if (valid && v >= t) T[atomicAdd(&off[comp_index(v) >> sh], 1u)] = v;
  });
  __syncthreads();
  const int nc = static_cast<int>(tot);
  uint64_t v[4];
  uint32_t at[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = 4 * tid + q;
    v[q] = j < nc ? T[j] : 0ull;
    at[q] = 0u;
    if (j < nc) {
      const uint32_t me = comp_index(v[q]), b = me >> sh;
      const uint32_t beg = b > 0u ? off[b - 1] : 0u, end = off[b];
      at[q] = beg;
#if FIB_REJ_RANK_ROLLED
#pragma unroll 1
#endif
      for (uint32_t i = beg; i < end; ++i) at[q] += comp_index(T[i]) < me ? 1u : 0u;
    }
  }
  __syncthreads();  // (every provisional entry read)
#pragma unroll
  for (int q = 0; q < 4; ++q)
    if (4 * tid + q < nc) T[at[q]] = v[q];
  __syncthreads();
  return nc;
}
#endif

// The cluster kernel's rejection rounds on the exact top-k set G[0..nc) of a row of V tokens (any
// order, or ascending token index where in_order: the cluster kernel's gathered tail, whose set is
// copied instead of sorted; in_order 2: already copied to scr's first nc entries, T; in_order 3: T
// as in 2 (sort_members_by_index) and G only room for the fallback, which copies T there; top_k_first,
// tp >= 0.25, wc.kind 0 or 1; kmin: the min-p key, 0 without min-p), and its fallback; seed /
// offs: the row's Philox seed and offset. Writes the token to *out. G is sorted by value in place
// on the fallback only (G zero-padded to the power of two above nc, as sort_desc_top needs). scr:
// kRejTailScratch u64. All threads. Not inlined: it runs once per row, and inlined into the
// two-pass kernel for two CTAs per SM (64 registers) it made the first pass's loops spill.
static __device__ __noinline__ void reject_tail(int64_t* out, int row, int V, uint64_t seed, uint64_t offs, uint64_t* G,
                                         int nc, WeightCtx wc, uint32_t kmin, float tp, uint64_t* scr,
                                         uint64_t* s_scratch, int in_order = 0) {
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  uint64_t* const T = scr;
  uint32_t* const off = reinterpret_cast<uint32_t*>(scr + kRejTailMaxK);
  uint64_t* const cand = scr + kRejTailMaxK + kBins / 2;                                             // [4]
  uint64_t(*const ws)[kWarps] = reinterpret_cast<uint64_t(*)[kWarps]>(scr + kRejTailMaxK + kBins / 2 + 4);  // [4]
#if FIB_TWOPASS_FUSED_TAIL
  if (in_order >= 2) {
    // (T = scr holds the set already, in token order: the gathered tail's select wrote both, or
    // sort_members_by_index wrote T from the merge's segments)
#else
  if (in_order == 2) {
    // (T = scr holds G already, in token order: the gathered tail's select wrote both)
#endif
  } else if (in_order) {
#pragma unroll
    for (int q = 0; q < 4; ++q)
      if (4 * tid + q < nc) T[4 * tid + q] = G[4 * tid + q];
    __syncthreads();
  } else {
    sort_by_index(G, nc, V, T, off, s_scratch);
  }
  // the kept weights in token order (thread tid: T[4 tid .. 4 tid + 3]) and their prefix sums
  uint64_t w[4], ex[4];
  uint32_t key[4];
  uint64_t ls = 0;
  {
    // (two 16-byte loads: four u64 loads at a 32-byte stride hit 8 wavefronts each; T's entries
    // past nc, up to kRejTailMaxK, are read but not used)
    const ulonglong2* const t2 = reinterpret_cast<const ulonglong2*>(T + 4 * tid);
    const ulonglong2 a = 4 * tid < nc ? t2[0] : make_ulonglong2(0ull, 0ull);
    const ulonglong2 b = 4 * tid + 2 < nc ? t2[1] : make_ulonglong2(0ull, 0ull);
    key[0] = static_cast<uint32_t>(a.x >> 32);
    key[1] = static_cast<uint32_t>(a.y >> 32);
    key[2] = static_cast<uint32_t>(b.x >> 32);
    key[3] = static_cast<uint32_t>(b.y >> 32);
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = 4 * tid + q;
    key[q] = j < nc ? key[q] : 0u;
    w[q] = (j < nc && key[q] >= kmin) ? weight_of(key[q], wc) : 0ull;
    ls += w[q];
  }
  uint64_t total = 0;
  uint64_t run = block_excl_scan_u64(ls, s_scratch, &total);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    ex[q] = run;
    run += w[q];
  }
  if (total == 0) {  // (block-uniform; not for kinds 0 / 1, whose maximum weighs 2^44)
    if (tid == 0) *out = 0;
    return;
  }
  const double tt = ceil(static_cast<double>(tp) * static_cast<double>(total));
  const uint64_t target = tt < 1.0 ? 1ull : static_cast<uint64_t>(tt);
  FIB_PROF(12);  // (profile builds: the weights and their scan; 13 the first round's candidates, 14 its check)
  for (int round = 0; round < kRejRounds; ++round) {
    uint64_t r[4];
    round_randoms(seed, offs, static_cast<uint32_t>(row), round, r);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint64_t tgt = __umul64hi(r[c], total);
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (w[q] > 0 && ex[q] <= tgt && tgt < ex[q] + w[q]) cand[c] = T[4 * tid + q];  // (one owner)
    }
    __syncthreads();  // (also: every thread has read the previous round's sums)
    if (round == 0) FIB_PROF(13);
    // candidates 0-1, then 2-3 only when both fall outside (reject_rounds' order: the same token)
#pragma unroll 1
    for (int h = 0; h < 4; h += 2) {
      const uint64_t va = cand[h], vb = cand[h + 1];
      const uint32_t ka = static_cast<uint32_t>(va >> 32), kb = static_cast<uint32_t>(vb >> 32);
      uint64_t A0 = 0ull, A1 = 0ull;  // (a key above a kept one is kept: the top-k and min-p sets are upper sets)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        A0 += key[q] > ka ? w[q] : 0ull;
        A1 += key[q] > kb ? w[q] : 0ull;
      }
      A0 = warp_sum_u64(A0);
      A1 = warp_sum_u64(A1);
      if (lane == 0) {
        ws[h][wid] = A0;
        ws[h + 1][wid] = A1;
      }
      __syncthreads();
      // (lane i adds warp i's sums: the same integers as every thread summing all kWarps)
      const uint64_t a0 = warp_sum_u64(lane < kWarps ? ws[h][lane] : 0ull);
      const uint64_t a1 = warp_sum_u64(lane < kWarps ? ws[h + 1][lane] : 0ull);
      // (block-uniform; the next round writes cand only after this round's last barrier, and
      // ws[h] only after its candidate barrier)
      const uint64_t acc = a0 < target ? va : (a1 < target ? vb : 0ull);
      if (acc != 0ull) {
        if (tid == 0) *out = static_cast<int64_t>(comp_index(acc));
        FIB_PROF(14);
        return;
      }
    }
  }
  // ---- every candidate fell outside: the exact nucleus (the sorted tail's rule: tokens whose
  // strictly larger keys hold less than the target, ties kept together) and a fresh draw (tag
  // kTagRetry) in token order over it, as the cluster kernel's radix top-p and 5b.
  __syncthreads();
#if FIB_TWOPASS_FUSED_TAIL
  if (in_order == 3) {  // (G: room only; the set, zero-padded to the power of two above nc)
    int P = 32;
    while (P < nc) P <<= 1;
    for (int j = tid; j < P; j += kThreads) G[j] = j < nc ? T[j] : 0ull;
    __syncthreads();
  }
#endif
  sort_desc_top(G, nc, nc, G + kRankSortMax);
  uint64_t sw[4], sex[4];
  uint64_t sl = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = 4 * tid + q;
    const uint32_t kj = j < nc ? static_cast<uint32_t>(G[j] >> 32) : 0u;
    sw[q] = (j < nc && kj >= kmin) ? weight_of(kj, wc) : 0ull;
    sl += sw[q];
  }
  uint64_t stot = 0;
  uint64_t srun = block_excl_scan_u64(sl, s_scratch, &stot);
  int J = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    sex[q] = srun;
    srun += sw[q];
    const int j = 4 * tid + q;
    J += __syncthreads_count(j < nc && sex[q] < target);  // (finish_sorted's count: outside min-p, sex = stot)
  }
  // (the kept entries are a prefix of the sorted set: min-p is a key threshold; J >= 1)
  const uint32_t kl = static_cast<uint32_t>(G[J < 1 ? 0 : J - 1] >> 32);
  uint64_t nl = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if (key[q] < kl) w[q] = 0ull;  // (T's entries, token order: the nucleus keys >= kl)
    nl += w[q];
  }
  uint64_t ntot = 0;
  uint64_t nrun = block_excl_scan_u64(nl, s_scratch, &ntot);
  const uint64_t tgt = __umul64hi(row_random64(seed, offs, static_cast<uint32_t>(row), kTagRetry), ntot);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if (w[q] > 0 && nrun <= tgt && tgt < nrun + w[q]) *out = static_cast<int64_t>(comp_index(T[4 * tid + q]));
    nrun += w[q];
  }
}

}  // namespace sampling
}  // namespace fib
