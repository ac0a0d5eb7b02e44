// fib-runtime sampling: a slice read from global memory, token by token or gathered.
// The two-pass kernel's loads (first pass and re-reads), 16-byte vectors unpacked to floats, warp-
// aggregated appends, and SliceSet: a CTA's slice (aligned body, unaligned head and tail) as 64-bit
// composites for the radix select (kth_prefix), or gathered into a buffer by a key or value test.
#pragma once
#include "fib/sampling/select.cuh"

namespace fib {
namespace sampling {

// The loads of the first pass and of the passes that read the slice again. Tried on the H200
// (results/sampling_twopass_ld1_h200.json against _ld0, k=50 from probs): the first pass with an
// L2 evict_last policy (createpolicy + ld.global.nc.L2::cache_hint) and the later ones
// evict_first: no faster anywhere (B=512 V=128256 92.7 -> 93.9 us, k=2048 B=64 59.2 -> 60.1).
__device__ __forceinline__ uint4 ld_first(const uint4* a) { return __ldg(a); }
__device__ __forceinline__ uint4 ld_again(const uint4* a) { return __ldg(a); }

// one 16-byte vector -> its 4 (fp32) or 8 (16-bit) values
template <int DT>
__device__ __forceinline__ void unpack_vec(const uint4 u, float (&x)[16 / ((DT == kF32) ? 4 : 2)]) {
  const uint32_t w4[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (DT == kF32) {
      x[j] = __uint_as_float(w4[j]);
    } else if constexpr (DT == kBF16) {
      x[2 * j] = __uint_as_float(w4[j] << 16);
      x[2 * j + 1] = __uint_as_float(w4[j] & 0xffff0000u);
    } else {
      x[2 * j] = __half2float(__ushort_as_half(static_cast<unsigned short>(w4[j] & 0xffffu)));
      x[2 * j + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w4[j] >> 16)));
    }
  }
}

// Appends the entries v of the lanes where `keep` holds to buf at one shared atomic per warp (all
// lanes); entries at cap or past it are counted in *cnt but not written.
__device__ __forceinline__ void warp_append1(bool keep, uint64_t v, uint64_t* buf, int* cnt, int cap = 0x7fffffff) {
  const int lane = threadIdx.x & 31;
  const unsigned m = __ballot_sync(0xffffffffu, keep);
  if (m) {
    int base = 0;
    if (lane == __ffs(m) - 1) base = atomicAdd(cnt, __popc(m));
    base = __shfl_sync(0xffffffffu, base, __ffs(m) - 1);
    const int at = base + __popc(m & ((1u << lane) - 1u));
    if (keep && at < cap) buf[at] = v;  // (past cap: counted only)
  }
}

