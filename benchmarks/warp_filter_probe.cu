// Warp-private top-k filter probe (standalone, not part of the package; issue 5, k=50 against
// FlashInfer's cake sampler). Question: can the filter kernel's streaming phase run near the
// 4.1 TB/s that plain register loads reach (stream_probe.cu), if it drops the TMA ring and the
// block barrier per 4096-token stage? Nsight put today's loop at ~190 warp instructions per warp
// and stage and 19% of the stall samples at that barrier; its memory skeleton alone takes 94.5 us
// of 109.6 at B=512 V=128256 (sampling_h200.md).
//
// The loop probed here has no block barrier until the slice is done:
//  - each warp streams its own contiguous part of the CTA's slice, 256 fp32 tokens per step
//    (2 x 16-byte loads per lane), with the next DEPTH-1 steps' loads in flight (registers);
//  - a token is a unique composite c = key(x) << 32 | (2^32-1-index); a warp keeps its candidates
//    c >= t in its own shared buffer (512 entries), t = max(its own tau, the CTA's shared tau);
//    one warp vote per step on the raw floats decides whether any lane needs composites;
//  - when its buffer passes 256 entries the warp alone selects its k-th largest (warp radix
//    select, 8-bit digits from the highest differing bit), keeps the entries >= it, and raises
//    the CTA's shared tau with atomicMax (a warp's k-th largest bounds the row's from below, so
//    every warp may filter with the largest of them).
// At the end (one barrier) each CTA writes its entries >= the shared tau; the host checks that
// every row's exact top-k lies among them (the merge, sort and draw of the real kernel would
// follow) and reports their number.
//
// Modes: filter (the loop above), filterq (the same, and after each compaction a warp publishes its
// m-th largest, m = ceil(k/13), and raises the shared tau to the 13th largest of the 16 published
// values: at least 13 m >= k tokens lie above it), vote (loads + the per-step vote against an unreachable
// threshold read from shared memory: the skeleton), load (loads + a max only).
// Result on the H200 (warp_filter_probe_h200.json): every top-k kept, but ~1500 candidates per row
// (a warp's own k-th largest is loose) and 151 us at B=512 V=128256, against 69.7 us for the
// skeleton and 66.8 us for the loads alone (the ring loop's skeleton: ~94.5 us); filterq 138 us
// (1338 candidates per row: its bound stops moving once compactions stop). Grid (S CTAs per row) x B rows, 512
// threads, 2 CTAs per SM (64 KB of buffers + 16 KB of histograms each).
// Modes cta / ctar (2026-12-01, later; warp_filter_probe_cta_h200.json): one CTA-wide buffer and
// threshold without a barrier per step. T0 = a lower bound from every warp's first step (the
// ceil(k/j)-th largest of the warps' j-th largest lane maxima, j = ceil(k/16): >= k tokens lie at
// or above it), one barrier; then each warp streams and appends tokens >= max(T0, shared tau) to
// the shared buffer (one shared atomic per warp and step with a candidate). ctar: the warp whose
// append passes kCtaRef entries selects the k-th largest of what is written so far (unwritten
// entries read 0) and raises the shared tau. Every row's top-k kept (ok = 1 everywhere), but a
// bound from 4096 tokens ranks ~1600th-2800th in a row of 128256, so ~2800 tokens per row are
// appended (cta) and nearly every warp step takes the append path: B=512 V=128256 k=50 105.9 us
// (cta) / 110.9 (ctar: ~2070 appended, 181 left above the final tau; the selecting warp falls
// behind) against 67.8 for the skeleton (vote) and ~109.5 for the filter kernel's whole call.
// V=32000 B=512: cta 37.5, vote 22.8. Not pursued: the appends, not the barrier, set the time
// once the threshold is loose.
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -Xptxas=-v -o warp_filter_probe benchmarks/warp_filter_probe.cu
// Run:   ./warp_filter_probe > results.json   (median of 7 launches, us and TB/s; "ok": sets checked)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr int kStep = 256;          // tokens per warp step (2 float4 per lane)
constexpr int kWCap = 512;          // warp buffer entries
constexpr int kWTrig = kWCap - kStep;  // compact above this: room for one more step
constexpr int kMaxK = 128;          // k <= kMaxK (a compaction leaves k entries)
constexpr int kOutCap = kWarps * kWCap;
enum Mode : int { kFilter = 0, kVote = 1, kLoad = 2, kFilterQ = 3, kCta = 4, kCtaR = 5 };
constexpr int kCtaRef = 768;  // ctar: one warp selects once the shared buffer passes this

