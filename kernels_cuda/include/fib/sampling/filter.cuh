// fib-runtime sampling: one-pass filtered top-k sampler (sm_90: TMA ring + thread-block cluster).
//
// For top-k sampling with k <= kFilterMaxK (the common case: k = 20..2048), every filter the row
// needs after the top-k (renormalisation, min-p, top-p, the draw) only looks at the k kept tokens,
// so the row is read exactly once:
//  1. S CTAs (a cluster; S = 1 for large batches) split the row. Each streams its slice from HBM
//     in 4096-token stages: fp32 rows through a ring of shared-memory stages filled by TMA bulk
//     copies (cp.async.bulk + mbarrier, one block barrier per stage), 16-bit rows through two
//     register buffers per thread (the next two stages in flight) with no barrier per stage
//     (warps run ahead independently and meet only to compact; see the loop).
//  2. Each token becomes the unique 64-bit composite c = key << 32 | (2^32-1-index) (value
//     descending, lower index first: the documented tie rule). A token can only matter if
//     c >= tau, tau = the k-th largest composite of this slice's buffer at its last compaction; a
//     warp first tests its raw values against tau's float value in one vote (NaN, negative
//     probabilities and -0 all compare below it), and only warps with a possible candidate build
//     composites and append them to a shared-memory buffer (one shared atomic per warp). When the
//     buffer passes the trigger, an exact radix select raises tau to the current k-th largest and
//     compacts the buffer to k entries. Rows with k <= kSeedMaxK start tau from the first
//     stage's lane maxima (seed_tau; rows of one CTA: the first two stages'), so that stage
//     appends ~k tokens instead of all 4096 and its compaction (~4-6 us) is gone.
//  3. Rank 0 of the cluster selects the top-k among the S local sets (pushed whole and back to
//     back into its idle ring over DSMEM when they fit, offsets reserved by a DSMEM atomic, else
//     compacted first or read remotely): sets of at most max(Pk, 256) entries (Pk: k rounded up
//     to a power of two) are sorted whole, larger ones first cut to at most Pk by a select that
//     stops early; the first k of the sorted order are the top-k (sets of 65-256 entries are ranked
//     by counting instead of sorted: sort_desc_top). It then runs the same tail as
//     the other paths (min-p, exact top-p on integer prefix sums in either order, one Philox draw
//     per row): the same token as the other kernels.
// Radix selects start at the highest bit in which the candidates differ (min/max first), so
// similar values (peaked or flat rows) do not pile into one histogram bin. Rows this kernel does
// not cover (no top-k, k >= V, k > kFilterMaxK, greedy temperature) run the general algorithm
// (sample_row, slices read from global memory).
// Measured on the H200 (benchmarks/results/sampling_h200.md): ~1.8x the memory floor at B=512.
// Nsight Compute (fp32, B=512 V=128256 k=50): the SMs issue on 59% of cycles, ~190 warp instructions
// per warp and stage, 19% of the warps' stall samples wait at the stage barrier (the slowest warp
// of each stage); profiled mbarrier waits are < 4 us per row. Instructions and the barrier, not
// memory, bound the kernel today.
#pragma once
#include "fib/sampling/sampler.cuh"
#include "fib/sampling/select.cuh"
#include "fib/sampling/joint_sums.cuh"

namespace fib {
namespace sampling {

constexpr int kFilterMaxK = 2048;                    // = kCand: finish_sorted holds 4 per thread
constexpr int kFilterPer = 8;                        // tokens per thread per ring stage
constexpr int kFilterStage = kThreads * kFilterPer;  // 4096 tokens per stage
constexpr int kFilterCap = 2 * kFilterStage;         // candidate buffer: 8192 u64 (64 KB)
constexpr int kFilterTrigger = kFilterCap - kFilterStage;  // compact above this (>= kFilterMaxK)
// 2 fp32 stages (16-bit rows stream through registers; the ring then only holds the merge's pushed
// sets). H200: 48 KB, 3 fp32 stages, was no faster (the loop does not
// wait on memory, profiled mbarrier waits are < 4 us per row of 31 stages; nor was a ring of 9
// stages when one CTA has an SM to itself, B=64 33.8 vs 33.8 us: an SM streams ~20-25 GB/s from
// HBM however many bytes it has in flight; measured before the 16-bit register stream)
constexpr int kFilterRingBytes = 40 * 1024;
constexpr size_t kFilterSmem = kFilterRingBytes + kFilterCap * sizeof(uint64_t);  // 104 KB: 2 CTAs/SM
// final sets of up to this many entries are sorted whole, without a select first (H200: 256 and
// 512 time the same; a select costs ~1 us per digit pass)
constexpr int kFilterSortDirect = 256;
static_assert(kFilterTrigger >= kFilterMaxK, "compaction must leave room for a stage");
static_assert(kFilterSmem >= 2 * kHistBufBytes, "the general fallback needs its histograms");
static_assert(kFilterCap - kFilterMaxK + 2 * kRankSortMax <= kFilterCap && kFilterRingBytes / 8 >= 2 * kRankSortMax,
              "sort_desc_top's output fits past the merged set");
#ifndef FIB_FILTER_SEED_STAGES  // stages whose lane maxima seed tau (1 or 2; 2: rows of one CTA)
#define FIB_FILTER_SEED_STAGES 2
#endif
#ifndef FIB_FILTER_REG_STREAM_F32  // 1: fp32 rows take the register stream too (H200: slower, see the kernel)
#define FIB_FILTER_REG_STREAM_F32 0
#endif
#ifndef FIB_FILTER_PREPASS  // 1: rows with k <= kSeedMaxK take the pre-pass (a -D for benchmark
#define FIB_FILTER_PREPASS 0   // builds; H200: no faster at B=64, slower from B=256, see the kernel)
#endif
#ifndef FIB_FILTER_PRE_VECS  // the pre-pass's 16-byte loads in flight per thread
#define FIB_FILTER_PRE_VECS 8
#endif
constexpr int kPreVecs = FIB_FILTER_PRE_VECS;
#ifndef FIB_FILTER_TRIG_FLOOR  // the compaction trigger's floor (a -D for benchmark builds)
#define FIB_FILTER_TRIG_FLOOR 512
#endif
// rows with k <= kSeedMaxK start their threshold from the first stage's lane maxima (seed_tau)
constexpr int kSeedLanes = 8;  // lane maxima per warp that enter the seed
constexpr int kSeedMaxK = kWarps * kSeedLanes;

// A lower bound for this slice's k-th largest token (k <= kSeedMaxK) from its first stages: m is
// each lane's maximum over its valid tokens of them (lane_max; NaN dropped); each warp's
// kSeedLanes largest lane maxima go into shared memory (a warp's bitonic
// sort), and the k-th largest of those kSeedMaxK values (ranks by counting, ties by slot). The
// lane maxima at or above it are k distinct tokens, so the slice's k-th largest is at least that
// value; with k << kSeedMaxK it is about the k-th largest of all 512 lane maxima (k = 50, one
// stage: the ~1.3% quantile of the stage, where the exact select of the stage's top k gives
// ~1.2%; two stages, rows of one CTA: about half of that, so half the appends).
// Returns the composite floor (key << 32) of the value, or 0 where it is no bound (not above 0
// for probs, -inf for logits: every token stays open). Uses sm.hist as scratch (kth_prefix
// clears it before use). All threads; two block barriers.
__device__ __forceinline__ float lane_max(const float (&x)[kFilterPer], uint32_t vm, float m = -INFINITY) {
#pragma unroll
  for (int j = 0; j < kFilterPer; ++j)
    if ((vm >> j) & 1u) m = fmaxf(m, x[j]);  // (fmaxf drops NaN)
  return m;
}
__device__ uint64_t seed_tau(float m, int k, bool logits, SelectSmem& sm) {
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const float o = __shfl_xor_sync(0xffffffffu, m, stride);
      m = (((lane & stride) == 0) == ((lane & size) == 0)) ? fmaxf(m, o) : fminf(m, o);
    }
  }
  float* vals = reinterpret_cast<float*>(sm.hist[0]);
  static_assert(kSeedMaxK + 1 <= 2 * 256, "seed_tau's scratch fits SelectSmem::hist");
  if (lane < kSeedLanes) vals[wid * kSeedLanes + lane] = m;
  __syncthreads();
  if (tid < kSeedMaxK) {
    const float v = vals[tid];
    int r = 0;
#pragma unroll 8
    for (int j = 0; j < kSeedMaxK; ++j) {
      const float o = vals[j];
      r += (o > v || (o == v && j < tid)) ? 1 : 0;
    }
    if (r == k - 1) sm.hist[1][0] = __float_as_uint(v);
  }
  __syncthreads();
  const float t = __uint_as_float(sm.hist[1][0]);
  if (!(t > (logits ? -INFINITY : 0.0f))) return 0ull;
  return static_cast<uint64_t>(f2key(t)) << 32;
}

