// fib-runtime sampling: the cluster kernel's gathered tail for large k (top_k_first, by rejection).
//
// Top_k_first rows with k > p.rej_min_k sample top-p by rejection on the exact top-k set (sampler.cuh,
// 4r.). Through the resident keys of S CTAs that costs the rest of the cluster radix select (an
// 11-bit digit pass and a cluster barrier each) and, per rejection round, cluster barriers around
// the candidates' draws and checks. Once a radix pass has narrowed the row to at most
// p.local_cap tokens at or above a digit boundary (the k-th largest key's bucket and everything
// above it: typically k plus a few hundred), every rank lists its tokens at or above that bound in
// token order, rank 0 gathers the lists (in rank order: token order), finishes the select in its
// own shared memory (the remaining digits, then ties by token index) and runs reject_tail on the
// exact top-k set (reject_tail.cuh: the cluster kernel's rounds, the same fixed-point weights, the
// same Philox draws and checks, and its fallback), with no cluster barrier after the gather. The
// token is the one the cluster-wide rounds return for the same inputs, seed and offset
// (tests/gpu/test_sampling_kernels_gpu.py compares the two with knob 7000 + S).
#pragma once
#include "fib/sampling/reject_tail.cuh"
#include "fib/sampling/spans.cuh"

namespace fib {
namespace sampling {

// The most tokens the gathered tail takes: a histogram buffer of u64 composites (32 KB) less its
// last 64 entries, which hold the counts pushed into rank 0 and the block scratch (kGatherCap on).
constexpr int kGatherCap = kHistBufBytes / 8 - 64;
static_assert(kGatherCap <= 8 * kThreads, "at most 8 gathered entries per thread");
static_assert(kRejTailScratch <= kGatherCap, "reject_tail's scratch fits a histogram buffer below the counts");
static_assert(kCand <= kRejTailMaxK, "the gathered tail's top-k sets fit reject_tail");

// Where gathered entry g sits in rank 0's X: entry 8t + j is read by thread t (gathered_select), so
// in plain order each of its eight u64 loads would hit one bank pair in 16 lanes of the warp (16
// shared-memory wavefronts a load instead of 2; Nsight Compute: 23K excess wavefronts per B=16
// launch, ~1460 per rank 0, ~0.75 us). Swizzled: within its row of 8, entry g moves by (g >> 4) & 7, so
// 16 consecutive threads' j-th entries lie in 16 distinct bank pairs. A permutation of each row of 8.
__device__ __forceinline__ int gather_pos(int g) { return g ^ ((g >> 4) & 7); }

#if FIB_HAS_CLUSTER
// Rank 0's mbarrier for the gathered lists: the other ranks' st.async complete their bytes on it
// (gathered_finish). Initialised at the kernel's entry by rank 0 of the gathered-tail instantiation
// (sampler.cuh), before the entry's cluster arrive, so every push finds it ready.
__shared__ __align__(8) uint64_t g_gather_bar;
#endif

// Rank 0, all threads: the exact top-k (value desc, lower token index first on ties) of the N
// gathered composites X[0..N) (key << 32 | ~index, ascending token index; entry g at gather_pos(g)), given the radix state
// so far: every key's bits above `top` are chosen (prefix: those bits; rem of the v tokens whose
// key matches them still to take; the other keys are above them and kept). The remaining bits go
// in digits of at most 11 bits from the top (at most 3 passes, block-local histograms; the bins of
// two passes alternate between two halves of Y, so a pass zeroes the next one's without a barrier
// of its own). The exact top k, in token order, go to X[0..k) (zero-padded to a power of two) and
// to T[0..k) (reject_tail's token-order copy). Y: 2 x kBins u32 (bins), T may alias it (written
// after the last bin is read). sh_b / sh_above / sh_v: 3 slots each (one per pass). Returns k.
__device__ __forceinline__ int gathered_select(uint64_t* X, int N, uint64_t* Y, uint64_t* T, uint32_t prefix, int top,
                                               uint64_t rem, uint64_t v, uint64_t* scratch, int* sh_b,
                                               uint64_t* sh_above, uint64_t* sh_v) {
  const int tid = threadIdx.x;
  uint64_t e[8];
  uint32_t key[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int pos = 8 * tid + j;
    e[j] = pos < N ? X[gather_pos(pos)] : 0ull;
    key[j] = static_cast<uint32_t>(e[j] >> 32);
  }
  bool all_kept = v == rem;  // the whole chosen bucket is kept: every key >= prefix
  uint32_t* const cnt0 = reinterpret_cast<uint32_t*>(Y);
  for (int b = tid; b < kBins; b += kThreads) cnt0[b] = 0u;
  if (tid < 3) sh_b[tid] = -1;
  __syncthreads();
  for (int q = 0; top > 0 && !all_kept; ++q) {  // (top <= 32: at most 3 passes)
    uint32_t* const cnt = cnt0 + (q & 1) * kBins;
    const int shift = top > 11 ? top - 11 : 0;
    const uint32_t dmask = (1u << (top - shift)) - 1u;
    const uint32_t mask = top >= 32 ? 0u : ~((1u << top) - 1u);
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (8 * tid + j < N && (key[j] & mask) == prefix) atomicAdd(&cnt[(key[j] >> shift) & dmask], 1u);
    uint32_t* const nxt = cnt0 + ((q + 1) & 1) * kBins;  // (the previous pass's bins: read before its scan's barriers)
    for (int b = tid; b < kBins; b += kThreads) nxt[b] = 0u;
    __syncthreads();
    // thread t owns bins 2047 - 4t .. 2044 - 4t (descending): its exclusive scan is the count above
    const uint4 b4 = *reinterpret_cast<const uint4*>(cnt + kBins - 4 - 4 * tid);  // (one 16-byte load)
    const uint32_t c4[4] = {b4.w, b4.z, b4.y, b4.x};
    uint64_t s = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) s += c4[j];
    uint64_t tot;
    uint64_t above = block_excl_scan_u64(s, scratch, &tot);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (c4[j] > 0 && above < rem && rem <= above + c4[j]) {
        sh_b[q] = kBins - 1 - 4 * tid - j;
        sh_above[q] = above;
        sh_v[q] = c4[j];
      }
      above += c4[j];
    }
    __syncthreads();
    const int b = sh_b[q];
    if (b < 0) {  // (cannot happen: rem <= the keys matching the prefix) keep the bucket whole
      all_kept = true;
      break;
    }
    rem -= sh_above[q];
    v = sh_v[q];
    prefix |= static_cast<uint32_t>(b) << shift;
    top = shift;
    all_kept = v == rem;
    FIB_PROF(4 + q);  // (profile builds: the digit passes on rank 0)
  }
  // kept: key > lo, or key == lo and among the first rem such keys in token order (all of them
  // when the bucket is kept whole: key >= lo)
  const uint32_t lo = prefix;
  bool kept[8];
  uint64_t kc = 0;
  if (all_kept) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      kept[j] = 8 * tid + j < N && key[j] >= lo;
      kc += kept[j] ? 1u : 0u;
    }
  } else {
    uint64_t tc = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) tc += (8 * tid + j < N && key[j] == lo) ? 1u : 0u;
    uint64_t tt;
    uint64_t before = block_excl_scan_u64(tc, scratch, &tt);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const bool valid = 8 * tid + j < N;
      const bool tie = valid && key[j] == lo;
      kept[j] = valid && (key[j] > lo || (tie && before < rem));
      before += tie ? 1u : 0u;
      kc += kept[j] ? 1u : 0u;
    }
  }
  uint64_t K;
  uint64_t pos = block_excl_scan_u64(kc, scratch, &K);  // (its barriers: every X entry and bin is read)
