// fib-runtime sampling: split-row top-k sampler for small k (1 <= k <= kSplitMaxK).
//
// Top-k sampling with a small k needs, from a row of V tokens, only a superset of its top-k: every
// filter after the top-k (renormalisation, min-p, top-p, the draw) looks at the kept tokens alone.
// The row is split into chunks of 8192 (fp32) or 16384 (16-bit) tokens, one ordinary CTA each
// (grid C x B, no clusters, 2 CTAs per SM); the CTAs of all rows stream independently, so one
// CTA's loads overlap another's selection work, and every byte of the row is read once:
//  1. Each thread loads four 16-byte vectors (all in flight at once) and takes the maximum of its
//     keys. A warp sorts its 32 lane maxima (shuffles); w_j = its j-th largest, j = ceil(k/16).
//     T = the ceil(k/j)-th largest of the 16 w_j: ceil(k/j) warps hold j distinct tokens >= T
//     each, so at least k tokens of the chunk are >= T, and the chunk's top-k (hence its share
//     of the row's top-k) is among the tokens >= T: ~90 of 8192 on random rows.
//  2. The chunk writes those candidates (composites key << 32 | ~index, the documented tie rule:
//     value descending, lower index first) to its slot of a per-row workspace, at most
//     kSplitCap. Ties at T beyond that (rows of equal values or zeros) are cut to the first k by
//     index; a chunk with more than kSplitCap - k distinct values above T (adversarial layouts
//     only) first runs an exact select on the chunk (read again, from L2).
//  3. The last CTA of the row to finish (a release/acquire counter) keeps the candidates whose key
//     is >= max_c T_c (every T_c is a lower bound of the row's k-th value), selects and sorts
//     the top-k and runs the filter kernel's tail (finish_topk: min-p, top-p in either order,
//     one Philox draw): the same token as the other kernels. It leaves the counter at zero, so
//     the workspace needs no clearing between calls (CUDA-graph safe).
// Rows the kernel does not cover (no top-k, k >= V, k > kSplitMaxK, greedy temperature) run in
// their chunk-0 CTA what the streaming kernel runs for them (stream_row; sample_row where the
// launch cannot have kStreamSmem of shared memory, sm_86/89): the same token as the other kernels.
// Measured on the H200 (benchmarks/results/sampling_split_h200.md): slower than the cluster and
// filter kernels (the merge chain at small B; ~11 GB/s per SM at B=512), 1.4-4x faster than the
// streaming kernel at small B: the launch policy uses it only where that is the alternative.
#pragma once
#include "fib/sampling/filter.cuh"
#include "fib/sampling/stream.cuh"

