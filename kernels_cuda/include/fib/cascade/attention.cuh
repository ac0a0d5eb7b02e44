// fib-runtime cascade attention: one level of multi-level cascade attention over a paged KV cache.
//
// A level is a batch of "groups" (FlashInfer: requests of that level). Group g owns query tokens
// [qo_indptr[g], qo_indptr[g+1]) and the KV pages kv_indices[kv_indptr[g] .. kv_indptr[g+1]),
// the last one filled to last_page_len[g]. Every query of a group attends every key of the group
// (optionally causal, FlashInfer's bottom-right alignment). For the shared-prefix level there is
// one group holding all queries, so the prefix KV is read once per (KV head, row tile) and the
// B*G queries of a KV head run as a tensor-core GEMM; for the unique level each group is one
// request.
//
// CTA = 4 warps (or 8 warps x 16 rows for large shared levels). Rows of a tile are packed (query token, head-in-group) pairs of one KV head:
// row r of group g <-> token r / G, qo head kv_head * G + r % G (FlashInfer's packing).
// WM warps split the rows (16 each), WK warps split the keys of each 64-key tile.
// The KV range of a group is split into chunks of kv_chunk keys (grid.z); each split writes a
// partial state (fp32 o, base-2 lse) to a workspace slot, or - in "final" mode, with one split -
// merges its state with all previously written slots of the row and writes the output.
#pragma once
#include "common.cuh"

namespace fib {
namespace cascade {

struct LevelParams {
  const void* q;
  int64_t q_stride_n, q_stride_h;  // elements
  const void* k;
  const void* v;
  int64_t kv_stride_page, kv_stride_tok, kv_stride_head;  // elements, same for k and v
  const int32_t* qo_indptr;
  const int32_t* kv_indptr;
  const int32_t* kv_indices;
  const int32_t* last_page_len;
  // per work item, 8 int32 (planned on the host, one dependent load): qo_start, qo_len,
  // first page slot (kv_indptr[g]), kv_len, first packed row of the tile, 3 unused
  const int32_t* work_info;
  int num_qo_heads, group_size, page_size;
  float sm_scale_log2;
  int causal;
  int kv_chunk;  // keys per split, multiple of 64
  float* ws_o;   // [slots, ws_rows, D]
  float* ws_lse; // [slots, ws_rows]
  int64_t ws_rows;  // total_q * num_qo_heads
  int slot_base;    // partial mode: slot of split 0
  int num_prev_slots;  // final mode: slots [0, num_prev_slots) to merge in
  int final_mode;
  void* out;
  float* lse;
  int64_t o_stride_n, o_stride_h;
};

template <int D, int WM = 4, int MT = 1>
struct LevelCfg {
  // 16-row tiles (decode-like levels) and 2-m-tile warps re-read Q from smem (register budget)
  static constexpr bool Q_IN_REGS = D <= 128 && WM > 1 && MT == 1;
  // 2-m-tile warps at head_dim 128 walk 32-key tiles (registers: S 32 + O 128 floats per thread)
  static constexpr int TILE_KV = (MT == 2 && D == 128) ? 32 : 64;
  static constexpr int STAGES = (MT == 2 && D == 128) ? 4 : ((D <= 128 && MT == 1) ? 3 : 2);
  static constexpr int CHUNKS = D / 8;  // 16-byte chunks per row
  static constexpr int STG_STRIDE = D + 4;  // fp32 staging row stride
};

// swizzled element offset of (row, col) in a [rows][D] 16-bit tile; col multiple of 8
template <int D>
__device__ __forceinline__ int swz(int row, int col) {
  return row * D + ((((col >> 3) ^ (row & 7))) << 3);
}

// Lazy rescaling (FlashAttention-4): the running max moves only when a row's max grows by more
// than this (log2 units), so P <= 2^8 and O is rescaled on few tiles.
#define FIB_RESCALE_THRESHOLD 8.0f

template <typename T, int D, int WM, int WK, int MT>
__global__ void __launch_bounds__(32 * WM * WK, (WM == 1 && D <= 128) ? 4 : 2)
    cascade_level_kernel(const LevelParams p) {
  using Cfg = LevelCfg<D, WM, MT>;
  constexpr int TILE_KV = Cfg::TILE_KV;
  constexpr int STAGES = Cfg::STAGES;
  constexpr int WROWS = 16 * MT;     // rows per warp
  constexpr int ROWS = WROWS * WM;   // rows per CTA tile
  constexpr int NKW = TILE_KV / WK;  // keys per warp per tile
  constexpr int NT = NKW / 8;        // score n-tiles per warp
  constexpr int KS = D / 16;         // k-steps over head dim
  constexpr int DT = D / 8;          // output n-tiles
  constexpr int CH = Cfg::CHUNKS;
  constexpr int NTHR = 32 * WM * WK;
  constexpr int ROWB = D * 2;        // bytes per smem row
  constexpr int STAGE_BYTES = 2 * TILE_KV * ROWB;
  static_assert(WM * WK == 4, "4 warps");
  static_assert(MT == 1 || WK == 1, "2 m-tiles per warp only without key split");
  static_assert(NKW % 16 == 0, "keys per warp must be a multiple of 16");

  extern __shared__ __align__(128) uint8_t smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);
  T* kv_s = q_s + ROWS * D;  // stage s: K at kv_s + s*2*TILE_KV*D, V after it
  float* stg = reinterpret_cast<float*>(kv_s);  // aliases the KV stages after the main loop
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WK, wk = warp % WK;