// The composites of every token of a slice, read from global memory (the exact path's radix select
// and gather): body vectors g = tid, tid + kThreads, ... then the unaligned head and tail tokens;
// warp-uniform trip counts (valid = false past the end), so f may use warp votes. PD: 16-byte
// loads in flight per thread.
template <int DT, int PD>
struct SliceSet {
  const char* in_row;  // the slice's first token
  const char* body;    // its 16-byte aligned body (nv vectors, starting at token `head`)
  int nv, head, tail0, extra;
  uint32_t start;  // the slice's first index in the row
  bool logits;
  __device__ __forceinline__ uint64_t comp(float x, int i) const {
    return (static_cast<uint64_t>(f2key(sanitize(x, logits))) << 32) | (0xffffffffu - (start + static_cast<uint32_t>(i)));
  }
  template <class F>
  __device__ __forceinline__ void each(F&& f) const {
    constexpr int TPV = 16 / ((DT == kF32) ? 4 : 2);
    for (int b = 0; b < nv; b += PD * kThreads) {  // PD loads in flight per thread
      uint4 r[PD];
#pragma unroll
      for (int d = 0; d < PD; ++d) {
        const int g = b + d * kThreads + static_cast<int>(threadIdx.x);
        r[d] = g < nv ? ld_again(reinterpret_cast<const uint4*>(body) + g) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int d = 0; d < PD; ++d) {
        const int g = b + d * kThreads + static_cast<int>(threadIdx.x);
        const bool ok = g < nv;
        float x[TPV];
        unpack_vec<DT>(r[d], x);
#pragma unroll
        for (int j = 0; j < TPV; ++j) f(ok ? comp(x[j], head + g * TPV + j) : 0ull, ok);
      }
    }
    for (int e0 = 0; e0 < extra; e0 += kThreads) {
      const int e = e0 + static_cast<int>(threadIdx.x);
      const bool ok = e < extra;
      const int i = e < head ? e : tail0 + (e - head);
      f(ok ? comp(load_elem<DT>(in_row, i), i) : 0ull, ok);
    }
  }
  // Appends every composite v of the slice with keep(v) to buf (count in *cnt): per batch of
  // PD vectors one warp scan of the threads' counts and one shared atomic per warp (a
  // ballot and an atomic per token slot put ~30K atomics on *cnt where thousands pass: H200,
  // 24 us for one pass over a 256 KB slice). All threads.
  template <class K>
  __device__ __forceinline__ void gather(K&& keep, uint64_t* buf, int* cnt, int cap = 0x7fffffff) const {
    constexpr int TPV = 16 / ((DT == kF32) ? 4 : 2);
    static_assert(PD * TPV <= 64, "one 64-bit mask per batch");
    const int lane = threadIdx.x & 31;
    for (int b = 0; b < nv; b += PD * kThreads) {
      uint4 r[PD];
#pragma unroll
      for (int d = 0; d < PD; ++d) {
        const int g = b + d * kThreads + static_cast<int>(threadIdx.x);
        r[d] = g < nv ? ld_again(reinterpret_cast<const uint4*>(body) + g) : make_uint4(0u, 0u, 0u, 0u);
      }
      uint64_t bits = 0ull;
#pragma unroll
      for (int d = 0; d < PD; ++d) {
        const int g = b + d * kThreads + static_cast<int>(threadIdx.x);
        float x[TPV];
        unpack_vec<DT>(r[d], x);
#pragma unroll
        for (int j = 0; j < TPV; ++j)
          if (g < nv && keep(comp(x[j], head + g * TPV + j))) bits |= 1ull << (d * TPV + j);
      }
      const int c = __popcll(bits);
      const int inc = warp_incl_scan_i32(c, lane);
      const int wtot = __shfl_sync(0xffffffffu, inc, 31);
      if (wtot == 0) continue;
      int base = 0;
      if (lane == 31) base = atomicAdd(cnt, wtot);
      base = __shfl_sync(0xffffffffu, base, 31) + inc - c;
#pragma unroll
      for (int d = 0; d < PD; ++d) {  // (static indices: r stays in registers)
        const int g = b + d * kThreads + static_cast<int>(threadIdx.x);
        float x[TPV];
        unpack_vec<DT>(r[d], x);
#pragma unroll
        for (int j = 0; j < TPV; ++j)
          if ((bits >> (d * TPV + j)) & 1ull) {
            if (base < cap) buf[base] = comp(x[j], head + g * TPV + j);  // (past cap: counted only)
            ++base;
          }
      }
    }
    for (int e0 = 0; e0 < extra; e0 += kThreads) {
      const int e = e0 + static_cast<int>(threadIdx.x);
      const bool ok = e < extra;
      const int i = e < head ? e : tail0 + (e - head);
      const uint64_t v = ok ? comp(load_elem<DT>(in_row, i), i) : 0ull;
      warp_append1(ok && keep(v), v, buf, cnt, cap);
    }
  }
  // gather for the keys at or above key(tf), tested on the values (x >= tf: the same set where tf
  // > 0 for probs, tf > -inf for logits; NaN never passes): one compare per token, composites
  // only for the tokens kept, and a vector with none is skipped. Every token of the slice (body,
  // head and tail); entries at cap or past it counted only. Its loop repeats gather's on purpose:
  // one batch loop for both with the test passed in (a per-token guard instead of the mask
  // afterwards) was correct but 5-10% slower at V >= 128256 on the H200 (B=512 V=128256 k=2048
  // 206.8 -> 218.3 us, k=256 131.4 -> 144.1). bm (or nullptr): the top 16 key bits
  // of each thread's batch maxima (batch i of thread t at bm[i * kThreads + t]; a batch is the
  // thread's PD vectors b / kThreads .. + PD - 1): batches below t16 are not read. All threads.
  __device__ __forceinline__ void gather_ge(float tf, uint64_t* buf, int* cnt, int cap, const uint16_t* bm = nullptr,
                                            uint32_t t16 = 0u) const {
    constexpr int TPV = 16 / ((DT == kF32) ? 4 : 2);
    static_assert(PD * TPV <= 64, "one 64-bit mask per batch");
    const int lane = threadIdx.x & 31;
    for (int b = 0, bi = 0; b < nv; b += PD * kThreads, ++bi) {
      const bool need = bm == nullptr || bm[bi * kThreads + static_cast<int>(threadIdx.x)] >= t16;
      if (!__any_sync(0xffffffffu, need)) continue;  // (warp-uniform)
      uint4 r[PD];
#pragma unroll
      for (int d = 0; d < PD; ++d) {
        const int g = b + d * kThreads + static_cast<int>(threadIdx.x);
        r[d] = (need && g < nv) ? ld_again(reinterpret_cast<const uint4*>(body) + g) : make_uint4(0u, 0u, 0u, 0u);
      }
      uint64_t bits = 0ull;
#pragma unroll
      for (int d = 0; d < PD; ++d) {
        float x[TPV];
        unpack_vec<DT>(r[d], x);
#pragma unroll
        for (int j = 0; j < TPV; ++j) bits |= static_cast<uint64_t>(x[j] >= tf) << (d * TPV + j);
      }
      // (vectors past the slice and those not read are zeros, which pass a negative tf: masked)
#pragma unroll
      for (int d = 0; d < PD; ++d) {
        const int g = b + d * kThreads + static_cast<int>(threadIdx.x);
        if (!need || g >= nv) bits &= ~(((1ull << TPV) - 1ull) << (d * TPV));
      }
      const int c = __popcll(bits);
      const int inc = warp_incl_scan_i32(c, lane);
      const int wtot = __shfl_sync(0xffffffffu, inc, 31);
      if (wtot == 0) continue;
      int base = 0;
      if (lane == 31) base = atomicAdd(cnt, wtot);
      base = __shfl_sync(0xffffffffu, base, 31) + inc - c;
      if (c == 0) continue;
#pragma unroll
      for (int d = 0; d < PD; ++d) {  // (static indices: r stays in registers)
        if (((bits >> (d * TPV)) & ((1ull << TPV) - 1ull)) == 0ull) continue;
        const int g = b + d * kThreads + static_cast<int>(threadIdx.x);
        float x[TPV];
        unpack_vec<DT>(r[d], x);
#pragma unroll
        for (int j = 0; j < TPV; ++j)
          if ((bits >> (d * TPV + j)) & 1ull) {
            if (base < cap) buf[base] = comp(x[j], head + g * TPV + j);
            ++base;
          }
      }
    }
    for (int e0 = 0; e0 < extra; e0 += kThreads) {
      const int e = e0 + static_cast<int>(threadIdx.x);
      const bool ok = e < extra;
      const int i = e < head ? e : tail0 + (e - head);
      const float x = ok ? load_elem<DT>(in_row, i) : 0.0f;
      warp_append1(ok && x >= tf, comp(x, i), buf, cnt, cap);
    }
  }
};

}  // namespace sampling
}  // namespace fib