namespace fib {
namespace sampling {

constexpr int kSplitMaxK = 128;
constexpr int kSplitVec = 4;      // 16-byte vectors per thread
constexpr int kSplitCap = 256;    // candidates one chunk writes at most
constexpr int kSplitMaxC = 64;    // chunks per row at most (V <= 524288 fp32)
constexpr int kSplitG = 8192;     // the final candidate set in shared memory (64 KB)
constexpr size_t kSplitSmem = kSplitG * sizeof(uint64_t);
constexpr size_t kSplitDoneBytes = 65536 * 4;  // the workspace's per-row counters (B <= 65535), then the rows
static_assert(kSplitSmem >= 2 * kHistBufBytes, "the general fallback needs its histograms");
static_assert(kSplitCap >= 2 * kSplitMaxK, "the tie cut must fit a chunk's slot");
static_assert(kSplitMaxK <= 16 * kWarps, "j = ceil(k / 16) lanes per warp");

template <int DT>
__host__ __device__ constexpr int split_chunk() {
  return kThreads * kSplitVec * (DT == kF32 ? 4 : 8);
}
// workspace (Params::ws): done[65536] (u32, one per row, fixed places whatever V), then per row
// 16 bytes (unused) | cnt[C] | tau[C] | pm[C] | ps[C] | cand[C][kSplitCap]
__host__ __device__ inline size_t split_off_ps(int C) { return (16 + 12 * static_cast<size_t>(C) + 7) & ~size_t(7); }
__host__ __device__ inline size_t split_off_cand(int C) {
  return (split_off_ps(C) + 8 * static_cast<size_t>(C) + 15) & ~size_t(15);
}
__host__ __device__ inline size_t split_row_bytes(int C) {
  return (split_off_cand(C) + 8 * static_cast<size_t>(C) * kSplitCap + 255) & ~size_t(255);
}

// token j (0 <= j < EPT, a compile-time index after unrolling) of a thread's four vectors
template <int DT>
__device__ __forceinline__ float split_elem(const uint4 (&r)[kSplitVec], int j) {
  constexpr int EPV = DT == kF32 ? 4 : 8;
  const uint4 u = r[j / EPV];
  const int e = j % EPV;
  if constexpr (DT == kF32) {
    return __uint_as_float(e == 0 ? u.x : (e == 1 ? u.y : (e == 2 ? u.z : u.w)));
  } else {
    const int c = e / 2;
    const uint32_t w = c == 0 ? u.x : (c == 1 ? u.y : (c == 2 ? u.z : u.w));
    if constexpr (DT == kBF16) return __uint_as_float((e & 1) ? (w & 0xffff0000u) : (w << 16));
    else return __half2float(__ushort_as_half(static_cast<unsigned short>((e & 1) ? (w >> 16) : (w & 0xffffu))));
  }
}

// descending bitonic sort of one value per lane
__device__ __forceinline__ uint32_t warp_sort32_desc(uint32_t x, int lane) {
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const uint32_t o = __shfl_xor_sync(0xffffffffu, x, stride);
      const bool keep_max = ((lane & stride) == 0) == ((lane & size) == 0);
      x = keep_max ? max(x, o) : min(x, o);
    }
  }
  return x;
}

// a chunk's tokens as a candidate set for kth_prefix, read again from global memory (L2) by the
// same threads in the same layout (rare path; keeps the registers of the common path unaliased)
template <int DT>
struct SplitChunkSet {
  const char* in_row;
  int64_t s0;
  int V;
  bool logits;
  template <class F>
  __device__ __forceinline__ void each(F&& f) const {
    constexpr int ESIZE = DT == kF32 ? 4 : 2, EPV = 16 / ESIZE;
#pragma unroll 1
    for (int v = 0; v < kSplitVec; ++v) {
      const int64_t e0 = s0 + static_cast<int64_t>(v * kThreads + threadIdx.x) * EPV;
#pragma unroll
      for (int e = 0; e < EPV; ++e) {
        const bool valid = e0 + e < V;
        const float x = valid ? load_elem<DT>(in_row, e0 + e) : 0.0f;
        const uint64_t c = (static_cast<uint64_t>(f2key(sanitize(x, logits))) << 32) |
                           (0xffffffffu - static_cast<uint32_t>(e0 + e));
        f(valid ? c : 0ull, valid);
      }
    }
  }
};

__device__ __forceinline__ uint64_t ldcg64(const uint64_t* a) {
  return __ldcg(reinterpret_cast<const unsigned long long*>(a));
}

// the candidates of a row's chunks with keys >= tg (rare path: more than kSplitG of them)
struct SplitWsSet {
  const uint64_t* cand;
  const int* cnt;  // shared memory, C entries
  int C;
  uint64_t tg;
  template <class F>
  __device__ __forceinline__ void each(F&& f) const {
    for (int i = 0; i < C; ++i) {
      const uint64_t* a = cand + static_cast<size_t>(i) * kSplitCap;
      const int n = cnt[i];
      for (int b = 0; b < n; b += kThreads) {
        const int q = b + threadIdx.x;
        const uint64_t v = q < n ? ldcg64(a + q) : 0ull;
        const bool valid = q < n && v >= tg;
        f(valid ? v : 0ull, valid);
      }
    }
  }
};