#pragma unroll
  for (int j = 0; j < 8; ++j)
    if (kept[j]) {
      X[pos] = e[j];
      T[pos] = e[j];
      ++pos;
    }
  int P = 32;
  while (P < static_cast<int>(K)) P <<= 1;
  for (int j = static_cast<int>(K) + tid; j < P; j += kThreads) X[j] = 0ull;
  __syncthreads();
  return static_cast<int>(K);
}

// Every rank, all threads: lists the slice's resident keys >= bound (thread spans, token order) as
// composites into Yb (at most kGatherCap; the count may exceed it, the entries past it are dropped)
// and pushes its count into pcnt[rank] of every rank (Yb + kGatherCap of each CTA). scratch: the
// block scan's kWarps u64. The count pass notes which of the span's 16-byte vectors hold such a key
// (a bit each: a resident span has at most 21 of them), so the list pass reads only those (~1 per
// thread at k = 2048) instead of the whole span again. Inline: the direct path calls it from
// sample_row with the row's state live (a call there made every later path spill around it).
__device__ __forceinline__ void gather_list(const uint32_t* skeys, int n, int64_t start, uint32_t bound, uint64_t* Yb,
                                            uint64_t* pcnt, uint64_t* scratch, uint32_t rank, uint32_t S) {
  const Span sp = thread_span(n);
  auto key_at = [&](int i) -> uint32_t { return skeys[i]; };
  uint32_t c = 0, hit = 0;  // hit: bit v = vector v of the span (keys sp.a + 4v ..) holds a key >= bound
  const bool masked = sp.b - sp.a <= 4 * 32;
  for_span4(skeys, true, key_at, sp, [&](const uint32_t (&kq)[4], int j, int cnt) {
    uint32_t h = 0;
#pragma unroll
    for (int t = 0; t < 4; ++t) h += (t < cnt && kq[t] >= bound) ? 1u : 0u;
    c += h;
    hit |= (h != 0u ? 1u : 0u) << (((j - sp.a) >> 2) & 31);
  });
  // (spans of more than 32 vectors, which resident slices never have, read every vector again below)
  uint64_t tot;
  uint64_t pos = block_excl_scan_u64(c, scratch, &tot);
  auto put = [&](const uint32_t (&kq)[4], int j, int cnt) {
#pragma unroll
    for (int t = 0; t < 4; ++t)
      if (t < cnt && kq[t] >= bound) {
        if (pos < static_cast<uint64_t>(kGatherCap))
          Yb[pos] = (static_cast<uint64_t>(kq[t]) << 32) | (0xffffffffu - static_cast<uint32_t>(start + j + t));
        ++pos;
      }
  };
  if (c > 0 && pos < static_cast<uint64_t>(kGatherCap)) {
    if (masked) {
      for (uint32_t m = hit; m != 0u; m &= m - 1u) {
        const int j = sp.a + 4 * (__ffs(m) - 1);
        const int cnt = min(4, sp.b - j);
        if (cnt == 4) {
          const uint4 q = *reinterpret_cast<const uint4*>(skeys + j);
          const uint32_t k[4] = {q.x, q.y, q.z, q.w};
          put(k, j, 4);
        } else {
          const uint32_t k[4] = {skeys[j], cnt > 1 ? skeys[j + 1] : 0u, cnt > 2 ? skeys[j + 2] : 0u, 0u};
          put(k, j, cnt);
        }
      }
    } else {
      for_span4(skeys, true, key_at, sp, put);
    }
  }
  if (threadIdx.x < S) *cl_remote(&pcnt[rank], threadIdx.x) = tot;
}

