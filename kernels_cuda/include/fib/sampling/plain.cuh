// fib-runtime sampling: one-pass kernel for plain sampling (no top-k, top-p or min-p) at large
// batches. One CTA per row, no cluster, no shared-memory copy of the row.
//
// The resident-row cluster kernel reads a row into shared memory, finds its maximum, then turns
// it into fixed-point weights: at B=512 V=128256 its waves of CTAs load, then compute, and the
// call takes 2.8x the bandwidth floor (172 us against FlashInfer's 101). Here the row is read once
// with U loads per thread always in flight, and each thread keeps what the draw needs of its own
// tokens: for probs the sum of its weights, for logits a running maximum and the sum of
// 2^((l - max) log2(e)/T) rescaled when the maximum rises (an online softmax). Then
//   1. one block reduction gives the row maximum M and the count of +inf entries;
//   2. every thread's mass (relative to M for logits) goes through a float64 block scan, and the
//      row's draw u in [0, 1) (Philox, tag kTagDraw) picks the thread whose interval holds
//      u * total (intervals tile exactly: each exclusive prefix is the previous inclusive one);
//   3. one warp rescans that thread's tokens (L1/L2 hits) with the cluster kernel's fixed-point
//      weights relative to M (floor(w / w_max * 2^44)) and returns the token at the draw's
//      fraction of that thread's fixed-point mass.
// Tokens the fixed-point weights drop (below 2^-44 of the maximum) are never returned, as in every
// other kernel. The thread masses are fp32 sums of V/512 weights (250 at V=128256), so the
// probability of a thread's tokens as a group is off by at most ~V/512 * 6e-8 relative (1.5e-5 at
// V=128256); within the thread the draw is exact.
// This kernel returns another token than the cluster kernel for the same (seed, offset): same
// distribution (docs/kernels.md). Rows it does not cover run the general algorithm in place
// (sample_row with S = 1, reading the row from global memory): rows with a filter (per-row
// tensors), greedy rows (temperature <= 0), rows with +inf entries, and a drawn thread whose
// tokens all fall below the fixed-point resolution (probability < 2^-30). The token depends on
// neither B nor the row's stride or alignment.
//
// Tried and not kept (2026-12-03, results/sampling_plain_topp_tried_h200.md): top-p alone in this
// kernel by rejection, four candidates drawn per round as above and one more pass over the row per
// round for their fixed-point masses of strictly larger tokens; the check pass took about twice the
// first (B=512 V=128256 263.6 us peaked against the cluster kernel's 248.0 and FlashInfer's 180.7).
#pragma once
#include <cfloat>

#include "fib/sampling/sampler.cuh"

namespace fib {
namespace sampling {

constexpr int kPlainUnroll = 4;  // 16-byte loads per thread in flight (64 KB per SM at 2 CTAs)

template <int DT>
__device__ __forceinline__ void plain_unpack(const uint4 r, float (&x)[16 / ((DT == kF32) ? 4 : 2)]) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
  if constexpr (DT == kF32) {
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = __uint_as_float(w[j]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (DT == kBF16) {
        x[2 * j] = __uint_as_float(w[j] << 16);
        x[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
      } else {
        x[2 * j] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[j] & 0xffffu)));
        x[2 * j + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[j] >> 16)));
      }
    }
  }
}

// Vector vi of a row (elements vi * VEC ..): one 16-byte load where the row is 16-byte aligned,
// else the same elements one by one (so the partition, and the token, do not depend on alignment).
template <int DT>
__device__ __forceinline__ uint4 plain_fetch(const char* in_row, bool vec_ok, int vi) {
  if (vec_ok) return __ldg(reinterpret_cast<const uint4*>(in_row) + vi);
  uint32_t w[4];
  if constexpr (DT == kF32) {
    const uint32_t* q = reinterpret_cast<const uint32_t*>(in_row) + static_cast<int64_t>(vi) * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = __ldg(q + j);
  } else {
    const unsigned short* q = reinterpret_cast<const unsigned short*>(in_row) + static_cast<int64_t>(vi) * 8;
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = static_cast<uint32_t>(__ldg(q + 2 * j)) | (static_cast<uint32_t>(__ldg(q + 2 * j + 1)) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Accumulates n values into a thread's (m, s, ninf). probs: m = max, s = sum of max(p, 0) (NaN ->
// 0); logits: m = running max (from -FLT_MAX), s = sum of 2^((l - m) * scale) (NaN -> -inf).
// +inf entries are counted and left out (such rows take the general algorithm).
template <int N>
__device__ __forceinline__ void plain_acc(float (&x)[N], bool logits, float scale, float& m, float& s, int& ninf) {
  if (!logits) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      float w = fmaxf(x[j], 0.0f);
      const bool inf = w == INFINITY;
      ninf += inf ? 1 : 0;
      w = inf ? 0.0f : w;
      m = fmaxf(m, w);
      s += w;
    }
    return;
  }
  float vm = -FLT_MAX;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    float v = x[j];
    const bool inf = v == INFINITY;
    ninf += inf ? 1 : 0;
    v = (inf || v != v) ? -INFINITY : v;
    x[j] = v;
    vm = fmaxf(vm, v);
  }
  if (vm > m) {  // (rare once the row's large values have been seen)
    s *= exp2_ftz(__fmul_rn(__fsub_rn(m, vm), scale));
    m = vm;
  }
#pragma unroll
  for (int j = 0; j < N; ++j) s += exp2_ftz(__fmul_rn(__fsub_rn(x[j], m), scale));
}