// The tail after an exact top-k: G[0..nc0) = the row's top-k composites sorted descending; min-p,
// top-p (top_k_first on the kept mass, or joint against the whole row's (cm, cs) partial), one
// Philox draw (finish_sorted; rnd: the row's kTagDraw random where the caller computed it early).
// Shared by the filter, split and two-pass kernels: the same token.
__device__ __forceinline__ void finish_topk(const Params& p, const uint64_t* G, int nc0, int row, bool logits,
                                            float T, float scale, bool use_m, float mp, bool use_p, float tp,
                                            bool joint, float cm, double cs, uint64_t* s_scratch,
                                            uint64_t* s_tot, const uint64_t* rnd = nullptr) {
  const float mval = key2f(static_cast<uint32_t>(G[0] >> 32));
  const WeightCtx wc = make_weight_ctx(mval, logits, scale);
  const int nc = (use_m && wc.kind != 3) ? min_p_keep(G, nc0, wc, logits, T, mp) : nc0;
  uint64_t joint_base = 0;
  if (joint) {
    double tot = 0.0;
    if (wc.kind == 0) tot = (cm == -INFINITY) ? 0.0 : cs * exp2(static_cast<double>(cm - mval) * scale);
    else if (wc.kind == 1) tot = cs / static_cast<double>(mval);
    joint_base = static_cast<uint64_t>(tot * static_cast<double>(kFixScale));
    if (joint_base == 0) joint_base = 1;
  }
  const bool use_p2 = use_p && wc.kind != 3 && (!joint || wc.kind <= 1);
  finish_sorted(p, G, nc, wc, use_p2, tp, joint_base, joint, row, s_scratch, s_tot, rnd);
}