// Every rank, all threads, after gather_list on every rank and a cluster barrier, with at most
// kGatherCap tokens listed in all: the lists land in rank 0's X in rank order (token order: the
// other ranks push theirs with st.async, rank 0 copies its own and waits on g_gather_bar), rank 0
// lets the other CTAs go, finishes the select (gathered_select: prefix / top / rem / v as there;
// v == 0: every gathered token matches the prefix, v = N) and draws (reject_tail); the token goes
// to *out. X: the histogram buffer no rank reads any more (the last select's), Yb: the other one
// (the lists; its last 64 entries the counts, the block scratch and the select's scalars). Not
// inlined; called where the row ends, so nothing of the caller lives across it.
static __device__ __noinline__ void gathered_finish(int64_t* out, int row, int V, uint64_t seed, uint64_t offs,
                                                    uint64_t* X, uint64_t* Yb, uint32_t prefix, int top,
                                                    uint64_t rem, uint64_t v, WeightCtx wc, uint32_t kmin, float tp) {
  const uint32_t rank = cl_rank(), S = cl_size();
  uint64_t* const pcnt = Yb + kGatherCap;
  uint64_t* const scratch = pcnt + kMaxCluster;
  int* const sh_b = reinterpret_cast<int*>(scratch + kWarps);
  uint64_t* const sh_above = scratch + kWarps + 2;
  uint64_t* const sh_v = scratch + kWarps + 5;
  static_assert(kMaxCluster + kWarps + 8 <= 64, "the gathered tail's scalars fit");
  static_assert(2 * kBins * 4 <= kGatherCap * 8 && kRejTailMaxK * 8 <= kGatherCap * 8, "the bins and T fit Yb");
  if (rank == 0) {
    int off[kMaxCluster + 1];
    list_offsets(pcnt, S, off);
    const int N = min(off[kMaxCluster], kGatherCap);
#if FIB_HAS_CLUSTER
    // the other ranks push their lists into X at their offsets (st.async, completing on
    // g_gather_bar) while rank 0 copies its own: one-way stores in place of rank 0's DSMEM loads
    if (threadIdx.x == 0) mbar_expect_tx(&g_gather_bar, static_cast<uint32_t>(N - off[1]) * 8u);
    for (int i = threadIdx.x; i < off[1]; i += kThreads) X[gather_pos(i)] = Yb[i];
    mbar_wait<true>(&g_gather_bar, 0u);
#else
    for (int g = threadIdx.x; g < N; g += kThreads) X[gather_pos(g)] = list_entry(Yb, off, g);
#endif
    __syncthreads();  // (every list is in X: Yb is free for the bins)
    cl_arrive_relaxed();  // (rank 0 has its entries: the other CTAs may exit)
    FIB_PROF(21);
    // (Yb: the bins, then reject_tail's scratch, whose first kRejTailMaxK entries, T, get the set)
    const int K = gathered_select(X, N, Yb, Yb, prefix, top, rem, v == 0 ? static_cast<uint64_t>(N) : v, scratch, sh_b,
                                  sh_above, sh_v);
    FIB_PROF(22);
    reject_tail(out, row, V, seed, offs, X, K, wc, kmin, tp, Yb, scratch, 2);
    FIB_PROF(9);
  } else {
#if FIB_HAS_CLUSTER
    uint64_t a = 0;  // (this rank's offset: the counts of the ranks before it)
    for (uint32_t q = 0; q < rank; ++q) a += pcnt[q];
    const int c = static_cast<int>(pcnt[rank]);
    const uint32_t dst = cl_addr(X, 0u), bar = cl_addr(&g_gather_bar, 0u);
    for (int i = threadIdx.x; i < c; i += kThreads)
      st_async_u64(dst + 8u * static_cast<uint32_t>(gather_pos(static_cast<int>(a) + i)), Yb[i], bar);
#endif
    cl_arrive_relaxed();  // (rank 0 arrives once every pushed entry has landed: no rank exits before)
  }
  cl_wait();
}

