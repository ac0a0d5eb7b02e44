// fib-runtime sampling kernels: shared helpers (keys, fixed point, Philox, cluster access).
#pragma once
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define FIB_HAS_CLUSTER 1
#else
#define FIB_HAS_CLUSTER 0
#endif
// 1: the two-pass kernel's large-k rows that draw in reject_tail take their exact top k straight
// from the merge's segments into reject_tail's token order (sort_members_by_index, reject_tail.cuh):
// the select's threshold exact at once (no slack, no second select), its first traversal's maximum
// for the weights (kth_prefix<true>), no append into a set, no pass for the maximum, no copy before
// the counting sort. The same set in the same order, so the same token. Off (0) until it has run on
// a GPU: with 0 the preprocessed source is the one before it (docs/sampling-journal.md, "The fused
// tail, written but not run")
#ifndef FIB_TWOPASS_FUSED_TAIL
#define FIB_TWOPASS_FUSED_TAIL 0
#endif

namespace fib {
namespace sampling {

constexpr int kThreads = 512;              // threads per CTA
constexpr int kWarps = kThreads / 32;      // 16
constexpr int kBins = 2048;                // 11-bit radix digits: 11/11/10
constexpr int kBinsPerThread = kBins / kThreads;
constexpr int kMaxCluster = 8;
// Fixed-point scale of the sampling weights: w in [0,1] -> floor(w * 2^44). A row of up to
// 2^18.x tokens sums below 2^63. Tokens whose weight relative to the row maximum is below 2^-44
// (logits more than 30.5*T below the maximum) get weight 0 and are never drawn.
constexpr float kFixScale = 17592186044416.0f;  // 2^44
constexpr double kFixInv = 1.0 / 17592186044416.0;

enum DType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };
enum Mode : int { kSample = 0, kRenormProbs = 1, kMaskLogits = 2 };

// ---- order-preserving keys: a > b (floats, no NaN) <=> key(a) > key(b). Key 0 never occurs
// for sanitised inputs (NaN is mapped to -inf or 0 first).
__device__ __forceinline__ uint32_t f2key(float f) {
  uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key2f(uint32_t k) {
  uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  return __uint_as_float(u);
}

// NaN -> -inf (logits) or 0 (probs); negative probs -> 0; -0 -> +0.
__device__ __forceinline__ float sanitize(float v, bool logits) {
  if (v != v) v = logits ? -INFINITY : 0.0f;
  if (!logits && v < 0.0f) v = 0.0f;
  if (v == 0.0f) v = 0.0f;
  return v;
}

// f2key(sanitize(x, LOGITS)) of an fp32 x given by its bits, in integer operations (the float
// compares of sanitize and f2key's branch cost ~11 instructions per token; this 3 for probs, 7 for
// logits). Same key for every bit pattern (tests/test_sampling_keys.py replays both over all 2^32).
template <bool LOGITS>
__device__ __forceinline__ uint32_t key_of_bits(uint32_t u) {
  if constexpr (LOGITS) {
    const uint32_t a = u & 0x7fffffffu;                                     // |x|
    const uint32_t s = static_cast<uint32_t>(static_cast<int32_t>(u) >> 31);  // all ones if x < 0
    const uint32_t key = a == 0u ? 0x80000000u : (u ^ (s | 0x80000000u));   // (-0 -> +0)
    return a > 0x7f800000u ? 0x007fffffu : key;                             // NaN -> -inf
  } else {
    return 0x80000000u | (u <= 0x7f800000u ? u : 0u);  // NaN, negatives and -0 -> +0
  }
}

// The largest key_of_bits<LOGITS> of a 16-byte vector's four fp32 bit patterns, from their float
// maximum: fmaxf ignores a NaN (whose key is the least key of either kind: -inf's for logits, +0's
// for probs), orders +-0 alike (one key) and subnormals exactly (no FTZ here); probs clamp at +0
// (negatives -> +0). 5 (probs) / 10 (logits) instructions against 15 / 31 for four keys and their
// maximum (tests/test_sampling_keys.py replays it against the maximum of the keys).
template <bool LOGITS>
__device__ __forceinline__ uint32_t vec_max_key(uint4 q) {
  const float m = fmaxf(fmaxf(__uint_as_float(q.x), __uint_as_float(q.y)), fmaxf(__uint_as_float(q.z), __uint_as_float(q.w)));
  if constexpr (LOGITS) {
    return key_of_bits<true>(__float_as_uint(m));
  } else {
    return 0x80000000u | __float_as_uint(fmaxf(m, 0.0f));
  }
}

template <int DT>
__device__ __forceinline__ float load_elem(const void* base, int64_t i) {
  if constexpr (DT == kF32) {
    return __ldg(reinterpret_cast<const float*>(base) + i);
  } else {
    unsigned short u = __ldg(reinterpret_cast<const unsigned short*>(base) + i);
    if constexpr (DT == kBF16) {
      return __uint_as_float(static_cast<uint32_t>(u) << 16);
    } else {
      return __half2float(__ushort_as_half(u));
    }
  }
}

// ---- weights in fixed point
struct WeightCtx {
  float m;      // logits: row max; probs: row max
  float scale;  // logits: log2(e)/T ; probs: 1/max
  int kind;     // 0 logits, 1 probs, 2 max is +inf (uniform over +inf), 3 degenerate (all zero)
};

// The weights of a row whose maximum is mval; logit_scale = log2(e)/T (logits only).
__device__ __forceinline__ WeightCtx make_weight_ctx(float mval, bool logits, float logit_scale) {
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
      wc.scale = logit_scale;
    }
  } else if (!(mval > 0.0f)) {
    wc.kind = 3;
  } else {
    wc.kind = 1;
    wc.scale = __fdiv_rn(1.0f, mval);
  }
  return wc;
}