template <int DT>
__global__ void __launch_bounds__(kThreads, 2) filter_kernel(const Params p) {
  // 128-byte aligned: the TMA destinations (ring stages, resident keys) start on a 128-byte line
  // whatever the static shared memory's size; at a 16-byte offset (static size 8528) the filter
  // kernel was 3-6% slower on the H200 (benchmarks/results/sampling_ab_early_tma_h200.json)
  extern __shared__ __align__(128) unsigned char dsm[];
#if FIB_HAS_CLUSTER
  pdl_enter();
  const int row = blockIdx.y;
  const uint32_t rank = cl_rank(), S = cl_size();
  FIB_PROF(0);
#ifdef FIB_SAMPLING_PROFILE
  if (blockIdx.y == 0 && threadIdx.x == 0 && cl_rank() == 0)
    g_fib_prof[10] = g_fib_prof[11] = g_fib_prof[14] = g_fib_prof[15] = g_fib_prof[21] = 0ull;
#endif
  const int V = p.V;
  const bool logits = p.is_logits != 0;
  int k = row_top_k(p, row);
  const float T = logits ? (p.temp_arr ? p.temp_arr[row] : p.temp_val) : 1.0f;
  if (!(k > 0 && k < V && k <= kFilterMaxK) || (logits && !(T > 0.0f))) {
    sample_row<DT>(p, dsm, row, rank, S, p.chunk, false);  // general algorithm over the cluster
    return;
  }
  const RowFilters rf = row_filters(p, row, logits, T);
  const float tp = rf.tp, mp = rf.mp, scale = rf.scale;
  const bool use_p = rf.use_p, use_m = rf.use_m, joint = rf.joint;

  constexpr int ESIZE = (DT == kF32) ? 4 : 2;
  constexpr int STAGE_BYTES = kFilterStage * ESIZE;
  constexpr int NV = (DT == kF32) ? 2 : 1;                // 16-byte vectors per thread per stage
  constexpr int NST = kFilterRingBytes / STAGE_BYTES;    // ring stages: 2 (fp32; 16-bit rows: unused)
  unsigned char* ring = dsm;
  uint64_t* buf = reinterpret_cast<uint64_t*>(dsm + kFilterRingBytes);
  // the stage loop: a TMA ring with one block barrier per stage (fp32) or a register stream
  // without them (16-bit rows; below)
  constexpr bool kRegStream = DT != kF32 || FIB_FILTER_REG_STREAM_F32;
  __shared__ uint64_t bars[kRegStream ? 1 : NST];
  __shared__ SelectSmem ssel;
  __shared__ uint64_t s_tau, s_tot;
  __shared__ uint64_t s_scratch[kWarps];
  __shared__ int s_cnt, s_new;
  __shared__ int s_flag;  // (register stream) a warp's append passed the trigger: compact
  __shared__ float s_jm[kWarps];
  __shared__ double s_js[kWarps];
  __shared__ float s_cm;   // this CTA's joint (max, sum of exp2((x - max) * scale)) / probs sum
  __shared__ double s_cs;
  __shared__ int s_rcnt[kMaxCluster];  // rank 0, push mode: the sets pushed by the other ranks
  __shared__ float s_rcm[kMaxCluster];
  __shared__ double s_rcs[kMaxCluster];
  const int tid = threadIdx.x, lane = tid & 31;

  // slice of the row, its 16-byte aligned body (TMA) and the unaligned head/tail tokens
  const int64_t start = static_cast<int64_t>(rank) * p.chunk;
  const int64_t n_rem = static_cast<int64_t>(V) - start;
  const int n = n_rem <= 0 ? 0 : static_cast<int>(n_rem < p.chunk ? n_rem : p.chunk);
  const char* in_row = reinterpret_cast<const char*>(p.in) + (static_cast<int64_t>(row) * p.in_stride + start) * ESIZE;
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(in_row);
  int head = static_cast<int>(((16 - (a0 & 15)) & 15) / ESIZE);  // (ESIZE-aligned input: exact)
  if (head > n) head = n;
  const int body_bytes = ((n - head) * ESIZE) & ~15;
  const int body_n = body_bytes / ESIZE;
  const int tail0 = head + body_n;  // tokens [tail0, n) are the tail
  const char* body = in_row + static_cast<int64_t>(head) * ESIZE;
  const int nstages = (body_bytes + STAGE_BYTES - 1) / STAGE_BYTES;

  // stage s of this thread (register stream): the 16-byte vectors v * kThreads + tid (v < NV) of the
  // body's stage s (streaming loads, zero past the body's end)
  auto load_stage = [&](int s, uint4 (&r)[NV]) {
    const int sb = body_bytes - s * STAGE_BYTES;
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const int off = (v * kThreads + tid) * 16;
      r[v] = off < sb ? __ldcs(reinterpret_cast<const uint4*>(body + static_cast<int64_t>(s) * STAGE_BYTES + off))
                      : make_uint4(0u, 0u, 0u, 0u);
    }
  };
  uint4 pf0[NV], pf1[NV];  // (register stream) stage s is in pf0 for even s, pf1 for odd s
  // (-DFIB_FILTER_PREPASS=1 only) rows with k <= kSeedMaxK read their slice in a pre-pass (below)
  // that finds the threshold from every lane's maximum; the stage loop then runs only where the
  // pre-pass cannot finish the row
  const bool pre = FIB_FILTER_PREPASS && k <= kSeedMaxK;
  // the stage loop's first loads: stages 0 and 1 (register stream) or the ring's first stages (TMA)
  auto start_stream = [&]() {
    if constexpr (kRegStream) {
      if (nstages > 0) load_stage(0, pf0);
      if (nstages > 1) load_stage(1, pf1);
    } else {
      if (tid == 0) {
        for (int q = 0; q < NST && q < nstages; ++q) {
          const int bytes = min(STAGE_BYTES, body_bytes - q * STAGE_BYTES);
          mbar_expect_tx(&bars[q], static_cast<uint32_t>(bytes));
          tma_load_1d(ring + q * STAGE_BYTES, body + static_cast<int64_t>(q) * STAGE_BYTES,
                      static_cast<uint32_t>(bytes), &bars[q]);
        }
      }
    }
  };
  if constexpr (kRegStream) {  // stages 0 and 1 are in flight from here on (rows without the pre-pass)
    if (!pre) start_stream();
    if (tid == 0) {
      s_cnt = 0;
      s_tau = 0ull;
      s_flag = 0;
      s_rcnt[0] = 0;  // (push mode: the other ranks reserve their places in this CTA's ring here)
    }
    __syncthreads();
  } else {
    if (tid == 0) {
      for (int q = 0; q < NST; ++q) mbar_init(&bars[q], 1);
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      s_cnt = 0;
      s_tau = 0ull;
      s_rcnt[0] = 0;  // (push mode: the other ranks reserve their places in this CTA's ring here)
    }
    __syncthreads();
    if (!pre) start_stream();
  }

  FIB_PROF(1);
  float jm = -INFINITY;  // joint: per-thread online max / sum (logits) or sum (probs)
  float js = 0.0f;
  auto joint_add = [&](const float (&x)[kFilterPer], uint32_t vmask) {
    if (logits) {
      float m = jm;
#pragma unroll
      for (int j = 0; j < kFilterPer; ++j)
        if ((vmask >> j) & 1u) m = fmaxf(m, x[j]);  // fmaxf drops NaN
      if (m > jm) {
        js = (jm == -INFINITY) ? 0.0f : js * exp2f(__fmul_rn(__fsub_rn(jm, m), scale));
        jm = m;
      }
      if (jm != -INFINITY) {
        if (jm == INFINITY) {
#pragma unroll
          for (int j = 0; j < kFilterPer; ++j) js += (((vmask >> j) & 1u) && x[j] == INFINITY) ? 1.0f : 0.0f;
        } else {
#pragma unroll
          for (int j = 0; j < kFilterPer; ++j) {  // (a select, not a branch per token; +0 for the others)
            const float e = exp2_ftz(__fmul_rn(__fsub_rn(fmaxf(x[j], -INFINITY), jm), scale));
            js += ((vmask >> j) & 1u) ? e : 0.0f;
          }
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < kFilterPer; ++j) js += ((vmask >> j) & 1u) ? fmaxf(x[j], 0.0f) : 0.0f;
    }
  };
  // compaction trigger: small buffers compact cheaply and tighten tau early (fewer warps then
  // take the append path); never above kFilterTrigger (room for one more stage). H200, k=50,
  // B=512 V=128256: a floor of 1024 / 512 / 256 / 128 gave 120.2 / 108.2 / 110.9 / 110.1 us.
  const int trig = min(kFilterTrigger, max(4 * k, FIB_FILTER_TRIG_FLOOR));
  // the last selects stop early (kth_prefix slack): their survivors (at most Pk, the sort size of
  // k) are sorted whole and cut to k. (A slack in the loop's compactions measured no faster: the
  // lower tau admits more appends; H200, B=512 V=128256 k=50 114.3 vs 113.7 us, k=2048 250 vs 246.)
  int Pk = 32;
  while (Pk < k) Pk <<= 1;
  const int direct = max(Pk, kFilterSortDirect);  // sets this small are sorted without a select
  // appends the tokens of this thread that pass c >= tau (one warp scan of the lanes' counts, one
  // shared atomic per warp; all lanes call); true when the count after this warp's append exceeds
  // trig. Token j of this thread sits at slice index i0 + j (j < 4) or i1 + j - 4 (j >= 4).
  // Once tau is above the floor value (open == false) a raw float compare x >= tf decides (it
  // admits ties at tf, harmless extras) and composites are built for the admitted tokens only.
  auto comp = [&](float x, int i) -> uint64_t {
    return (static_cast<uint64_t>(f2key(sanitize(x, logits))) << 32) | (0xffffffffu - static_cast<uint32_t>(start + i));
  };
  auto append = [&](const float (&x)[kFilterPer], int i0, int i1, uint32_t vmask, uint64_t tau, bool open,
                    float tf) -> bool {
    // each lane writes its own passing tokens at an offset from a warp scan of the lanes' counts
    uint32_t bits = 0u;
    if (open) {  // (warp-uniform) composites needed to decide
#pragma unroll
      for (int j = 0; j < kFilterPer; ++j)
        if (((vmask >> j) & 1u) && comp(x[j], j < 4 ? i0 + j : i1 + (j - 4)) >= tau) bits |= 1u << j;
    } else {
#pragma unroll
      for (int j = 0; j < kFilterPer; ++j)
        if (((vmask >> j) & 1u) && x[j] >= tf) bits |= 1u << j;
    }
    const int c = __popc(bits);
    const int inc = warp_incl_scan_i32(c, lane);
    const int wtot = __shfl_sync(0xffffffffu, inc, 31);
    if (wtot == 0) return false;
    int base = 0;
    if (lane == 0) base = atomicAdd(&s_cnt, wtot);
    base = __shfl_sync(0xffffffffu, base, 0);
    int pos = base + inc - c;
#pragma unroll
    for (int j = 0; j < kFilterPer; ++j)
      if ((bits >> j) & 1u) buf[pos++] = comp(x[j], j < 4 ? i0 + j : i1 + (j - 4));
    return base + wtot > trig;
  };
  // one 16-byte vector of shared memory -> 4 (fp32) or 8 (16-bit) floats at x[o..]
  auto unpack = [&](const uint4 u, float (&x)[kFilterPer], int o) {
    const uint32_t w4[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (DT == kF32) {
        x[o + j] = __uint_as_float(w4[j]);
      } else if constexpr (DT == kBF16) {
        x[o + 2 * j] = __uint_as_float(w4[j] << 16);
        x[o + 2 * j + 1] = __uint_as_float(w4[j] & 0xffff0000u);
      } else {
        x[o + 2 * j] = __half2float(__ushort_as_half(static_cast<unsigned short>(w4[j] & 0xffffu)));
        x[o + 2 * j + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w4[j] >> 16)));
      }
    }
  };

  const int extra = head + (n - tail0);  // unaligned head and tail tokens (< 16 bytes each)
  // head and tail tokens (< 16 bytes each): one per thread, before the ring (tau = 0: all pass)
  {
    for (int e0 = 0; e0 < extra; e0 += kThreads) {  // warp-uniform trip count
      const int e = e0 + tid;
      float x[kFilterPer] = {};
      int i = 0;
      uint32_t vm = 0u;
      if (e < extra) {
        i = e < head ? e : tail0 + (e - head);
        x[0] = load_elem<DT>(in_row, i);
        vm = 1u;
      }
      if (joint) joint_add(x, vm);
      append(x, i, i, vm, 0ull, true, 0.0f);
    }
    __syncthreads();
  }

  // ---- the pre-pass (-DFIB_FILTER_PREPASS=1, not the default; rows with k <= kSeedMaxK). Tried on the
  // H200 2026-12-03 (results/sampling_ab_prepass_h200.json, k=50 from probs, against the ring):
  // correct once its slow path stopped adding the joint sums a second time (the same-token and
  // path tests passed, results/sampling_h200_pytest_prepass.log), but B=64 V=128256 28.8 against 29.3 us (cake 17.8), B=256 61.4 against 49.6, B=512
  // 117.7 against 94.8: at one CTA per SM eight loads in flight per thread stream no faster than
  // the ring, and from B=256 the re-reading lanes' serial loads (8 batches, from HBM) hold each
  // row up. Every thread reads its tokens of the slice (the
  // stage loop's partition) with kPreVecs 16-byte loads always in flight and keeps its largest
  // value with its index and its second largest value (and the joint sums); seed_tau over the
  // lane maxima bounds the slice's k-th largest from below (the lane maxima at or above it are k
  // distinct tokens), and for k << 512 about k tokens of the slice reach it. A lane whose second
  // value is below that bound holds at most one candidate, its maximum: it appends it without
  // reading anything again; the few lanes with two or more re-read their tokens (L2) and append
  // those at or above the bound. Where too many lanes would re-read (tied or structured rows) or
  // the bound is no bound (fewer than k positive tokens), the stage loop streams the slice
  // again from that bound (exact either way: the buffer holds every token >= tau0 of the slice).
  bool fast = false;
  uint64_t tau0 = 0ull;
  if (pre) {
    constexpr int PD = kPreVecs;   // vectors in flight per thread
    constexpr int SPD = PD / NV;   // stages in flight
    constexpr int TPV = 16 / ESIZE;
    // the thread's flat vector u = stage u / NV, vector u % NV of the stage (zero past the body)
    auto ldv = [&](int u) -> uint4 {
      const int off = (u * kThreads + tid) * 16;
      return off < body_bytes ? __ldg(reinterpret_cast<const uint4*>(body + off)) : make_uint4(0u, 0u, 0u, 0u);
    };
    uint4 q[PD];
#pragma unroll
    for (int d = 0; d < PD; ++d) q[d] = ldv(d);
    float m1 = -INFINITY, m2 = -INFINITY;  // (NaN never enters: every compare with it is false)
    int i1 = 0;
    for (int s0 = 0; s0 < nstages; s0 += SPD) {
#pragma unroll
      for (int d = 0; d < SPD; ++d) {
        const int s = s0 + d;
        float x[kFilterPer] = {};
        uint32_t vm = 0u;
#pragma unroll
        for (int v = 0; v < NV; ++v) {
          const int u = s * NV + v;
          unpack(q[d * NV + v], x, v * 4);
          if ((u * kThreads + tid) * 16 < body_bytes) vm |= (DT == kF32 ? 0xfu : 0xffu) << (v * 4);
          q[d * NV + v] = ldv(u + PD);  // (the slot refilled before its values are used)
        }
        if (s < nstages) {
          if (joint) joint_add(x, vm);
          const int sb0 = head + s * kFilterStage;
          const int i0 = sb0 + tid * TPV, i1b = DT == kF32 ? sb0 + (kThreads + tid) * TPV : i0 + 4;
#pragma unroll
          for (int j = 0; j < kFilterPer; ++j) {
            const float xv = ((vm >> j) & 1u) ? x[j] : -INFINITY;
            const bool top = xv > m1;
            m2 = top ? m1 : fmaxf(m2, xv);
            i1 = top ? (j < 4 ? i0 + j : i1b + (j - 4)) : i1;
            m1 = top ? xv : m1;
          }
        }
      }
    }
    tau0 = seed_tau(m1, k, logits, ssel);
    const float tf0 = key2f(static_cast<uint32_t>(tau0 >> 32));
    const bool rr = tau0 != 0ull && m2 >= tf0;
    if (tid == 0) s_tau = tau0;
    const int nrr = __syncthreads_count(rr);
    // the buffer takes every candidate: the extras, one per lane, all tokens of the re-read lanes
    fast = tau0 != 0ull && nrr * (nstages * kFilterPer) + kThreads + extra <= kFilterTrigger;
    if (fast) {
      const bool hm = !rr && m1 >= tf0;
      const unsigned bm = __ballot_sync(0xffffffffu, hm);
      if (bm) {
        int base = 0;
        if (lane == __ffs(bm) - 1) base = atomicAdd(&s_cnt, __popc(bm));
        base = __shfl_sync(0xffffffffu, base, __ffs(bm) - 1);
        if (hm) buf[base + __popc(bm & ((1u << lane) - 1u))] = comp(m1, i1);
      }
      if (rr) {  // (a few lanes of the CTA) every token of this lane at or above the bound
        const int nvec = nstages * NV;
        for (int u0 = 0; u0 < nvec; u0 += PD) {
          uint4 w[PD];
#pragma unroll
          for (int d = 0; d < PD; ++d) w[d] = ldv(u0 + d);
#pragma unroll
          for (int d = 0; d < PD; ++d) {
            const int u = u0 + d;
            if ((u * kThreads + tid) * 16 >= body_bytes) continue;
            float x[kFilterPer] = {};
            unpack(w[d], x, 0);
            const int ib = head + (u * kThreads + tid) * TPV;
#pragma unroll
            for (int j = 0; j < TPV; ++j)
              if (x[j] >= tf0) buf[atomicAdd(&s_cnt, 1)] = comp(x[j], ib + j);
          }
        }
      }
      __syncthreads();
    } else {
      start_stream();  // the stage loop streams the slice again, from tau0
    }
  }

  FIB_PROF(2);
  // block-wide: compacts the buffer to its k-th largest, which becomes s_tau (every thread; ends
  // with a barrier); clear_flag (a constant): the register stream's s_flag is reset with it
  auto compact_buf = [&](bool clear_flag) {
    const int cnt = s_cnt;
    FIB_PROF_IF(g_fib_prof[10] == 0, 12);  // the first compaction's start / end
    FIB_PROF_ADD(10, 1);
    FIB_PROF_ADD(11, cnt);
    Segs sg;
    sg.seg[0] = buf;
    sg.cnt[0] = cnt;
    sg.nseg = 1;
    const uint64_t t = kth_prefix(sg, k, ssel);
    compact_ge(buf, cnt, t, &s_new);
    if (tid == 0) {
      s_cnt = s_new;
      s_tau = t;
      if (clear_flag) s_flag = 0;
    }
    __syncthreads();
    FIB_PROF_IF(g_fib_prof[10] == 1, 13);
  };
  if (fast) {
    // (the pre-pass appended the slice's candidates)
  } else if constexpr (!kRegStream) {
    uint64_t tau = tau0;
    uint32_t parity = 0u;
    for (int s = 0, q = 0; s < nstages; ++s) {
      const int sbytes = min(STAGE_BYTES, body_bytes - s * STAGE_BYTES);
#ifdef FIB_SAMPLING_PROFILE
      unsigned long long w0_;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(w0_));
#endif
      mbar_wait(&bars[q], parity);
#ifdef FIB_SAMPLING_PROFILE
      {
        unsigned long long w1_;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(w1_));
        FIB_PROF_ADD(21, w1_ - w0_);
      }