  const int item = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int4 wi0 = __ldg(reinterpret_cast<const int4*>(p.work_info) + 2 * item);
  const int4 wi1 = __ldg(reinterpret_cast<const int4*>(p.work_info) + 2 * item + 1);
  const int G = p.group_size;
  const int qo_start = wi0.x;
  const int qo_len = wi0.y;
  const int nrows = qo_len * G;
  const int pg_start = wi0.z;
  const int kv_len = wi0.w;
  const int row0 = wi1.x;

  int k_begin = split * p.kv_chunk;
  int k_end = min(kv_len, k_begin + p.kv_chunk);
  // causal: query token qi may see keys < kv_len - qo_len + qi + 1
  const int tile_rows = min(ROWS, nrows - row0);
  if (p.causal) {
    int q_last = (row0 + tile_rows - 1) / G;
    k_end = min(k_end, kv_len - qo_len + q_last + 1);
  }
  const int ntiles = k_end > k_begin ? (k_end - k_begin + TILE_KV - 1) / TILE_KV : 0;

  const T* __restrict__ kg = reinterpret_cast<const T*>(p.k);
  const T* __restrict__ vg = reinterpret_cast<const T*>(p.v);
  const int64_t head_off = (int64_t)kv_head * p.kv_stride_head;

  // ---------------- Q tile -> smem (zero rows past the group)
  {
    const T* qg = reinterpret_cast<const T*>(p.q);
    for (int c = tid; c < ROWS * CH; c += NTHR) {
      int r = c / CH, ch = c % CH;
      int gr = row0 + r;
      bool valid = gr < nrows;
      const T* src = qg;
      if (valid) {
        int qi = gr / G, j = gr - qi * G;
        src = qg + (int64_t)(qo_start + qi) * p.q_stride_n +
              (int64_t)(kv_head * G + j) * p.q_stride_h + ch * 8;
      }
      cp_async16(smem_u32(q_s + swz<D>(r, ch * 8)), src, valid);
    }
    cp_async_commit();
  }