// appends v to G (ballot-aggregated shared atomic on *n); entries past cap are counted, not stored
__device__ __forceinline__ void split_push(uint64_t* G, int* n, int cap, uint64_t v, bool keep, int lane) {
  const unsigned m = __ballot_sync(0xffffffffu, keep);
  if (m) {
    int base = 0;
    if (lane == __ffs(m) - 1) base = atomicAdd(n, __popc(m));
    base = __shfl_sync(0xffffffffu, base, __ffs(m) - 1);
    const int pos = base + __popc(m & ((1u << lane) - 1u));
    if (keep && pos < cap) G[pos] = v;
  }
}

// profiling builds: phase times of row 0 (chunk 0: slots 0-3; the merging CTA: 4-8; candidates
// written by the row in slot 10, kept for the merge in slot 11)
#define SPLIT_PROF(i) FIB_PROF_WHEN(blockIdx.y == 0 && (blockIdx.x == 0 || (i) >= 4), i)

template <int DT>
__global__ void __launch_bounds__(kThreads, 2) split_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char dsm[];
  pdl_enter();
  constexpr int ESIZE = DT == kF32 ? 4 : 2;
  constexpr int EPV = 16 / ESIZE, EPT = kSplitVec * EPV;
  constexpr int CHUNK = split_chunk<DT>();
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  const int c = blockIdx.x, row = blockIdx.y;
  const int V = p.V, C = p.split_C;
  const bool logits = p.is_logits != 0;
  const int k = row_top_k(p, row);
  const float T = logits ? (p.temp_arr ? p.temp_arr[row] : p.temp_val) : 1.0f;
  if (!(k > 0 && k < V && k <= kSplitMaxK) || (logits && !(T > 0.0f))) {
    // one CTA: the streaming kernel's row (which runs the general algorithm itself for rows it
    // does not cover), or, where its shared memory does not fit, the general algorithm
    if (c == 0) {
      if (p.split_stream_rows) stream_row<DT>(p, dsm, row);
      else sample_row<DT>(p, dsm, row, 0u, 1u, V, false);
    }
    return;
  }
  const RowFilters rf = row_filters(p, row, logits, T);
  const float tp = rf.tp, mp = rf.mp, scale = rf.scale;
  const bool use_p = rf.use_p, use_m = rf.use_m, joint = rf.joint;

  __shared__ uint64_t s_scratch[kWarps];
  __shared__ uint64_t s_tot;
  __shared__ uint32_t s_wt[kWarps];
  __shared__ SelectSmem ssel;
  __shared__ float s_jm[kWarps];
  __shared__ double s_js[kWarps];
  __shared__ int s_cnt[kSplitMaxC];
  __shared__ uint32_t s_tau[kSplitMaxC];
  __shared__ float s_pm[kSplitMaxC];
  __shared__ double s_ps[kSplitMaxC];
  __shared__ int s_n, s_new, s_last;

  unsigned char* wrow = p.ws + kSplitDoneBytes + static_cast<size_t>(row) * p.ws_row_bytes;
  unsigned int* done = reinterpret_cast<unsigned int*>(p.ws) + row;
  int* g_cnt = reinterpret_cast<int*>(wrow + 16);
  uint32_t* g_tau = reinterpret_cast<uint32_t*>(wrow + 16 + 4 * C);
  float* g_pm = reinterpret_cast<float*>(wrow + 16 + 8 * C);
  double* g_ps = reinterpret_cast<double*>(wrow + split_off_ps(C));
  uint64_t* g_cand = reinterpret_cast<uint64_t*>(wrow + split_off_cand(C));

  // ---- 1. load: four 16-byte vectors per thread, all in flight
  SPLIT_PROF(0);
#ifdef FIB_SAMPLING_PROFILE
  if (row == 0 && c == 0 && tid == 0) g_fib_prof[10] = 0ull;
