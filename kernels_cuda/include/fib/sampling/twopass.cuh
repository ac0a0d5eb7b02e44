// fib-runtime sampling: two-pass top-k sampler (sm_90: thread-block clusters).
//
// For top-k sampling with a small k the filter kernel's one-pass loop (a threshold that rises
// stage by stage, a block barrier per 16 KB stage, two CTAs per SM under a 64-register cap) costs
// more than reading the slice twice: H200, B=64 V=128256 k=50, the filter kernel 29.2 us, this
// kernel 20.6, cake's two-pass stage 1 17.9 (docs/sampling-journal.md, "The two-pass kernel"). This kernel:
//  1. S CTAs (a cluster) split the row. Each thread streams its 16-byte vectors of the slice with
//     tp_vecs<MINB>() register loads always in flight (a slot is refilled before its values are
//     used): 8 with one CTA of 512 threads per SM (128 registers hold them), 4 in the build for two
//     CTAs per SM (64 registers; from 256 rows, where one CTA streams while the other finishes).
//     Rows with k <= kTpSeedMaxK keep each lane's largest value with its index and its second
//     largest value; rows with kTpSeedMaxK < k <= kTpGroupMaxK the maxima of 8 groups of each
//     thread's tokens (and, where they fit, each batch's maximum); larger k (none by default)
//     count the keys' top 11 bits into a histogram. All keep the joint sums.
//  2. k <= kTpSeedMaxK: the k-th largest of each warp's 8 (k <= 64) or 16 largest lane maxima
//     bounds the slice's k-th largest from below (the lane maxima at or above it are k distinct
//     tokens). A lane whose second value is
//     below the bound holds at most one token at or above it, its maximum, and appends it; the
//     lanes with two or more (a few per slice) have their vectors read again by their warp. The
//     buffer then holds every token of the slice at or above the bound (>= k of them). Where the
//     bound is no bound (fewer than k positive / finite tokens) or too many lanes would read again
//     (tied or structured rows), and for larger k, the radix path: the k-th largest key's 11-bit
//     bin, then every token in it or above (when they fit the buffer; else the next digits are
//     counted in more passes), or for ties beyond the buffer an exact radix select over the
//     slice's composites (kth_prefix over SliceSet). Exact for any row.
//     kTpSeedMaxK < k <= kTpGroupMaxK: the k-th largest of the 4096 group maxima (two 11-bit
//     histogram rounds, 22 key bits) bounds the slice's k-th largest from below; every token at
//     or above it is gathered by one float compare per token, reading only the batches whose
//     maximum reaches it (~2750 tokens at k = 2048 on random rows; more than the buffer holds, or
//     fewer than k positive / finite maxima: the radix path). H200 against the histogram pass
//     (results/sampling_twopass_largek_h200.json): B=512 V=128256 k=2048 238.5 -> 208.1 us, k=256
//     181.1 -> 132.4.
//     (The large-k instantiation, LK below: these rows bound the slice from a sample before the
//     pass and append in it, "speculative candidates" below.)
//  3. Rows with k <= kRankSortMax (256; the default instantiation): each rank ranks its set (cut to
//     at most 256 first) into its top k in order; rank r > 0 sends that list with st.async into a
//     fixed slot of rank 0, completing its bytes on rank 0's mbarrier, and rank 0 places every
//     entry at its place in its list plus the entries of the other lists above it (binary
//     searches): the merged top k in order, with no select and no sort over the merged set, and no
//     cluster barrier (a cluster barrier's release is a GPU-scope fence, MEMBAR.ALL.GPU, which
//     under the other CTAs' streams cost ~2.5 us at B=64; docs/sampling-journal.md, "The two-pass
//     merge without a cluster barrier"). The draw's Philox random is computed after the pass from
//     the seed and offset fetched by cp.async at the start. Larger k: the filter kernel's merge,
//     each set cut to at most Pk when it does not fit its place, written into a fixed slot of rank
//     0 over DSMEM (one cluster barrier), selected and sorted there. Both then run the filter
//     kernel's tail: min-p, exact top-p on integer prefix sums in either order, one Philox draw:
//     the same token as the filter, streaming and cluster kernels for the same inputs, seed and
//     offset. (The large-k instantiation: top_k_first rows with k > rej_min_k take the cluster
//     kernel's rejection rounds on the unsorted top k, reject_tail.cuh, and its token.)
// Two instantiations per dtype and occupancy: the default one, and the large-k one (LK) that the
// host launches where it knows every row's k exceeds kTpSeedMaxK (a scalar top_k, or the caller's
// min_top_k hint). The large-k paths compiled into the default kernel cost its k <= 128 rows
// 1.02-1.08x (below), so they live in their own kernel.
// Composites, the tie rule and the NaN rules are the filter kernel's (filter.cuh).
#pragma once
#include "fib/sampling/filter.cuh"
#include "fib/sampling/reject_tail.cuh"
#include "fib/sampling/slice_set.cuh"

