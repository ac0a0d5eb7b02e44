// fib-runtime sampling kernel: one thread-block cluster per row, the row resident in shared memory.
//
// Algorithm (all filters are thresholds on order-preserving 32-bit keys of the scores):
//  1. Load: each CTA of the cluster (S <= 8 CTAs) reads its slice of the row once from HBM into
//     shared memory as keys (NaN -> -inf for logits / 0 for probs). Each thread's maximum is a
//     "delegate"; their 11-bit histogram is built on the fly.
//  2. top-k: the k-th largest delegate's bucket gives a lower bound L (k distinct delegates lie
//     at or above it), then an exact 11/11/10-bit radix select over the keys >= L, histograms
//     summed across the cluster over DSMEM. Ties at the k-th value: exactly k tokens are kept,
//     lower token index first.
//  3. min-p: one threshold (p >= min_p * p_max; logits: l >= l_max + T ln(min_p)).
//  4. top-p: radix select on mass (u64 fixed-point weight histograms, exact and order-free):
//     keep token i iff the mass of strictly larger kept tokens is < top_p * total. Tokens of
//     equal value are kept or dropped together. total = kept mass after top-k ("top_k_first",
//     renormalised) or the whole row ("joint", unrenormalised). Top-p alone (top_p >= 0.25)
//     first tries rejection: up to four rounds of four candidates drawn from the whole row, each
//     round checked against the same rule in one pass over candidates 0-1 and, when both fall
//     outside, one over 2-3 (4r.); the exact radix path runs only when all sixteen fall outside. The same rounds serve large k (reject_rounds): top_k_first rows
//     with k > rej_min_k draw from the kept top-k (4r., no gather or sort of the k tokens), peaked
//     joint rows with k > rej_joint_min_k draw from the whole row and check each candidate's top-k
//     rank, min-p and nucleus in the same pass (1r., before any select).
//  5. Draw: one Philox4x32-10 number per row, keyed by (seed, offset, row), selects a point of
//     the integer CDF of the kept weights in token order (exact, monotone, deterministic,
//     independent of the cluster geometry), located through per-thread spans (one cluster
//     barrier; one thread rescans its span, <= 68 keys on resident rows).
// Weights: logits w = exp2((l - l_max) * log2(e)/T), probs w = p / p_max, stored as
// floor(w * 2^44). See common.cuh for the resolution this implies.
#pragma once
#include "fib/sampling/common.cuh"
#include "fib/sampling/params.cuh"
#include "fib/sampling/cluster_select.cuh"
#include "fib/sampling/spans.cuh"
#include "fib/sampling/sort.cuh"
#include "fib/sampling/reject_rounds.cuh"
#include "fib/sampling/gather_tail.cuh"
#include "fib/sampling/tail.cuh"

#include <type_traits>