__host__ __device__ __forceinline__ uint32_t f2key_u(uint32_t u) { return (u & 0x80000000u) ? ~u : (u | 0x80000000u); }
__device__ __forceinline__ uint32_t f2key(float f) { return f2key_u(__float_as_uint(f)); }
__device__ __forceinline__ float key2f(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
__device__ __forceinline__ uint64_t wmax64(uint64_t v) {
  for (int d = 16; d > 0; d >>= 1) {
    const uint64_t o = __shfl_xor_sync(0xffffffffu, v, d);
    v = o > v ? o : v;
  }
  return v;
}
__device__ __forceinline__ uint64_t wmin64(uint64_t v) {
  for (int d = 16; d > 0; d >>= 1) {
    const uint64_t o = __shfl_xor_sync(0xffffffffu, v, d);
    v = o < v ? o : v;
  }
  return v;
}

// The value of rank r (0 = largest; ties to the lower lane) among lanes 0..n-1 of the warp
// (every lane gets it; all 32 lanes call; lanes >= n take no part).
template <class T>
__device__ __forceinline__ T warp_rank_pick(T v, int n, int r) {
  const int lane = threadIdx.x & 31;
  int rank = 0;
#pragma unroll
  for (int o = 0; o < 32; ++o) {
    const T u = __shfl_sync(0xffffffffu, v, o);
    rank += (o < n && (u > v || (u == v && o < lane))) ? 1 : 0;
  }
  const uint32_t at = __ballot_sync(0xffffffffu, lane < n && rank == r);
  return __shfl_sync(0xffffffffu, v, __ffs(at) - 1);
}

// Exact k-th largest of the n (unique) entries of buf, one warp, hist: 256 words of its own.
__device__ uint64_t warp_kth(const uint64_t* buf, int n, int k, uint32_t* hist) {
  const int lane = threadIdx.x & 31;
  uint64_t mx = 0ull, mn = ~0ull;
  for (int i = lane; i < n; i += 32) {
    const uint64_t v = buf[i];
    mx = v > mx ? v : mx;
    mn = v < mn ? v : mn;
  }
  mx = wmax64(mx);
  mn = wmin64(mn);
  if (mx == mn) return mx;
  const int hb = 63 - __clzll(static_cast<long long>(mx ^ mn));  // highest differing bit
  uint64_t known = (hb == 63) ? 0ull : ~((2ull << hb) - 1ull);    // bits decided so far
  uint64_t prefix = mx & known;
  int shift = hb + 1, kk = k;
  while (shift > 0) {
    const int d = shift < 8 ? shift : 8;
    shift -= d;
    for (int b = lane; b < 256; b += 32) hist[b] = 0u;
    __syncwarp();
    for (int i = lane; i < n; i += 32) {
      const uint64_t v = buf[i];
      if ((v & known) == prefix) atomicAdd(&hist[static_cast<uint32_t>(v >> shift) & ((1u << d) - 1u)], 1u);
    }
    __syncwarp();
    // bins in descending order: lane L holds bins 255-8L .. 248-8L
    uint32_t c[8], s = 0u;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      c[j] = hist[255 - 8 * lane - j];
      s += c[j];
    }
    uint32_t inc = s;
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t t = __shfl_up_sync(0xffffffffu, inc, o);
      if (lane >= o) inc += t;
    }
    const uint32_t before = inc - s;
    const bool mine = before < static_cast<uint32_t>(kk) && static_cast<uint32_t>(kk) <= inc;
    int digit = 0;
    uint32_t above = 0u;
    if (mine) {
      uint32_t acc = before;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (acc + c[j] >= static_cast<uint32_t>(kk)) {
          digit = 255 - 8 * lane - j;
          above = acc;
          break;
        }
        acc += c[j];
      }
    }
    const int src = __ffs(__ballot_sync(0xffffffffu, mine)) - 1;
    digit = __shfl_sync(0xffffffffu, digit, src);
    above = __shfl_sync(0xffffffffu, above, src);
    kk -= static_cast<int>(above);
    prefix |= static_cast<uint64_t>(digit) << shift;
    known |= static_cast<uint64_t>((1u << d) - 1u) << shift;
    __syncwarp();
  }
  return prefix;
}