namespace fib {
namespace sampling {

static_assert(kFilterMaxK <= kRejTailMaxK, "the two-pass kernel's top-k sets fit reject_tail");

// 16-byte loads in flight per thread in the first pass (and the passes that read the slice again)
// of the kernel with one CTA per SM (128 registers) and of the one with two (64 registers)
#ifndef FIB_TWOPASS_VECS
#define FIB_TWOPASS_VECS 8
#endif
#ifndef FIB_TWOPASS2_VECS
#define FIB_TWOPASS2_VECS 4
#endif
template <int MINB>
constexpr int tp_vecs() { return MINB == 1 ? FIB_TWOPASS_VECS : FIB_TWOPASS2_VECS; }
#ifndef FIB_TWOPASS_SEED_MAX_K  // rows with k up to this take the lane-maxima bound (<= 256)
#define FIB_TWOPASS_SEED_MAX_K 128
#endif
constexpr int kTpSeedMaxK = FIB_TWOPASS_SEED_MAX_K;
// rows with kTpSeedMaxK < k <= this bound their slice's k-th largest by the group maxima (0: the
// histogram pass for every larger k)
#ifndef FIB_TWOPASS_GROUP_MAX_K
#define FIB_TWOPASS_GROUP_MAX_K 2048
#endif
constexpr int kTpGroupMaxK = FIB_TWOPASS_GROUP_MAX_K;
constexpr int kTpGroups = 8;  // group maxima per thread (kThreads * kTpGroups >= 2 * kFilterMaxK)
// the most batches per thread whose maxima are kept (28 KB, leaving 3584 candidate entries)
#ifndef FIB_TWOPASS_BATCH_MAX
#define FIB_TWOPASS_BATCH_MAX 28
#endif
constexpr int kTpBatchMax = FIB_TWOPASS_BATCH_MAX;
// 1: rows with the group maxima bound (128 < k <= 2048) collect their candidates in the first pass,
// against a bound estimated from a sample of the slice before it ("speculative candidates"), and
// read the slice again only where that bound fails; 2: rows with k <= kTpSeedMaxK too (instead of
// the lane maxima bound and the re-read of the lanes that hold several tokens above it). Off in the
// default kernel (on in the large-k one, LK): on the H200 =1 takes k >= 1024 rows to 0.86x but the
// k <= 128 rows, which do not use it, to 1.06x (the kernel's spills grow); =2 costs those rows 1.15x
// (docs/sampling-journal.md, "Both switches on the H200")
#ifndef FIB_TWOPASS_SPEC
#define FIB_TWOPASS_SPEC 0
#endif
// 1: the large-k instantiation's merge keeps the entries at or above the exact threshold with
// append_ge (select.cuh: a count, one warp scan and one shared atomic per warp, then the writes)
// instead of warp_append1 per entry (a ballot, an atomic and a shuffle per slot); same set, another
// order, the same tokens (every later step sorts or selects). On the H100 it took B=64 k=2048 from
// 42.43 to 41.29 us (timed beside the refuted batched appends, docs/sampling-journal.md, "Not kept:
// the speculative pass's appends a batch at a time"); the GPU sampling suite passed on it (H100,
// benchmarks/results/sampling_append_ge_h100_pytest.log)
#ifndef FIB_TWOPASS_MERGE_APPEND_GE
#define FIB_TWOPASS_MERGE_APPEND_GE 1
#endif
// 1: the large-k instantiation's rows of several CTAs bound the row's k-th largest instead of each
// slice's: every rank samples the whole row at the same positions (so the same bound, with no
// exchange), and each appends its slice's tokens at or above it (~1.7k in the row at k = 2048 against
// ~1.5k per slice; docs/sampling-journal.md, "A bound for the row instead of the slice" and "No
// device; what 5x at k = 2048 asks"). Whether the row holds k of them is known only when every rank
// has counted: each rank stores its count into every rank before the merge's cluster barrier, and
// where the sum is short of k, every rank reads its slice again by the radix path (its exact top k)
// and the merge runs again. Its own instantiation (twopass_kernel<DT, 1, true, true>; the code
// costs every row of the kernel it is in ~18 more spilled registers: B=128 rows of one CTA, which
// never take it, ran 1.04-1.06x slower in the large-k kernel built with it, H200 2026-12-07); the host
// launches it for top_k_first calls of the large-k kernel of one CTA per SM with several CTAs per
// row (FIB_SAMPLING_TWOPASS_ROW_BOUND). H200, B=64 k=1024 / 2048 from probs and logits: 0.94-0.98x
// the large-k kernel's time (results/sampling_twopass_rb_h200.json); joint rows were 0.99-1.03x.
// 0 removes it from the build (the instantiation is then the large-k kernel)
#ifndef FIB_TWOPASS_ROW_BOUND
#define FIB_TWOPASS_ROW_BOUND 1
#endif
// FIB_TWOPASS_FUSED_TAIL (common.cuh): the large-k rows' exact top k straight into reject_tail's order
// diagnostic for profile builds only (-DFIB_SAMPLING_PROFILE): the large-k merge's select (one
// non-inlined copy) and reject_tail each run twice before their own calls, timed (slots 17-19,
// 23, 24, 26): the second run of the same code is warm (docs/sampling-journal.md, "Is the tail's
// code cold?" and "The warm/cold diagnostic's answer")
#ifndef FIB_TWOPASS_DIAG_TWICE
#define FIB_TWOPASS_DIAG_TWICE 0
#endif
// 1: top_k_first rows with k > p.rej_min_k sample by the cluster kernel's rejection rounds on the
// exact top-k set (reject_tail.cuh) instead of sorting it: the cluster kernel's token. Off in the
// default kernel (on in the large-k one): the call in the row loop moves values out of the uniform
// registers and costs the other rows 1.02x
#ifndef FIB_TWOPASS_REJECT_TAIL
#define FIB_TWOPASS_REJECT_TAIL 0
#endif
static_assert(kThreads * kTpGroups >= 2 * kFilterMaxK, "the group maxima bound the k-th largest with slack");
// the filter kernel's layout: a 40 KB area where the other ranks push their sets, then the
// 8192-entry candidate buffer (and >= 64 KB for the general algorithm's histograms)
constexpr size_t kTwoPassSmem = kFilterSmem;
// the candidate buffer's entries; past them, the radix path's histogram (2048 u32), so that the
// push area stays free for the other ranks from the kernel's start
constexpr int kTpCap = kFilterCap - kBins / 2;
constexpr int kTpReread = 4;  // loads in flight per lane when a warp reads its lanes again
#if FIB_TWOPASS_ROW_BOUND
constexpr int kTpRbFull = 1 << 24;  // (a rank's count that fills the row's k by itself)
#endif
static_assert(kTpCap >= kFilterMaxK + kThreads, "the buffer holds a slice's top-k and one entry per lane");

// seed_tau (filter.cuh) with the ranking spread over all threads: each warp's LANES largest lane
// maxima (8: the same values as seed_tau, a bound for k <= 128; 16: a bound for k <= 256, at least
// as tight for every k), ranked by kThreads / (16 * LANES) lanes per value (4 / 2: 32 / 128
// compares each, summed by shuffles). The lane maxima at or above the returned value are k
// distinct tokens: the slice's k-th largest is at least that value. Returns the composite floor
// (key << 32), or 0 where it is no bound. All threads; two block barriers.
template <int LANES>
__device__ uint64_t seed_tau_lanes(float m, int k, bool logits, SelectSmem& sm) {
  constexpr int NV = kWarps * LANES;   // values ranked
  constexpr int LPV = kThreads / NV;   // lanes per value
  static_assert(NV <= 256 && LPV * NV == kThreads && (LPV == 2 || LPV == 4), "seed_tau_lanes: 8 or 16 lanes");
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
  if (lane < LANES) vals[wid * LANES + lane] = m;
  __syncthreads();
  const int vi = tid / LPV, h = tid % LPV;
  const float v = vals[vi];
  int r = 0;
#pragma unroll 8
  for (int j = h * (NV / LPV); j < (h + 1) * (NV / LPV); ++j) {
    const float o = vals[j];
    r += (o > v || (o == v && j < vi)) ? 1 : 0;
  }
#pragma unroll
  for (int d = 1; d < LPV; d <<= 1) r += __shfl_xor_sync(0xffffffffu, r, d);
  if (h == 0 && r == k - 1) sm.hist[1][0] = __float_as_uint(v);
  __syncthreads();
  const float t = __uint_as_float(sm.hist[1][0]);
  if (!(t > (logits ? -INFINITY : 0.0f))) return 0ull;
  return static_cast<uint64_t>(f2key(t)) << 32;
}

// The highest bin b of hist[0..nb) (nb = 2048 or 1024: nb / kThreads bins per thread) with at
// least k entries in bins >= b (1 <= k <= the histogram's total); *above gets the entries in bins
// above b, *cb hist[b]. All threads; ends with a barrier.
__device__ __forceinline__ int hist_kth_bin(const uint32_t* hist, int nb, uint32_t k, uint64_t* scratch, int* s_res,
                                            uint32_t* above, uint32_t* cb) {
  const int tid = threadIdx.x;
  const int per = nb / kThreads;  // (2 or 4)
  uint32_t c[4];
  uint32_t t = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    c[j] = j < per ? hist[tid * per + j] : 0u;
    t += c[j];
  }
  uint64_t tot = 0;
  const uint64_t ex = block_excl_scan_u64(t, scratch, &tot);
  uint32_t ab = static_cast<uint32_t>(tot - ex - t);  // entries in the bins of higher threads
#pragma unroll
  for (int j = 3; j >= 0; --j) {
    if (j < per) {
      if (ab < k && k <= ab + c[j]) {
        s_res[0] = tid * per + j;
        s_res[1] = static_cast<int>(ab);
        s_res[2] = static_cast<int>(c[j]);
      }
      ab += c[j];
    }
  }
  __syncthreads();
  const int b = s_res[0];
  *above = static_cast<uint32_t>(s_res[1]);
  *cb = static_cast<uint32_t>(s_res[2]);
  __syncthreads();  // (s_res is read by every thread before a later call rewrites it)
  return b;
}

// The r-th largest of the CTA's kThreads * kTpGroups group maxima (gm: this thread's), to 22 key
// bits: two 11-bit histogram rounds over the maxima' keys, each a count into hist (kBins u32, zero
// on entry and zero again on return when `clear` is set). The value of the returned key is at most
// the r-th largest maximum, so at least r of them are at or above it (1 <= r <= kThreads *
// kTpGroups). All threads; block barriers. HOLD: the keys stay in registers for the second round
// (else they are computed again: fewer registers where the caller keeps loads in flight across it).
template <bool HOLD>
__device__ __forceinline__ uint32_t group_kth_key(const float (&gm)[kTpGroups], uint32_t r, bool logits,
                                                  uint32_t* hist, uint64_t* s_scratch, int* s_res, bool clear) {
  const int tid = threadIdx.x;
  uint32_t gk[kTpGroups];
#pragma unroll
  for (int j = 0; j < kTpGroups; ++j) {
    gk[j] = f2key(sanitize(gm[j], logits));
    atomicAdd(&hist[gk[j] >> 21], 1u);
  }
  __syncthreads();
  uint32_t ab = 0, cb = 0;
  const uint32_t b1 = static_cast<uint32_t>(hist_kth_bin(hist, kBins, r, s_scratch, s_res, &ab, &cb));
#pragma unroll
  for (int j = 0; j < kBins / kThreads; ++j) hist[j * kThreads + tid] = 0u;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kTpGroups; ++j) {
    const uint32_t key = HOLD ? gk[j] : f2key(sanitize(gm[j], logits));
    if ((key >> 21) == b1) atomicAdd(&hist[(key >> 10) & (kBins - 1)], 1u);
  }
  __syncthreads();
  uint32_t ab2 = 0, cb2 = 0;
  const uint32_t b2 = static_cast<uint32_t>(hist_kth_bin(hist, kBins, r - ab, s_scratch, s_res, &ab2, &cb2));
  if (clear) {  // (hist_kth_bin ended with a barrier: every thread has read the counts)
#pragma unroll
    for (int j = 0; j < kBins / kThreads; ++j) hist[j * kThreads + tid] = 0u;
    __syncthreads();
  }
  return (b1 << 21) | (b2 << 10);
}

