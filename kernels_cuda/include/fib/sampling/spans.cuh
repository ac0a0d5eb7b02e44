// fib-runtime sampling: per-thread spans of a slice: kept masses and the draw.
// Each thread owns a contiguous span of its CTA's slice; span_masses sums its kept weights (a
// block scan and the CTA totals give every span's place in the row's token order) and
// warp_span_hit finds the drawn token inside the span that holds the target.
#pragma once
#include "fib/sampling/cluster_select.cuh"

namespace fib {
namespace sampling {

__device__ __forceinline__ bool kept_pred(uint32_t key, int i, uint32_t lo, int cut) {
  return key > lo || (key == lo && i < cut);
}

// ---- the draw: thread t owns the keys [t*E, t*E + E) of the slice, E = 4q with q odd (resident
// keys: its 16-byte loads hit distinct banks); its kept mass, a block scan and the S CTA totals
// locate the drawn token to one span, which its warp rescans (warp_span_hit). The token is the
// first, in token order, whose inclusive prefix of kept weights exceeds the target, so every
// geometry and kernel returns the same token.
struct Span {
  int a, b;  // [a, b) of the slice
};
__device__ __forceinline__ Span thread_span(int n) {
  const int q = ((n + 4 * kThreads - 1) / (4 * kThreads)) | 1;
  const int a = min(n, static_cast<int>(threadIdx.x) * 4 * q);
  return Span{a, min(n, a + 4 * q)};
}
// Visits the span four keys at a time: f(k[4], j, cnt) with keys j..j+cnt-1 valid (cnt < 4 only at
// the end; invalid entries are 0). key_at(i): a key of the slice (non-resident rows).
template <class KeyAt, class F>
__device__ __forceinline__ void for_span4(const uint32_t* keys, bool resident, KeyAt&& key_at, Span sp, F&& f) {
  int j = sp.a;
  if (resident) {
#pragma unroll 2
    for (; j + 4 <= sp.b; j += 4) {
      const uint4 q = *reinterpret_cast<const uint4*>(keys + j);
      const uint32_t k[4] = {q.x, q.y, q.z, q.w};
      f(k, j, 4);
    }
  } else {
    for (; j + 4 <= sp.b; j += 4) {
      const uint32_t k[4] = {key_at(j), key_at(j + 1), key_at(j + 2), key_at(j + 3)};
      f(k, j, 4);
    }
  }
  if (j < sp.b) {
    const int c = sp.b - j;
    const uint32_t k[4] = {key_at(j), c > 1 ? key_at(j + 1) : 0u, c > 2 ? key_at(j + 2) : 0u, 0u};
    f(k, j, c);
  }
}
// weight_of for four keys: one (warp-uniform) branch on the row's kind, four independent chains
__device__ __forceinline__ void weights4(const uint32_t (&k)[4], const WeightCtx& wc, uint64_t (&w)[4]) {
  if (wc.kind == 1) {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = weight_probs(k[j], wc);
  } else if (wc.kind == 0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = weight_logits(k[j], wc);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = weight_of(k[j], wc);
  }
}
// Warp-collective (all 32 lanes): the slice index of the kept token at which the running mass
// passes rel, for the one lane (if any) with `mine` set, whose span holds rel (run = the span's
// exclusive prefix, run <= rel < run + its kept mass). The span is split over the 32 lanes (<= 3
// keys each), one warp scan of their masses, and the lane holding rel rescans its keys. Returns
// the index in every lane, -1 when no lane of the warp is the owner.
template <class KeyAt>
__device__ __forceinline__ int warp_span_hit(bool mine, Span sp, uint64_t run, uint64_t rel, uint32_t lo, int cut,
                                             const WeightCtx& wc, KeyAt&& key_at) {
  const unsigned own = __ballot_sync(0xffffffffu, mine);
  if (own == 0u) return -1;
  const int src = __ffs(own) - 1, lane = threadIdx.x & 31;
  const int a = __shfl_sync(0xffffffffu, sp.a, src), b = __shfl_sync(0xffffffffu, sp.b, src);
  run = __shfl_sync(0xffffffffu, run, src);
  rel = __shfl_sync(0xffffffffu, rel, src);
  const int c = (b - a + 31) >> 5;
  const int la = min(b, a + lane * c), lb = min(b, la + c);
  uint64_t s = 0;
  for (int i = la; i < lb; ++i) {
    const uint32_t key = key_at(i);
    if (kept_pred(key, i, lo, cut)) s += weight_of(key, wc);
  }
  const uint64_t inc = warp_incl_scan_u64(s, lane);
  uint64_t r = run + inc - s;
  int hit = -1;
  if (s > 0 && r <= rel && rel < r + s) {
    for (int i = la; i < lb && hit < 0; ++i) {
      const uint32_t key = key_at(i);
      const uint64_t w = kept_pred(key, i, lo, cut) ? weight_of(key, wc) : 0ull;
      if (rel < r + w) hit = i;
      r += w;
    }
  }
  const unsigned hb = __ballot_sync(0xffffffffu, hit >= 0);
  return hb ? __shfl_sync(0xffffffffu, hit, __ffs(hb) - 1) : -1;
}
// Mass of this thread's kept keys; the block's exclusive prefix in *ex; every rank's CTA total is
// pushed into `tot` (kMaxCluster u64 in each rank) before one cluster barrier. Returns the row's
// total and this slice's base in *base. All threads.
template <class KeyAt>
__device__ __forceinline__ uint64_t span_masses(const uint32_t* keys, bool resident, KeyAt&& key_at, Span sp,
                                                uint32_t lo, int cut, const WeightCtx& wc, uint32_t rank, uint32_t S,
                                                uint64_t* scratch, uint64_t* tot, uint64_t* mine, uint64_t* ex,
                                                uint64_t* base) {
  uint64_t m = 0;
  const bool all = lo == 0u && cut == 0x7fffffff;  // every key kept (plain, top-p candidates)
  // The row's kind is chosen once, outside the loop: with weights4's branch inside it, each quad's
  // weights sat in their own basic block and the quads' loads, conversions and adds did not
  // overlap (H200, one CTA, 16032 resident fp32 keys: 1.45 -> 1.04 us from probs, 1.75 -> 1.35
  // from logits; benchmarks/sampling_span_probe.cu, results/sampling_topp_chain_h200.json).
  with_weight_kind(wc, [&](auto kind_tag) {
    constexpr int KIND = decltype(kind_tag)::value;
    for_span4(keys, resident, key_at, sp, [&](const uint32_t (&k)[4], int j, int cnt) {
      if (all || max(max(k[0], k[1]), max(k[2], k[3])) >= lo) {  // (skips the weights of dropped quads)
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const uint64_t w = weight_kind<KIND>(k[t], wc);
          m += (t < cnt && kept_pred(k[t], j + t, lo, cut)) ? w : 0ull;
        }
      }
    });
  });
  uint64_t cta;
  *ex = block_excl_scan_u64(m, scratch, &cta);
  *mine = m;
  if (threadIdx.x < S) *cl_remote(&tot[rank], threadIdx.x) = cta;
  cl_sync();
  uint64_t b = 0, t = 0;
  for (uint32_t r = 0; r < S; ++r) {
    if (r < rank) b += tot[r];
    t += tot[r];
  }
  *base = b;
  return t;
}

}  // namespace sampling
}  // namespace fib
