// Streaming-bandwidth probe (standalone, not part of the package): how fast can CTAs read a large
// fp32 array and reduce it (a max per CTA, the work of a threshold pass), as a function of the
// bytes each SM has in flight? Answers the design question of the sampling kernels (issue 5):
// the split kernel streamed ~11 GB/s per SM with 64 KB in flight per SM at B=512; the filter
// kernel's TMA ring holds 40 KB per CTA.
//
// Variants, each over N = 512 x 128256 fp32 (263 MB, the B=512 V=128256 grid point):
//  regs   : THREADS threads, each VEC independent 16-byte loads in flight, one chunk per CTA
//           (grid = N / chunk), CTAs per SM limited by padding dynamic shared memory;
//  pipe   : persistent CTAs (2 per SM), each loops over chunks with the next chunk's VEC loads
//           issued before reducing the current one (register double buffer);
//  tma    : one cp.async.bulk per CTA of BYTES into shared memory (mbarrier), then the reduce
//           from shared memory; CTAs per SM from the shared-memory footprint.
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -o stream_probe benchmarks/stream_probe.cu
// Run:   ./stream_probe > results.json   (median of 7 timed launches per variant, GB/s)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <vector>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

__device__ __forceinline__ float vmax(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }

template <int THREADS>
__device__ __forceinline__ void block_max_out(float m, float* out) {
  __shared__ float s[THREADS / 32];
  for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
  if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float r = s[0];
    for (int i = 1; i < THREADS / 32; ++i) r = fmaxf(r, s[i]);
    out[blockIdx.x] = r;
  }
}

template <int THREADS, int VEC>
__global__ void __launch_bounds__(THREADS) k_regs(const float4* __restrict__ in, float* out) {
  extern __shared__ unsigned char pad[];
  (void)pad;
  const float4* base = in + static_cast<size_t>(blockIdx.x) * THREADS * VEC;
  float4 r[VEC];
#pragma unroll
  for (int v = 0; v < VEC; ++v) r[v] = __ldg(base + v * THREADS + threadIdx.x);
  float m = -INFINITY;
#pragma unroll
  for (int v = 0; v < VEC; ++v) m = fmaxf(m, vmax(r[v]));
  block_max_out<THREADS>(m, out);
}

template <int THREADS, int VEC>
__global__ void __launch_bounds__(THREADS) k_pipe(const float4* __restrict__ in, float* out, int nchunks) {
  float4 a[VEC], b[VEC];
  float m = -INFINITY;
  int c = blockIdx.x;
  if (c < nchunks) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) a[v] = __ldg(in + static_cast<size_t>(c) * THREADS * VEC + v * THREADS + threadIdx.x);
  }
  for (; c < nchunks; c += gridDim.x) {
    const int nx = c + gridDim.x;
    if (nx < nchunks) {
#pragma unroll
      for (int v = 0; v < VEC; ++v) b[v] = __ldg(in + static_cast<size_t>(nx) * THREADS * VEC + v * THREADS + threadIdx.x);
    }
#pragma unroll
    for (int v = 0; v < VEC; ++v) m = fmaxf(m, vmax(a[v]));
#pragma unroll
    for (int v = 0; v < VEC; ++v) a[v] = b[v];
  }
  block_max_out<THREADS>(m, out);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

template <int THREADS>
__global__ void __launch_bounds__(THREADS) k_tma(const float* __restrict__ in, float* out, int bytes) {
  extern __shared__ __align__(16) unsigned char buf[];
  __shared__ __align__(8) uint64_t bar;
  const char* src = reinterpret_cast<const char*>(in) + static_cast<size_t>(blockIdx.x) * bytes;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(&bar)), "r"(bytes) : "memory");
    for (int o = 0; o < bytes; o += 32768) {
      const int nb = min(32768, bytes - o);
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       smem_u32(buf + o)),
                   "l"(src + o), "r"(nb), "r"(smem_u32(&bar))
                   : "memory");
    }
  }
  __syncthreads();
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(smem_u32(&bar))
                 : "memory");
  }
  float m = -INFINITY;
  const float4* s4 = reinterpret_cast<const float4*>(buf);
  for (int i = threadIdx.x; i < bytes / 16; i += THREADS) m = fmaxf(m, vmax(s4[i]));
  block_max_out<THREADS>(m, out);
}

template <class F>
float median_ms(F&& launch) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  launch();
  launch();
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int r = 0; r < 7; ++r) {
    CK(cudaEventRecord(e0));
    launch();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[3];
}

