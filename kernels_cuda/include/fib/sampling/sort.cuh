// fib-runtime sampling: candidate sets: the cluster gather and the sorts.
// gather_lists (rank 0 reads the S CTAs' candidate lists), the one-warp sort of <= 64 entries,
// the bitonic sort of up to 2048 (strides below 128 in warp registers) and sort_desc_top (sets
// of 65-256 ranked by counting).
#pragma once
#include "fib/sampling/cluster_select.cuh"

namespace fib {
namespace sampling {

// The S CTAs' candidate lists back to back in rank order: off[r] = where rank r's cnt[r] entries
// start (off[kMaxCluster]: the total; ranks >= S hold none).
__device__ __forceinline__ void list_offsets(const uint64_t* cnt, uint32_t S, int (&off)[kMaxCluster + 1]) {
  off[0] = 0;
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) off[r + 1] = off[r] + (r < static_cast<int>(S) ? static_cast<int>(cnt[r]) : 0);
}
// Entry g of those lists, read from its rank's `list` over DSMEM: the last rank starting at or below
// g holds it (empty ranks start where the next does).
__device__ __forceinline__ uint64_t list_entry(const uint64_t* list, const int (&off)[kMaxCluster + 1], int g) {
  uint32_t r = 0;
  int base = 0;
#pragma unroll
  for (int q = 1; q < kMaxCluster; ++q) {
    if (g >= off[q]) {
      r = static_cast<uint32_t>(q);
      base = off[q];
    }
  }
  return cl_remote(const_cast<uint64_t*>(list), r)[g - base];
}

// Rank 0: copies the S CTAs' candidate lists (`list` in every CTA, cnt[r] entries) into G in rank
// order, at most cap entries in all; returns that count. Every thread copies entries of any rank,
// so the remote loads of all ranks are in flight together. All threads; no barrier.
__device__ __forceinline__ int gather_lists(uint64_t* G, uint64_t* list, const uint64_t* cnt, uint32_t S, int cap) {
  int off[kMaxCluster + 1];
  list_offsets(cnt, S, off);
  const int tot = off[kMaxCluster] < cap ? off[kMaxCluster] : cap;
  for (int g = threadIdx.x; g < tot; g += kThreads) G[g] = list_entry(list, off, g);
  return tot;
}

// Sorts G[0..P) descending (P <= 64; entries past P count as 0 and are not written) with warp
// 0's shuffles (no block barrier in the network); ends with a block barrier.
__device__ __forceinline__ void warp_sort64_desc(uint64_t* G, int P) {
  if (threadIdx.x < 32) {
    const int l = threadIdx.x;
    uint64_t a = l < P ? G[l] : 0ull, b = l + 32 < P ? G[l + 32] : 0ull;  // elements l and l + 32
#pragma unroll
    for (int size = 2; size <= 64; size <<= 1) {
#pragma unroll
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        if (stride == 32) {  // partners in the same lane: a (element l) < b (element l + 32)
          const uint64_t hi = a > b ? a : b, lo = a > b ? b : a;
          a = hi;  // size == 64 here: the whole sequence descends
          b = lo;
        } else {
          const uint64_t pa = __shfl_xor_sync(0xffffffffu, a, stride);
          const uint64_t pb = __shfl_xor_sync(0xffffffffu, b, stride);
          const bool first = (l & stride) == 0;  // element index below its partner's
          const bool da = (l & size) == 0, db = ((l + 32) & size) == 0;  // descending runs
          a = (first == da) ? (a > pa ? a : pa) : (a < pa ? a : pa);
          b = (first == db) ? (b > pb ? b : pb) : (b < pb ? b : pb);
        }
      }
    }
    if (l < P) G[l] = a;
    if (l + 32 < P) G[l + 32] = b;
  }
  __syncthreads();
}

// One bitonic compare-exchange of x (element i) against its partner's value y: the lower index
// of the pair keeps the larger value where the run (i & size) descends.
__device__ __forceinline__ uint64_t bitonic_keep(uint64_t x, uint64_t y, bool lower, bool desc) {
  const uint64_t hi = x > y ? x : y, lo = x > y ? y : x;
  return (lower == desc) ? hi : lo;
}