// min-p threshold value: p >= min_p * p_max (probs), l >= l_max + T ln(min_p) (logits).
__device__ __forceinline__ float min_p_threshold(const WeightCtx& wc, bool logits, float T, float mp) {
  return logits ? (wc.kind == 0 ? __fadd_rn(wc.m, __fmul_rn(T, logf(mp))) : wc.m) : __fmul_rn(mp, wc.m);
}

// 2^x by the SFU alone (ex2.approx.ftz: results below 2^-126 flush to 0). exp2f is the same SFU
// operation for x >= -126 and adds a fix-up for subnormal results (a compare, two predicated
// multiplies per call; sm_90 SASS). Used where a subnormal cannot matter: a fixed-point weight
// (floor(w * 2^44) is 0 for any w < 2^-82) and the joint sums of the filter, split and streaming
// kernels (each thread's sum holds its own maximum's 1.0).
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The fixed-point weight of a key for one row kind (weight_of dispatches on c.kind; loops that
// hoist the warp-uniform kind out of their body call these directly).
__device__ __forceinline__ uint64_t fixed_weight(float w) { return __float2ull_rz(__fmul_rn(w, kFixScale)); }
__device__ __forceinline__ uint64_t weight_logits(uint32_t key, const WeightCtx& c) {
  return fixed_weight(exp2_ftz(__fmul_rn(__fsub_rn(key2f(key), c.m), c.scale)));
}
__device__ __forceinline__ uint64_t weight_probs(uint32_t key, const WeightCtx& c) {
  return fixed_weight(__fmul_rn(key2f(key), c.scale));
}
__device__ __forceinline__ uint64_t weight_of(uint32_t key, const WeightCtx& c) {
  if (c.kind == 0) return weight_logits(key, c);
  if (c.kind == 1) return weight_probs(key, c);
  return fixed_weight((c.kind == 2 && key2f(key) == INFINITY) ? 1.0f : 0.0f);
}
// weight_of for a kind fixed at compile time (KIND 1 probs, 0 logits, 2 any other: weight_of)
template <int KIND>
__device__ __forceinline__ uint64_t weight_kind(uint32_t key, const WeightCtx& c) {
  if constexpr (KIND == 1) return weight_probs(key, c);
  else if constexpr (KIND == 0) return weight_logits(key, c);
  else return weight_of(key, c);
}
// Calls f(std::integral_constant<int, KIND>{}) with the row's kind, so that a loop inside f
// branches on it once instead of once per key (the warp-uniform branch of weight_of inside a loop
// kept the keys' loads and conversions from overlapping).
template <class F>
__device__ __forceinline__ void with_weight_kind(const WeightCtx& c, F&& f) {
  if (c.kind == 1) f(std::integral_constant<int, 1>{});
  else if (c.kind == 0) f(std::integral_constant<int, 0>{});
  else f(std::integral_constant<int, 2>{});
}

// ---- Philox4x32-10 (Salmon et al., SC'11), same constants as Random123 / curand.
__host__ __device__ __forceinline__ void philox4x32_10(uint32_t key0, uint32_t key1, uint32_t c[4]) {
  const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#pragma unroll
  for (int r = 0; r < 10; ++r) {
#if defined(__CUDA_ARCH__)
    uint32_t hi0 = __umulhi(M0, c[0]), lo0 = M0 * c[0];
    uint32_t hi1 = __umulhi(M1, c[2]), lo1 = M1 * c[2];
#else
    uint64_t p0 = static_cast<uint64_t>(M0) * c[0], p1 = static_cast<uint64_t>(M1) * c[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
#endif
    uint32_t n0 = hi1 ^ c[1] ^ key0, n2 = hi0 ^ c[3] ^ key1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
    key0 += W0;
    key1 += W1;
  }
}

// Philox counter tags ("FIB1".."FIB3"): the row's draw; the rejection top-p candidates of the first
// round (tags 1 and 2, two 64-bit numbers each); the draw after rejected candidates. Rejection
// rounds j >= 1 (of kRejRounds) use "FIR\0" + 2j and + 2j + 1.
constexpr uint32_t kTagDraw = 0x46494231u, kTagCand = 0x46494232u, kTagRetry = 0x46494233u;
constexpr uint32_t kTagRound = 0x46495200u;
constexpr int kRejRounds = 4;
// 128 random bits for (seed, offset, row, tag): counter = (offset lo, offset hi, row, tag), key = seed.
__device__ __forceinline__ void row_random128(uint64_t seed, uint64_t offset, uint32_t row, uint32_t tag,
                                              uint64_t* r0, uint64_t* r1) {
  uint32_t c[4] = {static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32), row, tag};
  philox4x32_10(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), c);
  *r0 = (static_cast<uint64_t>(c[0]) << 32) | c[1];
  *r1 = (static_cast<uint64_t>(c[2]) << 32) | c[3];
}
// The four candidate randoms of rejection round j: tags kTagDraw / kTagCand for round 0 (the row's
// draw block and the next), kTagRound + 2j / + 2j + 1 after it.
__device__ __forceinline__ void round_randoms(uint64_t seed, uint64_t offset, uint32_t row, int round,
                                              uint64_t (&r)[4]) {
  row_random128(seed, offset, row, round == 0 ? kTagDraw : kTagRound + 2u * round, &r[0], &r[1]);
  row_random128(seed, offset, row, round == 0 ? kTagCand : kTagRound + 2u * round + 1u, &r[2], &r[3]);
}
// 64 random bits for (seed, offset, row): the first half of row_random128's tag-kTagDraw block.
__device__ __forceinline__ uint64_t row_random64(uint64_t seed, uint64_t offset, uint32_t row,
                                                 uint32_t tag = kTagDraw) {
  uint64_t r0, r1;
  row_random128(seed, offset, row, tag, &r0, &r1);
  return r0;
}

