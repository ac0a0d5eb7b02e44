// fib-runtime sampling: exact radix select over 64-bit composites.
// kth_prefix: the k-th largest of a candidate set (one buffer or the S segments of a cluster merge)
// as a prefix, digits of up to 8 bits from the highest differing bit, optionally stopping early
// with a slack; compact_ge keeps the entries at or above it. Shared by the filter, two-pass and
// split kernels.
#pragma once
#include "fib/sampling/sampler.cuh"

namespace fib {
namespace sampling {

__device__ __forceinline__ uint64_t warp_max_u64(uint64_t v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    const uint64_t o = __shfl_xor_sync(0xffffffffu, v, d);
    v = o > v ? o : v;
  }
  return v;
}
__device__ __forceinline__ uint64_t warp_min_u64(uint64_t v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    const uint64_t o = __shfl_xor_sync(0xffffffffu, v, d);
    v = o < v ? o : v;
  }
  return v;
}

// Candidate sets visited by the radix select: `nseg` segments (one per cluster rank, or just the
// local buffer), segment r = seg[r][0..cnt[r]). Every thread visits slots tid, tid + kThreads, ...
// of each segment with a warp-uniform trip count (valid = false past the end).
struct Segs {
  const uint64_t* seg[kMaxCluster];
  int cnt[kMaxCluster];
  int nseg;
  template <class F>
  __device__ __forceinline__ void each(F&& f) const {
    for (int r = 0; r < nseg; ++r) {
      const uint64_t* a = seg[r];
      const int n = cnt[r];
      for (int b = 0; b < n; b += kThreads) {
        const int i = b + threadIdx.x;
        const bool valid = i < n;
        f(valid ? a[i] : 0ull, valid);
      }
    }
  }
};

// 1: kth_prefix combines the warps' extremes by one read per lane and shuffles instead of every
// thread reading all 2 kWarps (136 SASS instructions run once per call, whose fetches the warps
// waited on in the two-pass kernel's merge; docs/sampling-journal.md, "The estimate's wait")
#ifndef FIB_SELECT_SHFL_RED
#define FIB_SELECT_SHFL_RED 1
#endif

struct SelectSmem {
  uint32_t hist[2][256];  // double-buffered: a pass counts into one while the other is cleared
  uint64_t red[2 * kWarps];
  int b;
  uint32_t above, vb;
};

// k-th largest of the (unique) candidates, as a prefix t with k <= #{c >= t} <= k + slack
// (1 <= k <= n; slack = 0: exact, #{c >= t} == k). A slack lets the select stop as soon as the
// digit bin holding the k-th entry is small enough: callers that only need a lower bound for tau,
// or that sort the survivors anyway, save the last passes. All threads of the CTA call it; ends
// with a barrier. Digits of up to 8 bits start at the highest bit in which the candidates differ;
// each pass costs two block barriers: the histogram, then warp 0 scans it (8 bins per lane) and
// picks the digit while warps 1..8 clear the other buffer. (FIB_TWOPASS_FUSED_TAIL) MX: also
// writes the set's largest entry to *mx_out (every thread), which its first traversal finds anyway.
#if FIB_TWOPASS_FUSED_TAIL
template <bool MX = false, class Set>
__device__ uint64_t kth_prefix(const Set& s, int k, SelectSmem& sm, int slack = 0, uint64_t* mx_out = nullptr) {
#else
template <class Set>
__device__ uint64_t kth_prefix(const Set& s, int k, SelectSmem& sm, int slack = 0) {
#endif
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  uint64_t mx = 0ull, mn = ~0ull;
  s.each([&](uint64_t v, bool valid) {
    if (valid) {
      mx = v > mx ? v : mx;
      mn = v < mn ? v : mn;
    }
  });
  mx = warp_max_u64(mx);
  mn = warp_min_u64(mn);
  if (lane == 0) {
    sm.red[wid] = mx;
    sm.red[kWarps + wid] = mn;
  }
  if (tid < 256) sm.hist[0][tid] = 0u;
  __syncthreads();
#if FIB_SELECT_SHFL_RED
  // lane w reads warp w's extremes, then the warp reduces them (the same values)
  mx = warp_max_u64(lane < kWarps ? sm.red[lane] : 0ull);
  mn = warp_min_u64(lane < kWarps ? sm.red[kWarps + lane] : ~0ull);
#else
  mx = 0ull;
  mn = ~0ull;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    mx = sm.red[w] > mx ? sm.red[w] : mx;
    mn = sm.red[kWarps + w] < mn ? sm.red[kWarps + w] : mn;
  }
#endif
#if FIB_TWOPASS_FUSED_TAIL
  if constexpr (MX) *mx_out = mx;
#endif
  if (mx == mn) {
    __syncthreads();  // (red is read by every thread before a later call rewrites it)
    return mn;
  }
  int top = 64 - __clzll(static_cast<long long>(mx ^ mn));  // bits [0, top) still undecided
  uint64_t mask = top >= 64 ? 0ull : (~0ull << top);
  uint64_t prefix = mx & mask;
  uint32_t rem = static_cast<uint32_t>(k);
  for (int h = 0;; h ^= 1) {
    const int w = top < 8 ? top : 8;
    const int shift = top - w;
    const uint32_t dmask = (1u << w) - 1u;
    uint32_t* hist = sm.hist[h];
    s.each([&](uint64_t v, bool valid) {
      // (plain shared atomics; the range-adaptive first digit keeps similar values apart)
      if (valid && (v & mask) == prefix) atomicAdd(&hist[static_cast<uint32_t>(v >> shift) & dmask], 1u);
    });
    __syncthreads();
    if (wid == 0) {
      // lane l owns bins [8l, 8l + 8); "above" counts the entries in higher bins
      uint32_t c[8];
      uint32_t t = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        c[j] = hist[8 * lane + j];
        t += c[j];
      }
      uint32_t suf = t;  // inclusive suffix sum over lanes >= l
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const uint32_t o = __shfl_down_sync(0xffffffffu, suf, d);
        if (lane + d < 32) suf += o;
      }
      uint32_t above = suf - t;
      int fb = -1;
      uint32_t fa = 0, fv = 0;
#pragma unroll
      for (int j = 7; j >= 0; --j) {
        if (fb < 0 && c[j] > 0 && above < rem && rem <= above + c[j]) {
          fb = 8 * lane + j;
          fa = above;
          fv = c[j];
        }
        above += c[j];
      }
      if (fb >= 0) {
        sm.b = fb;
        sm.above = fa;
        sm.vb = fv;
      }
    } else if (wid <= 8) {
      sm.hist[h ^ 1][tid - 32] = 0u;  // the next pass's buffer
    }
    __syncthreads();
    const uint32_t b = static_cast<uint32_t>(sm.b), above = sm.above, vb = sm.vb;
    rem -= above;
    prefix |= static_cast<uint64_t>(b) << shift;
    mask |= static_cast<uint64_t>(dmask) << shift;
    top = shift;
    if (vb - rem <= static_cast<uint32_t>(slack) || top == 0) {  // (vb >= rem)
      __syncthreads();  // every thread has read sm.b / above / vb
      return prefix;
    }
  }
}