#endif
      if (s == 0) FIB_PROF(3);
      // thread tid holds the 16-byte vectors tid (and kThreads + tid for fp32) of the stage
      float x[kFilterPer] = {};
      uint32_t vm = 0u;
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        const int off = (v * kThreads + tid) * 16;
        if (off < sbytes) {
          unpack(*reinterpret_cast<const uint4*>(ring + q * STAGE_BYTES + off), x, v * 4);
          vm |= (DT == kF32 ? 0xfu : 0xffu) << (v * 4);
        }
      }
      if (joint && !pre) joint_add(x, vm);
      // (block-uniform) the first stage seeds tau (seed_tau), with stage 1 where a row has one CTA
      // (H200, results/sampling_ab_seed2_h200.json: V=32000 B=512 k=50 47.7 -> 43.6 us, V=128256
      // 100.3 -> 94.9; with S = 2 the slices end with larger sets to merge, B=64 29.8 -> 30.8)
      if (s == 0 && !pre && k <= kSeedMaxK) {
        float m = lane_max(x, vm);
        if (FIB_FILTER_SEED_STAGES > 1 && S == 1 && nstages > 1) {  // stage 1 too (in flight since the start)
          mbar_wait(&bars[1], 0u);
          const int sb1 = min(STAGE_BYTES, body_bytes - STAGE_BYTES);
          float x1[kFilterPer] = {};
          uint32_t vm1 = 0u;
#pragma unroll
          for (int v = 0; v < NV; ++v) {
            const int off = (v * kThreads + tid) * 16;
            if (off < sb1) {
              unpack(*reinterpret_cast<const uint4*>(ring + STAGE_BYTES + off), x1, v * 4);
              vm1 |= (DT == kF32 ? 0xfu : 0xffu) << (v * 4);
            }
          }
          m = lane_max(x1, vm1, m);
        }
        tau = seed_tau(m, k, logits, ssel);
        if (tid == 0) s_tau = tau;
      }
      constexpr int TPV = 16 / ESIZE;  // tokens per vector
      const int s0 = head + s * kFilterStage;
      const int i0 = s0 + tid * TPV, i1 = DT == kF32 ? s0 + (kThreads + tid) * TPV : s0 + tid * TPV + 4;
      // fast test: can any token of this warp reach tau? (raw values; NaN/negative/-0 compare low)
      const float tf = key2f(static_cast<uint32_t>(tau >> 32));
      const bool open = tau == 0ull || tf <= (logits ? -INFINITY : 0.0f);
      float mx = x[0];