#if FIB_TWOPASS_DIAG_TWICE
// (the diagnostic's select: one non-inlined copy, called twice)
static __device__ __noinline__ uint64_t diag_kth(const Segs& sg, int k, SelectSmem& sm, int slack) {
  return kth_prefix(sg, k, sm, slack);
}
#endif

// MINB: CTAs per SM the registers are sized for. 1: 128 registers, FIB_TWOPASS_VECS loads in
// flight; 2: 64 registers, FIB_TWOPASS2_VECS loads, and a CTA streams its slice while the SM's
// other CTA selects, merges and draws (rows of one CTA from 256 rows: the SM never waits for a
// row's tail).
// LK: the large-k instantiation, launched where the host knows every row's top_k exceeds
// kTpSeedMaxK (a scalar top_k, or the caller's min_top_k hint): the speculative candidates and the
// rejection tail (the switches below). Any row is exact in either. Its lane-maxima path stays (rows
// with k <= kTpSeedMaxK, which the host does not send it): without it the k >= 1024 rows were
// 0.820x the default kernel's time on the H100 against 0.808x with it, the k = 256 rows 0.946x
// against 0.914x (results/sampling_twopass_lk_h100.json; ptxas spilled into three pass loops without it).
template <int DT, int MINB, bool LK = false, bool RB = false>
__global__ void __launch_bounds__(kThreads, MINB) twopass_kernel(const Params p) {
  extern __shared__ __align__(128) unsigned char dsm[];
#if FIB_HAS_CLUSTER
  pdl_enter();
  constexpr bool kSpec = LK || FIB_TWOPASS_SPEC >= 1;
  constexpr bool kSpecSeeded = !LK && FIB_TWOPASS_SPEC >= 2;
  constexpr bool kRejTail = LK || FIB_TWOPASS_REJECT_TAIL != 0;
  constexpr int ESIZE = (DT == kF32) ? 4 : 2;
  constexpr int TPV = 16 / ESIZE;  // tokens per vector
  constexpr int PD = tp_vecs<MINB>();
  const int row = blockIdx.y;
  const uint32_t rank = cl_rank(), S = cl_size();
  FIB_PROF(0);
  FIB_PROF_CTA(0);
#ifdef FIB_SAMPLING_PROFILE
  if (blockIdx.y == 0 && threadIdx.x == 0 && rank == 0) g_fib_prof[11] = g_fib_prof[15] = g_fib_prof[16] = 0ull;
#endif
  const int V = p.V;
  const int tid = threadIdx.x, lane = tid & 31;

  // slice of the row, its 16-byte aligned body and the unaligned head / tail tokens (as in the
  // filter kernel); thread tid reads the body's vectors u * kThreads + tid, u < nvt
  const int64_t start = static_cast<int64_t>(rank) * p.chunk;
  const int64_t n_rem = static_cast<int64_t>(V) - start;
  const int n = n_rem <= 0 ? 0 : static_cast<int>(n_rem < p.chunk ? n_rem : p.chunk);
  const char* in_row = reinterpret_cast<const char*>(p.in) + (static_cast<int64_t>(row) * p.in_stride + start) * ESIZE;
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(in_row);
  int head = static_cast<int>(((16 - (a0 & 15)) & 15) / ESIZE);
  if (head > n) head = n;
  const int nv = ((n - head) * ESIZE) / 16;
  const int tail0 = head + nv * TPV;
  const int extra = head + (n - tail0);
  const char* body = in_row + static_cast<int64_t>(head) * ESIZE;
  const int nvt = (nv + kThreads - 1) / kThreads;  // (block-uniform)
  auto ldv = [&](int u) -> uint4 {
    const int g = u * kThreads + tid;
    return g < nv ? ld_first(reinterpret_cast<const uint4*>(body) + g) : make_uint4(0u, 0u, 0u, 0u);
  };
  // the first pass's loads go out before the row's parameters are read (global loads too)
  uint4 q[PD];
#pragma unroll
  for (int d = 0; d < PD; ++d) q[d] = ldv(d);

  const bool logits = p.is_logits != 0;
  const int k = row_top_k(p, row);
  const float T = logits ? (p.temp_arr ? p.temp_arr[row] : p.temp_val) : 1.0f;
  if (!(k > 0 && k < V && k <= kFilterMaxK) || (logits && !(T > 0.0f))) {
    sample_row<DT>(p, dsm, row, rank, S, p.chunk, false);  // general algorithm over the cluster
    return;
  }
  const RowFilters rf = row_filters(p, row, logits, T);
  const float tp = rf.tp, mp = rf.mp, scale = rf.scale;
  const bool use_p = rf.use_p, use_m = rf.use_m, joint = rf.joint;
  // rows with k <= kRankSortMax (ranked below; not in the large-k instantiation, whose rows with k >
  // 1024 draw in reject_tail: the added code cost its kernel for two CTAs per SM spills and k=2048
  // rows 5-7% at B >= 256): the other ranks send their ordered top k (Pk entries, zero-padded, and
  // a 16-byte header) with st.async into rank 0, whose mbarrier counts the bytes
  int Pk = 32;
  while (Pk < k) Pk <<= 1;
  const bool push = static_cast<int>(S - 1) * k <= kFilterRingBytes / 8;
  const int slot = S > 1 ? (kFilterRingBytes / 8) / static_cast<int>(S - 1) : 0;
  const bool ranked = !LK && k <= kRankSortMax && (S == 1 || push);
  // their kTagDraw random for rank 0's draw: the seed and offset come into shared memory while the
  // pass streams (cp.async: no register waits for them) and thread 0 runs the Philox rounds once its
  // pass ends (warp 0's ends first), so the draw does not wait for two global loads
  __shared__ uint64_t s_so[2], s_rnd;
  if (ranked && rank == 0 && tid == 0) {
    if (p.seed_arr) cp_async8(&s_so[0], p.seed_arr + (p.seed_per_row ? row : 0));
    else s_so[0] = static_cast<uint64_t>(p.seed_val);
    if (p.offset_arr) cp_async8(&s_so[1], p.offset_arr + (p.offset_per_row ? row : 0));
    else s_so[1] = static_cast<uint64_t>(p.offset_val);
  }

  unsigned char* ring = dsm;  // (the merge: the other ranks' sets land here in rank 0)
  uint64_t* buf = reinterpret_cast<uint64_t*>(dsm + kFilterRingBytes);
  __shared__ SelectSmem ssel;
  __shared__ uint64_t s_tot;
  __shared__ uint64_t s_scratch[kWarps];
  __shared__ int s_cnt, s_new;
  __shared__ int s_res[3];
  __shared__ float s_jm[kWarps];
  __shared__ double s_js[kWarps];
  __shared__ float s_cm;
  __shared__ double s_cs;
  __shared__ int s_rcnt[kMaxCluster];
  __shared__ float s_rcm[kMaxCluster];
  __shared__ double s_rcs[kMaxCluster];
  // rows with k > kSeedMaxK: the first pass counts the keys' top 11 bits into this histogram (past
  // the buffer's kTpCap entries)
  uint32_t* hist = reinterpret_cast<uint32_t*>(buf + kTpCap);
  const bool seeded = k <= kTpSeedMaxK;
  const bool grouped = !seeded && k <= kTpGroupMaxK && n > k;  // (the group maxima bound)
  bool spec_ok = false;  // (speculative candidates below: no lane / group / batch maxima then)
#if FIB_TWOPASS_ROW_BOUND
  // the row's bound (FIB_TWOPASS_ROW_BOUND): rows of several CTAs whose every slice, the last and
  // shortest too, holds 2 PD batches (the same in every rank; other rows bound each slice). One CTA
  // per SM only (B < 256, where 5x is short): with two, the kernels' spills doubled (64 registers)
  const bool rb = RB && LK && MINB == 1 && S > 1 && static_cast<int64_t>(V) - static_cast<int64_t>(S - 1) * p.chunk >=
                                     static_cast<int64_t>(2 * PD * kThreads + 1) * TPV;
#endif
  [[maybe_unused]] uint32_t spec_r = 0;  // (kSpec false: unused)
  if constexpr (kSpec) {
    // rows with the group maxima bound (FIB_TWOPASS_SPEC >= 1) or the lane maxima bound (>= 2)
    if (grouped || (kSpecSeeded && seeded && n > k)) {
      // m: the sample's expected tokens at or above the slice's k-th largest (iid tokens); the r-th
      // largest sampled value, r = m + 5 sqrt(m) + 8, lies above that k-th largest only about 5
      // standard deviations of the sample's spread away (m < 4: r >= 16, Poisson tail < 1e-9), and
      // ~k r / m tokens reach it
#if FIB_TWOPASS_ROW_BOUND
      const float mexp = static_cast<float>(kThreads * kTpGroups) * static_cast<float>(k) /
                         static_cast<float>(rb ? V : n);  // (the row's bound: a sample of the row)
#else
      const float mexp = static_cast<float>(kThreads * kTpGroups) * static_cast<float>(k) / static_cast<float>(n);
#endif
      const float rr = ceilf(mexp + 5.0f * sqrtf(mexp) + 8.0f);
      spec_ok = nvt >= 2 * PD && rr <= 0.5f * static_cast<float>(kThreads * kTpGroups) &&
                static_cast<float>(k) * rr <= 0.75f * static_cast<float>(kTpCap) * mexp;
#if FIB_TWOPASS_ROW_BOUND
      if (rb)  // (the same in every rank)
        spec_ok = rr <= 0.5f * static_cast<float>(kThreads * kTpGroups) &&
                  static_cast<float>(k) * rr <= 0.75f * static_cast<float>(kTpCap) * mexp;
#endif
      spec_r = static_cast<uint32_t>(rr);
    }
  }
  if (!seeded || spec_ok) {
#pragma unroll
    for (int j = 0; j < kBins / kThreads; ++j) hist[j * kThreads + tid] = 0u;
  }
  if (tid == 0) s_cnt = 0;
  __shared__ __align__(8) uint64_t s_mb;  // (ranked rows of S > 1: rank 0's receive mbarrier)
  if (S > 1 && ranked && rank == 0 && tid == 0) {
    mbar_init(&s_mb, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    mbar_expect_tx(&s_mb, static_cast<uint32_t>(S - 1) * static_cast<uint32_t>(8 * Pk + 16));
  }
  __syncthreads();
  // the other ranks write into rank 0's shared memory only after it has started: this arrive, the
  // wait before the merge (an arrive that publishes nothing: relaxed, no wait for the loads in flight)
  if (S > 1) cl_arrive_relaxed();

  const SliceSet<DT, PD> set{in_row, body, nv, head, tail0, extra, static_cast<uint32_t>(start), logits};
  float jm = -INFINITY;  // joint: per-thread online max / sum (logits) or sum (probs)
  float js = 0.0f;
  auto joint_add = [&](const float* x, int cnt) {
    if (logits) {
      float m = jm;
      for (int j = 0; j < cnt; ++j) m = fmaxf(m, x[j]);  // fmaxf drops NaN
      if (m > jm) {
        js = (jm == -INFINITY) ? 0.0f : js * exp2f(__fmul_rn(__fsub_rn(jm, m), scale));
        jm = m;
      }
      if (jm == INFINITY) {
        for (int j = 0; j < cnt; ++j) js += x[j] == INFINITY ? 1.0f : 0.0f;
      } else if (jm != -INFINITY) {
        for (int j = 0; j < cnt; ++j) js += exp2_ftz(__fmul_rn(__fsub_rn(fmaxf(x[j], -INFINITY), jm), scale));
      }
    } else {
      for (int j = 0; j < cnt; ++j) js += fmaxf(x[j], 0.0f);
    }
  };

  // the unaligned head and tail tokens (< 16 bytes each) go into the buffer as they are
  for (int e0 = 0; e0 < extra; e0 += kThreads) {  // (block-uniform trip count)
    const int e = e0 + tid;
    const bool ok = e < extra;
    const int i = e < head ? e : tail0 + (e - head);
    const float x = ok ? load_elem<DT>(in_row, i) : 0.0f;
    if (joint && ok) joint_add(&x, 1);
    if (seeded && !spec_ok) {  // (speculating rows append them against their bound, below)
      warp_append1(ok, set.comp(x, i), buf, &s_cnt);
    } else if (ok && !grouped && !seeded) {  // (grouped rows: the gather below reads them again)
      atomicAdd(&hist[f2key(sanitize(x, logits)) >> 21], 1u);
    }
  }

  // ---- pass 1: lane maxima (with index) and second maxima (rows with k <= kSeedMaxK), the
  // maxima of kTpGroups groups of each thread's tokens (k <= kTpGroupMaxK) or the histogram of the
  // keys' top 11 bits (larger k), and the joint sums
  float m1 = -INFINITY, m2 = -INFINITY;  // (NaN never enters: every compare with it is false)
  int i1 = 0;
  float gm[kTpGroups];
#pragma unroll
  for (int j = 0; j < kTpGroups; ++j) gm[j] = -INFINITY;
  // grouped rows of at most kTpBatchMax batches per thread: their batch maxima at the end of the
  // candidate buffer (2 bytes per thread and batch), which the gather then stops short of
  const int nbt = (nvt + PD - 1) / PD;
  uint16_t* bm = (grouped && !spec_ok && nbt <= kTpBatchMax) ? reinterpret_cast<uint16_t*>(buf + kTpCap) - nbt * kThreads : nullptr;
  const int gcap = bm ? (kTpCap * 8 - nbt * kThreads * 2) / 8 : kTpCap;
  bool fast = false;  // (the buffer holds every token of the slice at or above a bound of its k-th largest)
  bool spec = false;  // (the speculative candidates ran: no group maxima)
#if FIB_TWOPASS_ROW_BOUND
  // this rank's count at the row's bound (kTpRbFull: none, or past the buffer, or an exact slice top
  // k: the row holds k at the bound then), and whether the merge's check is still to come
  int rb_val = kTpRbFull;
  bool rb_redo = false;
  __shared__ int s_rbc[kMaxCluster];
#endif
  auto pass1 = [&](auto&& per_vec, auto&& end_batch) {
    for (int u0 = 0; u0 < nvt; u0 += PD) {
#pragma unroll
      for (int d = 0; d < PD; ++d) {
        const int u = u0 + d;
        const uint4 r = q[d];
        q[d] = ldv(u + PD);  // (the slot refilled before its values are used)
        const int g = u * kThreads + tid;
        if (g < nv) {
          float x[TPV];
          unpack_vec<DT>(r, x);
          if (joint) joint_add(x, TPV);
          per_vec(x, head + g * TPV, d);
        }
      }
      end_batch(u0 / PD);
    }
  };
  auto no_end = [](int) {};
  if constexpr (kSpec) {
    if (spec_ok) {
      // ---- speculative candidates (docs/sampling-journal.md, "Speculative candidates"): 8 tokens per
      // thread sampled evenly over the slice (one 32-byte sector each) estimate a value that about
      // k r / m of the slice's tokens reach (m, r: spec_ok above), and the pass appends every token
      // at or above it. If at least k and at most kTpCap tokens reached it, the buffer holds every
      // token at or above a value that k of them reach, so the slice's top k, and the slice is
      // read once. Otherwise (a sample unlike the slice) the radix path below reads it again.
      float sv[kTpGroups];
#if FIB_TWOPASS_ROW_BOUND
      if (rb) {  // (cluster-uniform) 8 consecutive tokens per thread, spread over the row, alike in every rank
        const char* row0 = reinterpret_cast<const char*>(p.in) + static_cast<int64_t>(row) * p.in_stride * ESIZE;
        const int64_t t0 = (static_cast<int64_t>(tid) * (V - kTpGroups)) / kThreads;
#pragma unroll
        for (int j = 0; j < kTpGroups; ++j) sv[j] = load_elem<DT>(row0, t0 + j);
      } else
#endif
      {
        constexpr int SV = kTpGroups / TPV;  // vectors per sample (fp32 2, 16-bit 1)
        int g0 = static_cast<int>((static_cast<int64_t>(tid) * nv) / kThreads) & ~(SV - 1);
        if (g0 > nv - SV) g0 = nv - SV;  // (nvt >= 2 PD: nv >= kThreads)
#pragma unroll
        for (int v = 0; v < SV; ++v) {
          float x[TPV];
          unpack_vec<DT>(ld_again(reinterpret_cast<const uint4*>(body) + g0 + v), x);
#pragma unroll
          for (int j = 0; j < TPV; ++j) sv[v * TPV + j] = x[j];
        }
      }
      const float tfs = key2f(group_kth_key<false>(sv, spec_r, logits, hist, s_scratch, s_res, true));
      spec = tfs > (logits ? -INFINITY : 0.0f);
      FIB_PROF(15);
      if (!spec && seeded) {  // the lane-maxima path below expects the head and tail in the buffer
        for (int e0 = 0; e0 < extra; e0 += kThreads) {
          const int e = e0 + tid;
          const bool ok = e < extra;
          const int i = e < head ? e : tail0 + (e - head);
          warp_append1(ok, set.comp(ok ? load_elem<DT>(in_row, i) : 0.0f, i), buf, &s_cnt);
        }
      }
      if (spec) {  // (block-uniform)
        for (int e0 = 0; e0 < extra; e0 += kThreads) {  // the unaligned head and tail tokens
          const int e = e0 + tid;
          const bool ok = e < extra;
          const int i = e < head ? e : tail0 + (e - head);
          const float x = ok ? load_elem<DT>(in_row, i) : 0.0f;
          warp_append1(ok && x >= tfs, set.comp(x, i), buf, &s_cnt, kTpCap);
        }
        // pass 1 appending every token at or above tfs (the shared-atomic appends on one address are
        // aggregated per warp by the compiler)
        pass1([&](const float (&x)[TPV], int ib, int) {
          uint32_t msk = 0u;
#pragma unroll
          for (int j = 0; j < TPV; ++j) msk |= static_cast<uint32_t>(x[j] >= tfs) << j;  // (NaN: never)
          if (msk != 0u) {
            int at = atomicAdd(&s_cnt, __popc(msk));
#pragma unroll
            for (int j = 0; j < TPV; ++j)
              if ((msk >> j) & 1u) {
                if (at < kTpCap) buf[at] = set.comp(x[j], ib + j);  // (past kTpCap: counted)
                ++at;
              }
          }
        }, no_end);
        FIB_PROF(16);
        __syncthreads();
        const int sc = s_cnt;
#if FIB_TWOPASS_ROW_BOUND
        if (rb) {  // (whether the row holds k: the merge's check below)
          fast = sc <= kTpCap;
          rb_val = fast ? sc : kTpRbFull;
        } else {
          fast = sc >= k && sc <= kTpCap;
        }
#else
        fast = sc >= k && sc <= kTpCap;
#endif
#ifdef FIB_SAMPLING_PROFILE
        if (blockIdx.y == 0 && rank == 0 && tid == 0) g_fib_prof[11] = static_cast<unsigned long long>(sc);
#endif
      }
    }
  }
  if (spec) {
  } else if (seeded) {
    pass1([&](const float (&x)[TPV], int ib, int) {
#pragma unroll
      for (int j = 0; j < TPV; ++j) {
        const float xv = x[j];
        const bool top = xv > m1;
        m2 = top ? m1 : fmaxf(m2, xv);
        i1 = top ? ib + j : i1;
        m1 = top ? xv : m1;
      }
    }, no_end);
  } else if (grouped) {
    // group of token j of the thread's d-th vector in flight: (d * TPV + j) * kTpGroups / (PD * TPV)
    static_assert((PD * TPV) % kTpGroups == 0, "whole groups per batch");
    // and, where they fit, the top 16 key bits of each batch's maximum (bm: the gather then reads
    // only the batches that reach the bound)
    float bmax = -INFINITY;
    auto gvec = [&](const float (&x)[TPV], int, int d) {
#pragma unroll
      for (int j = 0; j < TPV; ++j) {
        const int gi = (d * TPV + j) / (PD * TPV / kTpGroups);
        gm[gi] = fmaxf(gm[gi], x[j]);  // (fmaxf drops NaN)
        bmax = fmaxf(bmax, x[j]);
      }
    };
    auto gend = [&](int bi) {
      if (bm != nullptr) bm[bi * kThreads + tid] = static_cast<uint16_t>(f2key(sanitize(bmax, logits)) >> 16);
      bmax = -INFINITY;
    };
    pass1(gvec, gend);
  } else {
    pass1([&](const float (&x)[TPV], int, int) {
#pragma unroll
      for (int j = 0; j < TPV; ++j) atomicAdd(&hist[f2key(sanitize(x[j], logits)) >> 21], 1u);
    }, no_end);
  }
  FIB_PROF(1);
  FIB_PROF_CTA(1);
  if (ranked && rank == 0 && tid == 0) {
    cp_async_wait_all();
    s_rnd = row_random64(s_so[0], s_so[1], static_cast<uint32_t>(row));
  }

  // ---- the candidates: every token of the slice at or above the bound
  if (seeded && !spec) {
    // (k <= 64: each warp's 8 largest lane maxima, ranked by 4 lanes each; larger k: 16 per warp,
    // 2 lanes each, ~2 us more at B=64 but a bound tight enough up to k = 128)
    const uint64_t tau0 = k <= 64 ? seed_tau_lanes<8>(m1, k, logits, ssel) : seed_tau_lanes<16>(m1, k, logits, ssel);
    FIB_PROF(12);
    const float tf0 = key2f(static_cast<uint32_t>(tau0 >> 32));
    const bool rr = tau0 != 0ull && m2 >= tf0;  // (m2 = -inf where a lane has < 2 tokens)
    const int nrr = __syncthreads_count(rr);
    FIB_PROF(13);
#ifdef FIB_SAMPLING_PROFILE
    if (blockIdx.y == 0 && rank == 0 && tid == 0) g_fib_prof[10] = static_cast<unsigned long long>(nrr);
#endif
    fast = tau0 != 0ull && nrr * nvt * TPV + kThreads + extra <= kTpCap;
    if (fast) {
      warp_append1(!rr && m1 >= tf0, set.comp(m1, i1), buf, &s_cnt);
      // lanes with two or more: their warp reads all their vectors again at once (vector u of the
      // j-th such lane is entry j * nvt + u of the warp's list; kTpReread loads in flight per lane)
      const unsigned rrm = __ballot_sync(0xffffffffu, rr);
      const int tot = __popc(rrm) * nvt;
      for (int i0 = 0; i0 < tot; i0 += 32 * kTpReread) {  // (warp-uniform)
        uint4 r[kTpReread];
        int g[kTpReread];
#pragma unroll
        for (int c = 0; c < kTpReread; ++c) {
          const int i = i0 + c * 32 + lane;
          g[c] = nv;
          if (i < tot) {
            const int jl = i / nvt, u = i - jl * nvt;
            g[c] = u * kThreads + ((tid & ~31) | static_cast<int>(__fns(rrm, 0u, jl + 1)));
          }
          r[c] = g[c] < nv ? ld_again(reinterpret_cast<const uint4*>(body) + g[c]) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int c = 0; c < kTpReread; ++c) {
          float x[TPV];
          unpack_vec<DT>(r[c], x);
          const bool ok = g[c] < nv;
#pragma unroll
          for (int j = 0; j < TPV; ++j)
            warp_append1(ok && x[j] >= tf0, set.comp(x[j], head + g[c] * TPV + j), buf, &s_cnt);
        }
      }
      FIB_PROF(14);
      __syncthreads();
    }
  } else if (grouped && !spec) {
    // the k-th largest of the slice's kThreads * kTpGroups group maxima, to 22 key bits (two 11-bit
    // histogram rounds over the maxima): a floor with at least k tokens at or above it (each group
    // maximum is a distinct token). Then every token at or above it is gathered from the slice
    // (L2); where more than the buffer holds (structured or tied rows), the radix path below.
    const uint32_t tkey = group_kth_key<true>(gm, static_cast<uint32_t>(k), logits, hist, s_scratch, s_res, false);
    FIB_PROF(12);
    if (key2f(tkey) > (logits ? -INFINITY : 0.0f)) {  // (else fewer than k positive / finite maxima)
      set.gather_ge(key2f(tkey), buf, &s_cnt, gcap, bm, tkey >> 16);
      __syncthreads();
      fast = s_cnt <= gcap;
#ifdef FIB_SAMPLING_PROFILE
      if (blockIdx.y == 0 && rank == 0 && tid == 0) g_fib_prof[10] = static_cast<unsigned long long>(s_cnt);
#endif
    }
    FIB_PROF(14);
  }
  FIB_PROF(2);
#if FIB_TWOPASS_ROW_BOUND
radix_again:  // (the row held fewer than k tokens at its bound: every rank's exact top k, then the merge again)
#endif
  if (!fast) {
    // the radix path: the k-th largest key's bin from the histogram (built by the first pass, or
    // now from the slice: rows with the seed whose bound did not hold), then every token in that
    // bin or above when they fit the buffer (the usual case); else the next 11 / 10 key bits of
    // that bin are counted in one more pass, and so on. A slice whose k-th largest key is shared
    // by more tokens than the buffer holds (ties) takes the exact radix select over composites.
    // Passes after the first read the slice again (L2 where it still holds it).
    __syncthreads();
    if (tid == 0) s_cnt = 0;
    if ((seeded || grouped) && n > k) {
#pragma unroll
      for (int j = 0; j < kBins / kThreads; ++j) hist[j * kThreads + tid] = 0u;
      __syncthreads();
      set.each([&](uint64_t v, bool ok) {
        if (ok) atomicAdd(&hist[static_cast<uint32_t>(v >> 53)], 1u);
      });
    }
    __syncthreads();
    if (n <= k) {  // (every token of the slice)
      set.gather([&](uint64_t) { return true; }, buf, &s_cnt);
    } else {
      uint32_t rem = static_cast<uint32_t>(k), above_tot = 0, pfx = 0;
      int shift = 21, nb = kBins;
      for (;;) {
        uint32_t ab = 0, cb = 0;
        const int b = hist_kth_bin(hist, nb, rem, s_scratch, s_res, &ab, &cb);
        above_tot += ab;
        rem -= ab;
        pfx = (pfx << (nb == kBins ? 11 : 10)) | static_cast<uint32_t>(b);
        if (above_tot + cb <= static_cast<uint32_t>(kTpCap)) {  // (block-uniform)
          const int sh = shift;
          const uint32_t pf = pfx;
          set.gather([&](uint64_t v) { return (static_cast<uint32_t>(v >> 32) >> sh) >= pf; }, buf, &s_cnt);
          break;
        }
        if (shift == 0) {  // ties: the exact select over composites
          const uint64_t t = kth_prefix(set, k, ssel);
          set.gather([&](uint64_t v) { return v >= t; }, buf, &s_cnt);
          break;
        }
        const int w = shift > 11 ? 11 : shift;  // the next digit: bits [shift - w, shift)
        const int osh = shift;
        shift -= w;
        nb = 1 << w;
        for (int j = tid; j < nb; j += kThreads) hist[j] = 0u;
        __syncthreads();
        const int sh = shift;
        const uint32_t pf = pfx;
        set.each([&](uint64_t v, bool ok) {
          const uint32_t key = static_cast<uint32_t>(v >> 32);
          if (ok && (key >> osh) == pf) atomicAdd(&hist[(key >> sh) & static_cast<uint32_t>(nb - 1)], 1u);
        });
        __syncthreads();
      }
    }
    __syncthreads();
  }
  FIB_PROF(3);
  FIB_PROF_CTA(2);

  const int direct = max(Pk, kFilterSortDirect);
  // (from here on the filter kernel's merge and tail)
  // (speculating rows with k <= kTpSeedMaxK hold ~k r / m entries, several Pk: cut here, in every rank)
  // rows with k <= kRankSortMax: each rank ranks its set (at most kRankSortMax, cut below) into its
  // top k in order, sent straight into its slot of rank 0, which merges the S ordered lists (ranked
  // below); no select or sort over the merged set
  const int keep_max = ranked ? kRankSortMax
                       : (spec && seeded) ? direct : (S > 1 && push) ? min(slot, kFilterCap - kFilterMaxK) : direct;
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
  FIB_PROF(4);
  if (joint) {
    warp_joint_partial(jm, js, logits, scale, s_jm, s_js);
    __syncthreads();
    if (tid == 0) s_cs = combine_partials(s_jm, s_js, kWarps, logits, scale, &s_cm);
  }
  __syncthreads();

  uint64_t* G = buf;
  int nc0 = s_cnt;
  float cm = s_cm;
  double cs = s_cs;
  uint64_t* ring64 = reinterpret_cast<uint64_t*>(ring);
  if (!LK && ranked) {  // (block-uniform, the same in every rank; LK: compiled out)
    // this CTA's top kk in descending order: rank 0 (or a row of one CTA) into L0 past its set; rank
    // r > 0 sends it with st.async into slot r - 1 of rank 0's push area (its Pk entries zero-padded,
    // then its count and joint partial: 8 Pk + 16 bytes on rank 0's mbarrier, no cluster barrier, so
    // no GPU-scope fence on either side). Rank 0 places each entry at its place in its list plus the
    // entries of the other lists above it (binary searches): the merged top k in order, as the
    // select and sort of the merged set gave them (the same token)
    const int kk = min(nc0, k);
    uint64_t* L0 = buf + kRankSortMax;  // (nc0 <= kRankSortMax)
    if (S > 1) cl_wait();  // (the entry's arrive: every CTA of the cluster has started)
    FIB_PROF(5);
    if (S > 1 && rank != 0) {
      const uint32_t bar = cl_addr(&s_mb, 0u);
      const uint32_t dst = cl_addr(ring64 + static_cast<int>(rank - 1) * slot, 0u);
      // (rank_desc_each's ranking, written out with int lanes: through rank_desc_each ptxas allocates
      // the fp32 kernel for one CTA per SM differently, 3.7K SASS lines, not yet timed on the GPU)
      const int lg = rank_lg(nc0);
      const int i = tid >> lg, h = tid & ((1 << lg) - 1);
      const uint64_t v = i < nc0 ? buf[i] : 0ull;
      int r = 0;
      if (i < nc0) {
#pragma unroll 4
        for (int j = h; j < nc0; j += 1 << lg) r += buf[j] > v ? 1 : 0;
      }
      for (int d = 1; d < (1 << lg); d <<= 1) r += __shfl_xor_sync(0xffffffffu, r, d);
      if (h == 0 && i < nc0 && r < kk) st_async_u64(dst + 8u * static_cast<uint32_t>(r), v, bar);
      for (int j = kk + tid; j < Pk; j += kThreads) st_async_u64(dst + 8u * static_cast<uint32_t>(j), 0ull, bar);
      if (tid == 0) {
        st_async_u32(cl_addr(&s_rcnt[rank], 0u), static_cast<uint32_t>(kk), bar);
        st_async_u32(cl_addr(&s_rcm[rank], 0u), __float_as_uint(cm), bar);
        st_async_u64(cl_addr(&s_rcs[rank], 0u), static_cast<uint64_t>(__double_as_longlong(cs)), bar);
      }
      FIB_PROF_CTA(3);
      return;
    }
    rank_desc_each(buf, nc0, kk, rank_lg(nc0), [&](int r, uint64_t v) { L0[r] = v; });
    FIB_PROF(20);
    if (S > 1) {
      if (tid == 0) {
        s_rcm[0] = cm;
        s_rcs[0] = cs;
      }
      mbar_wait<true>(&s_mb, 0u);  // the other ranks' lists, counts and partials are in
      FIB_PROF(21);
      __syncthreads();  // (and this CTA's L0)
      FIB_PROF(22);
      G = L0 + kRankSortMax;
      int total = kk;
      for (int r = 1; r < static_cast<int>(S); ++r) total += s_rcnt[r];
      nc0 = min(total, k);
      merge_ranked(L0, kk, ring64, slot, s_rcnt, static_cast<int>(S), nc0, G);
      if (joint) cs = combine_partials(s_rcm, s_rcs, static_cast<int>(S), logits, scale, &cm);
      __syncthreads();
    } else {
      __syncthreads();
      G = L0;
      nc0 = kk;
    }
    FIB_PROF(6);
    FIB_PROF(7);
    finish_topk(p, G, nc0, row, logits, T, scale, use_m, mp, use_p, tp, joint, cm, cs, s_scratch, &s_tot, &s_rnd);
    FIB_PROF(8);
    FIB_PROF_CTA(3);
    return;
  }
#if FIB_TWOPASS_FUSED_TAIL
  // (block-uniform) rows that draw in reject_tail below (its condition there)
  const bool rej_fused = LK && !joint && use_p && tp >= 0.25f && p.rej_min_k > 0 && k > p.rej_min_k;
  // the exact top k of the set sg (total entries) into scr in token order and reject_tail on it
  // (true: the row is done); where the row's maximum is not finite (+inf, or no positive weight) the
  // top k are copied to Gf for the sorted tail below instead (false: G = Gf, nc0 their count). scr:
  // kRejTailScratch u64 apart from sg's segments; Gf: room for the set and the fallback's sort
  auto fused_tail = [&](const Segs& sg, int total, uint64_t* scr, uint64_t* Gf) -> bool {
    uint64_t mx = 0ull, t = 0ull;
    if (total > k) {
      t = kth_prefix<true>(sg, k, ssel, 0, &mx);
    } else {  // (every entry is kept)
      sg.each([&](uint64_t v, bool valid) { mx = (valid && v > mx) ? v : mx; });
      mx = warp_max_u64(mx);
      if (lane == 0) s_scratch[tid >> 5] = mx;
      __syncthreads();
      mx = warp_max_u64(lane < kWarps ? s_scratch[lane] : 0ull);
      __syncthreads();  // (s_scratch is reused)
    }
    const int nc = sort_members_by_index(sg, t, p.V, scr, s_scratch);
    if (S > 1 && !push) cl_arrive();  // no remote reads after this point
    FIB_PROF(6);
    const WeightCtx wc = make_weight_ctx(key2f(static_cast<uint32_t>(mx >> 32)), logits, scale);
    if (wc.kind == 0 || wc.kind == 1) {
      const uint32_t kmin = use_m ? f2key(min_p_threshold(wc, logits, T, mp)) : 0u;
      reject_tail(p.out_idx + row, row, p.V, row_seed(p, row), row_offset(p, row), Gf, nc, wc, kmin, tp, scr,
                  s_scratch, 3);
      FIB_PROF(8);
      if (S > 1 && !push) cl_wait();
      return true;
    }
    for (int j = tid; j < nc; j += kThreads) Gf[j] = scr[j];
    __syncthreads();
    G = Gf;
    nc0 = nc;
    return false;
  };
#endif
  if (S > 1) {
#if FIB_TWOPASS_ROW_BOUND
    if (!rb_redo)  // (the entry's arrive was waited once)
#endif
    cl_wait();  // (the entry's arrive: every CTA of the cluster has started)
    FIB_PROF(5);
    Segs sg;
    sg.nseg = static_cast<int>(S);
#if FIB_TWOPASS_ROW_BOUND
    // (cluster-uniform: the row's bound ran in every rank) each rank's count at it, into every rank,
    // before the cluster barrier below
    const bool rb_check = rb && spec && !rb_redo;
    if (rb_check && tid == 0)
      for (uint32_t r = 0; r < S; ++r) *cl_remote(&s_rbc[rank], r) = rb_val;
    // after that barrier, in every rank: fewer than k tokens of the row at its bound, so the sets may
    // miss some of the row's top k: every rank takes its slice's exact top k (the radix path), and
    // the merge runs again (its barrier again; no rank has read another's set yet)
    auto rb_short = [&]() {
      if (!rb_check) return false;
      int tot = 0;
      for (int r = 0; r < static_cast<int>(S); ++r) tot += s_rbc[r];
      return tot < k;
    };
#endif
    if (push) {
      // rank r > 0 writes its set into slot r - 1 of rank 0's push area (idle in this kernel) with
      // its count and joint partial: one cluster barrier, no reservation
      if (rank != 0) {
        uint64_t* dst = cl_remote(ring64, 0u) + static_cast<int>(rank - 1) * slot;
        for (int i = tid; i < nc0; i += kThreads) dst[i] = buf[i];
        if (tid == 0) {
          *cl_remote(&s_rcnt[rank], 0u) = nc0;
          *cl_remote(&s_rcm[rank], 0u) = cm;
          *cl_remote(&s_rcs[rank], 0u) = cs;
        }
      }
      cl_sync();  // the pushed sets are visible in rank 0
#if FIB_TWOPASS_ROW_BOUND
      if (rb_short()) {
        fast = false;
        rb_redo = true;
        goto radix_again;
      }
#endif
      FIB_PROF_CTA(3);
      if (rank != 0) return;
      sg.seg[0] = buf;
      sg.cnt[0] = nc0;
      for (int r = 1; r < kMaxCluster; ++r) {
        sg.seg[r] = ring64 + (r - 1) * slot;
        sg.cnt[r] = r < static_cast<int>(S) ? s_rcnt[r] : 0;
      }
      if (tid == 0) {
        s_rcm[0] = cm;
        s_rcs[0] = cs;
      }
      G = buf + nc0;  // (nc0 <= kFilterCap - kFilterMaxK)
    } else {
      cl_sync();  // every CTA's set, count and joint partials are final
#if FIB_TWOPASS_ROW_BOUND
      if (rb_short()) {
        fast = false;
        rb_redo = true;
        goto radix_again;
      }
#endif
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
      G = ring64;
    }
    int total = 0;
    for (int r = 0; r < sg.nseg; ++r) total += sg.cnt[r];
    if (tid == 0) s_new = 0;
    __syncthreads();
    if (joint) cs = combine_partials(s_rcm, s_rcs, static_cast<int>(S), logits, scale, &cm);
#if FIB_TWOPASS_DIAG_TWICE
    // (diagnostic, profile builds: the merge's select run twice through one non-inlined copy, each
    // timed; the second runs the same code warm, so their difference is what a first run pays: on
    // the H100 not its code, since the merge's own never-run copy then ran at the warm speed)
    FIB_PROF(17);
    if (LK && total > direct) {
      uint64_t td = diag_kth(sg, k, ssel, Pk - k);
      FIB_PROF(18);
      td ^= diag_kth(sg, k, ssel, Pk - k);
      FIB_PROF(19);
      if (td == 1ull && tid == 0) s_res[0] = 0;  // (keeps both selects)
    }
#endif
#if FIB_TWOPASS_FUSED_TAIL
    // (push: rank 0's own set fills buf's first nc0 entries, the pushed sets the ring; reject_tail
    // reads T by 16-byte vectors, so its scratch starts at an even entry)
    const int tail_at = (nc0 + 1) & ~1;
    if (rej_fused && (!push || tail_at + kRejTailScratch <= kFilterCap)) {  // (block-uniform)
      if (fused_tail(sg, total, push ? buf + tail_at : ring64, push ? ring64 : buf)) return;
    } else {
#endif
    const uint64_t t = total <= direct ? 0ull : kth_prefix(sg, k, ssel, Pk - k);
    if constexpr (LK && FIB_TWOPASS_MERGE_APPEND_GE != 0) {
      append_ge(sg, t, G, &s_new);  // (the large-k instantiation: ~5.8K entries at k = 2048, S = 2)
    } else {
      sg.each([&](uint64_t v, bool valid) { warp_append1(valid && v >= t, v, G, &s_new); });
    }
    __syncthreads();
    nc0 = s_new;
    if (!push) cl_arrive();  // no remote reads after this point
#if FIB_TWOPASS_FUSED_TAIL
    }
#endif
  }
#if FIB_TWOPASS_FUSED_TAIL
  else if (rej_fused) {  // (one CTA per row: its own set; the ring is free)
    Segs sg;
    sg.seg[0] = buf;
    sg.cnt[0] = nc0;
    sg.nseg = 1;
    if (fused_tail(sg, nc0, ring64, buf)) return;
  }
#endif
  FIB_PROF(6);
  if constexpr (kRejTail) {
    // rows the cluster kernel samples by rejection after its top-k (sampler.cuh, rej_k_first): its
    // rounds on the exact top-k set, no sort (the cluster kernel's token)
    if (!joint && use_p && tp >= 0.25f && p.rej_min_k > 0 && k > p.rej_min_k) {  // (block-uniform)
      if (nc0 > k) {  // the set of at most Pk cut to the exact top k
        Segs sg;
        sg.seg[0] = G;
        sg.cnt[0] = nc0;
        sg.nseg = 1;
        nc0 = compact_ge(G, nc0, kth_prefix(sg, k, ssel), &s_new);
      }
      uint64_t mx = 0ull;  // the row's maximum (the top k hold it)
      for (int j = tid; j < nc0; j += kThreads) mx = G[j] > mx ? G[j] : mx;
      mx = warp_max_u64(mx);
      if (lane == 0) s_scratch[tid >> 5] = mx;
      __syncthreads();
#if FIB_SELECT_SHFL_RED
      mx = warp_max_u64(lane < kWarps ? s_scratch[lane] : 0ull);
#else
#pragma unroll
      for (int w = 0; w < kWarps; ++w) mx = s_scratch[w] > mx ? s_scratch[w] : mx;
#endif
      __syncthreads();  // (s_scratch is reused)
      const WeightCtx wc = make_weight_ctx(key2f(static_cast<uint32_t>(mx >> 32)), logits, scale);
      if (wc.kind == 0 || wc.kind == 1) {
        int P = 32;
        while (P < nc0) P <<= 1;
        for (int j = nc0 + tid; j < P; j += kThreads) G[j] = 0ull;  // (the fallback's sort)
        // scratch: the ring (rows of one CTA, pushed sets: consumed by the select) or, where the set
        // was merged into the ring, this CTA's buffer
        uint64_t* const scr = G == ring64 ? buf : ring64;
        static_assert(kRejTailScratch * 8 <= kFilterRingBytes, "reject_tail's scratch fits the ring");
        const uint32_t kmin = use_m ? f2key(min_p_threshold(wc, logits, T, mp)) : 0u;
        __syncthreads();
#if FIB_TWOPASS_DIAG_TWICE
        // (reject_tail twice more before its call, timed: the same token each time; the second warm)
        FIB_PROF(23);
        reject_tail(p.out_idx + row, row, p.V, row_seed(p, row), row_offset(p, row), G, nc0, wc, kmin, tp, scr,
                    s_scratch);
        __syncthreads();
        FIB_PROF(24);
        reject_tail(p.out_idx + row, row, p.V, row_seed(p, row), row_offset(p, row), G, nc0, wc, kmin, tp, scr,
                    s_scratch);
        __syncthreads();
        FIB_PROF(26);
#endif
        reject_tail(p.out_idx + row, row, p.V, row_seed(p, row), row_offset(p, row), G, nc0, wc, kmin, tp, scr,
                    s_scratch);
        FIB_PROF(8);
        if (S > 1 && !push) cl_wait();
        return;
      }
    }
  }
  int P = 32;
  while (P < nc0) P <<= 1;
  for (int j = nc0 + tid; j < P; j += kThreads) G[j] = 0ull;
  __syncthreads();
  sort_desc_top(G, nc0, min(nc0, k), G + kRankSortMax);
  nc0 = min(nc0, k);
  FIB_PROF(7);
  finish_topk(p, G, nc0, row, logits, T, scale, use_m, mp, use_p, tp, joint, cm, cs, s_scratch, &s_tot);
  FIB_PROF(8);
  if (S > 1 && !push) cl_wait();
#else
  (void)dsm;
  (void)p;
  __trap();  // launched only on sm_90+
#endif
}

// Host: launches twopass_kernel<DT, MINB, LK, RB> for the p.B rows of p with S CTAs per row (one
// cluster per row) on stream st, with the filter kernel's slice and fallback layout.
template <int DT, int MINB, bool LK, bool RB = false>
inline cudaError_t launch_twopass_rows(Params p, int S, cudaStream_t st, bool pdl = false) {
  return launch_cluster_rows(twopass_kernel<DT, MINB, LK, RB>, p, S, kTwoPassSmem, st, pdl);
}

}  // namespace sampling
}  // namespace fib