// Row `row` by the one-pass draw; returns true (CTA-uniform) when the row needs the general
// algorithm instead (nothing written then).
template <int DT>
__device__ __forceinline__ bool plain_draw(const Params& p, const int row) {
  constexpr int ESIZE = (DT == kF32) ? 4 : 2;
  constexpr int VEC = 16 / ESIZE;
  constexpr int U = kPlainUnroll;
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  const int V = p.V;
  const bool logits = p.is_logits != 0;
  const char* in_row = reinterpret_cast<const char*>(p.in) + static_cast<int64_t>(row) * p.in_stride * ESIZE;
  const bool vec_ok = (reinterpret_cast<uintptr_t>(in_row) & 15) == 0;
  const int nv = V / VEC;

  // the first loads go out before the per-row parameters (global loads too)
  uint4 r[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int vi = tid + u * kThreads;
    if (vi < nv) r[u] = plain_fetch<DT>(in_row, vec_ok, vi);
  }
  const int k = row_top_k(p, row);
  const float tp = p.has_topp ? (p.top_p_arr ? p.top_p_arr[row] : p.top_p_val) : 1.0f;
  const float mp = p.has_minp ? (p.min_p_arr ? p.min_p_arr[row] : p.min_p_val) : 0.0f;
  const float T = logits ? (p.temp_arr ? p.temp_arr[row] : p.temp_val) : 1.0f;
  // (as sample_row reads them: tp NaN or >= 1 and mp <= 0 are no filter; T <= 0 or NaN is greedy)
  if ((k > 0 && k < V) || tp < 1.0f || mp > 0.0f || (logits && !(T > 0.0f))) return true;
  const float scale = logits ? __fdiv_rn(1.4426950408889634f, T) : 1.0f;
  const uint64_t rnd = row_random64(row_seed(p, row), row_offset(p, row), static_cast<uint32_t>(row), kTagDraw);

  // ---- one pass: every thread's vectors t, t + kThreads, ..., then its scalars past nv * VEC
  float m = logits ? -FLT_MAX : 0.0f, s = 0.0f;
  int ninf = 0;
  for (int v0 = tid; v0 < nv; v0 += kThreads * U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int vi = v0 + u * kThreads;
      if (vi < nv) {
        const uint4 cur = r[u];
        const int vn = vi + U * kThreads;
        if (vn < nv) r[u] = plain_fetch<DT>(in_row, vec_ok, vn);
        float x[VEC];
        plain_unpack<DT>(cur, x);
        plain_acc<VEC>(x, logits, scale, m, s, ninf);
      }
    }
  }
  for (int i = nv * VEC + tid; i < V; i += kThreads) {
    float x[1] = {load_elem<DT>(in_row, i)};
    plain_acc<1>(x, logits, scale, m, s, ninf);
  }

  // ---- 1. the row maximum and the +inf count
  __shared__ float sh_m[kWarps];
  __shared__ int sh_ni[kWarps], sh_lp[kWarps];
  __shared__ double sh_wt[kWarps];
  __shared__ int sh_owner, sh_tok;
  __shared__ double sh_u2;
  {
    float wm = m;
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) wm = fmaxf(wm, __shfl_xor_sync(0xffffffffu, wm, d));
    const int wi = __reduce_add_sync(0xffffffffu, ninf);
    if (lane == 0) {
      sh_m[wid] = wm;
      sh_ni[wid] = wi;
    }
  }
  __syncthreads();
  float M = sh_m[0];
  int NI = sh_ni[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
    M = fmaxf(M, sh_m[w]);
    NI += sh_ni[w];
  }
  if (NI > 0) return true;  // +inf entries: uniform over them (the general algorithm)

  // ---- 2. the thread masses' float64 scan
  const double mass =
      logits ? static_cast<double>(s * exp2_ftz(__fmul_rn(__fsub_rn(m, M), scale))) : static_cast<double>(s);
  double winc = mass;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const double o = __shfl_up_sync(0xffffffffu, winc, d);
    if (lane >= d) winc += o;
  }
  double wprev = __shfl_up_sync(0xffffffffu, winc, 1);
  if (lane == 0) wprev = 0.0;
  const int lp = __reduce_max_sync(0xffffffffu, static_cast<unsigned>(mass > 0.0 ? tid + 1 : 0));
  if (lane == 31) sh_wt[wid] = winc;
  if (lane == 0) sh_lp[wid] = lp;
  __syncthreads();
  double before = 0.0, total = 0.0;
  int lastpos = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    if (w == wid) before = total;
    total += sh_wt[w];
    lastpos = max(lastpos, sh_lp[w]);
  }
  if (!(total > 0.0)) {  // no positive weight: token 0
    if (tid == 0) p.out_idx[row] = 0;
    return false;
  }
  if (!(total < INFINITY)) return true;  // probs whose fp32 partial sums overflow (> 3.4e38)
  const double ex = before + wprev, inc = before + winc;
  const WeightCtx wc = make_weight_ctx(M, logits, scale);  // (kind 0 or 1: finite, positive mass)
  const int tail_base = nv * VEC;

  // ---- 3. the draw: the thread whose interval holds u * total (target >= total only through
  // rounding: the last thread with mass takes it), then one warp rescans that thread's tokens in
  // fixed point. Writes sh_tok (-1: the thread's tokens are all below the resolution).
  auto own_frac = [&](uint64_t rbits, double* f) -> bool {
    const double target = static_cast<double>(rbits >> 11) * 0x1.0p-53 * total;
    if (!(mass > 0.0 && ex <= target && (target < inc || tid + 1 == lastpos))) return false;
    const double q = (target - ex) / mass;
    *f = q < 0.0 ? 0.0 : (q < 1.0 ? q : 0x1.fffffffffffffp-1);
    return true;
  };
  auto pick = [&]() {  // one warp
    const int t = sh_owner;
    const int nvt = t < 0 ? 0 : (nv > t ? (nv - t + kThreads - 1) / kThreads : 0);
    const int tail0 = tail_base + t;
    const int nst = t < 0 ? 0 : (V > tail0 ? (V - tail0 + kThreads - 1) / kThreads : 0);
    const int items = nvt + nst;
    auto item_weights = [&](int j, uint64_t (&w)[VEC]) -> int {  // returns its first index
      if (j < nvt) {
        const int vi = t + j * kThreads;
        float x[VEC];
        plain_unpack<DT>(plain_fetch<DT>(in_row, vec_ok, vi), x);
#pragma unroll
        for (int e = 0; e < VEC; ++e) w[e] = weight_of(f2key(sanitize(x[e], logits)), wc);
        return vi * VEC;
      }
      const int i = tail0 + (j - nvt) * kThreads;
      w[0] = weight_of(f2key(sanitize(load_elem<DT>(in_row, i), logits)), wc);
#pragma unroll
      for (int e = 1; e < VEC; ++e) w[e] = 0ull;
      return i;
    };
    uint64_t lw = 0;
    for (int j = lane; j < items; j += 32) {
      uint64_t w[VEC];
      item_weights(j, w);
#pragma unroll
      for (int e = 0; e < VEC; ++e) lw += w[e];
    }
    const uint64_t W = warp_sum_u64(lw);
    if (W == 0) {
      if (lane == 0) sh_tok = -1;
      return;
    }
    const double tq = sh_u2 * static_cast<double>(W);
    uint64_t tgt = tq < 0.0 ? 0ull : static_cast<uint64_t>(tq);
    if (tgt >= W) tgt = W - 1;
    uint64_t base = 0;
    for (int j0 = 0; j0 < items; j0 += 32) {
      const int j = j0 + lane;
      uint64_t w[VEC];
      int first = 0;
      lw = 0;
      if (j < items) {
        first = item_weights(j, w);
#pragma unroll
        for (int e = 0; e < VEC; ++e) lw += w[e];
      }
      const uint64_t incl = warp_incl_scan_u64(lw, lane);
      const uint64_t run0 = base + incl - lw;
      if (j < items && run0 <= tgt && tgt < base + incl) {
        uint64_t run = run0;
        int e = 0;
#pragma unroll
        for (int q = 0; q < VEC; ++q) {
          if (run + w[q] > tgt && run <= tgt) e = q;
          run += w[q];
        }
        sh_tok = j < nvt ? first + e : first;  // (a scalar item's index is `first` itself)
      }
      base += __shfl_sync(0xffffffffu, incl, 31);
      if (base > tgt) break;
    }
  };

  if (tid == 0) {
    sh_owner = -1;
    sh_tok = -1;
  }
  __syncthreads();
  double f;
  if (own_frac(rnd, &f)) {
    sh_owner = tid;
    sh_u2 = f;
  }
  __syncthreads();
  if (sh_owner < 0) return true;  // (not reached: the intervals tile [0, total])
  if (wid == 0) pick();
  __syncthreads();
  if (sh_tok < 0) return true;  // the drawn thread's tokens are all below the resolution (p < 2^-30)
  if (tid == 0) p.out_idx[row] = sh_tok;
  return false;
}

template <int DT>
__global__ void __launch_bounds__(kThreads, 2) plain_kernel(const Params p) {
  // dsm: 2 * kHistBufBytes (sample_row's histograms, for the rows it takes)
  extern __shared__ __align__(16) unsigned char dsm[];
  pdl_enter();
  const int row = blockIdx.x;
  if (plain_draw<DT>(p, row)) sample_row<DT>(p, dsm, row, 0u, 1u, p.V, false);
}

}  // namespace sampling
}  // namespace fib