// ---- cluster helpers (a cluster of 1 on pre-Hopper builds)
__device__ __forceinline__ uint32_t cl_rank() {
#if FIB_HAS_CLUSTER
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
#else
  return 0;
#endif
}
__device__ __forceinline__ uint32_t cl_size() {
#if FIB_HAS_CLUSTER
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
#else
  return 1;
#endif
}
// Phase timestamps of row 0 / rank 0 (globaltimer ns) of the filter kernel or of sample_row, for
// profiling builds only
// (nvcc -DFIB_SAMPLING_PROFILE; read with the exported prof_read()).
#ifdef FIB_SAMPLING_PROFILE
__device__ unsigned long long g_fib_prof[40];
// slots 32-39: per-warp maxima over the CTA of row 0 / rank 0 (raw: clock cycles or globaltimer ns),
// zeroed at the row's start by sample_row; any lane 0 of that CTA
#define FIB_PROF_WMAX(i, v)                                                                   \
  do {                                                                                        \
    if ((threadIdx.x & 31) == 0 && blockIdx.y == 0 && cl_rank() == 0) atomicMax(&g_fib_prof[i], (v)); \
  } while (0)
#define FIB_GTIME(t_) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_))
// thread 0 of the CTAs where `cond` holds records slot i
#define FIB_PROF_WHEN(cond, i)                                           \
  do {                                                                   \
    if (threadIdx.x == 0 && (cond)) {                                    \
      unsigned long long t_;                                             \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));             \
      g_fib_prof[i] = t_;                                                \
    }                                                                    \
  } while (0)
