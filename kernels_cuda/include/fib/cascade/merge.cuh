// fib-runtime cascade attention: attention-state merge kernels.
//
// An attention state is (v, s): v the softmax-weighted value average over an index set, s the
// log-sum-exp of its scores in BASE 2 (FlashInfer's convention: lse2 = m + log2(sum exp2(x - m)),
// with the scores already scaled by log2(e)). Empty states have s = -inf; merging two empty
// states yields v = 0, s = -inf (FlashInfer clamps (-inf)-(-inf) with max(., -inf)).
#pragma once
#include "common.cuh"

namespace fib {
namespace cascade {

// Two-state merge weights, exactly FlashInfer's formula.
__device__ __forceinline__ void merge2_weights(float sa, float sb, float& wa, float& wb,
                                               float& s_out) {
  float m = fmaxf(sa, sb);
  float ea = ptx_exp2(fmaxf(sa - m, kNegInf));
  float eb = ptx_exp2(fmaxf(sb - m, kNegInf));
  float d = ea + eb;
  wa = d > 0.f ? ea / d : 0.f;
  wb = d > 0.f ? eb / d : 0.f;
  s_out = ptx_log2(d) + m;
}

// Thread layout of the merge kernels: blockDim = (tpr, rpb) with tpr = head_dim / 8 threads per
// row (one 16-byte vector each) and rpb rows per block; each thread handles UNROLL rows
// (row = (blockIdx.x * UNROLL + u) * rpb + threadIdx.y), all loads issued before any math.
template <typename T, int UNROLL, bool STREAM = false>
__global__ void __launch_bounds__(512) merge_state_kernel(
    const T* __restrict__ va, const float* __restrict__ sa, const T* __restrict__ vb,
    const float* __restrict__ sb, T* __restrict__ vo, float* __restrict__ so, int num_rows) {
  const int tpr = blockDim.x, rpb = blockDim.y, cx = threadIdx.x;
  float a[UNROLL][8], b[UNROLL][8], xa[UNROLL], xb[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int row = (blockIdx.x * UNROLL + u) * rpb + threadIdx.y;
    if (row < num_rows) {
      const int64_t e = (static_cast<int64_t>(row) * tpr + cx) * 8;
      xa[u] = __ldg(sa + row);
      xb[u] = __ldg(sb + row);
      load8<T, STREAM>(va + e, a[u]);
      load8<T, STREAM>(vb + e, b[u]);
    }
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int row = (blockIdx.x * UNROLL + u) * rpb + threadIdx.y;
    if (row >= num_rows) continue;
    const int64_t e = (static_cast<int64_t>(row) * tpr + cx) * 8;
    float wa, wb, sm;
    merge2_weights(xa[u], xb[u], wa, wb, sm);
    float o[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = wa * a[u][i] + wb * b[u][i];
    store8<T, STREAM>(vo + e, o);
    if (so != nullptr && cx == 0) so[row] = sm;
  }
}

// Persistent variant of merge_state: a grid of (SMs x resident blocks) walks the rows with a
// grid stride, the next row's loads issued before the current row's math (no wave tail).
template <typename T>
__global__ void __launch_bounds__(256) merge_state_persistent_kernel(
    const T* __restrict__ va, const float* __restrict__ sa, const T* __restrict__ vb,
    const float* __restrict__ sb, T* __restrict__ vo, float* __restrict__ so, int num_rows) {
  const int tpr = blockDim.x, cx = threadIdx.x;
  const int stride = gridDim.x * blockDim.y;
  int row = blockIdx.x * blockDim.y + threadIdx.y;
  float a[8], b[8], xa = 0.f, xb = 0.f;
  if (row < num_rows) {
    const int64_t e = (static_cast<int64_t>(row) * tpr + cx) * 8;
    xa = __ldg(sa + row);
    xb = __ldg(sb + row);
    load8<T>(va + e, a);
    load8<T>(vb + e, b);
  }
  for (; row < num_rows; row += stride) {
    const int nxt = row + stride;
    float na[8], nb[8], nxa = 0.f, nxb = 0.f;
    if (nxt < num_rows) {
      const int64_t e = (static_cast<int64_t>(nxt) * tpr + cx) * 8;
      nxa = __ldg(sa + nxt);
      nxb = __ldg(sb + nxt);
      load8<T>(va + e, na);
      load8<T>(vb + e, nb);
    }
    float wa, wb, sm;
    merge2_weights(xa, xb, wa, wb, sm);
    float o[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = wa * a[i] + wb * b[i];
    store8<T>(vo + (static_cast<int64_t>(row) * tpr + cx) * 8, o);
    if (so != nullptr && cx == 0) so[row] = sm;
    xa = nxa;
    xb = nxb;
#pragma unroll
    for (int i = 0; i < 8; ++i) a[i] = na[i], b[i] = nb[i];
  }
}

// ---------------------------------------------------------------- bandwidth variants (8+)
// 16-byte global load / store with an L2 cache policy (createpolicy.fractional evict_first) and
// the L2::256B prefetch-size hint on loads (read-only path, no L1 allocation). sm_80+.
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint4 ld16_hint(const void* ptr, uint64_t pol) {
  uint4 u;
  asm volatile(
      "ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
      : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
      : "l"(ptr), "l"(pol));
  return u;
}
__device__ __forceinline__ void st16_hint(void* ptr, uint4 u, uint64_t pol) {
  asm volatile("st.global.L1::no_allocate.L2::cache_hint.v4.u32 [%0], {%1,%2,%3,%4}, %5;" ::"l"(ptr),
               "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w), "l"(pol)
               : "memory");
}
template <typename T>
__device__ __forceinline__ void unpack8(uint4 u, float* f) {
  float2 a = TypeTraits<T>::unpack(u.x), b = TypeTraits<T>::unpack(u.y),
         c = TypeTraits<T>::unpack(u.z), d = TypeTraits<T>::unpack(u.w);
  f[0] = a.x; f[1] = a.y; f[2] = b.x; f[3] = b.y;
  f[4] = c.x; f[5] = c.y; f[6] = d.x; f[7] = d.y;
}
template <typename T>
__device__ __forceinline__ uint4 pack8(const float* f) {
  uint4 u;
  u.x = TypeTraits<T>::pack(f[0], f[1]);
  u.y = TypeTraits<T>::pack(f[2], f[3]);
  u.z = TypeTraits<T>::pack(f[4], f[5]);
  u.w = TypeTraits<T>::pack(f[6], f[7]);
  return u;
}

// merge_state with cache-policy hints (variants 11, 12): layout and UNROLL as merge_state_kernel;
// loads ld.global.nc + L2 evict_first policy + L2::256B prefetch; stores optionally with the same
// evict_first policy (SHINT), else plain.
template <typename T, int UNROLL, bool SHINT>
__global__ void __launch_bounds__(256) merge_state_hint_kernel(
    const T* __restrict__ va, const float* __restrict__ sa, const T* __restrict__ vb,
    const float* __restrict__ sb, T* __restrict__ vo, float* __restrict__ so, int num_rows) {
  const int tpr = blockDim.x, rpb = blockDim.y, cx = threadIdx.x;
  const uint64_t pol = l2_policy_evict_first();
  uint4 a[UNROLL], b[UNROLL];
  float xa[UNROLL], xb[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int row = (blockIdx.x * UNROLL + u) * rpb + threadIdx.y;
    if (row < num_rows) {
      const int64_t e = (static_cast<int64_t>(row) * tpr + cx) * 8;
      xa[u] = __ldg(sa + row);
      xb[u] = __ldg(sb + row);
      a[u] = ld16_hint(va + e, pol);
      b[u] = ld16_hint(vb + e, pol);
    }
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int row = (blockIdx.x * UNROLL + u) * rpb + threadIdx.y;
    if (row >= num_rows) continue;
    const int64_t e = (static_cast<int64_t>(row) * tpr + cx) * 8;
    float wa, wb, sm, fa[8], fb[8], o[8];
    merge2_weights(xa[u], xb[u], wa, wb, sm);
    unpack8<T>(a[u], fa);
    unpack8<T>(b[u], fb);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = wa * fa[i] + wb * fb[i];
    if (SHINT)
      st16_hint(vo + e, pack8<T>(o), pol);
    else
      *reinterpret_cast<uint4*>(vo + e) = pack8<T>(o);
    if (so != nullptr && cx == 0) so[row] = sm;
  }
}

// ---- TMA (sm_90 bulk async copy) primitives; bodies compiled only for sm_90+.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void mbar_fence_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@!P1 bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}
template <bool HINT>
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes,
                                         uint32_t bar, uint64_t pol) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (HINT)
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
        "[%1], %2, [%3], %4;" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(pol)
        : "memory");
  else
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            dst),
        "l"(src), "r"(bytes), "r"(bar)
        : "memory");