// Steps `stride` = smax .. 1 of bitonic level `size` on the 128-entry chunk of warp w
// (G[128w .. 128w + 128)) held in registers: lane l holds elements 32r + l, r = 0..3; strides 64
// and 32 pair registers of one lane, strides 16..1 pair lanes (shuffles). No block barrier.
__device__ __forceinline__ void bitonic_chunk128(uint64_t (&v)[4], int base, int size, int smax) {
  const int l = threadIdx.x & 31;
  for (int stride = smax; stride > 0; stride >>= 1) {
    if (stride >= 32) {
      const int rs = stride >> 5;  // 2 (stride 64) or 1 (stride 32)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        if ((r & rs) == 0) {
          const int i = base + 32 * r + l;
          const bool desc = (i & size) == 0;
          const uint64_t a = v[r], b = v[r + rs];
          v[r] = bitonic_keep(a, b, true, desc);
          v[r + rs] = bitonic_keep(b, a, false, desc);
        }
      }
    } else {
      const bool lower = (l & stride) == 0;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = base + 32 * r + l;
        const uint64_t o = __shfl_xor_sync(0xffffffffu, v[r], stride);
        v[r] = bitonic_keep(v[r], o, lower, (i & size) == 0);
      }
    }
  }
}

// Sorts G[0..P) descending (P a power of two, P <= 16 * 128); all threads call it; ends with a
// block barrier. P <= 64: one warp's shuffles. P >= 128: every level runs its strides below 128
// inside one warp's registers (one load, one store, one barrier per level) and only the larger
// strides through shared memory with a barrier each: 15 barriers for P = 2048 instead of 66.
static_assert(kWarps * 128 >= kCand, "bitonic_sort_desc: one 128-entry chunk per warp");
__device__ __forceinline__ void bitonic_sort_desc(uint64_t* G, int P) {
  if (P <= 64) {
    warp_sort64_desc(G, P);
    return;
  }
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  const bool mine = w < (P >> 7);
  const int base = w * 128;
  uint64_t v[4];
  if (mine) {
#pragma unroll
    for (int r = 0; r < 4; ++r) v[r] = G[base + 32 * r + l];
    for (int size = 2; size <= 128; size <<= 1) bitonic_chunk128(v, base, size, size >> 1);
#pragma unroll
    for (int r = 0; r < 4; ++r) G[base + 32 * r + l] = v[r];
  }
  __syncthreads();
  for (int size = 256; size <= P; size <<= 1) {
    for (int stride = size >> 1; stride >= 128; stride >>= 1) {
      for (int t = threadIdx.x; t < (P >> 1); t += kThreads) {
        const int i = 2 * t - (t & (stride - 1));
        const int j = i + stride;
        const uint64_t a = G[i], b = G[j];
        const bool desc = (i & size) == 0;
        if ((a < b) == desc) {
          G[i] = b;
          G[j] = a;
        }
      }
      __syncthreads();
    }
    if (mine) {
#pragma unroll
      for (int r = 0; r < 4; ++r) v[r] = G[base + 32 * r + l];
      bitonic_chunk128(v, base, size, 64);
#pragma unroll
      for (int r = 0; r < 4; ++r) G[base + 32 * r + l] = v[r];
    }
    __syncthreads();
  }
}

// The first kk (<= n) entries of G[0..n) in descending order (unique composites, n <= kCand, G
// zero-padded to the sort size as bitonic_sort_desc needs). n <= 64 or n > kRankSortMax: sorted in
// place (warp shuffles, the bitonic network), returns false. 64 < n <= kRankSortMax: ranks by
// counting into D[0..kk) (D must not overlap G[0..n)), returns true: entry i's rank is the number
// of larger entries, counted by 2-4 adjacent lanes (a strided share each, summed by shuffles), so
// no thread waits on a chain of exchanges as in the one-warp 128-entry network. The same order,
// hence the same token, as the sort. All threads; ends with a block barrier.
// RankSmall: sets of at most 64 are ranked too (8 lanes per entry; the cluster kernel: one
// barrier instead of warp 0's 21-step shuffle network while the other 15 warps wait).
constexpr int kRankSortMax = 256;
// The ranking behind sort_desc_top_to and the two-pass merge: entry i of G[0..n) (unique
// composites) gets its rank r (the entries above it), counted by 2^lg adjacent lanes (a strided
// share each, summed by shuffles; lg block-uniform, n << lg <= kThreads); put(r, v) for every entry
// with r < kk (kk distinct ranks). All threads; no barrier.
template <class Put>
__device__ __forceinline__ void rank_desc_each(const uint64_t* G, int n, int kk, int lg, Put&& put) {
  const int tpe = 1 << lg;
  const int i = threadIdx.x >> lg, h = threadIdx.x & (tpe - 1);
  const uint64_t v = i < n ? G[i] : 0ull;
  int r = 0;
  if (i < n) {
#pragma unroll 4
    for (int j = h; j < n; j += tpe) r += G[j] > v ? 1 : 0;
  }
  for (int d = 1; d < tpe; d <<= 1) r += __shfl_xor_sync(0xffffffffu, r, d);
  if (h == 0 && i < n && r < kk) put(r, v);
}
// rank_desc_each's lanes per entry for a set of n <= kRankSortMax: kThreads / 64, / 128 or / 256
__device__ __forceinline__ int rank_lg(int n) { return n <= 64 ? 3 : (n <= 128 ? 2 : 1); }