#endif
  const int64_t s0 = static_cast<int64_t>(c) * CHUNK;
  const char* in_row = reinterpret_cast<const char*>(p.in) + static_cast<int64_t>(row) * p.in_stride * ESIZE;
  const bool aligned = (reinterpret_cast<uintptr_t>(in_row) & 15u) == 0;
  uint4 r[kSplitVec];
  uint32_t vm = 0u;
  if (aligned && s0 + CHUNK <= V) {  // (block-uniform) a whole aligned chunk: four vector loads
#pragma unroll
    for (int v = 0; v < kSplitVec; ++v)
      r[v] = __ldg(reinterpret_cast<const uint4*>(in_row + (s0 + static_cast<int64_t>(v * kThreads + tid) * EPV) * ESIZE));
    vm = EPT == 32 ? 0xffffffffu : ((1u << EPT) - 1u);
  } else {  // the row's last chunk, or rows not 16-byte aligned: token by token
#pragma unroll
    for (int v = 0; v < kSplitVec; ++v) {
      const int64_t e0 = s0 + static_cast<int64_t>(v * kThreads + tid) * EPV;
      uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int e = 0; e < EPV; ++e) {
        if (e0 + e < V) {
          if constexpr (DT == kF32) {
            w[e] = __ldg(reinterpret_cast<const unsigned int*>(in_row) + e0 + e);
          } else {
            const uint32_t u = __ldg(reinterpret_cast<const unsigned short*>(in_row) + e0 + e);
            w[e / 2] |= u << (16 * (e & 1));
          }
          vm |= 1u << (v * EPV + e);
        }
      }
      r[v] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  const uint32_t idx0 = static_cast<uint32_t>(s0) + static_cast<uint32_t>(tid) * EPV;
  // the keys, once (key2f gives the sanitised values back for the joint sums)
  uint32_t key[EPT];
#pragma unroll
  for (int j = 0; j < EPT; ++j) key[j] = ((vm >> j) & 1u) ? f2key(sanitize(split_elem<DT>(r, j), logits)) : 0u;
  auto comp_at = [&](int j) -> uint64_t {
    return (static_cast<uint64_t>(key[j]) << 32) |
           (0xffffffffu - (idx0 + static_cast<uint32_t>((j / EPV) * kThreads * EPV + j % EPV)));
  };

  // ---- 2. the threshold T from the lane maxima (invalid tokens have key 0)
  uint32_t tmax = 0u;
#pragma unroll
  for (int j = 0; j < EPT; ++j) tmax = max(tmax, key[j]);
  const int jj = (k + kWarps - 1) / kWarps;  // lanes per warp
  const int need = (k + jj - 1) / jj;        // warps (<= 16)
  {
    const uint32_t srt = warp_sort32_desc(tmax, lane);
    const uint32_t wt = __shfl_sync(0xffffffffu, srt, jj - 1);
    if (lane == 0) s_wt[wid] = wt;
    if (tid == 0) s_n = 0;
  }
  if (joint) {  // this thread's (max, sum of exp2((x - max) * scale)) / probs sum
    float jm = -INFINITY, js = 0.0f;
    if (logits) {
#pragma unroll
      for (int j = 0; j < EPT; ++j)
        if ((vm >> j) & 1u) jm = fmaxf(jm, key2f(key[j]));
      if (jm == INFINITY) {
#pragma unroll
        for (int j = 0; j < EPT; ++j) js += (((vm >> j) & 1u) && key2f(key[j]) == INFINITY) ? 1.0f : 0.0f;
      } else if (jm != -INFINITY) {
#pragma unroll
        for (int j = 0; j < EPT; ++j) {  // (a select, not a branch per token; +0 for the others)
          const float e = exp2_ftz(__fmul_rn(__fsub_rn(key2f(key[j]), jm), scale));
          js += ((vm >> j) & 1u) ? e : 0.0f;
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < EPT; ++j)
        if ((vm >> j) & 1u) js += key2f(key[j]);
    }
    warp_joint_partial(jm, js, logits, scale, s_jm, s_js);
  }
  __syncthreads();
  SPLIT_PROF(1);
  uint32_t Tk;
  {
    const uint32_t srt = warp_sort32_desc(lane < kWarps ? s_wt[lane] : 0u, lane);
    Tk = __shfl_sync(0xffffffffu, srt, need - 1);
  }
  // candidates (every valid token >= T): positions from a warp scan and one shared atomic per
  // warp; written while they fit the chunk's slot
  uint64_t* cand = g_cand + static_cast<size_t>(c) * kSplitCap;
  {
    int cge = 0;
#pragma unroll
    for (int j = 0; j < EPT; ++j) cge += ((vm >> j) & 1u) && key[j] >= Tk;
    const int inc = warp_incl_scan_i32(cge, lane);
    const int wtot = __shfl_sync(0xffffffffu, inc, 31);
    int base = 0;
    if (lane == 31 && wtot > 0) base = atomicAdd(&s_n, wtot);
    int pos = __shfl_sync(0xffffffffu, base, 31) + inc - cge;
#pragma unroll
    for (int j = 0; j < EPT; ++j) {
      if (((vm >> j) & 1u) && key[j] >= Tk) {
        if (pos < kSplitCap) cand[pos] = comp_at(j);
        ++pos;
      }
    }
  }
  __syncthreads();
  const int n_ge = s_n;
  int cnt = n_ge;
  uint32_t tau_out = Tk;
  if (n_ge > kSplitCap) {  // (block-uniform, rare) ties at T, or many distinct values above it
    uint32_t cg = 0u, ce = 0u;
#pragma unroll
    for (int j = 0; j < EPT; ++j) {
      if ((vm >> j) & 1u) {
        cg += key[j] > Tk;
        ce += key[j] == Tk;
      }
    }
    uint64_t tot;
    const uint64_t pre = block_excl_scan_u64((static_cast<uint64_t>(cg) << 32) | ce, s_scratch, &tot);
    const int n_gt = static_cast<int>(tot >> 32);
    if (n_gt + k <= kSplitCap) {
      // ties at T: every token above T, then the first max(k - n_gt, 0) ties in index order (token
      // order is vector-major: v, then thread, then lane in the vector)
      const int m = max(k - n_gt, 0);
      int pos = static_cast<int>(pre >> 32);
#pragma unroll
      for (int j = 0; j < EPT; ++j)
        if (((vm >> j) & 1u) && key[j] > Tk) cand[pos++] = comp_at(j);
      if (m > 0) {  // (block-uniform)
        uint64_t pk = 0;
#pragma unroll
        for (int j = 0; j < EPT; ++j)
          if (((vm >> j) & 1u) && key[j] == Tk) pk += 1ull << (16 * (j / EPV));
        uint64_t tot2;
        const uint64_t pre2 = block_excl_scan_u64(pk, s_scratch, &tot2);
        int basev = 0;
#pragma unroll
        for (int v = 0; v < kSplitVec; ++v) {
          int rank = basev + static_cast<int>((pre2 >> (16 * v)) & 0xffffu);
#pragma unroll
          for (int e = 0; e < EPV; ++e) {
            const int j = v * EPV + e;
            if (((vm >> j) & 1u) && key[j] == Tk) {
              if (rank < m) cand[n_gt + rank] = comp_at(j);
              ++rank;
            }
          }
          basev += static_cast<int>((tot2 >> (16 * v)) & 0xffffu);
        }
      }
      cnt = n_gt + m;
    } else {
      // more than kSplitCap - k distinct values above T: an exact select on the chunk first
      const SplitChunkSet<DT> cs{in_row, s0, V, logits};
      const uint64_t t = kth_prefix(cs, k, ssel, kSplitCap - k);
      uint32_t ck = 0u;
#pragma unroll
      for (int j = 0; j < EPT; ++j) ck += (((vm >> j) & 1u) && comp_at(j) >= t) ? 1u : 0u;
      uint64_t tot3;
      int pos = static_cast<int>(block_excl_scan_u64(ck, s_scratch, &tot3));
#pragma unroll
      for (int j = 0; j < EPT; ++j)
        if (((vm >> j) & 1u) && comp_at(j) >= t) cand[pos++] = comp_at(j);
      cnt = static_cast<int>(tot3);
      tau_out = static_cast<uint32_t>(t >> 32);
    }
  }
  SPLIT_PROF(2);
#ifdef FIB_SAMPLING_PROFILE
  if (row == 0 && tid == 0) atomicAdd(&g_fib_prof[10], static_cast<unsigned long long>(cnt));
#endif
  if (tid == 0) {
    g_cnt[c] = cnt;
    g_tau[c] = tau_out;
    if (joint) {
      float cm;
      g_ps[c] = combine_partials(s_jm, s_js, kWarps, logits, scale, &cm);
      g_pm[c] = cm;
    }
  }
  // ---- 3. the last CTA of the row merges. The barrier orders every thread's writes before thread
  // 0's release (cumulative); its acquire and the next barrier order the last CTA's reads after
  // every other CTA's writes. (A __threadfence per thread is a MEMBAR.SC.GPU per warp: slow.)
  __syncthreads();
  SPLIT_PROF(3);
  if (tid == 0) {
    unsigned int prev;
    asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;" : "=r"(prev) : "l"(done) : "memory");
    s_last = prev == static_cast<unsigned int>(C - 1);
    s_n = 0;
  }
  __syncthreads();
  if (!s_last) return;
  SPLIT_PROF(4);
  if (tid < C) {
    s_cnt[tid] = __ldcg(g_cnt + tid);
    s_tau[tid] = __ldcg(g_tau + tid);
    if (joint) {
      s_pm[tid] = __ldcg(g_pm + tid);
      s_ps[tid] = __ldcg(g_ps + tid);
    }
  }
  if (tid == 0) *done = 0u;  // every CTA of the row has counted: ready for the next call
  __syncthreads();
  uint32_t tg32 = 0u;
  for (int i = 0; i < C; ++i) tg32 = max(tg32, s_tau[i]);
  const uint64_t tg = static_cast<uint64_t>(tg32) << 32;
  uint64_t* G = reinterpret_cast<uint64_t*>(dsm);
  // every slot of every chunk at once (independent L2 reads, 4 per thread in flight)
  {
    const int nslots = C * kSplitCap;
    for (int b0 = 0; b0 < nslots; b0 += 4 * kThreads) {
      uint64_t v[4];
      bool ok[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int sl = b0 + q * kThreads + tid;
        ok[q] = sl < nslots && (sl % kSplitCap) < s_cnt[sl / kSplitCap];
        v[q] = ok[q] ? ldcg64(g_cand + sl) : 0ull;
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) split_push(G, &s_n, kSplitG, v[q], ok[q] && v[q] >= tg, lane);
    }
  }
  __syncthreads();
  int n = s_n;
  SPLIT_PROF(5);
#ifdef FIB_SAMPLING_PROFILE
  if (row == 0 && tid == 0) g_fib_prof[11] = static_cast<unsigned long long>(n);
#endif
  int Pk = 32;
  while (Pk < k) Pk <<= 1;
  const int direct = max(Pk, kFilterSortDirect);
  if (n > kSplitG) {  // (rare) select over the workspace, then keep the survivors (<= Pk)
    const SplitWsSet ws{g_cand, s_cnt, C, tg};
    const uint64_t t = kth_prefix(ws, k, ssel, Pk - k);
    if (tid == 0) s_n = 0;
    __syncthreads();
    ws.each([&](uint64_t v, bool valid) { split_push(G, &s_n, kSplitG, v, valid && v >= t, lane); });
    __syncthreads();
    n = s_n;
  } else if (n > direct) {
    Segs sg;
    sg.seg[0] = G;
    sg.cnt[0] = n;
    sg.nseg = 1;
    const uint64_t t = kth_prefix(sg, k, ssel, Pk - k);
    n = compact_ge(G, n, t, &s_new);
  }
  SPLIT_PROF(6);
  int P = 32;
  while (P < n) P <<= 1;
  for (int j = n + tid; j < P; j += kThreads) G[j] = 0ull;
  __syncthreads();
  bitonic_sort_desc(G, P);
  n = min(n, k);
  SPLIT_PROF(7);
  float cm = 0.0f;
  double cs = 0.0;
  if (joint) cs = combine_partials(s_pm, s_ps, C, logits, scale, &cm);
  finish_topk(p, G, n, row, logits, T, scale, use_m, mp, use_p, tp, joint, cm, cs, s_scratch, &s_tot);
  SPLIT_PROF(8);
}

}  // namespace sampling
}  // namespace fib
