// fib-runtime sampling: streaming top-k kernel for large batches (one CTA per row, no cluster).
// (This is the register-prefetch variant measured in run 2: 172 us at B=512, V=128256, k=50; a
// cp.async-ring variant and a leaner prefilter measured slower, 193 and 211 us.)
//
// The row is read once from HBM in tiles of 2048 tokens (4 per thread, several tiles in flight).
// Each token becomes a unique 64-bit composite c = key << 32 | (2^32-1-index): ordering by c is
// "value descending, lower index first", so the top-k by c is exactly the top-k with our tie rule
// and never has ties. Tokens with c >= tau are appended to a shared-memory buffer; when it fills,
// an exact radix select (8-bit digits on c) finds the current k-th largest, tau rises to it and the
// buffer is compacted to those k. For a randomly ordered row about k ln(V/k) tokens are ever
// appended. At the end the k survivors are sorted and finish_sorted() applies min-p / top-p and
// draws, exactly as the cluster path does. Rows this kernel does not cover (no top-k, k > 2048)
// run the general algorithm in place (sample_row with S = 1, reading the row from global memory).
#pragma once
#include "fib/sampling/sampler.cuh"

namespace fib {
namespace sampling {

constexpr int kTile = kThreads * 4;     // 2048 tokens per tile
constexpr int kStreamBuf = 3 * kTile;   // 6144 candidates
constexpr int kStreamTrigger = kStreamBuf - kTile;
constexpr int kPrefetch = 4;            // tiles in flight per thread
constexpr size_t kStreamSmem = 2 * kStreamBuf * sizeof(uint64_t);  // 96 KB (>= the 64 KB sample_row needs)

// Exact k-th largest (as a lower bound prefix tau with #{a >= tau} == k) of n unique u64 values.
__device__ __forceinline__ uint64_t select_kth_u64(const uint64_t* a, int n, int k, uint32_t* hist,
                                                   uint64_t* scratch, int* sh_b, uint32_t* sh_cnt_above) {
  const int tid = threadIdx.x, lane = tid & 31;
  uint64_t prefix = 0, mask = 0;
  uint32_t rem = static_cast<uint32_t>(k);
  for (int pass = 0; pass < 8; ++pass) {
    const int shift = 56 - 8 * pass;
    if (tid < 256) hist[tid] = 0u;
    __syncthreads();
    for (int i = tid; i < n; i += kThreads) {
      const uint64_t v = a[i];
      if ((v & mask) == prefix) atomicAdd(&hist[(v >> shift) & 255u], 1u);
    }
    __syncthreads();
    // suffix sums over 256 bins: 8 warps
    uint32_t v = 0, suf = 0;
    if (tid < 256) {
      v = hist[tid];
      suf = v;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        uint32_t o = __shfl_down_sync(0xffffffffu, suf, d);
        if (lane + d < 32) suf += o;
      }
      if (lane == 0) reinterpret_cast<uint32_t*>(scratch)[tid >> 5] = suf;
    }
    __syncthreads();
    if (tid < 256) {
      uint32_t later = 0;
      for (int w = (tid >> 5) + 1; w < 8; ++w) later += reinterpret_cast<uint32_t*>(scratch)[w];
      const uint32_t above = suf - v + later;
      if (v > 0 && above < rem && rem <= above + v) {
        *sh_b = tid;
        sh_cnt_above[0] = above;
        sh_cnt_above[1] = v;
      }
    }
    __syncthreads();
    const uint64_t b = static_cast<uint64_t>(*sh_b);
    rem -= sh_cnt_above[0];
    const uint32_t vb = sh_cnt_above[1];
    prefix |= b << shift;
    mask |= 0xffull << shift;
    __syncthreads();
    if (vb == rem) break;
  }
  return prefix;
}

// One row (one CTA; dsm: kStreamSmem bytes). The streaming kernel runs it for every row; the
// split kernel for the rows it does not cover itself (k > kSplitMaxK), where kStreamSmem fits.
template <int DT>
__device__ __forceinline__ void stream_row(const Params& p, unsigned char* dsm, const int row) {
  const int V = p.V;
  const bool logits = p.is_logits != 0;
  int k = row_top_k(p, row);
  float T = logits ? (p.temp_arr ? p.temp_arr[row] : p.temp_val) : 1.0f;
  if (!(k > 0 && k < V && k <= kCand) || (logits && !(T > 0.0f))) {
    sample_row<DT>(p, dsm, row, 0u, 1u, V, false);  // general algorithm, one CTA
    return;
  }
  const RowFilters rf = row_filters(p, row, logits, T);
  const float tp = rf.tp, mp = rf.mp, scale = rf.scale;
  const bool use_p = rf.use_p, use_m = rf.use_m, joint = rf.joint;

  uint64_t* bufA = reinterpret_cast<uint64_t*>(dsm);
  uint64_t* bufB = bufA + kStreamBuf;
  __shared__ uint32_t s_hist[256];
  __shared__ uint64_t s_scratch[kWarps];
  __shared__ int s_cnt, s_b;
  __shared__ uint32_t s_ca[2];
  __shared__ uint64_t s_tau, s_tot;
  __shared__ double s_wsum[kWarps];
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  if (tid == 0) {
    s_cnt = 0;
    s_tau = 0ull;
  }
  __syncthreads();

  constexpr int ESIZE = (DT == kF32) ? 4 : 2;
  const char* in_row = reinterpret_cast<const char*>(p.in) + static_cast<int64_t>(row) * p.in_stride * ESIZE;
  const bool vec_ok = (reinterpret_cast<uintptr_t>(in_row) & (4 * ESIZE - 1)) == 0;
  const int ntiles = (V + kTile - 1) / kTile;
  uint64_t* buf = bufA;
  uint64_t* other = bufB;
  uint64_t tau = 0ull;
  // joint: per-thread online (max, sum of exp2((x - max) * scale)) / probs: plain sum
  float om = -INFINITY, os = 0.0f;

  auto load_tile = [&](int tile, float (&x)[4]) {
    const int i0 = tile * kTile + tid * 4;
    if (vec_ok && i0 + 3 < V) {
      if constexpr (DT == kF32) {
        float4 f = __ldcs(reinterpret_cast<const float4*>(in_row) + (i0 >> 2));
        x[0] = f.x; x[1] = f.y; x[2] = f.z; x[3] = f.w;
      } else {
        uint2 u = __ldcs(reinterpret_cast<const uint2*>(in_row) + (i0 >> 2));
        const uint32_t w2[2] = {u.x, u.y};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          if constexpr (DT == kBF16) {
            x[2 * j] = __uint_as_float(w2[j] << 16);
            x[2 * j + 1] = __uint_as_float(w2[j] & 0xffff0000u);
          } else {
            x[2 * j] = __half2float(__ushort_as_half(static_cast<unsigned short>(w2[j] & 0xffffu)));
            x[2 * j + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w2[j] >> 16)));
          }
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] = (i0 + j < V) ? load_elem<DT>(in_row, i0 + j) : NAN;
    }
  };

  float ring[kPrefetch][4];
