// fib-runtime sampling: rejection rounds over resident spans (the cluster kernel).
// Top-p (and large-k top-k) sampled by drawing candidates from the kept weights and accepting
// the first whose strictly larger tokens hold less than the nucleus target (sampler.cuh, 4r. and
// 1r.).
#pragma once
#include "fib/sampling/spans.cuh"

namespace fib {
namespace sampling {

// Rejection rounds for sampling with top-p (exact): round j draws four candidates from the weights
// kept by (lo, cut) (inverse CDF in token order through the spans; total / mine / ex / base come
// from span_masses over the same set) and accepts the first candidate c such that the tokens of a
// strictly larger key have mass < target, and (rank_k > 0) fewer than rank_k tokens precede c in
// (value desc, index asc) order, i.e. c is in the top-k with the lower-index tie rule, and key(c) >=
// kmin (min-p), checking candidates 0-1 in one pass and 2-3 in another only when both fall
// outside. Exact: the first accepted of independent draws follows the kept weights restricted
// to the accepted set. Round 0 uses the tags kTagDraw / kTagCand, round j kTagRound + 2j, + 2j + 1.
// Returns the token's row index (cluster-uniform), or -1 when all kRejRounds rounds fall outside.
// scr: kRejScratch u64 at the same shared-memory offset in every CTA of the cluster (written
// remotely; free from the first cluster barrier inside to the last). All threads of every rank.
constexpr int kRejScratch = 4 + 8 * kMaxCluster + 8 * kWarps;
// 1r. (joint, large k) is tried only on rows whose mass is at most this many times the top token's
constexpr uint64_t kRejJointSpan = 256;
// (Inlined: a __noinline__ build was 1.2-2x slower on every sampler_kernel path, H200.)
template <bool RANK, class KeyAt>  // RANK: rank_k > 0 (a top-k rank to check; separate to keep registers)
__device__ __forceinline__ int64_t reject_rounds(const Params& p, int row, int64_t start, const uint32_t* skeys,
                                                 bool resident, KeyAt&& key_at, Span sp, uint32_t lo, int cut,
                                                 const WeightCtx& wc, uint32_t rank, uint32_t S, uint64_t total,
                                                 uint64_t mine, uint64_t ex, uint64_t base, uint64_t target, int rank_k,
                                                 uint32_t kmin, uint64_t* scr) {
  uint64_t* const cand = scr;  // [4]: (key << 32 | row index) of this round's candidates
  uint64_t(*const rsum)[4] = reinterpret_cast<uint64_t(*)[4]>(scr + 4);                   // [rank][c] masses
  uint64_t(*const rcnt)[4] = reinterpret_cast<uint64_t(*)[4]>(scr + 4 + 4 * kMaxCluster);  // [rank][c] counts
  uint64_t(*const r4)[kWarps] = reinterpret_cast<uint64_t(*)[kWarps]>(scr + 4 + 8 * kMaxCluster);
  uint64_t(*const c4)[kWarps] = reinterpret_cast<uint64_t(*)[kWarps]>(scr + 4 + 8 * kMaxCluster + 4 * kWarps);
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  const uint64_t seed = row_seed(p, row), off = row_offset(p, row);
  for (int round = 0; round < kRejRounds; ++round) {
    uint64_t r[4];
    round_randoms(seed, off, static_cast<uint32_t>(row), round, r);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint64_t tgt = __umul64hi(r[c], total);
      const bool own = tgt >= base && tgt - base >= ex && tgt - base < ex + mine;  // one thread of the cluster
      const int i = warp_span_hit(own, sp, ex, tgt - base, lo, cut, wc, key_at);
      if (own) {
        const uint64_t v = (static_cast<uint64_t>(key_at(i)) << 32) | static_cast<uint32_t>(start + i);
        for (uint32_t q = 0; q < S; ++q) *cl_remote(&cand[c], q) = v;
      }
    }
    cl_sync();  // (also: every rank has read the previous round's sums)
    FIB_PROF(12);
    // candidates 0-1, then 2-3 only when both fall outside (as in 4r.: the same first accepted
    // candidate as one pass over all four, at ~2/3 of its cost). Each pass reads its two candidates
    // from shared memory (not four held in registers across both passes: fewer spills); they stay
    // there until the first rank passes the round's last barrier (then the next round's owners
    // write theirs), so the decision after a barrier uses the registers read before it.
#pragma unroll 1
    for (int h = 0; h < 4; h += 2) {
      const uint32_t ka = static_cast<uint32_t>(cand[h] >> 32), kb = static_cast<uint32_t>(cand[h + 1] >> 32);
      const uint32_t ia = static_cast<uint32_t>(cand[h]), ib = static_cast<uint32_t>(cand[h + 1]);
      const uint32_t cmin = min(ka, kb);
      uint64_t A0 = 0ull, A1 = 0ull, C0 = 0ull, C1 = 0ull;
      for_span4(skeys, resident, key_at, sp, [&](const uint32_t (&k)[4], int j, int cnt) {
        const uint32_t mx = max(max(k[0], k[1]), max(k[2], k[3]));
        if (RANK ? mx < cmin : mx <= cmin) return;  // no key above (or, counting, at) either candidate
        uint64_t w[4];
        weights4(k, wc, w);
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const uint64_t wt = t < cnt ? w[t] : 0ull;
          A0 += k[t] > ka ? wt : 0ull;
          A1 += k[t] > kb ? wt : 0ull;
        }
        if constexpr (RANK) {
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            const uint32_t idx = static_cast<uint32_t>(start + j + t);
            C0 += (t < cnt && (k[t] > ka || (k[t] == ka && idx < ia))) ? 1ull : 0ull;
            C1 += (t < cnt && (k[t] > kb || (k[t] == kb && idx < ib))) ? 1ull : 0ull;
          }
        }
      });
      {
        const uint64_t a0 = warp_sum_u64(A0), a1 = warp_sum_u64(A1);
        const uint64_t c0 = RANK ? warp_sum_u64(C0) : 0ull, c1 = RANK ? warp_sum_u64(C1) : 0ull;
        if (lane == 0) {
          r4[h][wid] = a0;
          r4[h + 1][wid] = a1;
          c4[h][wid] = c0;
          c4[h + 1][wid] = c1;
        }
      }
      __syncthreads();
      FIB_PROF(13);
      if (tid < 2) {
        uint64_t v = 0, u = 0;
        for (int w = 0; w < kWarps; ++w) {
          v += r4[h + tid][w];
          u += c4[h + tid][w];
        }
        for (uint32_t q = 0; q < S; ++q) {
          *cl_remote(&rsum[rank][h + tid], q) = v;
          *cl_remote(&rcnt[rank][h + tid], q) = u;
        }
      }
      cl_sync();  // (also: every rank has read this round's candidates)
      FIB_PROF(14);
      // (the candidates' keys and indices from the registers read before the barrier: once a rank
      // has passed it, it may already write the next round's candidates into this CTA's `cand`)
      for (int c = h; c < h + 2; ++c) {
        uint64_t a = 0, n = 0;
        for (uint32_t q = 0; q < S; ++q) {
          a += rsum[q][c];
          n += rcnt[q][c];
        }
        if (a < target && (!RANK || n < static_cast<uint64_t>(rank_k)) && (c == h ? ka : kb) >= kmin)
          return static_cast<int64_t>(c == h ? ia : ib);  // (cluster-uniform) no remote access follows
      }
    }
  }
  return -1;
}

}  // namespace sampling
}  // namespace fib