#define FIB_PROF(i) FIB_PROF_WHEN(blockIdx.y == 0 && cl_rank() == 0, i)
// thread 0 of every CTA (rows < 1024, ranks < 8): event e (0..3) of CTA (row, rank)
__device__ unsigned long long g_fib_cta[1024 * 8 * 4];
#define FIB_PROF_CTA(e)                                                                  \
  do {                                                                                   \
    if (threadIdx.x == 0 && blockIdx.y < 1024) {                                         \
      unsigned long long t_;                                                             \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                             \
      g_fib_cta[(blockIdx.y * 8 + cl_rank()) * 4 + (e)] = t_;                            \
    }                                                                                    \
  } while (0)
#define FIB_PROF_ADD(i, v) \
  do { if (blockIdx.y == 0 && threadIdx.x == 0 && cl_rank() == 0) g_fib_prof[i] += (v); } while (0)
#define FIB_PROF_IF(cond, i) \
  do { if (cond) FIB_PROF(i); } while (0)
// any thread of row 0 (e.g. the one thread that rescans the drawn span)
#define FIB_PROF_ROW(i)                                                  \
  do {                                                                   \
    if (blockIdx.y == 0) {                                               \
      unsigned long long t_;                                             \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));             \
      g_fib_prof[i] = t_;                                                \
    }                                                                    \
  } while (0)
#else
#define FIB_PROF_WMAX(i, v) \
  do {                    \
  } while (0)
#define FIB_PROF_CTA(e) \
  do {                  \
  } while (0)
#define FIB_PROF_WHEN(cond, i) \
  do {                         \
  } while (0)
#define FIB_PROF_ROW(i) \
  do {                  \
  } while (0)
#define FIB_PROF(i) \
  do {              \
  } while (0)
#define FIB_PROF_ADD(i, v) \
  do {                     \
  } while (0)
#define FIB_PROF_IF(cond, i) \
  do {                     \
  } while (0)
#endif

