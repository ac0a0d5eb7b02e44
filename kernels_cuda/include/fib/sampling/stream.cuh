// fib-runtime sampling: streaming top-k kernel for large batches (one CTA per row, no cluster).
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
constexpr int kRing = 6;                // tiles in flight per thread (cp.async ring in shared memory)
constexpr size_t kStreamSmemBytes = kStreamBuf * sizeof(uint64_t) + static_cast<size_t>(kRing) * kThreads * 16;

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

template <int DT>
__global__ void __launch_bounds__(kThreads, 2) stream_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char dsm[];
  const int row = blockIdx.x;
  const int V = p.V;
  const bool logits = p.is_logits != 0;
  int k = 0;
  if (p.has_topk) {
    if (p.top_k_arr) {
      if (p.top_k_is64) {
        long long kk = reinterpret_cast<const long long*>(p.top_k_arr)[row];
        k = kk > 0x7fffffffLL ? 0x7fffffff : (kk < 0 ? 0 : static_cast<int>(kk));
      } else {
        k = reinterpret_cast<const int*>(p.top_k_arr)[row];
      }
    } else {
      k = p.top_k_val;
    }
  }
  float T = logits ? (p.temp_arr ? p.temp_arr[row] : p.temp_val) : 1.0f;
  if (!(k > 0 && k < V && k <= kCand) || (logits && !(T > 0.0f))) {
    sample_row<DT>(p, dsm, row, 0u, 1u, V, false);  // general algorithm, one CTA
    return;
  }
  float tp = p.has_topp ? (p.top_p_arr ? p.top_p_arr[row] : p.top_p_val) : 1.0f;
  float mp = p.has_minp ? (p.min_p_arr ? p.min_p_arr[row] : p.min_p_val) : 0.0f;
  const bool use_p = tp < 1.0f;
  const bool use_m = mp > 0.0f;
  mp = fminf(mp, 1.0f);
  const bool joint = p.joint != 0 && use_p;
  const float scale = logits ? __fdiv_rn(1.4426950408889634f, T) : 1.0f;
  const int step = (k <= 1024) ? 2 : 1;

  uint64_t* buf = reinterpret_cast<uint64_t*>(dsm);                        // [kStreamBuf]
  unsigned char* ring = dsm + kStreamBuf * sizeof(uint64_t);               // [kRing][kThreads] x 16 B
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
  uint64_t tau = 0ull;
  // cheap per-token prefilter: x >= tau_f (a float lower bound of tau); NaN logits pass only while
  // tau_f is -inf (they count as -inf); probs are clamped with fmaxf (NaN and negatives -> 0)
  float tau_f = -INFINITY;
  bool nan_pass = true;
  // joint: per-thread online (max, sum of exp2((x - max) * scale)) / probs: plain sum
  float om = -INFINITY, os = 0.0f;

  // cp.async ring: each thread copies (and later reads back) only its own 4 tokens of a tile, so
  // no barrier is needed for the data and copies stay in flight across the per-tile barriers.
  const uint32_t ring_base = static_cast<uint32_t>(__cvta_generic_to_shared(ring)) + tid * 16;
  const char* src_next = in_row + static_cast<int64_t>(tid) * 4 * ESIZE;
  int rem_next = V - tid * 4;  // tokens left at this thread's position of the next issued tile
  int slot_w = 0, slot_r = 0;
  auto issue = [&]() {
    if (rem_next > -kTile * kRing) {  // cheap guard; zero-size copies past the end are harmless
      int nb = rem_next * ESIZE;
      nb = nb < 0 ? 0 : (nb > 4 * ESIZE ? 4 * ESIZE : nb);
      const char* src = nb > 0 ? src_next : in_row;
      const uint32_t dst = ring_base + slot_w * (kThreads * 16);
      if constexpr (ESIZE == 4) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(nb) : "memory");
      } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(nb) : "memory");
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    src_next += kTile * ESIZE;
    rem_next -= kTile;
    slot_w = (slot_w + 1 == kRing) ? 0 : slot_w + 1;
  };
  if (vec_ok) {
#pragma unroll
    for (int q = 0; q < kRing - 1; ++q) issue();
  }

  for (int tile = 0; tile < ntiles; ++tile) {
    float x[4];
    const int i0 = tile * kTile + tid * 4;
    if (vec_ok) {
      issue();
      asm volatile("cp.async.wait_group %0;\n" ::"n"(kRing - 1) : "memory");
      const unsigned char* slot = ring + static_cast<size_t>(slot_r) * (kThreads * 16) + tid * 16;
      slot_r = (slot_r + 1 == kRing) ? 0 : slot_r + 1;
      if constexpr (DT == kF32) {
        const float4 f = *reinterpret_cast<const float4*>(slot);
        x[0] = f.x; x[1] = f.y; x[2] = f.z; x[3] = f.w;
      } else {
        const uint2 u = *reinterpret_cast<const uint2*>(slot);
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
      for (int j = 0; j < 4; ++j) x[j] = (i0 + j < V) ? load_elem<DT>(in_row, i0 + j) : 0.0f;
    }
    const int nvalid = V - i0;  // tokens of this thread's 4 that exist
    bool pass[4];
    bool anyp = false;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (!logits) x[j] = fmaxf(x[j], 0.0f);
      pass[j] = (x[j] >= tau_f || (nan_pass && x[j] != x[j])) && j < nvalid;
      anyp |= pass[j];
    }
    if (joint) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (j < nvalid) {
          if (logits) {
            const float v = sanitize(x[j], true);
            if (v > om) {
              os = os * exp2f(__fmul_rn(__fsub_rn(om, v), scale)) + 1.0f;
              om = v;
            } else {
              os += exp2f(__fmul_rn(__fsub_rn(v, om), scale));
            }
          } else {
            os += x[j];
          }
        }
      }
    }
    if (__any_sync(0xffffffffu, anyp)) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const unsigned m = __ballot_sync(0xffffffffu, pass[j]);
        if (m) {
          int base = 0;
          if (lane == __ffs(m) - 1) base = atomicAdd(&s_cnt, __popc(m));
          base = __shfl_sync(0xffffffffu, base, __ffs(m) - 1);
          if (pass[j]) {
            const uint64_t c = (static_cast<uint64_t>(f2key(sanitize(x[j], logits))) << 32) |
                               (0xffffffffu - static_cast<uint32_t>(i0 + j));
            buf[base + __popc(m & ((1u << lane) - 1u))] = c;
          }
        }
      }
    }
    // synchronise every `step` tiles (2 when k <= 1024: the buffer has room for two tiles)
    if (((tile + 1) % step) != 0 && tile != ntiles - 1) continue;
    __syncthreads();
    const int cnt = s_cnt;
    if (cnt > kStreamBuf - step * kTile || (tile == ntiles - 1 && cnt > k)) {
      const uint64_t nt = select_kth_u64(buf, cnt, k, s_hist, s_scratch, &s_b, s_ca);
      // in-place compaction: stage this thread's entries in registers first
      uint64_t e[kStreamBuf / kThreads];
#pragma unroll
      for (int r = 0; r < kStreamBuf / kThreads; ++r) {
        const int i = tid + r * kThreads;
        e[r] = (i < cnt) ? buf[i] : 0ull;
      }
      __syncthreads();
      if (tid == 0) s_cnt = 0;
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kStreamBuf / kThreads; ++r) {
        const int i = tid + r * kThreads;
        const bool keep = i < cnt && e[r] >= nt;
        const unsigned m = __ballot_sync(0xffffffffu, keep);
        if (m) {
          int base = 0;
          if (lane == __ffs(m) - 1) base = atomicAdd(&s_cnt, __popc(m));
          base = __shfl_sync(0xffffffffu, base, __ffs(m) - 1);
          if (keep) buf[base + __popc(m & ((1u << lane) - 1u))] = e[r];
        }
      }
      if (tid == 0) s_tau = nt;
      __syncthreads();
      tau = s_tau;
      float tf = key2f(static_cast<uint32_t>(tau >> 32));
      if (tf != tf) tf = -INFINITY;  // a prefix below -inf's key decodes to NaN
      tau_f = tf;
      nan_pass = logits && tf == -INFINITY;
    }
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  // buf[0..k) hold the top-k (exactly k: V > k); sort them
  const int nc0 = s_cnt;
  int P = 32;
  while (P < nc0) P <<= 1;
  for (int j = nc0 + tid; j < P; j += kThreads) buf[j] = 0ull;
  __syncthreads();
  bitonic_sort_desc(buf, P);
  const float mval = key2f(static_cast<uint32_t>(buf[0] >> 32));
  WeightCtx wc;
  wc.m = mval;
  wc.scale = 1.0f;
  if (mval == INFINITY) {
    wc.kind = 2;
  } else if (logits) {
    if (mval == -INFINITY) {
      wc.kind = 3;
    } else {
      wc.kind = 0;
      wc.scale = scale;
    }
  } else if (!(mval > 0.0f)) {
    wc.kind = 3;
  } else {
    wc.kind = 1;
    wc.scale = __fdiv_rn(1.0f, mval);
  }
  int nc = nc0;
  if (use_m && wc.kind != 3) {
    const float t = logits ? (wc.kind == 0 ? __fadd_rn(mval, __fmul_rn(T, logf(mp))) : mval) : __fmul_rn(mp, mval);
    const uint32_t tk = f2key(t);
    int c = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int j = 4 * tid + q;
      c += __syncthreads_count(j < nc0 && static_cast<uint32_t>(buf[j] >> 32) >= tk);
    }
    nc = c < 1 ? 1 : c;
  }
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

}  // namespace sampling
}  // namespace fib