#pragma unroll
      for (int j = 1; j < kFilterPer; ++j) mx = fmaxf(mx, x[j]);
      bool over = false;
#ifdef FIB_SAMPLING_PROFILE
      if (blockIdx.y == 0 && rank == 0 && lane == 0) {
        atomicAdd(&g_fib_prof[15], 1ull);
      }
#endif
      if (__any_sync(0xffffffffu, vm != 0u && (open || mx >= tf))) {
#ifdef FIB_SAMPLING_PROFILE
        if (blockIdx.y == 0 && rank == 0 && lane == 0) atomicAdd(&g_fib_prof[14], 1ull);
#endif
        over = append(x, i0, i1, vm, tau, open, tf);
      }
      // barrier: ring slot q fully read, appends done. The compaction decision comes from the
      // warps' own atomics (the count only grows within a stage), so no thread reads s_cnt while
      // a faster warp may already append the next stage.
      const bool compact = __syncthreads_or(over) != 0;
      if (tid == 0 && s + NST < nstages) {
        const int s2 = s + NST;
        const int bytes = min(STAGE_BYTES, body_bytes - s2 * STAGE_BYTES);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        mbar_expect_tx(&bars[q], static_cast<uint32_t>(bytes));
        tma_load_1d(ring + q * STAGE_BYTES, body + static_cast<int64_t>(s2) * STAGE_BYTES, static_cast<uint32_t>(bytes),
                    &bars[q]);
      }
      if (compact) compact_buf(false);
      tau = s_tau;
      if (++q == NST) {
        q = 0;
        parity ^= 1u;
      }
    }
  } else {
    // ---- the stages (16-bit rows): each thread streams its own vector of every stage through two
    // register buffers (stage s + 2 is loaded as soon as stage s is unpacked); no block barrier per
    // stage. H200 (results/sampling_ab_reg_stream16_h200.json): bf16 / fp16 k = 50-200 at B = 256-512
    // 3-15% faster than through the ring (bf16 B=512 V=128256 k=50 106.1 -> 93.0 us), k = 2048 within
    // -4% / +1.3%; fp32 rows are 6-14% slower this way (FIB_FILTER_REG_STREAM_F32=1: B=512 V=128256
    // 100.3 -> 112.6 us, also with each warp reading one contiguous KB per stage, or with the refill
    // after the stage's appends, or with each warp's KB arriving by its own TMA bulk copy: 105.3),
    // so they keep the ring. Stage 0
    // runs block-wide (the seed, its compaction); after it, warps run ahead independently and tau
    // (a register copy of s_tau) changes only at a compaction: a warp whose append passes the
    // trigger raises s_flag and stops, every other warp stops at its next stage (each appends at
    // most one more stage of its own after the count passed the trigger: <= trig + kFilterStage
    // entries), and all meet at one barrier. A warp that has consumed every stage waits at that
    // barrier too, so after it either s_flag is set (compact, go on) or every warp is done.
    uint64_t tau = 0ull;
    float tf = 0.0f;
    bool open = true;
    auto set_tau = [&](uint64_t t) {
      tau = t;
      tf = key2f(static_cast<uint32_t>(tau >> 32));  // fast test: raw values (NaN/negative/-0 compare low)
      open = tau == 0ull || tf <= (logits ? -INFINITY : 0.0f);
    };
    set_tau(tau0);
    // consumes stage s from r (then refills r with stage s + 2): joint sum, vote, appends; true when
    // this warp's append passed the trigger
    auto step = [&](uint4 (&r)[NV], int s, bool first) -> bool {
      float x[kFilterPer] = {};
      uint32_t vm = 0u;
      const int sb = body_bytes - s * STAGE_BYTES;
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        unpack(r[v], x, v * 4);
        if ((v * kThreads + tid) * 16 < sb) vm |= (DT == kF32 ? 0xfu : 0xffu) << (v * 4);
      }
      if (!first && s + 2 < nstages) load_stage(s + 2, r);  // (early: its registers are free)
      if (joint && !pre) joint_add(x, vm);
      if (first && !pre && k <= kSeedMaxK) {  // stage 0 (block-wide; a constant argument): the seed
        float m = lane_max(x, vm);
        if (FIB_FILTER_SEED_STAGES > 1 && S == 1 && nstages > 1) {  // stage 1 too (pf1)
          float x1[kFilterPer] = {};
          uint32_t vm1 = 0u;
          const int sb1 = body_bytes - STAGE_BYTES;
#pragma unroll
          for (int v = 0; v < NV; ++v) {
            unpack(pf1[v], x1, v * 4);
            if ((v * kThreads + tid) * 16 < sb1) vm1 |= (DT == kF32 ? 0xfu : 0xffu) << (v * 4);
          }
          m = lane_max(x1, vm1, m);
        }
        set_tau(seed_tau(m, k, logits, ssel));
        if (tid == 0) s_tau = tau;
      }
      constexpr int TPV = 16 / ESIZE;  // tokens per vector
      const int s0 = head + s * kFilterStage;
      const int i0 = s0 + tid * TPV, i1 = DT == kF32 ? s0 + (kThreads + tid) * TPV : i0 + 4;
      float mx = x[0];
#pragma unroll
      for (int j = 1; j < kFilterPer; ++j) mx = fmaxf(mx, x[j]);
      bool over = false;
#ifdef FIB_SAMPLING_PROFILE
      if (blockIdx.y == 0 && rank == 0 && lane == 0) atomicAdd(&g_fib_prof[15], 1ull);
#endif
      if (__any_sync(0xffffffffu, vm != 0u && (open || mx >= tf))) {
#ifdef FIB_SAMPLING_PROFILE
        if (blockIdx.y == 0 && rank == 0 && lane == 0) atomicAdd(&g_fib_prof[14], 1ull);
#endif
        over = append(x, i0, i1, vm, tau, open, tf);
      }
      if (first && s + 2 < nstages) load_stage(s + 2, r);  // (after the seed's barriers)
      return over;
    };
    auto compact_all = [&]() {  // (s_flag is cleared with the compaction, before its barrier)
      compact_buf(true);
      set_tau(s_tau);
    };
    if (nstages > 0) {
      FIB_PROF(3);
      if (__syncthreads_or(step(pf0, 0, true)) != 0) compact_all();
    }
    volatile int* flag = &s_flag;
    for (int s = 1;;) {
      while (s < nstages) {
        // (the two buffers by name: indexing them by s & 1 would put them in local memory)
        const bool over = (s & 1) ? step(pf1, s, false) : step(pf0, s, false);
        ++s;
        if (over) *flag = 1;
        if (__any_sync(0xffffffffu, over) || *flag != 0) break;
      }
      __syncthreads();  // every warp is done or stopped for a compaction; its appends are visible
      if (*flag == 0) break;
      compact_all();
    }
  }
  FIB_PROF(4);
  // push mode (S > 1, the S-1 other sets fit rank 0's idle ring, `slot` entries each): every
  // rank writes its set into rank 0 over DSMEM, one more cluster barrier, then rank 0 works on
  // local memory only. Otherwise rank 0 reads the other CTAs' buffers remotely.
  const bool push = static_cast<int>(S - 1) * k <= kFilterRingBytes / 8;
  const int slot = S > 1 ? (kFilterRingBytes / 8) / static_cast<int>(S - 1) : 0;
  // local top-k (k to Pk entries), unless the whole set fits its place in the merge (rank 0 then
  // selects over the S buffers as they are: one select on the critical path, not two)
  const int keep_max = (S > 1 && push) ? min(slot, kFilterCap - kFilterMaxK) : direct;
  {
    const int cnt = s_cnt;
    if (cnt > keep_max) {
      Segs sg;
      sg.seg[0] = buf;
      sg.cnt[0] = cnt;
      sg.nseg = 1;
      const uint64_t t = kth_prefix(sg, k, ssel, min(keep_max, Pk) - k);
      compact_ge(buf, cnt, t, &s_new);
      if (tid == 0) s_cnt = s_new;
    }
  }
  FIB_PROF(5);
  if (joint) {  // this CTA's (max, sum): logits relative to its max, probs a plain sum
    warp_joint_partial(jm, js, logits, scale, s_jm, s_js);
    __syncthreads();
    if (tid == 0) s_cs = combine_partials(s_jm, s_js, kWarps, logits, scale, &s_cm);
  }
  __syncthreads();

  FIB_PROF(6);
  // ---- cluster merge: rank 0 selects the top-k of the S local sets
  uint64_t* G = buf;
  int nc0 = s_cnt;
  float cm = s_cm;
  double cs = s_cs;
  uint64_t* ring64 = reinterpret_cast<uint64_t*>(ring);
  if (S > 1) {
    cl_sync();  // every CTA's set, count and joint partials are final; rank 0's ring is idle
    FIB_PROF(16);
    Segs sg;
    sg.nseg = static_cast<int>(S);
    if (push) {
      // the other ranks' sets land back to back in rank 0's ring (offsets reserved by a DSMEM
      // atomic on rank 0's s_rcnt[0], zeroed at entry; each set <= slot, so they fit): rank 0
      // selects over two segments, not S
      if (rank != 0) {
        if (tid == 0) s_new = atomicAdd(cl_remote(&s_rcnt[0], 0u), nc0);
        __syncthreads();
        uint64_t* dst = cl_remote(ring64, 0u) + s_new;
        for (int i = tid; i < nc0; i += kThreads) dst[i] = buf[i];
        if (tid == 0) {
          *cl_remote(&s_rcm[rank], 0u) = cm;
          *cl_remote(&s_rcs[rank], 0u) = cs;
        }
      }
      FIB_PROF(17);
      cl_sync();  // the pushed sets are visible in rank 0
      FIB_PROF(18);
      if (rank != 0) return;
      sg.nseg = 2;
      sg.seg[0] = buf;
      sg.cnt[0] = nc0;
      sg.seg[1] = ring64;
      sg.cnt[1] = s_rcnt[0];
      if (tid == 0) {
        s_rcm[0] = cm;
        s_rcs[0] = cs;
      }
      G = buf + nc0;  // buf[0..nc0) is rank 0's own set (nc0 <= kFilterCap - kFilterMaxK)
    } else {
      if (rank != 0) {
        cl_arrive();
        cl_wait();  // rank 0 reads this CTA's buffer until it arrives
        return;
      }
      for (uint32_t r = 0; r < static_cast<uint32_t>(kMaxCluster); ++r) {
        sg.seg[r] = r < S ? cl_remote(buf, r) : nullptr;
        sg.cnt[r] = r < S ? *cl_remote(&s_cnt, r) : 0;
      }
      if (tid < static_cast<int>(S)) {
        s_rcm[tid] = *cl_remote(&s_cm, tid);
        s_rcs[tid] = *cl_remote(&s_cs, tid);
      }
      G = reinterpret_cast<uint64_t*>(ring);  // the ring is idle now (every stage consumed)
    }
    int total = 0;
    for (int r = 0; r < sg.nseg; ++r) total += sg.cnt[r];
    if (tid == 0) s_new = 0;
    __syncthreads();  // (s_rcm / s_rcs, s_new)
    if (joint) cs = combine_partials(s_rcm, s_rcs, static_cast<int>(S), logits, scale, &cm);
    const uint64_t t = total <= direct ? 0ull : kth_prefix(sg, k, ssel, Pk - k);
    FIB_PROF(19);
    sg.each([&](uint64_t v, bool valid) {
      const bool keep = valid && v >= t;
      const unsigned m = __ballot_sync(0xffffffffu, keep);
      if (m) {
        int base = 0;
        if (lane == __ffs(m) - 1) base = atomicAdd(&s_new, __popc(m));
        base = __shfl_sync(0xffffffffu, base, __ffs(m) - 1);
        if (keep) G[base + __popc(m & ((1u << lane) - 1u))] = v;
      }
    });
    __syncthreads();
    nc0 = s_new;
    if (!push) cl_arrive();  // no remote reads after this point
  }

  FIB_PROF(7);
  // ---- sort the survivors (k to max(Pk, direct)) and keep the first k; min-p, top-p, draw (the
  // tail shared with the streaming kernel)
  int P = 32;
  while (P < nc0) P <<= 1;
  for (int j = nc0 + tid; j < P; j += kThreads) G[j] = 0ull;
  __syncthreads();
  // (G + kRankSortMax is free: G is buf, buf + a set of <= kFilterCap - kFilterMaxK, or the ring)
  sort_desc_top(G, nc0, min(nc0, k), G + kRankSortMax);
  nc0 = min(nc0, k);
  FIB_PROF(8);
  finish_topk(p, G, nc0, row, logits, T, scale, use_m, mp, use_p, tp, joint, cm, cs, s_scratch, &s_tot);
  FIB_PROF(9);
  if (S > 1 && !push) cl_wait();  // (remote mode: the other CTAs wait for rank 0's reads)