static size_t g_bytes;
static int g_sms;
static bool g_first = true;
static void emit(const char* kind, int threads, int vec_or_kb, int per_sm_req, int per_sm_got, float ms) {
  const double gbs = g_bytes / (ms * 1e-3) / 1e9;
  printf("%s  {\"kind\": \"%s\", \"threads\": %d, \"vec_or_kb\": %d, \"ctas_per_sm_req\": %d, \"ctas_per_sm\": %d, "
         "\"us\": %.2f, \"GBps\": %.0f, \"GBps_per_sm\": %.2f}\n",
         g_first ? "" : ",", kind, threads, vec_or_kb, per_sm_req, per_sm_got, ms * 1e3, gbs, gbs / g_sms);
  g_first = false;
  fflush(stdout);
}

template <int THREADS, int VEC>
void run_regs(const float* d_in, float* d_out, int optin) {
  const size_t chunk = static_cast<size_t>(THREADS) * VEC * 4;  // floats
  const int grid = static_cast<int>(g_bytes / 4 / chunk);
  CK(cudaFuncSetAttribute(k_regs<THREADS, VEC>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - 2048));
  for (int per : {1, 2, 4, 8, 16}) {
    if (per * THREADS > 2048) continue;
    const int pad = per == 16 ? 0 : (228 * 1024) / per - 4096;  // bytes of dynamic smem to cap CTAs per SM
    if (pad > optin - 2048) continue;
    int got = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&got, k_regs<THREADS, VEC>, THREADS, pad > 0 ? pad : 0));
    const float ms = median_ms([&] {
      k_regs<THREADS, VEC><<<grid, THREADS, pad > 0 ? pad : 0>>>(reinterpret_cast<const float4*>(d_in), d_out);
    });
    CK(cudaGetLastError());
    emit("regs", THREADS, VEC, per, got, ms);
  }
}

template <int THREADS, int VEC>
void run_pipe(const float* d_in, float* d_out) {
  const size_t chunk = static_cast<size_t>(THREADS) * VEC * 4;
  const int nchunks = static_cast<int>(g_bytes / 4 / chunk);
  for (int per : {1, 2, 4}) {
    if (per * THREADS > 2048) continue;
    const int grid = g_sms * per;
    const float ms = median_ms([&] {
      k_pipe<THREADS, VEC><<<grid, THREADS>>>(reinterpret_cast<const float4*>(d_in), d_out, nchunks);
    });
    CK(cudaGetLastError());
    emit("pipe", THREADS, VEC, per, per, ms);
  }
}

template <int THREADS>
void run_tma(const float* d_in, float* d_out, int optin) {
  CK(cudaFuncSetAttribute(k_tma<THREADS>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - 1024));
  for (int kb : {16, 32, 48, 64, 96, 128, 192}) {
    const int bytes = kb * 1024;
    if (bytes > optin - 1024) continue;
    const int grid = static_cast<int>(g_bytes / bytes);
    int got = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&got, k_tma<THREADS>, THREADS, bytes));
    const float ms = median_ms([&] { k_tma<THREADS><<<grid, THREADS, bytes>>>(d_in, d_out, bytes); });
    CK(cudaGetLastError());
    emit("tma", THREADS, kb, got, got, ms);
  }
}

int main() {
  int dev = 0, optin = 0;
  CK(cudaSetDevice(dev));
  CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  const size_t n = static_cast<size_t>(512) * 128256;
  g_bytes = n * 4;
  g_bytes -= g_bytes % (192 * 1024);  // every variant divides it evenly
  float *d_in, *d_out;
  CK(cudaMalloc(&d_in, g_bytes));
  CK(cudaMalloc(&d_out, (g_bytes / 4096 + 1) * sizeof(float)));
  CK(cudaMemset(d_in, 0, g_bytes));
  printf("{\"device\": \"%s\", \"sms\": %d, \"bytes\": %zu, \"runs\": [\n", prop.name, g_sms, g_bytes);
  run_regs<512, 1>(d_in, d_out, optin);
  run_regs<512, 2>(d_in, d_out, optin);
  run_regs<512, 4>(d_in, d_out, optin);
  run_regs<512, 8>(d_in, d_out, optin);
  run_regs<256, 4>(d_in, d_out, optin);
  run_regs<256, 8>(d_in, d_out, optin);
  run_regs<256, 16>(d_in, d_out, optin);
  run_pipe<512, 4>(d_in, d_out);
  run_pipe<512, 8>(d_in, d_out);
  run_pipe<256, 8>(d_in, d_out);
  run_pipe<256, 16>(d_in, d_out);
  run_tma<512>(d_in, d_out, optin);
  run_tma<256>(d_in, d_out, optin);
  printf("]}\n");
  return 0;
}