// All ranks of the cluster (every thread), after a top-k radix pass left at most kGatherCap tokens
// at or above `prefix` (the digits chosen so far: every bit at or above `top`, the pass's shift; the
// row's N = (k - rem) + v): the gathered tail (see the top of this file). Each rank lists its keys >= prefix,
// then after one cluster barrier gathered_finish. dsm: the two histogram buffers (X = buffer xbuf,
// the one the last pass's select read, free after the barrier; Yb the other one, free since that
// pass's barrier), then the resident keys (slices of chunk tokens). Not inlined, and its state
// derived here from few arguments: inside sample_row's radix loop it made the cluster kernel spill
// on every path (ptxas: 0 -> 136 bytes of stack; a call with 25 arguments: 24-40). The direct path
// (sample_row, after the delegate select) runs gather_list, the barrier and gathered_finish itself.
static __device__ __noinline__ void gathered_tail(int64_t* out, int row, int V, int chunk, uint64_t seed, uint64_t offs,
                                                  unsigned char* dsm, int xbuf, uint32_t prefix, int top,
                                                  uint64_t rem, uint64_t v, WeightCtx wc, uint32_t kmin, float tp) {
  const uint32_t rank = cl_rank(), S = cl_size();
  const int64_t start = static_cast<int64_t>(rank) * chunk;
  const int n = static_cast<int>(max(static_cast<int64_t>(0), min(static_cast<int64_t>(chunk), V - start)));
  uint64_t* const X = reinterpret_cast<uint64_t*>(dsm + xbuf * kHistBufBytes);
  uint64_t* const Yb = reinterpret_cast<uint64_t*>(dsm + (xbuf ^ 1) * kHistBufBytes);
  const uint32_t* const skeys = reinterpret_cast<const uint32_t*>(dsm + 2 * kHistBufBytes);
  gather_list(skeys, n, start, prefix, Yb, Yb + kGatherCap, Yb + kGatherCap + kMaxCluster, rank, S);
  cl_sync();  // (every rank's list and count written; every remote read of X done)
  FIB_PROF(23);
  gathered_finish(out, row, V, seed, offs, X, Yb, prefix, top, rem, v, wc, kmin, tp);
}

}  // namespace sampling
}  // namespace fib
