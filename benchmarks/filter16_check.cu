// Standalone check of the 16-bit filter kernel (sm_90): filter_kernel<kBF16> alone, without the
// binding, on bf16 logits of V = 50021 (every 16-byte alignment class of a row start), random and
// ascending rows, k = 1 / 50 / 100 / 200 (the seeded first stage, the warp sort, the ranked final
// set) and 1 or 3 CTAs per row, top-p 0.99; every sampled token must lie in the row's top-k (ties
// at the k-th value admitted). It reproduced the ptxas 13.0 miscompile of the rank store in ~40 s
// of build time where the whole library takes ~6 minutes (docs/sampling-journal.md, "A ptxas miscompile").
//
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -DNDEBUG -gencode=arch=compute_90,code=sm_90 \
//        -Ikernels_cuda/include benchmarks/filter16_check.cu -o /tmp/filter16_check
//   /tmp/filter16_check [V] [reps]        (exit status 1 when a token falls outside the top-k)
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "fib/sampling/filter.cuh"

namespace fs = fib::sampling;

static void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::printf("CUDA error (%s): %s\n", what, cudaGetErrorString(e));
    std::exit(2);
  }
}

int main(int argc, char** argv) {
  const int B = 64, V = argc > 1 ? std::atoi(argv[1]) : 50021, reps = argc > 2 ? std::atoi(argv[2]) : 3;
  ck(cudaFuncSetAttribute(fs::filter_kernel<fs::kBF16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          static_cast<int>(fs::kFilterSmem)),
     "cudaFuncSetAttribute");
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<__nv_bfloat16> h(static_cast<size_t>(B) * V);
  std::vector<float> hf(h.size());
  void* d_in = nullptr;
  int64_t* d_out = nullptr;
  ck(cudaMalloc(&d_in, h.size() * 2), "cudaMalloc");
  ck(cudaMalloc(&d_out, B * sizeof(int64_t)), "cudaMalloc");
  long bad_total = 0;
  for (int asc = 0; asc < 2; ++asc) {
    for (float& v : hf) v = nd(rng);
    if (asc)
      for (int r = 0; r < B; ++r) std::sort(hf.begin() + static_cast<size_t>(r) * V, hf.begin() + static_cast<size_t>(r + 1) * V);
    for (size_t i = 0; i < h.size(); ++i) {
      h[i] = __float2bfloat16(hf[i]);
      hf[i] = __bfloat162float(h[i]);
    }
    ck(cudaMemcpy(d_in, h.data(), h.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    for (int k : {1, 50, 100, 200}) {
      std::vector<float> kth(B);
      for (int r = 0; r < B; ++r) {
        std::vector<float> t(hf.begin() + static_cast<size_t>(r) * V, hf.begin() + static_cast<size_t>(r + 1) * V);
        std::nth_element(t.begin(), t.begin() + (k - 1), t.end(), std::greater<float>());
        kth[r] = t[k - 1];
      }
      for (int S : {1, 3}) {
        int bad = 0;
        for (int rep = 0; rep < reps; ++rep) {
          fs::Params p = {};
          p.in = d_in;
          p.in_stride = V;
          p.out_idx = d_out;
          p.B = B;
          p.V = V;
          p.is_logits = 1;
          p.mode = fs::kSample;
          p.elem16 = 1;
          p.top_k_val = k;
          p.has_topk = 1;
          p.top_p_val = 0.99f;
          p.has_topp = 1;
          p.temp_val = 1.0f;
          p.seed_val = 11 + rep;
          p.offset_val = 3;
          ck(fs::launch_filter_rows<fs::kBF16>(p, S, nullptr), "launch_filter_rows");
          ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
          std::vector<int64_t> o(B);
          ck(cudaMemcpy(o.data(), d_out, B * sizeof(int64_t), cudaMemcpyDeviceToHost), "cudaMemcpy");
          for (int r = 0; r < B; ++r)
            bad += (o[r] < 0 || o[r] >= V || hf[static_cast<size_t>(r) * V + o[r]] < kth[r]) ? 1 : 0;
        }
        std::printf("%s k=%3d S=%d: %d of %d draws outside the top-k\n", asc ? "ascending" : "random   ", k, S, bad,
                    B * reps);
        bad_total += bad;
      }
    }
  }
  std::printf("%s\n", bad_total ? "FAIL" : "ok");
  return bad_total ? 1 : 0;
}