namespace fib {
namespace sampling {

// The keys of one 16-byte vector of the input: 4 (fp32) or 8 (16-bit) tokens.
template <int DT>
__device__ __forceinline__ void vec_keys(const uint4 r, bool logits, uint32_t (&kk)[16 / ((DT == kF32) ? 4 : 2)]) {
  const uint32_t w4[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (DT == kF32) {
      kk[j] = f2key(sanitize(__uint_as_float(w4[j]), logits));
    } else if constexpr (DT == kBF16) {
      kk[2 * j] = f2key(sanitize(__uint_as_float(w4[j] << 16), logits));
      kk[2 * j + 1] = f2key(sanitize(__uint_as_float(w4[j] & 0xffff0000u), logits));
    } else {
      kk[2 * j] = f2key(sanitize(__half2float(__ushort_as_half(static_cast<unsigned short>(w4[j] & 0xffffu))), logits));
      kk[2 * j + 1] = f2key(sanitize(__half2float(__ushort_as_half(static_cast<unsigned short>(w4[j] >> 16))), logits));
    }
  }
}

// 1: the listing's summary (SUMM) follows the rejection threshold only for rows that leave the
// candidate paths above it (sampling rows with top-p); rows whose own top_p is 1 (vLLM's per-row
// tensor) keep it to kCand. Not kept (a -D for benchmark builds; docs/sampling-journal.md, "The
// threshold at 512" and "The H200 back"): the GPU sampling suite passed on it, but on the H200 its
// k = 2048 rows without top-p ran 1.6-3.5% slower and its k <= 1024 rows ~1% faster
// (results/sampling_twopass_summ_row_p_h200.json)
#ifndef FIB_SUMM_ROW_P
#define FIB_SUMM_ROW_P 0
#endif

// One row (the slice `rank` of S) of the general algorithm. Called by the cluster kernel, and by
// the streaming kernel (S = 1, not resident) for rows it does not handle itself.
// GATHER: the cluster kernel's instantiation for calls whose every row is known on the host to have
// k > p.rej_min_k (gather_tail.cuh); the others hold none of its code (their SASS is the same).
template <int DT, bool SUMM = false, bool GATHER = false, bool XPK = false>
__device__ __forceinline__ void sample_row(const Params& p, unsigned char* dsm, const int row, const uint32_t rank,
                                           const uint32_t S, const int chunk, const bool resident_in) {
  bool resident = resident_in;  // (cleared when a top-p row of a histogram-free layout needs its histograms)
  // two histogram buffers of kHistBufBytes, then the resident keys
  auto hbuf = [&](int b) { return reinterpret_cast<uint64_t*>(dsm + (b & 1) * kHistBufBytes); };
  uint64_t* hist = hbuf(0);
  uint32_t* skeys = reinterpret_cast<uint32_t*>(dsm + p.hist_bytes);
  __shared__ uint64_t sh_scratch[kWarps];
  __shared__ uint64_t sh_wsum[kWarps];
  __shared__ uint64_t sh_slot[4];
  __shared__ uint64_t sh_gather[kMaxCluster];
  __shared__ uint64_t sh_above, sh_v;
  __shared__ uint64_t sh_csum[2][kGroups];
  __shared__ uint64_t sh_gabove;
  __shared__ int sh_b, sh_cut, sh_take, sh_local, sh_grp, sh_cnt;
  __shared__ uint32_t sh_max;
  // pushed by every rank into every rank before a cluster barrier (local reads after it, no DSMEM
  // round trip): row maxima, coarse top-k histograms, candidate counts and weight sums
  __shared__ uint32_t sh_pmax[kMaxCluster];
  __shared__ uint64_t sh_pcsum[kMaxCluster * kGroups];
  __shared__ uint64_t sh_pcnt[kMaxCluster], sh_pw[kMaxCluster];
  // (no new static arrays: the filter kernel, which inlines this function, must keep 2 CTAs per SM:
  // 2 x (104 KB + its 8576 bytes of static shared memory + 1 KB reserved) of 228 KB)
  // the draw's CTA kept masses reuse sh_pcnt (read by 2a long before; 2a and 4a return early)
  uint64_t* const sh_ptot = sh_pcnt;

  constexpr int ESIZE = (DT == kF32) ? 4 : 2;
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  const int V = p.V;
  const int64_t start = static_cast<int64_t>(rank) * chunk;
  const int64_t n_rem = static_cast<int64_t>(V) - start;
  const int n = n_rem <= 0 ? 0 : static_cast<int>(n_rem < chunk ? n_rem : chunk);
  const bool logits = p.is_logits != 0;
  const char* in_row = reinterpret_cast<const char*>(p.in) + (static_cast<int64_t>(row) * p.in_stride + start) * ESIZE;

  FIB_PROF(0);
  if constexpr (SUMM && !GATHER && XPK) FIB_PROF_CTA(0);
  constexpr int VEC = 16 / ESIZE;
  const bool vec_ok = (reinterpret_cast<uintptr_t>(in_row) & 15) == 0;
  const int nv = vec_ok ? n / VEC : 0;
  const uint4* src = reinterpret_cast<const uint4*>(in_row);
  // resident fp32 slices arrive by TMA bulk copies (the whole slice in flight at once, no
  // registers held) and are then turned into keys in place. H200, B=512 V=128256 against the
  // register loads: plain 201.9 -> 190.2 us, top-p 286.8 -> 273.4, min-p 162.9 -> 150.9; small
  // batches time the same (one SM streams ~25 GB/s either way). Issued before anything else: the
  // per-row parameters below are global loads, and the entry's cluster arrive used to wait for them
  // (a release arrive is a GPU-scope memory barrier) before the first byte was requested.
  bool tma = false;
  // XP (the top-k instantiation's exchange variant, sampler_kernel<kF32, true, false, true>: launched
  // for clusters of 2..FIB_SAMPLING_CLUSTER_PUSH_MAX_S CTAs, the host's choice): rows with k <=
  // kRankSortMax exchange their delegates and candidate lists with st.async on these mbarriers
  // instead of cluster barriers (each barrier.cluster.arrive.release is a MEMBAR.ALL.GPU, ~2.5 us
  // while the other CTAs stream): [0] the other ranks' delegates, [1] rank 0: the other ranks'
  // lists; rank r > 0: rank 0's verdict. Its own instantiation: inlined into the top-k one it cost
  // that kernel's other rows 0.6-0.9 us (spills) and lost ~0.9 us at 6-8 CTAs (H100, 2026-12-05)
  constexpr bool XP = SUMM && !GATHER && XPK;
#if FIB_HAS_CLUSTER
  __shared__ uint64_t sh_lbar;
  __shared__ __align__(8) uint64_t sh_xbar[2];
  if constexpr (DT == kF32) tma = resident && nv > 0;
  if constexpr (XP) {
    if (tid == 0 && S > 1) {  // (any row's: which rows exchange is known after the parameters' loads)
      mbar_init(&sh_xbar[0], 1);
      mbar_init(&sh_xbar[1], 1);
      if (!tma) asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // (else the TMA's below)
    }
  }
  if constexpr (GATHER) {  // (gather_tail.cuh: the other ranks push their lists into rank 0)
    if (tid == 0 && rank == 0) {
      mbar_init(&g_gather_bar, 1);
      if (!tma) asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // (else the TMA's below)
    }
  }
  if (tma && tid == 0) {
    mbar_init(&sh_lbar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    const uint32_t bytes = static_cast<uint32_t>(nv) * 16u;
    mbar_expect_tx(&sh_lbar, bytes);
    for (uint32_t o = 0; o < bytes; o += 32768u)
      tma_load_1d(skeys + o / 4, src + o / 16, min(32768u, bytes - o), &sh_lbar);
  }
#endif
  // this CTA has started: its shared memory may take pushes once every rank arrived (relaxed: the
  // arrive publishes nothing, so it need not wait for this thread's loads)
  cl_arrive_relaxed();
  // the row's kTagDraw random, computed while the slice is in flight (its seed and offset are global
  // loads): every draw of a kept set in this row without a retry uses it
  // and the next 128 bits of that block plus the kTagCand block: the first rejection round's four
  // candidates of top-p alone (4r.)
  __shared__ uint64_t sh_rnd, sh_rc[4];
  if (tid == 32) {
    row_random128(row_seed(p, row), row_offset(p, row), static_cast<uint32_t>(row), kTagDraw, &sh_rc[0], &sh_rc[1]);
    sh_rnd = sh_rc[0];
  } else if (tid == 64) {
    row_random128(row_seed(p, row), row_offset(p, row), static_cast<uint32_t>(row), kTagCand, &sh_rc[2], &sh_rc[3]);
  }

  // ---- per-row parameters
  int k = row_top_k(p, row);
  float tp = p.has_topp ? (p.top_p_arr ? p.top_p_arr[row] : p.top_p_val) : 1.0f;
  float mp = p.has_minp ? (p.min_p_arr ? p.min_p_arr[row] : p.min_p_val) : 0.0f;
  float T = logits ? (p.temp_arr ? p.temp_arr[row] : p.temp_val) : 1.0f;
  if (logits && !(T > 0.0f)) {  // temperature <= 0 (or NaN): greedy
    k = 1;
    tp = 1.0f;
    mp = 0.0f;
    T = 1.0f;
  }
  const bool use_k = k > 0 && k < V;
  const bool use_p = tp < 1.0f;  // NaN -> no filter
  const bool use_m = mp > 0.0f;
  mp = fminf(mp, 1.0f);
  // XP rows: sampling with 0 < k <= kRankSortMax (the ranked lists, k entries a slot, fit sh_pcsum), k
  // within both rejection thresholds (so neither 1r. nor the closed candidate paths: 2a. takes the row
  // whenever its bound L is found). Row-uniform.
  bool xp = false;
  if constexpr (XP) {
#if FIB_HAS_CLUSTER
    xp = S > 1 && p.mode == kSample && use_k && k <= kRankSortMax &&
         static_cast<int>(S - 1) * k <= kMaxCluster * kGroups && (p.rej_min_k <= 0 || k <= p.rej_min_k) &&
         (!p.joint || !use_p || p.rej_joint_min_k <= 0 || k <= p.rej_joint_min_k);
#endif
  }

#ifdef FIB_SAMPLING_PROFILE
  if (blockIdx.y == 0 && threadIdx.x == 0 && cl_rank() == 0) {
    for (int q = 10; q < 18; ++q) g_fib_prof[q] = 0ull;
    for (int q = 32; q < 40; ++q) g_fib_prof[q] = 0ull;  // (FIB_PROF_WMAX's maxima)
  }
#endif
  auto gkey = [&](int i) -> uint32_t { return f2key(sanitize(load_elem<DT>(in_row, i), logits)); };
#define FIB_KEY(i) (resident ? skeys[(i)] : gkey(i))

  uint32_t* cnt0 = reinterpret_cast<uint32_t*>(hist);
  // SUMM (sampler_kernel<DT, true>: top-k calls on sm_90): for fp32 resident slices of rows that
  // can take 2a.'s listing (k within the candidate path's reach, not a joint row with top-p, which
  // sums every weight in the same pass), the top 16 key bits of each 16-byte vector's largest key,
  // in the half of histogram buffer 1 that the candidate list leaves free. 2a. then reads one u16
  // per vector and only the vectors that reach its bound (a bin boundary: key >= L <=> key >> 16
  // >= L >> 16). A separate instantiation: the same code inlined into every path of the one
  // kernel moved unrelated paths by 1-4% (top-p / min-p at B=512, benchmarks/results/
  // sampling_ab_summary_h200.json).
  uint16_t* const summ = reinterpret_cast<uint16_t*>(reinterpret_cast<unsigned char*>(hbuf(1)) + kCand * 8);
  const bool kcand_rej = FIB_SUMM_ROW_P == 0 || (p.mode == kSample && use_p);
  const int kcand = kcand_rej && p.rej_min_k > 0 && p.rej_min_k < kCand ? p.rej_min_k : kCand;
  const bool summ_ok = SUMM && tma && use_k && k <= kcand && !(use_p && p.joint) &&
                       p.hist_bytes >= 2 * kHistBufBytes && nv * 2 <= kHistBufBytes - kCand * 8;
  if (p.hist_bytes)
    for (int b = tid; b < kBins; b += kThreads) cnt0[b] = 0u;
  if (tid == 0) sh_max = 0u;
  FIB_PROF(24);
  __syncthreads();  // (the mbarrier's init, the zeroed histogram)

  // ---- 1. load (+ delegate histogram)
  uint32_t dkey = 0;
  if constexpr (DT == kF32) {
#if FIB_HAS_CLUSTER
#ifdef FIB_SAMPLING_PROFILE
    // (profile: 32 the slowest warp's cycles in the wait, 33 its globaltimer past it, 34 the slowest
    // warp's cycles in the conversion loop, 35 the globaltimer at the last warp's loop end)
    unsigned long long pc0_ = clock64(), pt_;
#endif
    if (tma) mbar_wait(&sh_lbar, 0u);
    FIB_PROF(25);
#ifdef FIB_SAMPLING_PROFILE
    const unsigned long long pc1_ = clock64();
    FIB_GTIME(pt_);
    FIB_PROF_WMAX(32, pc1_ - pc0_);
    FIB_PROF_WMAX(33, pt_);
#endif
    // the slice's keys in place: 4 vectors per thread loaded before any is stored (a store may
    // alias a later load, so one at a time each load waited out the store before it), the key in
    // integer operations, the row's kind outside the loop. summ_ok rows (ST false) leave the fp32
    // bits in place and take each vector's largest key alone (vec_max_key): their candidate listing
    // converts the few vectors it reads, and a row that goes on to the radix path converts its
    // slice there first. The conversion was most of the load: per-warp profile (H100, B=64 V=32000,
    // 2 CTAs, 8 vectors a thread) 1858 cycles from probs, 3222 from logits after the TMA; without
    // the stores 1148 / 1551 (journal: "The listing rows keep the fp32 bits; prob bins").
    uint4* sk4 = reinterpret_cast<uint4*>(skeys);
    auto convert = [&](auto lg, auto st) {
      constexpr bool LG = decltype(lg)::value;
      constexpr bool ST = decltype(st)::value;
      constexpr int U = 4;
      for (int v0 = tma ? tid : nv; v0 < nv; v0 += U * kThreads) {  // (the vectors of the register path below)
        uint4 q[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (v0 + u * kThreads < nv) q[u] = sk4[v0 + u * kThreads];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int vi = v0 + u * kThreads;
          if (vi < nv) {
            uint32_t vm;
            if constexpr (ST) {
              const uint32_t k0 = key_of_bits<LG>(q[u].x), k1 = key_of_bits<LG>(q[u].y);
              const uint32_t k2 = key_of_bits<LG>(q[u].z), k3 = key_of_bits<LG>(q[u].w);
              vm = max(max(k0, k1), max(k2, k3));
              sk4[vi] = make_uint4(k0, k1, k2, k3);
            } else {
              vm = vec_max_key<LG>(q[u]);
            }
            dkey = max(dkey, vm);
            if constexpr (SUMM) {
              if (summ_ok) summ[vi] = static_cast<uint16_t>(vm >> 16);
            }
          }
        }
      }
    };
    if (SUMM && summ_ok) {
      if constexpr (SUMM) {
        if (logits) convert(std::true_type{}, std::false_type{});
        else convert(std::false_type{}, std::false_type{});
      }
    } else {
      if (logits) convert(std::true_type{}, std::true_type{});
      else convert(std::false_type{}, std::true_type{});
    }
#ifdef FIB_SAMPLING_PROFILE
    FIB_GTIME(pt_);
    FIB_PROF_WMAX(34, clock64() - pc1_);
    FIB_PROF_WMAX(35, pt_);
#endif
#endif
  }
  {
    constexpr int UNROLL = (DT == kF32) ? 4 : 2;
    for (int v0 = tma ? nv : tid; v0 < nv; v0 += kThreads * UNROLL) {
      uint4 r[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        int vi = v0 + u * kThreads;
        if (vi < nv) r[u] = resident ? __ldcs(src + vi) : __ldg(src + vi);
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        int vi = v0 + u * kThreads;
        if (vi < nv) {
          uint32_t kk[VEC];
          vec_keys<DT>(r[u], logits, kk);
#pragma unroll
          for (int j = 0; j < VEC; ++j) dkey = max(dkey, kk[j]);
          if (resident) {
#pragma unroll
            for (int j = 0; j < VEC; j += 4)
              *reinterpret_cast<uint4*>(skeys + static_cast<int64_t>(vi) * VEC + j) = make_uint4(kk[j], kk[j + 1], kk[j + 2], kk[j + 3]);
          }
        }
      }
    }
    for (int i = nv * VEC + tid; i < n; i += kThreads) {
      uint32_t key = gkey(i);
      if (resident) skeys[i] = key;
      dkey = max(dkey, key);
    }
  }
  FIB_PROF(26);
  // a delegate's bin of the coarse histogram (the summary kernel's logits: logit_bin, probs:
  // prob_bin; else the top 11 bits)
  const auto delegate_bin = [&](uint32_t key) {
    return SUMM ? (logits ? logit_bin(key) : prob_bin(key)) : static_cast<int>(key >> 21);
  };
  if (use_k && dkey) atomicAdd(&cnt0[delegate_bin(dkey)], 1u);
  {
    uint32_t wm = __reduce_max_sync(0xffffffffu, dkey);
    if (lane == 0) atomicMax(&sh_max, wm);
  }
  __syncthreads();
  FIB_PROF(27);
  uint32_t maxkey = 0;
  if (xp) {
#if FIB_HAS_CLUSTER
    // every rank sends its kThreads delegates to every other rank (16 bytes per 4 lanes) into the
    // candidate list's room of buffer 1 (idle until 2a.), slot = the sender's rank; each rank adds
    // them to its delegate histogram, which then holds the cluster's: the select below is local, and
    // no rank reads another's shared memory before its list is sent
    FIB_PROF(1);
    cl_wait();  // every rank has started: its mbarriers are initialised (pairs with the arrive at entry)
    uint32_t* const xdk = reinterpret_cast<uint32_t*>(hbuf(1));
    if (tid == 0) mbar_expect_tx(&sh_xbar[0], (S - 1u) * static_cast<uint32_t>(kThreads) * 4u);
    {
      const uint32_t d1 = __shfl_down_sync(0xffffffffu, dkey, 1), d2 = __shfl_down_sync(0xffffffffu, dkey, 2);
      const uint32_t d3 = __shfl_down_sync(0xffffffffu, dkey, 3);
      if ((lane & 3) == 0)
        for (uint32_t q = 0; q < S; ++q)
          if (q != rank) st_async_v4(cl_addr(xdk + rank * kThreads + tid, q), dkey, d1, d2, d3, cl_addr(&sh_xbar[0], q));
    }
    mbar_wait<true>(&sh_xbar[0], 0u);
    FIB_PROF_CTA(1);
    uint32_t m = 0;
    for (uint32_t q = 0; q < S; ++q) {
      const uint32_t kq = q == rank ? 0u : xdk[q * kThreads + tid];
      m = max(m, kq);
      if (kq) atomicAdd(&cnt0[delegate_bin(kq)], 1u);
    }
    m = __reduce_max_sync(0xffffffffu, m);
    if (lane == 0) atomicMax(&sh_max, m);
    __syncthreads();
    build_coarse(cnt0, sh_csum[0]);
    __syncthreads();  // (the coarse sums, sh_max)
    maxkey = sh_max;
    FIB_PROF(2);
#endif
  } else {
    if (use_k) build_coarse(cnt0, sh_csum[0]);
    FIB_PROF(1);
    cl_wait();  // every rank has started (pairs with the arrive at entry)
    __syncthreads();  // (the coarse sums)
    if (tid < static_cast<int>(S)) *cl_remote(&sh_pmax[rank], tid) = sh_max;
    if (use_k && tid < static_cast<int>(S) * kGroups)
      *cl_remote(&sh_pcsum[rank * kGroups + tid % kGroups], tid / kGroups) = sh_csum[0][tid % kGroups];
    cl_sync();  // (A) keys, delegate histograms, pushed maxima and coarse sums visible cluster-wide
    FIB_PROF(2);
    uint32_t t[kMaxCluster];  // (all loads before the first max: see sum_ranks)
#pragma unroll
    for (uint32_t r = 0; r < static_cast<uint32_t>(kMaxCluster); ++r) t[r] = sh_pmax[r < S ? r : 0u];
#pragma unroll
    for (uint32_t r = 0; r < static_cast<uint32_t>(kMaxCluster); ++r) maxkey = max(maxkey, t[r]);
  }
  const float mval = key2f(maxkey);

  const WeightCtx wc = make_weight_ctx(mval, logits, logits ? __fdiv_rn(1.4426950408889634f, T) : 1.0f);

  // kept(key, i) = key > lo || (key == lo && i < cut)
  uint32_t lo = 0u;
  int cut = 0x7fffffff;
  int stage = 1;

  // Rows that sample top-p by rejection (top_p >= 0.25, finite weights): top-p alone (4r.), top-k
  // first with k > p.rej_min_k (4r., after the top-k select and min-p: each candidate is accepted
  // with probability >= top_p) and peaked joint rows with k > p.rej_joint_min_k (1r.: the top-k,
  // min-p and the nucleus are checked per candidate, no select at all). A row whose rounds all fall
  // outside draws again (tag kTagRetry) on the exact radix path (4., 5b.), not on a candidate path
  // (those draw with kTagDraw).
  const bool rej_ok = p.mode == kSample && use_p && tp >= 0.25f && (wc.kind == 0 || wc.kind == 1);
  const bool rej_p = rej_ok && !use_k && !use_m;
  const bool rej_k_first = rej_ok && use_k && !p.joint && p.rej_min_k > 0 && k > p.rej_min_k;
  const bool rej_joint = rej_ok && use_k && p.joint && p.rej_joint_min_k > 0 && k > p.rej_joint_min_k &&
                         p.hist_bytes > 0;
  // the candidate paths (gather, sort) are closed to rows with k > p.rej_min_k in either order: the
  // exact radix path is faster there (H200, joint flat k=2048 B=1 V=32000: 36.1 -> 27.0 us)
  bool no_cand = rej_ok && use_k && p.rej_min_k > 0 && k > p.rej_min_k;
  // (GATHER) rej_k_first rows of resident slices finish on rank 0 once a radix pass of the top-k
  // leaves at most p.gather_cap tokens at or above the k-th largest key's bucket (gather_tail.cuh)
  [[maybe_unused]] const bool gather_ok =
      GATHER && rej_k_first && resident && p.gather_cap > 0 && k <= kCand && p.hist_bytes == 2 * kHistBufBytes;
  uint32_t draw_tag = kTagDraw;

  // ---- 1r. joint with a large k, peaked rows: candidates from the whole row, accepted when in the
  // top-k, above the min-p threshold and in the nucleus of the whole row (the three kept sets are
  // all "at least this key" sets, so each check is one count or mass). Only where the top token
  // alone holds >= 1/kRejJointSpan of the row's mass (it is always kept, so each candidate is
  // accepted with at least that probability); flat rows go to the exact path at once.
  if (rej_joint) {
    const Span sp = thread_span(n);
    auto key_at = [&](int i) -> uint32_t { return FIB_KEY(i); };
    uint64_t* const scr = hbuf(1);  // unused until the top-k's first radix pass
    static_assert(kMaxCluster + kRejScratch <= kHistBufBytes / 8, "rejection scratch fits a histogram buffer");
    uint64_t mine, ex, base;
    const uint64_t total =
        span_masses(skeys, resident, key_at, sp, 0u, 0x7fffffff, wc, rank, S, sh_scratch, scr, &mine, &ex, &base);
    FIB_PROF(11);
    if (total > 0 && total / static_cast<uint64_t>(kRejJointSpan) <= weight_of(maxkey, wc)) {  // (cluster-uniform)
      const double tt = ceil(static_cast<double>(tp) * static_cast<double>(total));
      const uint64_t target = tt < 1.0 ? 1ull : static_cast<uint64_t>(tt);
      const uint32_t kmin = use_m ? f2key(min_p_threshold(wc, logits, T, mp)) : 0u;
      const int64_t tok = reject_rounds<true>(p, row, start, skeys, resident, key_at, sp, 0u, 0x7fffffff, wc, rank, S, total,
                                        mine, ex, base, target, k, kmin, scr + kMaxCluster);
      if (tok >= 0) {
        if (rank == 0 && tid == 0) p.out_idx[row] = tok;
        return;
      }
      draw_tag = kTagRetry;
      no_cand = true;
    }
  }

  // ---- 2. top-k
  if (use_k) {
    if (xp)  // (the delegate histogram is the cluster's already)
      cluster_select<uint32_t, true>(cnt0, sh_csum[0], 1u, static_cast<uint64_t>(k), &sh_b, &sh_above, &sh_v,
                                     sh_scratch, &sh_grp, &sh_gabove);
    else
      cluster_select(cnt0, sh_csum[0], S, static_cast<uint64_t>(k), &sh_b, &sh_above, &sh_v, sh_scratch, &sh_grp,
                     &sh_gabove, sh_pcsum);
    const uint32_t L = sh_b < 0 ? 0u
                       : SUMM     ? (logits ? logit_bin_floor(sh_b) : prob_bin_floor(sh_b))
                                  : (static_cast<uint32_t>(sh_b) << 21);
    FIB_PROF(3);
    // (GATHER) the direct gathered tail: where the delegates bound the k-th largest key (L > 0:
    // S x kThreads delegates, at least k of them at or above L), every rank lists its tokens at or
    // above L at once (gather_list), and when there are at most p.gather_cap of them in all (~1.3-1.7 k
    // at 6-8 CTAs on the grid's rows) rank 0 finishes the row from the bits that L and the row's
    // largest key share (up to 3 digit passes, block-local), without the first radix pass over the
    // resident keys and its cluster barrier. Else (more tokens: ties, fewer CTAs) the radix path
    // below, as before; no rank has read another's list (buffer 1, which the first pass's histogram
    // then overwrites).
    if constexpr (GATHER) {
      if (gather_ok && p.gather_direct && L > 0) {  // (cluster-uniform)
        uint64_t* const Yb = hbuf(1);
        gather_list(skeys, n, start, L, Yb, Yb + kGatherCap, Yb + kGatherCap + kMaxCluster, rank, S);
        cl_sync();  // (every rank's list and count written; every remote read of buffer 0 done)
        FIB_PROF(23);
        const uint64_t N = sum_ranks(S, [&](uint32_t r) { return Yb[kGatherCap + r]; });
        if (N <= static_cast<uint64_t>(p.gather_cap)) {  // (cluster-uniform)
          const uint32_t kmin = use_m ? f2key(min_p_threshold(wc, logits, T, mp)) : 0u;
          // every gathered key lies in [L, maxkey]: their common top bits are chosen already
          const int top = 32 - __clz(L ^ maxkey);
          const uint32_t pre = top >= 32 ? 0u : (L & ~((1u << top) - 1u));
          gathered_finish(p.out_idx + row, row, V, row_seed(p, row), row_offset(p, row), hist, Yb, pre, top,
                          static_cast<uint64_t>(k), 0ull, wc, kmin, tp);
          return;
        }
      }
    }
    // ---- 2a. direct candidates: when at most 2048 tokens of the row lie at or above L (the usual
    // case for k up to a few hundred), gather them into rank 0 and select exactly there (sorted by
    // value desc, index asc: the top k of that order are the top-k with the lower-index tie rule).
    if (p.mode == kSample && k <= kCand && L > 0 && wc.kind != 3 && !no_cand) {
      uint64_t* list = hbuf(1);  // buffer 1: not used yet
      if (tid == 0) sh_cnt = 0;
      __syncthreads();
      const bool need_all = use_p && p.joint;
      uint64_t wall = 0;
      auto visit = [&](uint32_t key, int i) {
        if (need_all) wall += weight_of(key, wc);
        if (key >= L) {
          const int pos = atomicAdd(&sh_cnt, 1);
          if (pos < kCand)
            list[pos] = (static_cast<uint64_t>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(start + i));
        }
      };
      if (summ_ok && !need_all) {  // the vectors whose largest key reaches L (fp32 bits: their keys here), then the tail keys
        const uint4* sk4 = reinterpret_cast<const uint4*>(skeys);
        const uint32_t L16 = L >> 16;
        auto list_vectors = [&](auto lg) {
          constexpr bool LG = decltype(lg)::value;
          for (int v = tid; v < nv; v += kThreads) {
            if (summ[v] >= L16) {
              const uint4 q = sk4[v];
              visit(key_of_bits<LG>(q.x), 4 * v);
              visit(key_of_bits<LG>(q.y), 4 * v + 1);
              visit(key_of_bits<LG>(q.z), 4 * v + 2);
              visit(key_of_bits<LG>(q.w), 4 * v + 3);
            }
          }
        };
        if (logits) list_vectors(std::true_type{});
        else list_vectors(std::false_type{});
        for (int i = nv * 4 + tid; i < n; i += kThreads) visit(skeys[i], i);
      } else if (resident && (n & 3) == 0) {  // resident keys, 4 per shared-memory load
        const uint4* sk4 = reinterpret_cast<const uint4*>(skeys);
        // joint rows sum every weight here: the row's kind is chosen outside the loop (as in
        // span_masses: weight_of's branch per key kept the keys' conversions from overlapping)
        auto scan = [&](auto kind_tag) {
          constexpr int KIND = decltype(kind_tag)::value;  // -1: no weights (not joint)
          for (int v = tid; v < (n >> 2); v += kThreads) {
            const uint4 q = sk4[v];
            const uint32_t kq[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int t = 0; t < 4; ++t) {
              if constexpr (KIND >= 0) wall += weight_kind<KIND>(kq[t], wc);
              if (kq[t] >= L) {
                const int pos = atomicAdd(&sh_cnt, 1);
                if (pos < kCand)
                  list[pos] = (static_cast<uint64_t>(kq[t]) << 32) | (0xffffffffu - static_cast<uint32_t>(start + 4 * v + t));
              }
            }
          }
        };
        if (need_all) with_weight_kind(wc, scan);
        else scan(std::integral_constant<int, -1>{});
      } else if (!resident && vec_ok) {
        // slices read from global memory (L2 after the load pass): 16-byte vectors, 4 per thread
        // in flight (a scalar loop waits out one L2 latency per token)
        constexpr int U = 4;
        for (int v0 = tid; v0 < nv; v0 += kThreads * U) {
          uint4 r[U];
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (v0 + u * kThreads < nv) r[u] = __ldg(src + v0 + u * kThreads);
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int vi = v0 + u * kThreads;
            if (vi < nv) {
              uint32_t kk[VEC];
              vec_keys<DT>(r[u], logits, kk);
#pragma unroll
              for (int j = 0; j < VEC; ++j) visit(kk[j], vi * VEC + j);
            }
          }
        }
        for (int i = nv * VEC + tid; i < n; i += kThreads) visit(gkey(i), i);
      } else {
        for (int i = tid; i < n; i += kThreads) visit(FIB_KEY(i), i);
      }
      if (need_all) {
        wall = warp_sum_u64(wall);
        if (lane == 0) sh_wsum[wid] = wall;
      }
      __syncthreads();
      // XP rows: each rank puts its own list in order (when it holds at most kCand; go on below);
      // the others: rank 0 gathers every rank's list after one cluster barrier (at most kCand in
      // all; else the radix path below) and puts that in order
      uint64_t wall_tot = 0;
      bool go = true;  // (block-uniform) false: the radix path below
      [[maybe_unused]] int cx = 0;
      if (xp) {
        FIB_PROF_CTA(2);
        cx = sh_cnt;
        if (need_all)  // (this rank's; summed on rank 0)
          for (int q = 0; q < kWarps; ++q) wall_tot += sh_wsum[q];
      } else {
        if (tid == 0) {
          uint64_t w = 0;
          if (need_all)
            for (int q = 0; q < kWarps; ++q) w += sh_wsum[q];
          for (uint32_t r = 0; r < S; ++r) {  // (every rank decides on the total)
            *cl_remote(&sh_pcnt[rank], r) = static_cast<uint64_t>(sh_cnt);
            *cl_remote(&sh_pw[rank], r) = w;
          }
        }
        FIB_PROF(4);
        cl_sync();
        FIB_PROF(5);
        const uint64_t total_c = sum_ranks(S, [&](uint32_t r) { return sh_pcnt[r]; });
        wall_tot = sum_ranks(S, [&](uint32_t r) { return sh_pw[r]; });
        go = total_c <= static_cast<uint64_t>(kCand);  // cluster-uniform decision
      }
      if (go) {
        if (xp || rank == 0) {
          // buffer 0 (the gather): its last remote readers passed the barrier above
          uint64_t* const G = xp ? list : hist;
          const int nc = xp ? (cx <= kCand ? cx : 0) : gather_lists(G, list, sh_pcnt, S, kCand);
          int P = 32;
          while (P < nc) P <<= 1;
          for (int j = nc + tid; j < P; j += kThreads) G[j] = 0ull;
          __syncthreads();
          if (!xp) cl_arrive_relaxed();  // (rank 0 has read the other CTAs' lists: they may exit)
          FIB_PROF(6);
          int nk = nc < k ? nc : k;
          const uint64_t* Gs = sort_desc_top_to<true>(G, nc, nk, hist + kRankSortMax) ? hist + kRankSortMax : G;  // (hist: 4096 u64)
          FIB_PROF(7);
          FIB_PROF_ADD(10, nc);
          if (xp) {
#if FIB_HAS_CLUSTER
            // XP: this rank's top nk = min(c, k) in order (the row's top k lies in the union of the
            // ranks' top k). Rank r > 0 sends them with st.async into slot r - 1 of rank 0 (k entries,
            // zero-padded), then its count (-1: its list overflowed) and wall sum: 8 k + 12 bytes on
            // rank 0's sh_xbar[1]. Rank 0 places every entry at its place in its list plus the entries
            // of the other lists above it (merge_ranked): the merged top k in order, as the gather and
            // sort of the other rows give them (the same token), and answers every rank with its
            // verdict (0: done; 1: an overflowed list, the radix path below after one cluster
            // barrier), so no rank exits while another may still read its shared memory.
            const bool ok = cx <= kCand;
            uint64_t* const ring = sh_pcsum;                    // rank 0: slot r - 1 of k entries
            int* const rcnt = reinterpret_cast<int*>(sh_pcnt);  // rank 0: the ranks' counts
            int& verdict = sh_take;                             // rank r > 0: rank 0's verdict
            if (rank != 0) {
              const uint32_t bar = cl_addr(&sh_xbar[1], 0u);
              const uint32_t dst = cl_addr(ring + static_cast<int>(rank - 1) * k, 0u);
              if (tid == 0) mbar_expect_tx(&sh_xbar[1], 4u);  // (the verdict)
              for (int j = tid; j < k; j += kThreads) st_async_u64(dst + 8u * j, j < nk ? Gs[j] : 0ull, bar);
              if (tid == 0) {
                st_async_u32(cl_addr(&rcnt[rank], 0u), ok ? static_cast<uint32_t>(nk) : 0xffffffffu, bar);
                st_async_u64(cl_addr(&sh_pw[rank], 0u), wall_tot, bar);
              }
              FIB_PROF_CTA(3);
              mbar_wait<true>(&sh_xbar[1], 0u);
              if (verdict == 0) return;
              go = false;
            } else {
              if (tid == 0) {
                mbar_expect_tx(&sh_xbar[1], (S - 1u) * (8u * static_cast<uint32_t>(k) + 12u));
                rcnt[0] = ok ? nk : -1;
                sh_pw[0] = wall_tot;
              }
              mbar_wait<true>(&sh_xbar[1], 0u);  // the other ranks' lists, counts and wall sums are in
              __syncthreads();  // (rank 0's count)
              int tot = 0;
              wall_tot = 0;
              for (uint32_t r = 0; r < S; ++r) {
                go = go && rcnt[r] >= 0;
                tot += rcnt[r];
                wall_tot += sh_pw[r];
              }
              if (tid > 0 && tid < static_cast<int>(S))
                st_async_u32(cl_addr(&verdict, tid), go ? 0u : 1u, cl_addr(&sh_xbar[1], tid));
              if (go) {
                uint64_t* const M = hist + 2 * kRankSortMax;
                const int n0 = nk;
                nk = min(tot, k);
                merge_ranked(Gs, n0, ring, k, rcnt, static_cast<int>(S), nk, M);
                __syncthreads();
                Gs = M;
              }
            }
#endif
          }
          if (go) {
            if (use_m) nk = min_p_keep(Gs, nk, wc, logits, T, mp);
            finish_sorted(p, Gs, nk, wc, use_p, tp, p.joint ? wall_tot : 0ull, p.joint != 0, row, sh_scratch,
                          &sh_above, &sh_rnd);  // (candidate paths draw with kTagDraw)
            FIB_PROF(8);
            if (xp) FIB_PROF_CTA(3);
          }
        } else {
          cl_arrive_relaxed();
        }
        if (go) {
          if (!xp) cl_wait();
          return;
        }
        cl_sync();  // (XP, an overflowed list) the radix path, as after the other rows' barrier
      }
    }
    // summ_ok rows that go on from here (no candidate path, or its list overflowed) turn their
    // slice into keys first: the load left fp32 bits in place (block-uniform; after the candidate
    // path's last read of them)
    if constexpr (SUMM) {
      if (summ_ok) {
        uint4* const sk4 = reinterpret_cast<uint4*>(skeys);
        auto to_keys = [&](auto lg) {
          constexpr bool LG = decltype(lg)::value;
          for (int v = tid; v < nv; v += kThreads) {
            const uint4 q = sk4[v];
            sk4[v] = make_uint4(key_of_bits<LG>(q.x), key_of_bits<LG>(q.y), key_of_bits<LG>(q.z), key_of_bits<LG>(q.w));
          }
        };
        if (logits) to_keys(std::true_type{});
        else to_keys(std::false_type{});
        __syncthreads();
      }
    }
    // (the radix digits are 11 bits: their bound is L rounded down to one; a lower bound of the
    // k-th key still, and a digit boundary, so a whole kept bucket lies at or above it)
    const uint32_t Lr = SUMM ? (L & 0xffe00000u) : L;
    uint32_t prefix = 0, mask = 0;
    uint64_t rem = static_cast<uint64_t>(k);
    for (int pass = 0; pass < 3; ++pass) {
      const int shift = pass == 0 ? 21 : (pass == 1 ? 10 : 0);
      const uint32_t dmask = pass == 2 ? 0x3ffu : 0x7ffu;
      uint32_t* cnt = reinterpret_cast<uint32_t*>(hbuf(stage));
      uint64_t* cs = sh_csum[stage & 1];
      ++stage;
      for (int b = tid; b < kBins; b += kThreads) cnt[b] = 0u;
      __syncthreads();
      for (int i = tid; i < n; i += kThreads) {
        uint32_t key = FIB_KEY(i);
        if (key >= Lr && (key & mask) == prefix) atomicAdd(&cnt[(key >> shift) & dmask], 1u);
      }
      __syncthreads();
      build_coarse(cnt, cs);
      cl_sync();
      cluster_select(cnt, cs, S, rem, &sh_b, &sh_above, &sh_v, sh_scratch, &sh_grp, &sh_gabove);
      FIB_PROF(18 + pass);  // (profiling builds: the top-k radix passes)
      const int b = sh_b;
      if (b < 0) break;  // cannot happen (rem <= candidates); keep everything above the prefix
      rem -= sh_above;
      prefix |= static_cast<uint32_t>(b) << shift;
      mask |= dmask << shift;
      lo = prefix;
      if constexpr (GATHER) {
        if (gather_ok && static_cast<uint64_t>(k) - rem + sh_v <= static_cast<uint64_t>(p.gather_cap)) {  // (uniform)
          const uint32_t kmin = use_m ? f2key(min_p_threshold(wc, logits, T, mp)) : 0u;
          gathered_tail(p.out_idx + row, row, V, chunk, row_seed(p, row), row_offset(p, row), dsm, (stage - 1) & 1,
                        prefix, shift, rem, sh_v, wc, kmin, tp);
          return;
        }
      }
      if (sh_v == rem) break;  // the whole bucket is kept: key >= prefix
      if (pass == 2) {
        // exact k-th key; sh_v ties of which rem are kept, lowest index first
        if (tid == 0) {
          uint64_t before = 0;
          for (uint32_t r = 0; r < rank; ++r) before += cl_remote(cnt, r)[b];
          int local = static_cast<int>(cnt[b]);
          long long take = static_cast<long long>(rem) - static_cast<long long>(before);
          take = take < 0 ? 0 : (take > local ? local : take);
          sh_take = static_cast<int>(take);
          sh_local = local;
        }
        __syncthreads();
        const int take = sh_take, local = sh_local;
        if (take >= local) {
          cut = 0x7fffffff;
        } else if (take == 0) {
          cut = 0;
        } else {
          const int E = (n + kThreads - 1) / kThreads;
          const int i0 = min(n, tid * E), i1 = min(n, i0 + E);
          int c = 0;
          for (int i = i0; i < i1; ++i) c += (FIB_KEY(i) == lo);
          uint64_t tot;
          const int ex = static_cast<int>(block_excl_scan_u64(static_cast<uint64_t>(c), sh_scratch, &tot));
          if (ex < take && take <= ex + c) {
            int need = take - ex;
            for (int i = i0; i < i1; ++i) {
              if (FIB_KEY(i) == lo && --need == 0) {
                sh_cut = i + 1;
                break;
              }
            }
          }
          __syncthreads();
          cut = sh_cut;
        }
      }
    }
  }

  // ---- 3. min-p
  if (use_m && wc.kind != 3) {
    const uint32_t tk = f2key(min_p_threshold(wc, logits, T, mp));
    if (tk > lo) {
      lo = tk;
      cut = 0x7fffffff;
    }
  }

  // ---- 4a. candidate path (sampling with top-k <= 2048): gather the kept tokens into rank 0,
  // sort them (value desc, index asc), exact top-p on the sorted prefix sums, inverse-CDF draw.
  if (p.mode == kSample && use_k && k <= kCand && wc.kind != 3 && !no_cand) {
    uint64_t* list = hbuf(stage);   // free: last used two barriers ago
    uint64_t* G = hbuf(stage + 1);  // free after the next barrier
    if (tid == 0) sh_cnt = 0;
    __syncthreads();
    const bool need_all = use_p && p.joint;
    uint64_t wall = 0;
    for (int i = tid; i < n; i += kThreads) {
      uint32_t key = FIB_KEY(i);
      if (need_all) wall += weight_of(key, wc);
      if (kept_pred(key, i, lo, cut)) {
        int pos = atomicAdd(&sh_cnt, 1);
        if (pos < kCand)
          list[pos] = (static_cast<uint64_t>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(start + i));
      }
    }
    if (need_all) {
      wall = warp_sum_u64(wall);
      if (lane == 0) sh_wsum[wid] = wall;
    }
    __syncthreads();
    if (tid == 0) {
      uint64_t w = 0;
      if (need_all)
        for (int q = 0; q < kWarps; ++q) w += sh_wsum[q];
      *cl_remote(&sh_pcnt[rank], 0u) = static_cast<uint64_t>(min(sh_cnt, kCand));
      *cl_remote(&sh_pw[rank], 0u) = w;
    }
    cl_sync();
    if (rank == 0) {
      uint64_t wall_tot = 0;
      for (uint32_t r = 0; r < S; ++r) wall_tot += sh_pw[r];
      const int nc = gather_lists(G, list, sh_pcnt, S, kCand);
      int P = 32;
      while (P < nc) P <<= 1;
      for (int j = nc + tid; j < P; j += kThreads) G[j] = 0ull;
      __syncthreads();
      cl_arrive_relaxed();  // rank 0 is done reading the other CTAs
      const uint64_t* Gs = sort_desc_top_to(G, nc, nc, G + kRankSortMax) ? G + kRankSortMax : G;
      finish_sorted(p, Gs, nc, wc, use_p, tp, p.joint ? wall_tot : 0ull, p.joint != 0, row, sh_scratch, &sh_above,
                    &sh_rnd);
    } else {
      cl_arrive_relaxed();
    }
    cl_wait();
    return;
  }

  // ---- 4r. top-p by rejection (top_p >= 0.25), alone or after a large top-k (and min-p): rounds
  // of four candidates drawn from the kept tokens (inverse CDF, token order); candidate j is in the
  // nucleus iff the mass of strictly larger tokens (all kept) is below the target (the rule of 4.),
  // checked for all four in one pass; the first accepted candidate is the token. Exact: the first
  // accepted of independent draws from w follows w restricted to the nucleus. Up to kRejRounds
  // rounds (the first uses tags kTagDraw/kTagCand, round j kTagRound + 2j, + 2j + 1): a row falls to
  // the exact path below, with a fresh draw (tag kTagRetry), with probability <= (1 - top_p)^(4
  // kRejRounds). One round alone left 6% of the rows at top_p = 0.5 to the exact path, and one such
  // row holds up a whole batch. Top-p alone keeps its own copy of the rounds: through
  // reject_rounds it timed ~10% slower (H200, B=512 V=128256 257 -> 283 us; register pressure).
  const Span sp = thread_span(n);
  auto key_at = [&](int i) -> uint32_t { return FIB_KEY(i); };
  if (rej_p) {
    // without top-k the pushed coarse sums (sh_pcsum, 4 KB) are unused on this row in every rank:
    // CTA masses [8], candidates [4], the candidates' masses per rank [8][4], block partials [4][16]
    uint64_t* const sh_rtot = sh_pcsum;
    uint64_t* const sh_cand = sh_pcsum + kMaxCluster;
    uint64_t(*const sh_rsum)[4] = reinterpret_cast<uint64_t(*)[4]>(sh_pcsum + kMaxCluster + 4);
    uint64_t(*const sh_r4)[kWarps] = reinterpret_cast<uint64_t(*)[kWarps]>(sh_pcsum + 5 * kMaxCluster + 4);
    static_assert(5 * kMaxCluster + 4 + 4 * kWarps <= kMaxCluster * kGroups, "rejection scratch fits sh_pcsum");
    uint64_t mine, ex, base;
    const uint64_t total =
        span_masses(skeys, resident, key_at, sp, 0u, 0x7fffffff, wc, rank, S, sh_scratch, sh_rtot, &mine, &ex, &base);
    FIB_PROF(11);
    if (total > 0) {  // (cluster-uniform)
      const uint64_t seed = row_seed(p, row), off = row_offset(p, row);
      const double tt = ceil(static_cast<double>(tp) * static_cast<double>(total));
      const uint64_t target = tt < 1.0 ? 1ull : static_cast<uint64_t>(tt);
      // up to kRejRounds rounds of four candidates (the spans' masses above serve every round).
      // Each round's candidates are checked two at a time, in draw order: the first pass sums the
      // masses above candidates 0 and 1 only, and the pass for 2 and 3 runs only when both fall
      // outside (probability (1 - top_p)^2 per round). The same first accepted candidate, so the
      // same token, as one pass over all four; the pass costs ~2/3 of one over four (H200, one CTA,
      // 16032 resident keys: 3.3 -> 2.1 us).
      for (int round = 0; round < kRejRounds; ++round) {
        uint64_t r[4];
        if (round == 0) {  // (computed during the load, sh_rnd's block and the next)
#pragma unroll
          for (int c = 0; c < 4; ++c) r[c] = sh_rc[c];
        } else {
          row_random128(seed, off, static_cast<uint32_t>(row), kTagRound + 2u * round, &r[0], &r[1]);
          row_random128(seed, off, static_cast<uint32_t>(row), kTagRound + 2u * round + 1u, &r[2], &r[3]);
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const uint64_t tgt = __umul64hi(r[c], total);
          const bool own = tgt >= base && tgt - base >= ex && tgt - base < ex + mine;  // one thread of the cluster
          const int i = warp_span_hit(own, sp, ex, tgt - base, 0u, 0x7fffffff, wc, key_at);
          if (own) {
            const uint64_t v = (static_cast<uint64_t>(FIB_KEY(i)) << 32) | static_cast<uint32_t>(start + i);
            for (uint32_t q = 0; q < S; ++q) *cl_remote(&sh_cand[c], q) = v;
          }
        }
        cl_sync();  // (also: every rank has read the previous round's sh_rsum)
        FIB_PROF(12);
        int acc = -1;
#pragma unroll 1
        for (int h = 0; h < 4 && acc < 0; h += 2) {
          const uint32_t ca = static_cast<uint32_t>(sh_cand[h] >> 32), cb = static_cast<uint32_t>(sh_cand[h + 1] >> 32);
          const uint32_t cmin = min(ca, cb);
          uint64_t A0 = 0ull, A1 = 0ull;
          for_span4(skeys, resident, key_at, sp, [&](const uint32_t (&k)[4], int, int cnt) {
            if (max(max(k[0], k[1]), max(k[2], k[3])) <= cmin) return;  // no key above either candidate
            uint64_t w[4];
            weights4(k, wc, w);
#pragma unroll
            for (int t = 0; t < 4; ++t) {
              const uint64_t wt = t < cnt ? w[t] : 0ull;
              A0 += k[t] > ca ? wt : 0ull;
              A1 += k[t] > cb ? wt : 0ull;
            }
          });
          {
            const uint64_t v0 = warp_sum_u64(A0), v1 = warp_sum_u64(A1);
            if (lane == 0) {
              sh_r4[h][wid] = v0;
              sh_r4[h + 1][wid] = v1;
            }
          }
          __syncthreads();
          FIB_PROF(13);
          if (tid < 2) {
            uint64_t v = 0;
            for (int w = 0; w < kWarps; ++w) v += sh_r4[h + tid][w];
            for (uint32_t q = 0; q < S; ++q) *cl_remote(&sh_rsum[rank][h + tid], q) = v;
          }
          cl_sync();  // (also: every rank has read this round's sh_cand, and sh_r4 is free again)
          FIB_PROF(14);
          for (int c = h; c < h + 2 && acc < 0; ++c) {
            uint64_t a = 0;
            for (uint32_t q = 0; q < S; ++q) a += sh_rsum[q][c];
            if (a < target) acc = c;
          }
        }
        if (acc >= 0) {  // (cluster-uniform) no remote access follows
          if (rank == 0 && tid == 0) p.out_idx[row] = static_cast<int64_t>(static_cast<uint32_t>(sh_cand[acc]));
          return;
        }
      }
      draw_tag = kTagRetry;
    }
  }
  if (rej_k_first) {
    // the pushed coarse sums (sh_pcsum, 4 KB): no rank reads them after the top-k's first select
    // (cluster barriers since). Span totals [kMaxCluster], then the rounds' scratch.
    uint64_t* const sh_rtot = sh_pcsum;
    static_assert(kMaxCluster + kRejScratch <= kMaxCluster * kGroups, "rejection scratch fits sh_pcsum");
    uint64_t mine, ex, base;
    const uint64_t total =
        span_masses(skeys, resident, key_at, sp, lo, cut, wc, rank, S, sh_scratch, sh_rtot, &mine, &ex, &base);
    FIB_PROF(11);
    if (total > 0) {  // (cluster-uniform)
      const double tt = ceil(static_cast<double>(tp) * static_cast<double>(total));
      const uint64_t target = tt < 1.0 ? 1ull : static_cast<uint64_t>(tt);
      const int64_t tok = reject_rounds<false>(p, row, start, skeys, resident, key_at, sp, lo, cut, wc, rank, S, total, mine,
                                        ex, base, target, 0, 0u, sh_pcsum + kMaxCluster);
      if (tok >= 0) {
        if (rank == 0 && tid == 0) p.out_idx[row] = tok;
        return;
      }
      draw_tag = kTagRetry;
    }
  }

  // ---- 4. top-p on mass
  if (use_p && wc.kind != 3 && p.hist_bytes == 0 && resident) {
    // top-p alone in the histogram-free layout (sampling.cu): from here the keys are read from
    // global memory and the two histogram buffers overlay the resident keys (>= kHistBytes)
    __syncthreads();
    resident = false;
  }
  if (use_p && wc.kind != 3) {
    uint32_t prefix = 0, mask = 0;
    uint64_t H = 0, target = 0;
    bool ok = true;
    for (int pass = 0; pass < 3 && ok; ++pass) {
      const int shift = pass == 0 ? 21 : (pass == 1 ? 10 : 0);
      const uint32_t dmask = pass == 2 ? 0x3ffu : 0x7ffu;
      uint32_t* ms = reinterpret_cast<uint32_t*>(hbuf(stage));
      Mass* msv = reinterpret_cast<Mass*>(ms);
      uint64_t* cs = sh_csum[stage & 1];
      ++stage;
      for (int b = tid; b < kHistBufWords; b += kThreads) ms[b] = 0u;
      __syncthreads();
      uint64_t wall = 0;
      const bool all_pass = (pass == 0 && p.joint);
      for (int i = tid; i < n; i += kThreads) {
        uint32_t key = FIB_KEY(i);
        bool kp = kept_pred(key, i, lo, cut);
        if (all_pass) {
          uint64_t w = weight_of(key, wc);
          wall += w;
          if (kp && w) mass_add(ms, static_cast<int>(key >> 21), w);
        } else if (kp && (key & mask) == prefix) {
          uint64_t w = weight_of(key, wc);
          if (w) mass_add(ms, static_cast<int>((key >> shift) & dmask), w);
        }
      }
      if (all_pass) {
        wall = warp_sum_u64(wall);
        if (lane == 0) sh_wsum[wid] = wall;
        __syncthreads();
        if (tid == 0) {
          uint64_t s = 0;
          for (int w = 0; w < kWarps; ++w) s += sh_wsum[w];
          sh_slot[1] = s;
        }
      }
      __syncthreads();
      build_coarse(msv, cs);
      cl_sync();
      if (pass == 0) {
        uint64_t base = 0;
        if (p.joint) {
          if (tid < static_cast<int>(S)) sh_gather[tid] = *cl_remote(&sh_slot[1], tid);
          __syncthreads();
          for (uint32_t r = 0; r < S; ++r) base += sh_gather[r];
        } else {
          if (tid < kGroups) {
            uint64_t g = sum_ranks(S, [&](uint32_t r) { return cl_remote(cs, r)[tid]; });
            g = warp_sum_u64(g);
            if ((tid & 31) == 0) sh_scratch[tid >> 5] = g;
          }
          __syncthreads();
          base = sh_scratch[0] + sh_scratch[1];
          __syncthreads();
        }
        double t = ceil(static_cast<double>(tp) * static_cast<double>(base));
        target = t < 1.0 ? 1ull : static_cast<uint64_t>(t);
        if (base == 0) {
          ok = false;
          break;
        }
      }
      cluster_select(msv, cs, S, target - H, &sh_b, &sh_above, &sh_v, sh_scratch, &sh_grp, &sh_gabove);
      const int b = sh_b;
      if (b < 0) {  // the whole region is within the nucleus (only through rounding): keep it
        ok = false;
        break;
      }
      H += sh_above;
      prefix |= static_cast<uint32_t>(b) << shift;
      mask |= dmask << shift;
    }
    if (ok && prefix > lo) {
      lo = prefix;
      cut = 0x7fffffff;
    }
  }

  // ---- 5. output
  if (p.mode == kMaskLogits) {
    cl_arrive_relaxed();  // (no remote access follows: the others may exit once this CTA is here)
    char* orow = reinterpret_cast<char*>(p.out_vals) + (static_cast<int64_t>(row) * p.out_stride + start) * ESIZE;
    for (int i = tid; i < n; i += kThreads) {
      uint32_t key = FIB_KEY(i);
      float o = kept_pred(key, i, lo, cut) ? key2f(key) : -INFINITY;
      if constexpr (DT == kF32) {
        reinterpret_cast<float*>(orow)[i] = o;
      } else if constexpr (DT == kBF16) {
        reinterpret_cast<__nv_bfloat16*>(orow)[i] = __float2bfloat16_rn(o);
      } else {
        reinterpret_cast<__half*>(orow)[i] = __float2half_rn(o);
      }
    }
    cl_wait();
    return;
  }

  // ---- 5b. the kept mass of every thread span, the CTA totals, and then the renormalised probs
  // or the draw (one cluster barrier; the warp that owns the drawn span rescans it)
  uint64_t mine, ex, base;
  FIB_PROF(15);
  const uint64_t total =
      span_masses(skeys, resident, key_at, sp, lo, cut, wc, rank, S, sh_scratch, sh_ptot, &mine, &ex, &base);
  FIB_PROF(16);
  if (p.mode == kRenormProbs) {
    float* orow = reinterpret_cast<float*>(p.out_vals) + static_cast<int64_t>(row) * p.out_stride + start;
    const double inv = total ? 1.0 / static_cast<double>(total) : 0.0;
    for (int i = tid; i < n; i += kThreads) {
      uint32_t key = FIB_KEY(i);
      float o = 0.0f;
      if (kept_pred(key, i, lo, cut)) o = static_cast<float>(static_cast<double>(weight_of(key, wc)) * inv);
      orow[i] = o;
    }
    return;
  }
  if (total == 0) {
    if (rank == 0 && tid == 0) p.out_idx[row] = 0;  // degenerate row: no positive weight
    return;
  }
  const uint64_t tgt = draw_tag == kTagDraw ? __umul64hi(sh_rnd, total) : row_draw_target(p, row, total, draw_tag);
  const bool own = tgt >= base && tgt - base >= ex && tgt - base < ex + mine;  // one thread of the cluster
  const int hit = warp_span_hit(own, sp, ex, tgt - base, lo, cut, wc, key_at);
  if (own) {
    p.out_idx[row] = start + hit;
    FIB_PROF_ROW(17);
  }
#undef FIB_KEY
}

template <int DT, bool SUMM = false, bool GATHER = false, bool XPK = false>
__global__ void __launch_bounds__(kThreads, 2) sampler_kernel(const Params p) {
  // 128-byte aligned: the TMA destinations (ring stages, resident keys) start on a 128-byte line
  // whatever the static shared memory's size; at a 16-byte offset (static size 8528) the filter
  // kernel was 3-6% slower on the H200 (benchmarks/results/sampling_ab_early_tma_h200.json)
  extern __shared__ __align__(128) unsigned char dsm[];
#if FIB_HAS_CLUSTER
  pdl_enter();
  sample_row<DT, SUMM, GATHER, XPK>(p, dsm, blockIdx.y, cl_rank(), cl_size(), p.chunk, p.resident != 0);
#else
  if constexpr (!SUMM && !GATHER) sample_row<DT>(p, dsm, blockIdx.y, cl_rank(), cl_size(), p.chunk, p.resident != 0);
#endif  // (SUMM, GATHER: launched on sm_90 only)
}

}  // namespace sampling
}  // namespace fib