  // KV tile loads. Each thread copies rows r = tid / CH + i * RSTEP (16-byte chunk tid % CH) of
  // K and V. The page ids of the rows of the next tile to issue are loaded one iteration ahead
  // (registers), so the dependent page-table read never sits on the critical path.
  constexpr int RSTEP = NTHR / CH;
  constexpr int NR = TILE_KV / RSTEP;
  const int ch = tid % CH;
  const int rbase = tid / CH;
  const unsigned ps_u = static_cast<unsigned>(p.page_size);
  const unsigned ps_magic = ps_u > 1 ? 0xFFFFFFFFu / ps_u + 1u : 0u;
  const uint32_t kv_s_u32 = smem_u32(kv_s);
  const uint32_t dst_off = static_cast<uint32_t>(swz<D>(rbase, ch * 8)) * 2u;  // + i*RSTEP rows
  int pg[NR];  // page id (or -1) of the rows of the next tile to issue
  auto fetch_pages = [&](int t) {
    const int kbase = k_begin + t * TILE_KV;
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      const int kpos = kbase + rbase + i * RSTEP;
      int v = -1;
      if (kpos < k_end) {
        const int pi = ps_u > 1 ? static_cast<int>(__umulhi(static_cast<unsigned>(kpos), ps_magic)) : kpos;
        v = __ldg(p.kv_indices + pg_start + pi);
      }
      pg[i] = v;
    }
  };
  auto issue_tile = [&](int t) {
    const uint32_t kdst = kv_s_u32 + (t % STAGES) * STAGE_BYTES + dst_off;
    const int kbase = k_begin + t * TILE_KV;
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      const int kpos = kbase + rbase + i * RSTEP;
      const bool valid = pg[i] >= 0;
      const T* ksrc = kg;
      const T* vsrc = vg;
      if (valid) {
        const int pi = ps_u > 1 ? static_cast<int>(__umulhi(static_cast<unsigned>(kpos), ps_magic)) : kpos;
        const int off = kpos - pi * p.page_size;
        const int64_t o = static_cast<int64_t>(pg[i]) * p.kv_stride_page +
                          static_cast<int64_t>(off) * p.kv_stride_tok + head_off + ch * 8;
        ksrc = kg + o;
        vsrc = vg + o;
      }
      // rows i*RSTEP apart: when RSTEP is a multiple of 8 the swizzle pattern is the same
      uint32_t d;
      if constexpr (RSTEP % 8 == 0) {
        d = kdst + i * RSTEP * ROWB;
      } else {
        d = kdst - dst_off + static_cast<uint32_t>(swz<D>(rbase + i * RSTEP, ch * 8)) * 2u;
      }
      cp_async16(d, ksrc, valid);
      cp_async16(d + TILE_KV * ROWB, vsrc, valid);
    }
  };

