// Span-pass probe (standalone, not part of the package): the cluster kernel's per-thread passes over
// resident keys, timed alone in one CTA of 512 threads (16032 resident fp32 keys: a B=1 V=128256
// slice at S=8). Modes: 0 span_masses' loop as it was (weights4's kind branch inside the loop), 1 the
// top-p rejection check over four candidates, 2 the span loop with the row's kind chosen outside it
// (the shipped span_masses), 3 the check with the kind outside (no gain), 4 the check over two
// candidates (the shipped 4r. pass). Results: benchmarks/results/sampling_topp_chain_h200.json.
// Build: nvcc -O3 -std=c++17 --expt-relaxed-constexpr -DNDEBUG -arch=sm_90 -Ikernels_cuda/include
//        -I<tvm_ffi include> -I<dlpack include> benchmarks/sampling_span_probe.cu
#include <cstdio>
#include <type_traits>
#include "fib/sampling/sampler.cuh"
using namespace fib::sampling;
// The rejection check with the row's kind chosen outside the loop, over the first NC candidates:
// the XOR of their masses of strictly larger keys.
template <int NC, class WC>
__device__ uint64_t check_hoisted(const uint32_t* keys, Span sp, const WC& wc, const uint32_t (&ck)[4]) {
  auto key_at = [&](int i) -> uint32_t { return keys[i]; };
  uint32_t cmin = ck[0];
#pragma unroll
  for (int c = 1; c < NC; ++c) cmin = min(cmin, ck[c]);
  uint64_t A[NC] = {};
  auto body = [&](auto probs_tag) {
    for_span4(keys, true, key_at, sp, [&](const uint32_t (&k)[4], int, int cnt) {
      if (max(max(k[0], k[1]), max(k[2], k[3])) <= cmin) return;
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const uint64_t w = decltype(probs_tag)::value ? weight_probs(k[t], wc) : weight_logits(k[t], wc);
        const uint64_t wt = t < cnt ? w : 0ull;
#pragma unroll
        for (int c = 0; c < NC; ++c) A[c] += k[t] > ck[c] ? wt : 0ull;
      }
    });
  };
  if (wc.kind == 1) body(std::true_type{}); else body(std::false_type{});
  uint64_t x = 0;
#pragma unroll
  for (int c = 0; c < NC; ++c) x ^= A[c];
  return x;
}
template <int MODE>
__global__ void __launch_bounds__(kThreads, 2) kspan(const float* __restrict__ x, int n, unsigned long long* out, int reps, int kind) {
  extern __shared__ uint32_t keys[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) keys[i] = f2key(x[i]);
  __syncthreads();
  WeightCtx wc = make_weight_ctx(1.0f, kind == 0, 1.4426950408889634f);
  const Span sp = thread_span(n);
  auto key_at = [&](int i) -> uint32_t { return keys[i]; };
  uint64_t acc = 0;
  const uint32_t ck[4] = {keys[7], keys[100], keys[2000], keys[5]};
  const uint32_t cmin = min(min(ck[0], ck[1]), min(ck[2], ck[3]));
  unsigned long long t0 = clock64();
  for (int r = 0; r < reps; ++r) {
    if constexpr (MODE == 0) {  // span_masses' loop, all kept
      uint64_t m = 0;
      const uint32_t lo = 0u; const int cut = 0x7fffffff;
      for_span4(keys, true, key_at, sp, [&](const uint32_t (&k)[4], int j, int cnt) {
        uint64_t w[4];
        weights4(k, wc, w);
#pragma unroll
        for (int t = 0; t < 4; ++t) m += (t < cnt && kept_pred(k[t], j + t, lo, cut)) ? w[t] : 0ull;
      });
      acc += m;
    } else if constexpr (MODE == 2) {  // span, kind hoisted out of the loop
      uint64_t m = 0;
      auto body = [&](auto probs_tag) {
        for_span4(keys, true, key_at, sp, [&](const uint32_t (&k)[4], int j, int cnt) {
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            const uint64_t w = decltype(probs_tag)::value ? weight_probs(k[t], wc) : weight_logits(k[t], wc);
            m += t < cnt ? w : 0ull;
          }
        });
      };
      if (wc.kind == 1) body(std::true_type{}); else body(std::false_type{});
      acc += m;
    } else if constexpr (MODE == 3 || MODE == 4) {  // check, kind hoisted, over 4 / 2 candidates
      acc += check_hoisted<MODE == 3 ? 4 : 2>(keys, sp, wc, ck);
    } else {  // the 4r. check loop
      uint64_t A[4] = {0ull, 0ull, 0ull, 0ull};
      for_span4(keys, true, key_at, sp, [&](const uint32_t (&k)[4], int, int cnt) {
        if (max(max(k[0], k[1]), max(k[2], k[3])) <= cmin) return;
        uint64_t w[4];
        weights4(k, wc, w);
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const uint64_t wt = t < cnt ? w[t] : 0ull;
#pragma unroll
          for (int c = 0; c < 4; ++c) A[c] += k[t] > ck[c] ? wt : 0ull;
        }
      });
      acc += A[0] ^ A[1] ^ A[2] ^ A[3];
    }
    __syncthreads();
  }
  unsigned long long t1 = clock64();
  atomicAdd(out, (unsigned long long)acc);
  if (threadIdx.x == 0) atomicAdd(out + 1, (t1 - t0) / reps);
}
int main() {
  const int n = 16032;
  float* h = new float[n];
  uint32_t st = 12345;
  for (int i = 0; i < n; ++i) { st = st * 1664525u + 1013904223u; h[i] = (st >> 8) * (1.0f / 16777216.0f); }
  float* d; unsigned long long* o;
  cudaMalloc(&d, n * 4); cudaMalloc(&o, 16);
  cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice);
  cudaFuncSetAttribute(kspan<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, n * 4);
  cudaFuncSetAttribute(kspan<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, n * 4);
  cudaFuncSetAttribute(kspan<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, n * 4);
  cudaFuncSetAttribute(kspan<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, n * 4);
  cudaFuncSetAttribute(kspan<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, n * 4);
  for (int mode = 0; mode < 5; ++mode)
    for (int kind = 0; kind < 2; ++kind) {
      cudaMemset(o, 0, 16);
      if (mode == 0) kspan<0><<<1, kThreads, n * 4>>>(d, n, o, 100, kind);
      else if (mode == 1) kspan<1><<<1, kThreads, n * 4>>>(d, n, o, 100, kind);
      else if (mode == 2) kspan<2><<<1, kThreads, n * 4>>>(d, n, o, 100, kind);
      else if (mode == 3) kspan<3><<<1, kThreads, n * 4>>>(d, n, o, 100, kind);
      else kspan<4><<<1, kThreads, n * 4>>>(d, n, o, 100, kind);
      cudaError_t e = cudaDeviceSynchronize();
      unsigned long long r[2]; cudaMemcpy(r, o, 16, cudaMemcpyDeviceToHost);
      printf("%s kind=%s: %llu cycles per pass of %d keys (%.2f us at 1.98 GHz) %s\n", mode == 0 ? "span      " : mode == 1 ? "check     " : mode == 2 ? "span-hoist" : mode == 3 ? "chk-hoist " : "chk2-hoist", kind ? "probs" : "logits",
             r[1], n, r[1] / 1980.0, cudaGetErrorString(e));
    }
  return 0;
}