// keep buf entries >= t, in order, in place; returns the new count (all lanes)
__device__ int warp_compact(uint64_t* buf, int n, uint64_t t) {
  const int lane = threadIdx.x & 31;
  int w = 0;
  for (int b = 0; b < n; b += 32) {
    const int i = b + lane;
    const uint64_t v = i < n ? buf[i] : 0ull;
    const bool keep = i < n && v >= t;
    const uint32_t m = __ballot_sync(0xffffffffu, keep);
    __syncwarp();
    if (keep) buf[w + __popc(m & ((1u << lane) - 1u))] = v;
    w += __popc(m);
    __syncwarp();
  }
  return w;
}

template <int DEPTH, int MODE>
__global__ void __launch_bounds__(kThreads, 2)
    warp_filter(const float* __restrict__ in, int V, int chunk, int k, uint64_t* out, int* out_cnt, int* out_app) {
  extern __shared__ __align__(16) unsigned char dsm[];
  uint64_t* wbuf_all = reinterpret_cast<uint64_t*>(dsm);
  uint32_t* hist_all = reinterpret_cast<uint32_t*>(dsm + kWarps * kWCap * sizeof(uint64_t));
  __shared__ unsigned long long s_tau;
  __shared__ unsigned long long s_q[kWarps];  // filterq: each warp's m-th largest at its last compaction
  __shared__ int s_out, s_cnt;
  __shared__ float s_a[kWarps];
  constexpr bool CTA = MODE == kCta || MODE == kCtaR;
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  const int row = blockIdx.y, rank = blockIdx.x;
  uint64_t* wbuf = wbuf_all + wid * kWCap;
  uint32_t* hist = hist_all + wid * 256;
  if (threadIdx.x == 0) {
    s_tau = MODE == kVote ? ~0ull : 0ull;  // vote: a threshold no token reaches, read at run time
    s_out = 0;
    s_cnt = 0;
  }
  if (threadIdx.x < kWarps) s_q[threadIdx.x] = 0ull;
  if (CTA)  // cta modes: one shared buffer of kOutCap entries; unwritten entries read as 0
    for (int i = threadIdx.x; i < kOutCap; i += kThreads) wbuf_all[i] = 0ull;
  __syncthreads();
  // this warp's part of the CTA's slice: [lo, hi) of the row (multiples of 4)
  const int s0 = rank * chunk, s1 = min(V, s0 + chunk);
  const int per = ((((s1 - s0) + kWarps - 1) / kWarps) + 3) & ~3;
  const int lo = min(s1, s0 + wid * per), hi = min(s1, lo + per);
  const float4* src = reinterpret_cast<const float4*>(in + static_cast<size_t>(row) * V);
  const int nsteps = (hi - lo + kStep - 1) / kStep;
  float4 r[DEPTH][2];
  auto issue = [&](int st, float4 (&dst)[2]) {
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      const int i = lo + st * kStep + v * 128 + lane * 4;
      dst[v] = (st < nsteps && i < hi) ? __ldg(src + (i >> 2)) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
  };
#pragma unroll
  for (int d = 0; d < DEPTH - 1; ++d) issue(d, r[d]);
  int cnt = 0;
  uint64_t own = 0ull;
  float acc = -INFINITY;
  if (CTA) {
    // a CTA-wide lower bound from each warp's first step (8 tokens per lane): a = the j-th largest
    // lane maximum of warp w (>= j of its tokens are >= a), j = ceil(k/16); T0 = the ceil(k/j)-th
    // largest of the 16 warps' a (>= j * ceil(k/j) >= k tokens of the slice are >= T0)
    const float4* q = r[0];
    float mx = fmaxf(fmaxf(fmaxf(q[0].x, q[0].y), fmaxf(q[0].z, q[0].w)), fmaxf(fmaxf(q[1].x, q[1].y), fmaxf(q[1].z, q[1].w)));
    const int j = (k + kWarps - 1) / kWarps;
    const float a = warp_rank_pick(mx, 32, j - 1);
    if (lane == 0) s_a[wid] = a;
    __syncthreads();
    const int m = (k + j - 1) / j;  // <= 16
    const float T0 = warp_rank_pick(lane < kWarps ? s_a[lane] : -INFINITY, kWarps, m - 1);
    own = static_cast<uint64_t>(f2key(T0)) << 32;  // every token >= T0 has a composite >= own
  }
  for (int st0 = 0; st0 < nsteps; st0 += DEPTH) {
#pragma unroll
    for (int ph = 0; ph < DEPTH; ++ph) {
      const int st = st0 + ph;
      if (st < nsteps) {  // (warp-uniform)
        issue(st + DEPTH - 1, r[(ph + DEPTH - 1) % DEPTH]);
        const float4* q = r[ph];
        const float x[8] = {q[0].x, q[0].y, q[0].z, q[0].w, q[1].x, q[1].y, q[1].z, q[1].w};
        float mx = x[0];
#pragma unroll
        for (int j = 1; j < 8; ++j) mx = fmaxf(mx, x[j]);
        if (MODE == kLoad) {
          acc = fmaxf(acc, mx);
        } else {
          const uint64_t shared_tau = *reinterpret_cast<volatile unsigned long long*>(&s_tau);
          const uint64_t t = own > shared_tau ? own : shared_tau;
          const float tf = key2f(static_cast<uint32_t>(t >> 32));
          const bool open = t == 0ull;
          if (CTA) {
            if (__any_sync(0xffffffffu, mx >= tf)) {
              const int base_i = lo + st * kStep + lane * 4;
              uint32_t bits = 0u;
#pragma unroll
              for (int j = 0; j < 8; ++j) {
                const int i = base_i + (j < 4 ? j : 124 + j);
                const uint64_t c = (static_cast<uint64_t>(f2key(x[j])) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
                if (i < hi && x[j] >= tf && c >= t) bits |= 1u << j;
              }
              const int n = __popc(bits);
              int inc = n;
              for (int o = 1; o < 32; o <<= 1) {
                const int u = __shfl_up_sync(0xffffffffu, inc, o);
                if (lane >= o) inc += u;
              }
              const int wtot = __shfl_sync(0xffffffffu, inc, 31);
              if (wtot > 0) {
                int base = 0;
                if (lane == 0) base = atomicAdd(&s_cnt, wtot);
                base = __shfl_sync(0xffffffffu, base, 0);
                int pos = base + inc - n;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                  if ((bits >> j) & 1u) {
                    const int i = base_i + (j < 4 ? j : 124 + j);
                    if (pos < kOutCap)
                      wbuf_all[pos] = (static_cast<uint64_t>(f2key(x[j])) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
                    ++pos;
                  }
                }
                if (MODE == kCtaR && base < kCtaRef && kCtaRef <= base + wtot) {
                  // this warp alone (the one that crossed the mark): the k-th largest of the
                  // entries written so far (unwritten ones read 0: a subset's k-th largest is
                  // still a lower bound) raises the shared tau
                  __syncwarp();
                  const uint64_t q2 = warp_kth(wbuf_all, min(base + wtot, kOutCap), k, hist);
                  if (lane == 0) atomicMax(&s_tau, static_cast<unsigned long long>(q2));
                }
              }
            }
          } else if (__any_sync(0xffffffffu, open || mx >= tf)) {
            const int base_i = lo + st * kStep + lane * 4;  // token of x[j]: base_i + j (j < 4), + 124 (j >= 4)
            uint32_t bits = 0u;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              const int i = base_i + (j < 4 ? j : 124 + j);
              const uint64_t c = (static_cast<uint64_t>(f2key(x[j])) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
              if (i < hi && (open || (x[j] >= tf && c >= t))) bits |= 1u << j;
            }
            const int n = __popc(bits);
            int inc = n;
            for (int o = 1; o < 32; o <<= 1) {
              const int u = __shfl_up_sync(0xffffffffu, inc, o);
              if (lane >= o) inc += u;
            }
            int pos = cnt + inc - n;
            cnt += __shfl_sync(0xffffffffu, inc, 31);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              if ((bits >> j) & 1u) {
                const int i = base_i + (j < 4 ? j : 124 + j);
                wbuf[pos++] = (static_cast<uint64_t>(f2key(x[j])) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
              }
            }
            __syncwarp();
            if (cnt > kWTrig) {
              own = warp_kth(wbuf, cnt, k, hist);
              cnt = warp_compact(wbuf, cnt, own);
              uint64_t tnew = own;
              if (MODE == kFilterQ) {
                // publish this warp's m-th largest (m = ceil(k / 13): >= m of its tokens are >= it);
                // the 13th largest of the 16 published values has >= 13 m >= k tokens above it
                const int m = (k + kWarps - 4) / (kWarps - 3);
                const uint64_t q = warp_kth(wbuf, cnt, m, hist);
                if (lane == 0) *reinterpret_cast<volatile unsigned long long*>(&s_q[wid]) = q;
                __syncwarp();
                const uint64_t v = lane < kWarps ? *reinterpret_cast<volatile unsigned long long*>(&s_q[lane]) : 0ull;
                const uint64_t T = warp_rank_pick(v, kWarps, kWarps - 4);
                tnew = T > own ? T : own;
              }
              if (lane == 0) atomicMax(&s_tau, static_cast<unsigned long long>(tnew));
            }
          }
        }
      }
    }
  }
  if (MODE == kLoad) {
    if (acc == 12345.0f) out_cnt[0] = 1;  // (keeps the loads)
    return;
  }
  __syncthreads();
  const uint64_t t = s_tau;
  if (MODE == kVote) {
    if (cnt > 0 && lane == 0) atomicAdd(&out_cnt[row], cnt);
    return;
  }
  uint64_t* o = out + (static_cast<size_t>(row) * gridDim.x + rank) * kOutCap;
  if (CTA) {
    const uint64_t tt = t > own ? t : own;
    const int c = min(s_cnt, kOutCap);
    for (int b = 0; b < c; b += kThreads) {
      const int i = b + threadIdx.x;
      const bool keep = i < c && wbuf_all[i] >= tt;
      const uint32_t m = __ballot_sync(0xffffffffu, keep);
      int base = 0;
      if (lane == 0 && m) base = atomicAdd(&s_out, __popc(m));
      base = __shfl_sync(0xffffffffu, base, 0);
      if (keep) o[base + __popc(m & ((1u << lane) - 1u))] = wbuf_all[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      out_cnt[row * gridDim.x + rank] = s_cnt > kOutCap ? -1 : s_out;  // -1: the buffer overflowed
      out_app[row * gridDim.x + rank] = s_cnt;
    }
    return;
  }
  // (filter, filterq)
  // the CTA's candidates >= the shared tau -> out[row][rank * kOutCap ...]
  for (int b = 0; b < cnt; b += 32) {
    const int i = b + lane;
    const bool keep = i < cnt && wbuf[i] >= t;
    const uint32_t m = __ballot_sync(0xffffffffu, keep);
    int base = 0;
    if (lane == 0 && m) base = atomicAdd(&s_out, __popc(m));
    base = __shfl_sync(0xffffffffu, base, 0);
    if (keep) o[base + __popc(m & ((1u << lane) - 1u))] = wbuf[i];
  }
  __syncthreads();
  if (threadIdx.x == 0) out_cnt[row * gridDim.x + rank] = s_out;
}

// deterministic inputs: flat (uniform in (0,1)) or peaked (u^16), fp32, rows of V
__global__ void fill(float* x, size_t n, int peaked, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed ^ static_cast<uint32_t>(i >> 32) * 0x85EBCA77u;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    h *= 0x297A2D39u;
    h ^= h >> 15;
    float u = (static_cast<float>(h >> 8) + 0.5f) * (1.0f / 16777216.0f);
    if (peaked) {
      u = u * u;
      u = u * u;
      u = u * u;
      u = u * u;
    }
    x[i] = u;
  }
}

static int g_sms = 0;
static bool g_first = true;

template <int DEPTH, int MODE>
void run(const float* d_in, std::vector<float>& h_in, int B, int V, int S, int k, int peaked, uint64_t* d_out,
         int* d_cnt, int* d_app) {
  if (k < 1 || k > kMaxK || V % 4 != 0) {
    fprintf(stderr, "probe: needs 1 <= k <= %d and V %% 4 == 0\n", kMaxK);
    exit(1);
  }
  const int chunk = (((V + S - 1) / S) + 3) & ~3;
  const size_t smem = kWarps * kWCap * sizeof(uint64_t) + kWarps * 256 * sizeof(uint32_t);
  auto kern = warp_filter<DEPTH, MODE>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int rep = 0; rep < 8; ++rep) {
    CK(cudaMemset(d_cnt, 0, sizeof(int) * B * S));
    CK(cudaEventRecord(e0));
    kern<<<dim3(S, B), kThreads, smem>>>(d_in, V, chunk, k, d_out, d_cnt, d_app);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (rep) ts.push_back(ms * 1000.f);
  }
  std::sort(ts.begin(), ts.end());
  const double us = ts[ts.size() / 2];
  const double tbs = static_cast<double>(B) * V * 4 / (us * 1e-6) / 1e12;
  // check (filter mode): every row's exact top-k is among its CTAs' candidates
  int ok = -1;
  double avg = 0.0;
  double app = 0.0;
  if (MODE == kCta || MODE == kCtaR) {
    std::vector<int> a(static_cast<size_t>(B) * S);
    CK(cudaMemcpy(a.data(), d_app, sizeof(int) * B * S, cudaMemcpyDeviceToHost));
    for (int v : a) app += v;
    app /= B;
  }
  if (MODE != kVote && MODE != kLoad) {
    ok = 1;
    std::vector<int> cnt(static_cast<size_t>(B) * S);
    CK(cudaMemcpy(cnt.data(), d_cnt, sizeof(int) * B * S, cudaMemcpyDeviceToHost));
    std::vector<uint64_t> cand(static_cast<size_t>(S) * kOutCap);
    std::vector<uint64_t> all(V);
    for (int b = 0; b < B; ++b) {
      CK(cudaMemcpy(cand.data(), d_out + static_cast<size_t>(b) * S * kOutCap, sizeof(uint64_t) * S * kOutCap,
                    cudaMemcpyDeviceToHost));
      std::vector<uint64_t> got;
      for (int r = 0; r < S; ++r) {
        const int n = cnt[static_cast<size_t>(b) * S + r];
        if (n < 0 || n > kOutCap) {
          ok = 0;
          continue;
        }
        got.insert(got.end(), cand.begin() + static_cast<size_t>(r) * kOutCap,
                   cand.begin() + static_cast<size_t>(r) * kOutCap + n);
      }
      avg += static_cast<double>(got.size());
      for (int i = 0; i < V; ++i) {
        uint32_t u;
        std::memcpy(&u, &h_in[static_cast<size_t>(b) * V + i], 4);
        all[i] = (static_cast<uint64_t>(f2key_u(u)) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
      }
      std::nth_element(all.begin(), all.begin() + (k - 1), all.end(), std::greater<uint64_t>());
      std::sort(got.begin(), got.end());
      for (int j = 0; j < k && ok; ++j)
        if (!std::binary_search(got.begin(), got.end(), all[j])) ok = 0;
    }
    avg /= B;
  }
  printf("%s{\"mode\": \"%s\", \"depth\": %d, \"B\": %d, \"V\": %d, \"S\": %d, \"k\": %d, \"peaked\": %d, "
         "\"us\": %.2f, \"TBps\": %.3f, \"ok\": %d, \"cands_per_row\": %.1f, \"appended_per_row\": %.1f}\n",
         g_first ? "" : ",", MODE == kFilter ? "filter" : MODE == kFilterQ ? "filterq" : MODE == kVote ? "vote" : MODE == kCta ? "cta" : MODE == kCtaR ? "ctar" : "load", DEPTH, B, V, S, k, peaked,
         us, tbs, ok, avg, app);
  fflush(stdout);
  g_first = false;
}

int main() {
  CK(cudaSetDevice(0));
  CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("{\"device\": \"%s\", \"sms\": %d, \"runs\": [\n", prop.name, g_sms);
  const int Bmax = 512, Vs[3] = {32000, 128256, 151936};
  float* d_in;
  uint64_t* d_out;
  int *d_cnt, *d_app;
  CK(cudaMalloc(&d_app, sizeof(int) * Bmax * 4));
  CK(cudaMalloc(&d_in, sizeof(float) * Bmax * 151936));
  CK(cudaMalloc(&d_out, sizeof(uint64_t) * Bmax * 4 * kOutCap));
  CK(cudaMalloc(&d_cnt, sizeof(int) * Bmax * 4));
  std::vector<float> h;
  for (int peaked = 0; peaked < 2; ++peaked) {
    for (int V : Vs) {
      const size_t n = static_cast<size_t>(Bmax) * V;
      fill<<<1024, 256>>>(d_in, n, peaked, 1234u + V);
      CK(cudaDeviceSynchronize());
      h.resize(n);
      CK(cudaMemcpy(h.data(), d_in, sizeof(float) * n, cudaMemcpyDeviceToHost));
      for (int B : {64, 256, 512}) {
        // S: CTAs per row as the filter kernel (2 per row below 132 rows)
        const int S = B >= g_sms ? 1 : 2;
        run<2, kCta>(d_in, h, B, V, S, 50, peaked, d_out, d_cnt, d_app);
        run<2, kCtaR>(d_in, h, B, V, S, 50, peaked, d_out, d_cnt, d_app);
        run<3, kCtaR>(d_in, h, B, V, S, 50, peaked, d_out, d_cnt, d_app);
        run<2, kVote>(d_in, h, B, V, S, 50, peaked, d_out, d_cnt, d_app);
        if (peaked == 0 && V == 128256) {
          run<2, kCtaR>(d_in, h, B, V, S, 128, peaked, d_out, d_cnt, d_app);
          run<2, kFilterQ>(d_in, h, B, V, S, 50, peaked, d_out, d_cnt, d_app);
          run<3, kVote>(d_in, h, B, V, S, 50, peaked, d_out, d_cnt, d_app);
          run<2, kLoad>(d_in, h, B, V, S, 50, peaked, d_out, d_cnt, d_app);
        }
      }
    }
  }
  printf("]}\n");
  return 0;
}