#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) {
    if (t < ntiles) {
      fetch_pages(t);
      issue_tile(t);
    }
    cp_async_commit();
  }
  if (STAGES - 1 < ntiles) fetch_pages(STAGES - 1);

  // per-thread rows: (wm*MT + mt)*16 + lane/4 (+8) of the tile
  int kmax[MT][2];
  int kmax_min = 1 << 30;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int gr = row0 + (wm * MT + mt) * 16 + (lane >> 2) + h * 8;
      int lim = k_end;
      if (p.causal) lim = min(lim, kv_len - qo_len + gr / G + 1);
      kmax[mt][h] = lim;
      kmax_min = min(kmax_min, lim);
    }

  float o[MT][DT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < DT; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = kNegInf, l[mt][0] = l[mt][1] = 0.f;
  const float sc = p.sm_scale_log2;

  // ldmatrix byte offsets (swizzle folded in; only compile-time offsets are added later).
  // K (B of QK^T, non-trans): rows kofs + nt*8 + (lane&7), chunk kp*4 + lane/8
  // V (B of PV, trans): rows kofs + kk*16 + (lane&7) + ((lane>>3)&1)*8, chunk dp*2 + lane/16
  // Q (A): rows wrow0 + mt*16 + (lane&7) + ((lane>>3)&1)*8, chunk kk*2 + lane/16
  const int kofs = wk * NKW;
  const int l7 = lane & 7;
  uint32_t koff[2], voff[4], qoff[4];
#pragma unroll
  for (int e = 0; e < 2; ++e)
    koff[e] = static_cast<uint32_t>((kofs + l7) * ROWB + (((e * 4 + (lane >> 3)) ^ l7) << 4));
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    voff[e] = static_cast<uint32_t>(TILE_KV * ROWB + (kofs + l7 + ((lane >> 3) & 1) * 8) * ROWB +
                                    (((e * 2 + (lane >> 4)) ^ l7) << 4));
    qoff[e] = smem_u32(q_s) + static_cast<uint32_t>((wm * WROWS + l7 + ((lane >> 3) & 1) * 8) * ROWB +
                                                   (((e * 2 + (lane >> 4)) ^ l7) << 4));
  }

  uint32_t qf[Cfg::Q_IN_REGS ? KS : 1][4];
  // wait for Q (oldest group): groups committed so far = 1 + (STAGES-1)
  cp_async_wait<STAGES - 1>();
  __syncthreads();
  if constexpr (Cfg::Q_IN_REGS) {
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) ldmatrix_x4(qf[kk], qoff[kk & 3] + (kk >> 2) * 128);
  }

  for (int t = 0; t < ntiles; ++t) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (t + STAGES - 1 < ntiles) {
      issue_tile(t + STAGES - 1);  // page ids fetched last iteration
      if (t + STAGES < ntiles) fetch_pages(t + STAGES);
    }
    cp_async_commit();

    const uint32_t tb = kv_s_u32 + (t % STAGES) * STAGE_BYTES;

    // ---- S = Q K^T  (WROWS x NKW per warp), raw scores
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
    for (int kp = 0; kp < KS / 2; ++kp) {
      if constexpr (Cfg::Q_IN_REGS) {
        uint32_t b[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) ldmatrix_x4(b[nt], tb + koff[kp & 1] + (kp >> 1) * 128 + nt * 8 * ROWB);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma16816<T>(s[0][nt], qf[2 * kp], b[nt][0], b[nt][1]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma16816<T>(s[0][nt], qf[2 * kp + 1], b[nt][2], b[nt][3]);
      } else {
        uint32_t a[MT][2][4];
        const int k0 = 2 * kp, k1 = 2 * kp + 1;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          ldmatrix_x4(a[mt][0], qoff[k0 & 3] + (k0 >> 2) * 128 + mt * 16 * ROWB);
          ldmatrix_x4(a[mt][1], qoff[k1 & 3] + (k1 >> 2) * 128 + mt * 16 * ROWB);
        }
        constexpr int NB = NT;
#pragma unroll
        for (int n0 = 0; n0 < NT; n0 += NB) {
          uint32_t b[NB][4];
#pragma unroll
          for (int j = 0; j < NB; ++j)
            ldmatrix_x4(b[j], tb + koff[kp & 1] + (kp >> 1) * 128 + (n0 + j) * 8 * ROWB);
          // k-step outer: MT*NB independent accumulators between dependent mma
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < NB; ++j) mma16816<T>(s[mt][n0 + j], a[mt][0], b[j][0], b[j][1]);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < NB; ++j) mma16816<T>(s[mt][n0 + j], a[mt][1], b[j][2], b[j][3]);
        }
      }
    }

    // ---- mask, online softmax (base 2, lazy rescale)
    const int tile_k0 = k_begin + t * TILE_KV + kofs;
    if (tile_k0 + NKW > kmax_min) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            int key = tile_k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
            if (key >= kmax[mt][e >> 1]) s[mt][nt][e] = kNegInf;
          }
    }
    float alpha[MT][2];
    bool moved = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = kNegInf;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
        const float mxs = mx * sc;  // scaled (sc > 0 keeps the order; -inf stays -inf)
        const float m_new = (mxs > m[mt][h] + FIB_RESCALE_THRESHOLD) ? mxs : m[mt][h];
        alpha[mt][h] = m_new == m[mt][h] ? 1.f : ptx_exp2(m[mt][h] - m_new);  // 0 from -inf
        moved |= m_new != m[mt][h];
        m[mt][h] = m_new;
        const float m_use = m_new == kNegInf ? 0.f : m_new;
        float rs = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const float p0 = ptx_exp2(fmaf(s[mt][nt][2 * h], sc, -m_use));
          const float p1 = ptx_exp2(fmaf(s[mt][nt][2 * h + 1], sc, -m_use));
          s[mt][nt][2 * h] = p0;
          s[mt][nt][2 * h + 1] = p1;
          rs += p0 + p1;
        }
        l[mt][h] = l[mt][h] * alpha[mt][h] + rs;
      }
    if (__any_sync(0xffffffff, moved)) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          o[mt][dt][0] *= alpha[mt][0];
          o[mt][dt][1] *= alpha[mt][0];
          o[mt][dt][2] *= alpha[mt][1];
          o[mt][dt][3] *= alpha[mt][1];
        }
    }

    // ---- O += P V
