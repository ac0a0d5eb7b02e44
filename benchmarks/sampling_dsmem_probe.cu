// DSMEM probe (standalone, not part of the package): what a cluster exchange costs on the GPU, the
// shapes the sampling kernels use to hand candidate sets and counts between the CTAs of a row.
// One cluster of S CTAs (512 threads, one per SM); each mode runs R rounds in a loop and the kernel
// reports the mean cycles per round (clock64 of rank 0, thread 0). Modes:
//   0 barrier only: barrier.cluster.arrive.release + wait.acquire (cl_sync)
//   1 barrier with a relaxed arrive (no release fence)
//   2 push counts: thread 0 stores one u64 into each of the S ranks, then cl_sync (2a.'s counts)
//   3 push sets: NP threads of ranks > 0 store one u64 each into rank 0, then cl_sync (the
//     two-pass merge's push mode; the cluster kernel's pushed-set variant)
//   4 pull sets: cl_sync, then NP threads of rank 0 load one u64 each from rank (i % (S-1)) + 1,
//     then a block barrier (2a.'s gather)
//   5 pull counts: cl_sync, then thread r < S of every rank loads one u64 from rank r (sum_ranks)
//   6 local: a block barrier only (reference)
// Build: nvcc -O3 -std=c++17 -arch=sm_90 benchmarks/sampling_dsmem_probe.cu -o dsmem_probe
// Prints JSON: per (S, mode, NP) the mean ns per round (cycles / the SM clock in GHz).
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
namespace cg = cooperative_groups;
__device__ __forceinline__ void cl_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void cl_sync_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
}
__global__ void __launch_bounds__(512, 1) kx(int mode, int np, int rounds, unsigned long long* out) {
  __shared__ uint64_t area[4096];
  __shared__ uint64_t cnt[8];
  cg::cluster_group cl = cg::this_cluster();
  const uint32_t rank = cl.block_rank(), S = cl.num_blocks();
  const int tid = threadIdx.x;
  for (int i = tid; i < 4096; i += 512) area[i] = i;
  if (tid < 8) cnt[tid] = 0;
  cl.sync();
  uint64_t acc = 0;
  const long long t0 = clock64();
  for (int r = 0; r < rounds; ++r) {
    if (mode == 0) {
      cl_sync();
    } else if (mode == 1) {
      cl_sync_relaxed();
    } else if (mode == 2) {
      if (tid == 0)
        for (uint32_t q = 0; q < S; ++q) *cl.map_shared_rank(&cnt[rank], q) = r;
      cl_sync();
      acc += cnt[(r + 1) % S];
    } else if (mode == 3) {
      if (rank > 0 && tid < np) cl.map_shared_rank(area, 0u)[(rank - 1) * np + tid] = r + tid;
      cl_sync();
      if (rank == 0 && tid < np) acc += area[tid];
    } else if (mode == 4) {
      cl_sync();
      if (rank == 0 && tid < np) acc += cl.map_shared_rank(area, 1u + tid % (S - 1))[tid];
      __syncthreads();
      cl_sync_relaxed();  // (the pulled ranks stay until rank 0 has read: the kernel's arrive / wait)
    } else if (mode == 5) {
      cl_sync();
      if (tid < static_cast<int>(S)) acc += *cl.map_shared_rank(&cnt[tid], tid);
      __syncthreads();
      cl_sync_relaxed();
    } else {
      __syncthreads();
    }
  }
  const long long t1 = clock64();
  if (acc == 0x123456789ull) out[100] = acc;
  if (rank == 0 && tid == 0) out[blockIdx.x / S] = static_cast<unsigned long long>(t1 - t0);
  cl.sync();
}
int main() {
  unsigned long long* out;
  cudaMalloc(&out, 8192);
  int clk_khz = 0;
  cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0);
  const double ghz = clk_khz / 1e6;
  const int rounds = 1000;
  printf("{\"sm_clock_ghz\": %.3f, \"rows\": [\n", ghz);
  bool first = true;
  for (int S : {2, 8}) {
    for (int mode = 0; mode <= 6; ++mode) {
      for (int np : {1, 8, 64}) {
        if (mode != 3 && mode != 4 && np != 1) continue;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(S, 1, 1);
        cfg.blockDim = dim3(512, 1, 1);
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = S;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        cudaLaunchKernelEx(&cfg, kx, mode, np, 10, out);  // warm-up
        cudaLaunchKernelEx(&cfg, kx, mode, np, rounds, out);
        cudaDeviceSynchronize();
        unsigned long long c = 0;
        cudaMemcpy(&c, out, 8, cudaMemcpyDeviceToHost);
        printf("%s{\"S\": %d, \"mode\": %d, \"np\": %d, \"cycles_per_round\": %.1f, \"ns_per_round\": %.1f}\n",
               first ? "" : ",", S, mode, np, (double)c / rounds, (double)c / rounds / ghz);
        first = false;
      }
    }
  }
  printf("], \"err\": \"%s\"}\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