// Appends the entries >= t of the set s to out[*cnt ..) (*cnt set before a barrier; out apart from
// s's segments): each thread counts its entries, one warp scan and one shared atomic per warp
// place them, and it reads its entries again to write them (no ballot, atomic and shuffle per slot,
// as warp_append1 per entry: ~2.6 us for ~5.8K entries in the two-pass kernel's merge on the H100).
// The order differs from warp_append1's; callers sort or select the result. All threads.
template <class Set>
__device__ void append_ge(const Set& s, uint64_t t, uint64_t* out, int* cnt) {
  const int lane = threadIdx.x & 31;
  int c = 0;
  s.each([&](uint64_t v, bool valid) { c += (valid && v >= t) ? 1 : 0; });
  const int inc = warp_incl_scan_i32(c, lane);
  const int wtot = __shfl_sync(0xffffffffu, inc, 31);
  if (wtot == 0) return;  // (warp-uniform)
  int at = 0;
  if (lane == 31) at = atomicAdd(cnt, wtot);
  at = __shfl_sync(0xffffffffu, at, 31) + inc - c;
  s.each([&](uint64_t v, bool valid) {
    if (valid && v >= t) out[at++] = v;
  });
}

// Keeps the entries >= t of buf[0..n) (in place, order not kept); returns the new count.
__device__ int compact_ge(uint64_t* buf, int n, uint64_t t, int* s_new) {
  const int tid = threadIdx.x, lane = tid & 31;
  if (tid == 0) *s_new = 0;
  __syncthreads();
  constexpr int R = 4;  // entries held per thread between barriers
  for (int b0 = 0; b0 < n; b0 += R * kThreads) {
    uint64_t v[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = b0 + r * kThreads + tid;
      v[r] = i < n ? buf[i] : 0ull;
    }
    __syncthreads();  // every read of this group precedes any write (writes land below b0 + R*kThreads)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = b0 + r * kThreads + tid;
      const bool keep = i < n && v[r] >= t;
      const unsigned m = __ballot_sync(0xffffffffu, keep);
      if (m) {
        int base = 0;
        if (lane == __ffs(m) - 1) base = atomicAdd(s_new, __popc(m));
        base = __shfl_sync(0xffffffffu, base, __ffs(m) - 1);
        if (keep) buf[base + __popc(m & ((1u << lane) - 1u))] = v[r];
      }
    }
  }
  __syncthreads();
  return *s_new;
}

}  // namespace sampling
}  // namespace fib