#pragma unroll
  for (int q = 0; q < kPrefetch; ++q)
    if (q < ntiles) load_tile(q, ring[q]);
  bool over = false;  // this warp's appends passed kStreamTrigger in the current tile

  for (int t0 = 0; t0 < ntiles; t0 += kPrefetch) {
#pragma unroll
    for (int q = 0; q < kPrefetch; ++q) {
      const int tile = t0 + q;
      if (tile < ntiles) {
        float x[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x[j] = ring[q][j];
        if (tile + kPrefetch < ntiles) load_tile(tile + kPrefetch, ring[q]);
        const int i0 = tile * kTile + tid * 4;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int i = i0 + j;
          const bool valid = i < V;
          const float v = sanitize(x[j], logits);
          if (joint && valid) {
            if (logits) {
              if (v > om) {
                os = os * exp2_ftz(__fmul_rn(__fsub_rn(om, v), scale)) + 1.0f;
                om = v;
              } else {
                os += exp2_ftz(__fmul_rn(__fsub_rn(v, om), scale));
              }
            } else {
              os += v;
            }
          }
          const uint64_t c = (static_cast<uint64_t>(f2key(v)) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
          const bool pass = valid && c >= tau;
          const unsigned m = __ballot_sync(0xffffffffu, pass);
          if (m) {
            int base = 0;
            if (lane == __ffs(m) - 1) base = atomicAdd(&s_cnt, __popc(m));
            base = __shfl_sync(0xffffffffu, base, __ffs(m) - 1);
            if (pass) buf[base + __popc(m & ((1u << lane) - 1u))] = c;
            over = over || base + __popc(m) > kStreamTrigger;
          }
        }
        // The decision comes from the warps' own atomics (the count only grows within a tile):
        // s_cnt is read only where no warp can append (the compaction, the last tile), never
        // while a faster warp may already append the next tile (a read after the barrier alone
        // raced with those appends: compute-sanitizer racecheck, and threads then disagreed on
        // whether to compact, i.e. on the barriers inside the select).
        const bool last = tile == ntiles - 1;
        if (__syncthreads_or(over) || (last && s_cnt > k)) {
          over = false;
          const int cnt = s_cnt;
          const uint64_t nt = select_kth_u64(buf, cnt, k, s_hist, s_scratch, &s_b, s_ca);
          if (tid == 0) s_cnt = 0;
          __syncthreads();
          for (int i0 = 0; i0 < cnt; i0 += kThreads) {
            const int i = i0 + tid;
            const bool keep = i < cnt && buf[i] >= nt;
            const unsigned m = __ballot_sync(0xffffffffu, keep);
            if (m) {
              int base = 0;
              if (lane == __ffs(m) - 1) base = atomicAdd(&s_cnt, __popc(m));
              base = __shfl_sync(0xffffffffu, base, __ffs(m) - 1);
              if (keep) other[base + __popc(m & ((1u << lane) - 1u))] = buf[i];
            }
          }
          uint64_t* tmp = buf;
          buf = other;
          other = tmp;
          if (tid == 0) s_tau = nt;
          __syncthreads();
        }
        tau = s_tau;
      }
    }
  }
  // buf[0..k) hold the top-k (exactly k: V > k); sort them
  const int nc0 = s_cnt;
  int P = 32;
  while (P < nc0) P <<= 1;
  for (int j = nc0 + tid; j < P; j += kThreads) buf[j] = 0ull;
  __syncthreads();
  bitonic_sort_desc(buf, P);
  const float mval = key2f(static_cast<uint32_t>(buf[0] >> 32));
  const WeightCtx wc = make_weight_ctx(mval, logits, scale);
  const int nc = (use_m && wc.kind != 3) ? min_p_keep(buf, nc0, wc, logits, T, mp) : nc0;
  uint64_t joint_base = 0;
  if (joint) {
    double contrib = 0.0;
    if (wc.kind == 0) {
      contrib = (om == -INFINITY) ? 0.0 : static_cast<double>(os) * exp2(static_cast<double>(om - mval) * scale);
    } else if (wc.kind == 1) {
      contrib = static_cast<double>(os) / static_cast<double>(mval);
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) contrib += __shfl_xor_sync(0xffffffffu, contrib, d);
    if (lane == 0) s_wsum[wid] = contrib;
    __syncthreads();
    double tot = 0.0;
    for (int w = 0; w < kWarps; ++w) tot += s_wsum[w];
    joint_base = static_cast<uint64_t>(tot * static_cast<double>(kFixScale));
    if (joint_base == 0) joint_base = 1;
  }
  finish_sorted(p, buf, nc, wc, use_p && wc.kind != 3 && (!joint || wc.kind <= 1), tp, joint_base, joint, row,
                s_scratch, &s_tot);
}

template <int DT>
__global__ void __launch_bounds__(kThreads, 2) stream_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char dsm[];
  pdl_enter();
  stream_row<DT>(p, dsm, blockIdx.x);
}

}  // namespace sampling
}  // namespace fib