#endif
}
template <bool HINT>
__device__ __forceinline__ void bulk_s2g(void* dst, uint32_t src, uint32_t bytes, uint64_t pol) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (HINT)
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(
                     dst),
                 "r"(src), "r"(bytes), "l"(pol)
                 : "memory");
  else
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
#endif
}
template <int N>
__device__ __forceinline__ void bulk_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void fence_proxy_async_smem() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// Shared-memory bytes of merge_state_tma_kernel: STAGES x (va tile, vb tile, sa, sb), two
// output tiles, STAGES mbarriers. tile_rows is a multiple of 4 (16-byte s copies).
__host__ __device__ inline int merge_tma_smem_bytes(int stages, int tile_rows, int row_bytes) {
  const int tile = tile_rows * row_bytes;
  return stages * (2 * tile + 8 * tile_rows) + 2 * tile + 8 * stages;
}

// merge_state through TMA bulk copies (variants 8, 9, 10), sm_90. blockDim.x = 256 (1-D).
// The rows are cut into tiles of tile_rows rows (tile_rows % 4 == 0); CTA b handles tiles
// b, b + gridDim.x, ... through a STAGES-deep ring: thread 0 issues cp.async.bulk global->shared
// of the va / vb tiles and of the 16-byte-aligned head of the sa / sb tile (a tail of < 4 rows is
// read from global), completion on the stage's mbarrier; all threads merge from shared memory into
// one of two output tiles, which thread 0 writes back with cp.async.bulk shared->global (bulk
// group); s_out is stored directly. HINT: L2 evict_first cache policy on every bulk copy.
// Requires 16-byte aligned va / vb / vo / sa / sb (checked by the launcher).
// Fallback below sm_90 (never launched there by the host): a plain grid-stride loop.
template <typename T, int STAGES, bool HINT>
__global__ void __launch_bounds__(256) merge_state_tma_kernel(
    const T* __restrict__ va, const float* __restrict__ sa, const T* __restrict__ vb,
    const float* __restrict__ sb, T* __restrict__ vo, float* __restrict__ so, int num_rows,
    int tpr, int tile_rows) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, nthr = blockDim.x;
  const int row_bytes = tpr * 16;
  const int tile_bytes = tile_rows * row_bytes;
  const int stage_bytes = 2 * tile_bytes + 8 * tile_rows;
  uint8_t* out_base = smem + STAGES * stage_bytes;
  const uint32_t smem0 = smem_u32(smem);
  const uint32_t bar0 = smem0 + STAGES * stage_bytes + 2 * tile_bytes;
  const int num_tiles = (num_rows + tile_rows - 1) / tile_rows;
  uint64_t pol = 0;
  if (HINT) pol = l2_policy_evict_first();
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) mbar_init(bar0 + 8 * s, 1);
    mbar_fence_init();
  }
  __syncthreads();

  auto issue = [&](int k) {  // thread 0 only
    const int tile = blockIdx.x + k * gridDim.x;
    if (tile >= num_tiles) return;
    const int s = k % STAGES;
    const int start = tile * tile_rows;
    const int rows = min(tile_rows, num_rows - start);
    const uint32_t vbytes = static_cast<uint32_t>(rows) * row_bytes;
    const int srows = rows & ~3;
    const uint32_t bar = bar0 + 8 * s;
    const uint32_t st = smem0 + s * stage_bytes;
    mbar_expect_tx(bar, 2 * vbytes + 8 * srows);
    const int64_t e = static_cast<int64_t>(start) * tpr * 8;
    bulk_g2s<HINT>(st, va + e, vbytes, bar, pol);
    bulk_g2s<HINT>(st + tile_bytes, vb + e, vbytes, bar, pol);
    if (srows > 0) {
      bulk_g2s<HINT>(st + 2 * tile_bytes, sa + start, 4 * srows, bar, pol);
      bulk_g2s<HINT>(st + 2 * tile_bytes + 4 * tile_rows, sb + start, 4 * srows, bar, pol);
    }
  };
  if (tid == 0) {
#pragma unroll
    for (int k = 0; k < STAGES; ++k) issue(k);
  }
  for (int k = 0;; ++k) {
    const int tile = blockIdx.x + k * gridDim.x;
    if (tile >= num_tiles) break;
    const int s = k % STAGES;
    const int start = tile * tile_rows;
    const int rows = min(tile_rows, num_rows - start);
    const int srows = rows & ~3;
    mbar_wait(bar0 + 8 * s, (k / STAGES) & 1);
    const uint8_t* st = smem + s * stage_bytes;
    const float* ssa = reinterpret_cast<const float*>(st + 2 * tile_bytes);
    const float* ssb = ssa + tile_rows;
    uint8_t* ob = out_base + (k & 1) * tile_bytes;
    const int nchunks = rows * tpr;
    for (int c = tid; c < nchunks; c += nthr) {
      const int r = c / tpr;
      float xa, xb;
      if (r < srows) {
        xa = ssa[r];
        xb = ssb[r];
      } else {
        xa = __ldg(sa + start + r);
        xb = __ldg(sb + start + r);
      }
      float wa, wb, sm, fa[8], fb[8], o[8];
      merge2_weights(xa, xb, wa, wb, sm);
      unpack8<T>(*reinterpret_cast<const uint4*>(st + 16 * c), fa);
      unpack8<T>(*reinterpret_cast<const uint4*>(st + tile_bytes + 16 * c), fb);
#pragma unroll
      for (int i = 0; i < 8; ++i) o[i] = wa * fa[i] + wb * fb[i];
      *reinterpret_cast<uint4*>(ob + 16 * c) = pack8<T>(o);
      if (so != nullptr && c - r * tpr == 0) so[start + r] = sm;
    }
    fence_proxy_async_smem();  // make this thread's output-tile writes visible to the bulk copy
    // output tile (k+1)&1 was last read by the store of tile k-1: finished before the barrier
    if (tid == 0) bulk_wait_read<0>();
    __syncthreads();  // stage s fully consumed, output tile complete
    if (tid == 0) {
      bulk_s2g<HINT>(vo + static_cast<int64_t>(start) * tpr * 8,
                     smem0 + STAGES * stage_bytes + (k & 1) * tile_bytes,
                     static_cast<uint32_t>(rows) * row_bytes, pol);
      issue(k + STAGES);
    }
  }
  if (tid == 0) bulk_wait<0>();