// Programmatic dependent launch (sm_90; the host's FIB_SAMPLING_PDL): a kernel launched with
// programmatic stream serialization may become resident before the kernel ahead of it on the stream
// has finished. pdl_enter(), the first thing such a kernel does, waits until that kernel has
// completed and its writes are visible (griddepcontrol.wait; before it the kernel touches no global
// memory), then lets the kernel behind it launch (which waits in turn, so it never reads a token
// before this kernel has written it). Where the launch did not ask for it, both return at once.
__device__ __forceinline__ void pdl_enter() {
#if FIB_HAS_CLUSTER
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void cl_sync() {
#if FIB_HAS_CLUSTER
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  __syncthreads();
#endif
}
__device__ __forceinline__ void cl_arrive() {
#if FIB_HAS_CLUSTER
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
// An arrive that publishes nothing (a CTA has started, or has finished reading the others' shared
// memory): .release compiles to MEMBAR.ALL.CTA + MEMBAR.ALL.GPU, which waits for every memory
// operation of the thread still in flight, global loads included.
__device__ __forceinline__ void cl_arrive_relaxed() {
#if FIB_HAS_CLUSTER
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cl_wait() {
#if FIB_HAS_CLUSTER
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
template <class T>
__device__ __forceinline__ T* cl_remote(T* p, uint32_t rank) {
#if FIB_HAS_CLUSTER
  return cooperative_groups::this_cluster().map_shared_rank(p, rank);
#else
  (void)rank;
  return p;
#endif
}

// ---- mbarriers and 1-D TMA bulk copies (sm_90)
#if FIB_HAS_CLUSTER
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
// CLUSTER: acquire at cluster scope (an mbarrier that other CTAs complete, st_async below)
template <bool CLUSTER = false>
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = smem_u32(bar);
  uint32_t done = 0;
  while (!done) {
    if constexpr (CLUSTER) {
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(a), "r"(parity)
          : "memory");
    } else {
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(a), "r"(parity)
          : "memory");
    }
  }
}
// 8 bytes global -> shared without a register (cp.async; the thread waits only at cp_async_wait_all)
__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// the shared::cluster address of p in the CTA of rank `rank`
__device__ __forceinline__ uint32_t cl_addr(const void* p, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_u32(p)), "r"(rank));
  return r;
}
// a store into another CTA's shared memory that completes its bytes on that CTA's mbarrier (no fence,
// no cluster barrier: the receiver waits on the mbarrier's phase)
__device__ __forceinline__ void st_async_u64(uint32_t addr, uint64_t v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];" ::"r"(addr), "l"(v), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void st_async_u32(uint32_t addr, uint32_t v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr), "r"(v), "r"(bar)
               : "memory");
}
// four u32 (16 bytes, addr 16-byte aligned) into another CTA's shared memory, as st_async_u64
__device__ __forceinline__ void st_async_v4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(addr),
               "r"(a), "r"(b), "r"(c), "r"(d), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void tma_load_1d(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}
#endif

// ---- warp / block reductions and scans (kThreads threads, all participate)
__device__ __forceinline__ uint64_t warp_sum_u64(uint64_t v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}
// inclusive prefix sum of v over the warp's lanes (all 32 lanes)
__device__ __forceinline__ int warp_incl_scan_i32(int v, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int o = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += o;
  }
  return v;
}
__device__ __forceinline__ uint64_t warp_incl_scan_u64(uint64_t v, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    uint64_t o = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += o;
  }
  return v;
}
// exclusive prefix over threads in index order; *total gets the block total. scratch: kWarps u64.
// The warp sums are scanned across lanes (lane i holds warp i's), not summed by every thread: one
// load and a shuffle scan per thread instead of kWarps loads and ~4 kWarps integer instructions.
__device__ __forceinline__ uint64_t block_excl_scan_u64(uint64_t v, uint64_t* scratch, uint64_t* total) {
  static_assert(kWarps <= 32, "one warp sum per lane");
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const uint64_t inc = warp_incl_scan_u64(v, lane);
  if (lane == 31) scratch[w] = inc;
  __syncthreads();
  uint64_t ws = lane < kWarps ? scratch[lane] : 0ull;
#pragma unroll
  for (int d = 1; d < kWarps; d <<= 1) {  // (inclusive scan of the warp sums over lanes 0..kWarps-1)
    const uint64_t o = __shfl_up_sync(0xffffffffu, ws, d);
    if (lane >= d) ws += o;
  }
  __syncthreads();  // (every warp has read scratch: a later call may write it)
  *total = __shfl_sync(0xffffffffu, ws, kWarps - 1);
  const uint64_t before = __shfl_sync(0xffffffffu, ws, (w + 31) & 31);  // (warp w - 1's inclusive sum)
  return (w == 0 ? 0ull : before) + inc - v;
}

}  // namespace sampling
}  // namespace fib