#else
  (void)dsm;
  (void)p;
  __trap();  // launched only on sm_90+
#endif
}

// the launch attribute of programmatic dependent launch (the kernels' pdl_enter(), common.cuh)
inline cudaLaunchAttribute pdl_launch_attr() {
  cudaLaunchAttribute a;
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

// Host: a launch of `kernel` with one cluster of S CTAs per row (grid S x B, kThreads threads,
// `smem` bytes of dynamic shared memory) on stream st, the filter kernel's slices (p.chunk) and
// the layout its rows handed to sample_row use (streamed, histograms). The filter and two-pass
// kernels launch through it; cluster_launch_config also serves occupancy queries.
struct ClusterLaunch {
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
};
// pdl: launched with programmatic stream serialization (the kernels' pdl_enter(), common.cuh)
inline void cluster_launch_config(ClusterLaunch& l, int S, int rows, size_t smem, cudaStream_t st, bool pdl = false) {
  l.cfg = {};
  l.cfg.gridDim = dim3(S, rows, 1);
  l.cfg.blockDim = dim3(kThreads, 1, 1);
  l.cfg.dynamicSmemBytes = smem;
  l.cfg.stream = st;
  l.attr[0].id = cudaLaunchAttributeClusterDimension;
  l.attr[0].val.clusterDim.x = S;
  l.attr[0].val.clusterDim.y = 1;
  l.attr[0].val.clusterDim.z = 1;
  l.attr[1] = pdl_launch_attr();
  l.cfg.attrs = l.attr;
  l.cfg.numAttrs = pdl ? 2 : 1;
}
template <class K>
inline cudaError_t launch_cluster_rows(K kernel, Params p, int S, size_t smem, cudaStream_t st, bool pdl = false) {
  int chunk = (p.V + S - 1) / S;
  p.chunk = (chunk + 7) & ~7;
  p.resident = 0;
  p.hist_bytes = 2 * kHistBufBytes;
  ClusterLaunch l;
  cluster_launch_config(l, S, p.B, smem, st, pdl);
  return cudaLaunchKernelEx(&l.cfg, kernel, p);
}

// Host: launches filter_kernel<DT> for the p.B rows of p with S CTAs per row (one cluster per row)
// on stream st; sets the fields the launch decides (the slice per CTA, streamed rows and their
// histograms for the rows the kernel hands to sample_row). The library and the standalone checks
// (benchmarks/filter16_check.cu) launch through it.
template <int DT>
inline cudaError_t launch_filter_rows(Params p, int S, cudaStream_t st, bool pdl = false) {
  return launch_cluster_rows(filter_kernel<DT>, p, S, kFilterSmem, st, pdl);
}

}  // namespace sampling
}  // namespace fib