#else
  // pre-sm_90 fallback (the launcher never selects this kernel there)
  const int64_t nchunks = static_cast<int64_t>(num_rows) * tpr;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < nchunks;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(c / tpr);
    float wa, wb, sm, fa[8], fb[8], o[8];
    merge2_weights(__ldg(sa + row), __ldg(sb + row), wa, wb, sm);
    load8<T>(va + c * 8, fa);
    load8<T>(vb + c * 8, fb);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = wa * fa[i] + wb * fb[i];
    store8<T>(vo + c * 8, o);
    if (so != nullptr && c - static_cast<int64_t>(row) * tpr == 0) so[row] = sm;
  }
#endif
}

// In place: (v, s) <- (v, s) (+) (v_other, s_other); rows whose token has mask == 0 untouched.
template <typename T, int UNROLL, bool STREAM = false>
__global__ void __launch_bounds__(512) merge_state_in_place_kernel(
    T* __restrict__ v, float* __restrict__ s, const T* __restrict__ vb,
    const float* __restrict__ sb, const uint8_t* __restrict__ mask, int num_rows, int num_heads) {
  const int tpr = blockDim.x, rpb = blockDim.y, cx = threadIdx.x;
  float a[UNROLL][8], b[UNROLL][8], xa[UNROLL], xb[UNROLL];
  bool ok[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int row = (blockIdx.x * UNROLL + u) * rpb + threadIdx.y;
    ok[u] = row < num_rows && (mask == nullptr || mask[row / num_heads] != 0);
    if (ok[u]) {
      const int64_t e = (static_cast<int64_t>(row) * tpr + cx) * 8;
      xa[u] = s[row];
      xb[u] = __ldg(sb + row);
      load8<T, STREAM>(v + e, a[u]);
      load8<T, STREAM>(vb + e, b[u]);
    }
  }
  // every thread of a row reads s[row] before its chunk-0 thread (maybe another warp) writes it
  __syncthreads();
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    if (!ok[u]) continue;
    const int row = (blockIdx.x * UNROLL + u) * rpb + threadIdx.y;
    const int64_t e = (static_cast<int64_t>(row) * tpr + cx) * 8;
    float wa, wb, sm;
    merge2_weights(xa[u], xb[u], wa, wb, sm);
    float o[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = wa * a[u][i] + wb * b[u][i];
    store8<T, STREAM>(v + e, o);
    if (cx == 0) s[row] = sm;
  }
}