template <bool RankSmall = false>
__device__ __forceinline__ bool sort_desc_top_to(uint64_t* G, int n, int kk, uint64_t* D) {
  if ((n > 64 || (RankSmall && n > 0)) && n <= kRankSortMax) {  // (block-uniform)
    rank_desc_each(G, n, kk, rank_lg(n), [&](int r, uint64_t v) { D[r] = v; });
    __syncthreads();
    return true;
  }
  int P = 32;
  while (P < n) P <<= 1;
  bitonic_sort_desc(G, P);
  return false;
}
// sort_desc_top_to with the result always at G[0..kk) (a ranked set is copied back; one more
// barrier). The filter kernel uses this form because of a compiler bug: reading the result
// through "D or G" there, ptxas 13.0 (V13.0.88, -O2 and -O3; -O1 was correct) compiled the 16-bit
// kernels' rank store as "D += 2 KB; st [D + 8r + 2 KB]", two KB past where the rows were then
// read (docs/sampling-journal.md, "A ptxas miscompile"; tests/gpu/test_sampling_sass.py looks for the
// shape in the built library). The cluster kernel keeps "D or G": copying back there moved its
// register allocation (8 -> 64 bytes of stack, +1.3 us at B=1 k=2048) and its SASS is clean.
__device__ __forceinline__ void sort_desc_top(uint64_t* G, int n, int kk, uint64_t* D) {
  if (sort_desc_top_to(G, n, kk, D)) {
    if (threadIdx.x < kk) G[threadIdx.x] = D[threadIdx.x];  // (kk <= kRankSortMax < kThreads)
    __syncthreads();
  }
}
static_assert(kThreads >= 2 * kRankSortMax, "sort_desc_top: at least two lanes per entry");

// The entries of the descending list L[0..n) above v (a binary search; n <= kRankSortMax).
__device__ __forceinline__ int count_above(const uint64_t* L, int n, uint64_t v) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (L[mid] > v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Merges S descending lists of unique composites (rank 0's L0[0..n0), rank r's ring[(r - 1) * slot ..]
// with rcnt[r] entries) into the first kk (<= their total) of their union in descending order,
// G[0..kk): an entry at place i of its list lands at i plus the entries of the other lists above
// it. All threads; no barrier. (Unrolled over kMaxCluster: the counts and offsets stay in registers.)
__device__ __forceinline__ void merge_ranked(const uint64_t* L0, int n0, const uint64_t* ring, int slot,
                                             const int* rcnt, int S, int kk, uint64_t* G) {
  int cnt[kMaxCluster], off[kMaxCluster + 1];
  off[0] = 0;
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) {
    cnt[r] = r == 0 ? n0 : (r < S ? rcnt[r] : 0);
    off[r + 1] = off[r] + cnt[r];
  }
  for (int g = threadIdx.x; g < off[kMaxCluster]; g += kThreads) {
    int a = 0, base = 0;
#pragma unroll
    for (int r = 1; r < kMaxCluster; ++r) {  // (empty lists start where the next does)
      if (g >= off[r]) {
        a = r;
        base = off[r];
      }
    }
    const int i = g - base;
    const uint64_t v = (a == 0 ? L0 : ring + (a - 1) * slot)[i];
    int pos = i;
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r)
      if (r < S && r != a) pos += count_above(r == 0 ? L0 : ring + (r - 1) * slot, cnt[r], v);
    if (pos < kk) G[pos] = v;
  }
}

}  // namespace sampling
}  // namespace fib