#pragma unroll
    for (int kk = 0; kk < NKW / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        a[mt][0] = TypeTraits<T>::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = TypeTraits<T>::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = TypeTraits<T>::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = TypeTraits<T>::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
      constexpr int DP = D / 16;
      constexpr int DPB_MAX = (WM == 1 || MT == 2) ? 2 : 8;  // fragments per batch (registers)
      constexpr int DPB = DP > DPB_MAX ? DPB_MAX : DP;
#pragma unroll
      for (int db = 0; db < DP; db += DPB) {
        uint32_t b[DPB][4];
#pragma unroll
        for (int j = 0; j < DPB; ++j) {
          const int dp = db + j;
          ldmatrix_x4_trans(b[j], tb + voff[dp & 3] + (dp >> 2) * 128 + kk * 16 * ROWB);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int j = 0; j < DPB; ++j) {
            mma16816<T>(o[mt][2 * (db + j)], a[mt], b[j][0], b[j][1]);
            mma16816<T>(o[mt][2 * (db + j) + 1], a[mt], b[j][2], b[j][3]);
          }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // KV smem is reused as fp32 staging below

  // ---------------- per-warp state -> smem staging (normalised o, lse)
  constexpr int SS = Cfg::STG_STRIDE;
  constexpr int STG_BYTES = WK * ROWS * SS * 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float lt = l[mt][h];
      lt += __shfl_xor_sync(0xffffffff, lt, 1);
      lt += __shfl_xor_sync(0xffffffff, lt, 2);
      l[mt][h] = lt;
    }
  float* lse_stage = reinterpret_cast<float*>(smem_raw + (size_t)ROWS * D * 2 + (size_t)STG_BYTES);
  {
    float* st = stg + (wk * ROWS) * SS;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = (wm * MT + mt) * 16 + (lane >> 2) + h * 8;
        const float inv = l[mt][h] > 0.f ? 1.f / l[mt][h] : 0.f;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          *reinterpret_cast<float2*>(st + r * SS + dt * 8 + (lane & 3) * 2) =
              make_float2(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
        }
        if ((lane & 3) == 0)
          lse_stage[wk * ROWS + r] = l[mt][h] > 0.f ? m[mt][h] + ptx_log2(l[mt][h]) : kNegInf;
      }
  }
  __syncthreads();

  // ---------------- row-wise merge of the WK warp states (+ previous slots) and write-out
  constexpr int TPR = D / 4;  // threads per row, 4 floats each
  constexpr int RPI = NTHR / TPR;
  const int c4 = (tid % TPR) * 4;
  for (int r = tid / TPR; r < ROWS; r += RPI) {
    int gr = row0 + r;
    if (gr >= nrows) continue;
    int qi = gr / G, j = gr - qi * G;
    int64_t token = qo_start + qi;
    int head = kv_head * G + j;
    int64_t grow = token * p.num_qo_heads + head;
    float mx = kNegInf;
#pragma unroll
    for (int w = 0; w < WK; ++w) mx = fmaxf(mx, lse_stage[w * ROWS + r]);
    const int nprev = p.final_mode ? p.num_prev_slots : 0;
    for (int sl = 0; sl < nprev; ++sl) mx = fmaxf(mx, p.ws_lse[sl * p.ws_rows + grow]);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    float den = 0.f;
    if (mx != kNegInf) {
#pragma unroll
      for (int w = 0; w < WK; ++w) {
        float wt = ptx_exp2(lse_stage[w * ROWS + r] - mx);
        float4 x = *reinterpret_cast<const float4*>(stg + (w * ROWS + r) * SS + c4);
        acc[0] += wt * x.x; acc[1] += wt * x.y; acc[2] += wt * x.z; acc[3] += wt * x.w;
        den += wt;
      }
      for (int sl = 0; sl < nprev; ++sl) {
        float wt = ptx_exp2(p.ws_lse[sl * p.ws_rows + grow] - mx);
        float4 x = *reinterpret_cast<const float4*>(p.ws_o + (sl * p.ws_rows + grow) * D + c4);
        acc[0] += wt * x.x; acc[1] += wt * x.y; acc[2] += wt * x.z; acc[3] += wt * x.w;
        den += wt;
      }
    }
    float inv = den > 0.f ? 1.f / den : 0.f;
    float res[4] = {acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv};
    float lse_out = den > 0.f ? mx + ptx_log2(den) : kNegInf;
    if (p.final_mode) {
      T* og = reinterpret_cast<T*>(p.out) + token * p.o_stride_n + (int64_t)head * p.o_stride_h;
      store4<T>(og + c4, res);
      if (p.lse != nullptr && c4 == 0) p.lse[grow] = lse_out;
    } else {
      int64_t slot = p.slot_base + split;
      store4<float>(p.ws_o + (slot * p.ws_rows + grow) * D + c4, res);
      if (c4 == 0) p.ws_lse[slot * p.ws_rows + grow] = lse_out;
    }
  }
}

// dynamic shared memory for a config (must match the kernel's layout)
template <int D, int WM, int WK, int MT>
inline int level_smem(int stages_alloc) {
  constexpr int ROWS = 16 * WM * MT;
  int kv = stages_alloc * 2 * LevelCfg<D, WM, MT>::TILE_KV * D * 2;
  int stg = WK * ROWS * (D + 4) * 4;
  return ROWS * D * 2 + (kv > stg ? kv : stg) + WK * ROWS * 4;
}

}  // namespace cascade
}  // namespace fib