// n-ary merge over num_states states with general strides (elements). Row r = token * H + head.
// v(state i of row r) = v + token*v_ts + i*v_ss + head*v_hs; s likewise. Output (TOut) at
// vo + token*o_ts + head*o_hs, so[token*H + head] (contiguous [n, H]).
// Matches FlashInfer's MergeStatesKernel: 0 states -> (0, -inf); 1 state -> copy; else online
// merge with m=-inf, d=1 start and normalisation by 1/d (0 if d == 0).
template <typename TIn, typename TOut>
__global__ void __launch_bounds__(256) merge_states_kernel(
    const TIn* __restrict__ v, const float* __restrict__ s, TOut* __restrict__ vo,
    float* __restrict__ so, int num_rows, int num_heads, int num_states, int64_t v_ts,
    int64_t v_ss, int64_t v_hs, int64_t s_ts, int64_t s_ss, int64_t o_ts, int64_t o_hs) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= num_rows) return;
  const int chunk = threadIdx.x;
  const int64_t tok = row / num_heads;
  const int head = row - static_cast<int>(tok) * num_heads;
  const TIn* vp = v + tok * v_ts + (int64_t)head * v_hs + chunk * 8;
  const float* sp = s + tok * s_ts + head;
  TOut* op = vo + tok * o_ts + (int64_t)head * o_hs + chunk * 8;
  float o[8];
  float out_s;
  if (num_states == 0) {
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = 0.f;
    out_s = kNegInf;
  } else if (num_states == 1) {
    load8<TIn>(vp, o);
    out_s = sp[0];
  } else {
    float m = kNegInf, d = 1.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = 0.f;
    int i = 0;
    for (; i + 1 < num_states; i += 2) {
      float x0 = sp[(int64_t)i * s_ss], x1 = sp[(int64_t)(i + 1) * s_ss];
      float v0[8], v1[8];
      load8<TIn>(vp + (int64_t)i * v_ss, v0);
      load8<TIn>(vp + (int64_t)(i + 1) * v_ss, v1);
      {
        float mp = m;
        m = fmaxf(mp, x0);
        float f1 = ptx_exp2(fmaxf(mp - m, kNegInf)), f2 = ptx_exp2(fmaxf(x0 - m, kNegInf));
        d = d * f1 + f2;
#pragma unroll
        for (int j = 0; j < 8; ++j) o[j] = o[j] * f1 + v0[j] * f2;
      }
      {
        float mp = m;
        m = fmaxf(mp, x1);
        float f1 = ptx_exp2(fmaxf(mp - m, kNegInf)), f2 = ptx_exp2(fmaxf(x1 - m, kNegInf));
        d = d * f1 + f2;
#pragma unroll
        for (int j = 0; j < 8; ++j) o[j] = o[j] * f1 + v1[j] * f2;
      }
    }
    if (i < num_states) {
      float x0 = sp[(int64_t)i * s_ss];
      float v0[8];
      load8<TIn>(vp + (int64_t)i * v_ss, v0);
      float mp = m;
      m = fmaxf(mp, x0);
      float f1 = ptx_exp2(fmaxf(mp - m, kNegInf)), f2 = ptx_exp2(fmaxf(x0 - m, kNegInf));
      d = d * f1 + f2;
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = o[j] * f1 + v0[j] * f2;
    }
    float r = d > 0.f ? 1.f / d : 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] *= r;
    out_s = m + ptx_log2(d);
  }
  store8<TOut>(op, o);
  if (so != nullptr && chunk == 0) so[row] = out_s;
}

}  // namespace cascade
}  // namespace fib
