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
