// fib-runtime sampling: the joint order's whole-row sums from per-thread partials.
// Joint (SGLang) top-p measures the nucleus against the whole row's mass: the streaming kernels keep
// per-thread (max, sum) partials and combine them per warp, per CTA and per cluster here.
#pragma once
#include "fib/sampling/common.cuh"

namespace fib {
namespace sampling {

// Combines n partials (m_i, s_i) of sum exp2((x - m) * scale) (logits: a max and a sum relative to
// it; probs: plain sums, m unused) into one: returns the sum, *m_out its max. Any thread.
__device__ __forceinline__ double combine_partials(const float* m, const double* s, int n, bool logits, float scale,
                                                   float* m_out) {
  float cm = -INFINITY;
  for (int i = 0; i < n; ++i) cm = fmaxf(cm, m[i]);
  double cs = 0.0;
  for (int i = 0; i < n; ++i) {
    if (!logits) cs += s[i];
    else if (cm == INFINITY) cs += (m[i] == INFINITY) ? s[i] : 0.0;
    else if (m[i] != -INFINITY) cs += s[i] * exp2(static_cast<double>(m[i] - cm) * scale);
  }
  *m_out = cm;
  return cs;
}

// One warp's joint partial from its lanes' (jm, js) (logits: a max and a sum of exp2((x - jm) *
// scale); probs: jm unused, a plain sum) into s_jm[warp] / s_js[warp] (lane 0 writes); all lanes.
__device__ __forceinline__ void warp_joint_partial(float jm, float js, bool logits, float scale, float* s_jm,
                                                   double* s_js) {
  float m = jm;
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
  double c = 0.0;
  if (logits) {
    if (jm != -INFINITY && m != INFINITY) c = static_cast<double>(js) * exp2(static_cast<double>(jm - m) * scale);
    else if (m == INFINITY && jm == INFINITY) c = static_cast<double>(js);
  } else {
    c = static_cast<double>(js);
  }
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) c += __shfl_xor_sync(0xffffffffu, c, d);
  if ((threadIdx.x & 31) == 0) {
    s_jm[threadIdx.x >> 5] = m;
    s_js[threadIdx.x >> 5] = c;
  }
}

}  // namespace sampling
}  // namespace fib
