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
  const int32_t* work_group;  // per work item: group id
  const int32_t* work_row;    // per work item: first packed row of the tile inside the group
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

template <int D, int WM = 4>
struct LevelCfg {
  // 16-row tiles (decode-like levels) re-read Q from smem: frees registers for 4 CTAs/SM
  static constexpr bool Q_IN_REGS = D <= 128 && WM > 1;
  static constexpr int TILE_KV = 64;
  static constexpr int STAGES = D <= 128 ? 3 : 2;
  static constexpr int CHUNKS = D / 8;  // 16-byte chunks per row
  static constexpr int STG_STRIDE = D + 4;  // fp32 staging row stride
};

// swizzled element offset of (row, col) in a [rows][D] 16-bit tile; col multiple of 8
template <int D>
__device__ __forceinline__ int swz(int row, int col) {
  return row * D + ((((col >> 3) ^ (row & 7))) << 3);
}

template <typename T, int D, int WM, int WK>
__global__ void __launch_bounds__(32 * WM * WK, (WM == 1 && D <= 128) ? 4 : (WM * WK == 8 ? 1 : 2))
    cascade_level_kernel(const LevelParams p) {
  using Cfg = LevelCfg<D, WM>;
  constexpr int TILE_KV = Cfg::TILE_KV;
  constexpr int STAGES = Cfg::STAGES;
  constexpr int ROWS = 16 * WM;
  constexpr int NKW = TILE_KV / WK;  // keys per warp per tile
  constexpr int NT = NKW / 8;        // score n-tiles per warp
  constexpr int KS = D / 16;         // k-steps over head dim
  constexpr int DT = D / 8;          // output n-tiles
  constexpr int CH = Cfg::CHUNKS;
  constexpr int NTHR = 32 * WM * WK;
  static_assert(WM * WK == 4 || (WM == 8 && WK == 1), "4 warps, or 8 warps x 16 rows");
  static_assert(NKW % 16 == 0, "keys per warp must be a multiple of 16");

  extern __shared__ __align__(128) uint8_t smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);
  T* kv_s = q_s + ROWS * D;  // stage s: K at kv_s + s*2*TILE_KV*D, V after it
  float* stg = reinterpret_cast<float*>(kv_s);  // aliases the KV stages after the main loop
  // lse staging lives after the fp32 staging area (the KV stages are dead by then)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WK, wk = warp % WK;

  const int item = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int g = p.work_group[item];
  const int row0 = p.work_row[item];
  const int G = p.group_size;
  const int qo_start = p.qo_indptr[g];
  const int qo_len = p.qo_indptr[g + 1] - qo_start;
  const int nrows = qo_len * G;
  const int pg_start = p.kv_indptr[g];
  const int npages = p.kv_indptr[g + 1] - pg_start;
  const int kv_len = npages > 0 ? (npages - 1) * p.page_size + p.last_page_len[g] : 0;

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
  int pg[NR];  // page id (or -1) for rows of tile `pg_tile`
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
    const int stage = t % STAGES;
    T* ks = kv_s + stage * 2 * TILE_KV * D;
    T* vs = ks + TILE_KV * D;
    const int kbase = k_begin + t * TILE_KV;
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      const int r = rbase + i * RSTEP;
      const int kpos = kbase + r;
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
      cp_async16(smem_u32(ks + swz<D>(r, ch * 8)), ksrc, valid);
      cp_async16(smem_u32(vs + swz<D>(r, ch * 8)), vsrc, valid);
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

  // per-thread rows: lane/4 and lane/4 + 8 of this warp's m-tile
  int kmax[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int gr = row0 + wm * 16 + (lane >> 2) + h * 8;
    int lim = k_end;
    if (p.causal) {
      int qi = gr / G;
      lim = min(lim, kv_len - qo_len + qi + 1);
    }
    kmax[h] = lim;
  }
  const int kmax_min = min(kmax[0], kmax[1]);

  float o[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};

  uint32_t qf[Cfg::Q_IN_REGS ? KS : 1][4];
  // wait for Q (oldest group): groups committed so far = 1 + (STAGES-1)
  cp_async_wait<STAGES - 1>();
  __syncthreads();
  const int q_row_l = wm * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int q_col_l = (lane >> 4) * 8;
  if constexpr (Cfg::Q_IN_REGS) {
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
      ldmatrix_x4(qf[kk], smem_u32(q_s + swz<D>(q_row_l, kk * 16 + q_col_l)));
  }

  for (int t = 0; t < ntiles; ++t) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (t + STAGES - 1 < ntiles) {
      issue_tile(t + STAGES - 1);  // page ids fetched last iteration
      if (t + STAGES < ntiles) fetch_pages(t + STAGES);
    }
    cp_async_commit();

    const int stage = t % STAGES;
    const T* ks = kv_s + stage * 2 * TILE_KV * D;
    const T* vs = ks + TILE_KV * D;
    const int kofs = wk * NKW;

    // ---- S = Q K^T  (16 x NKW per warp)
    float s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kp = 0; kp < KS / 2; ++kp) {
      uint32_t b[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        ldmatrix_x4(b[nt], smem_u32(ks + swz<D>(kofs + nt * 8 + (lane & 7), kp * 32 + (lane >> 3) * 8)));
      if constexpr (Cfg::Q_IN_REGS) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma16816<T>(s[nt], qf[2 * kp], b[nt][0], b[nt][1]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma16816<T>(s[nt], qf[2 * kp + 1], b[nt][2], b[nt][3]);
      } else {
        uint32_t a0[4], a1[4];
        ldmatrix_x4(a0, smem_u32(q_s + swz<D>(q_row_l, (2 * kp) * 16 + q_col_l)));
        ldmatrix_x4(a1, smem_u32(q_s + swz<D>(q_row_l, (2 * kp + 1) * 16 + q_col_l)));
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma16816<T>(s[nt], a0, b[nt][0], b[nt][1]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma16816<T>(s[nt], a1, b[nt][2], b[nt][3]);
      }
    }

    // ---- scale, mask, online softmax (base 2)
    const int tile_k0 = k_begin + t * TILE_KV + kofs;
    const bool need_mask = tile_k0 + NKW > kmax_min;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * p.sm_scale_log2;
        if (need_mask) {
          int key = tile_k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
          if (key >= kmax[e >> 1]) x = kNegInf;
        }
        s[nt][e] = x;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = kNegInf;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
      float m_new = fmaxf(m[h], mx);
      float m_use = m_new == kNegInf ? 0.f : m_new;
      float alpha = ptx_exp2(m[h] - m_use);
      m[h] = m_new;
      float rs = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        float p0 = ptx_exp2(s[nt][2 * h] - m_use);
        float p1 = ptx_exp2(s[nt][2 * h + 1] - m_use);
        s[nt][2 * h] = p0;
        s[nt][2 * h + 1] = p1;
        rs += p0 + p1;
      }
      l[h] = l[h] * alpha + rs;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        o[dt][2 * h] *= alpha;
        o[dt][2 * h + 1] *= alpha;
      }
    }

    // ---- O += P V
#pragma unroll
    for (int kk = 0; kk < NKW / 16; ++kk) {
      uint32_t a[4];
      a[0] = TypeTraits<T>::pack(s[2 * kk][0], s[2 * kk][1]);
      a[1] = TypeTraits<T>::pack(s[2 * kk][2], s[2 * kk][3]);
      a[2] = TypeTraits<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = TypeTraits<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      const int vrow = kofs + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      constexpr int DP = D / 16;
      constexpr int DPB_MAX = WM == 1 ? 2 : 8;  // fragments loaded per batch (register budget)
      constexpr int DPB = DP > DPB_MAX ? DPB_MAX : DP;
#pragma unroll
      for (int db = 0; db < DP; db += DPB) {
        uint32_t b[DPB][4];
#pragma unroll
        for (int j = 0; j < DPB; ++j)
          ldmatrix_x4_trans(b[j], smem_u32(vs + swz<D>(vrow, (db + j) * 16 + (lane >> 4) * 8)));
#pragma unroll
        for (int j = 0; j < DPB; ++j) {
          mma16816<T>(o[2 * (db + j)], a, b[j][0], b[j][1]);
          mma16816<T>(o[2 * (db + j) + 1], a, b[j][2], b[j][3]);
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
  for (int h = 0; h < 2; ++h) {
    float lt = l[h];
    lt += __shfl_xor_sync(0xffffffff, lt, 1);
    lt += __shfl_xor_sync(0xffffffff, lt, 2);
    l[h] = lt;
  }
  {
    float* st = stg + (wk * ROWS) * SS;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int r = wm * 16 + (lane >> 2) + h * 8;
      float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        *reinterpret_cast<float2*>(st + r * SS + dt * 8 + (lane & 3) * 2) =
            make_float2(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
      }
    }
  }
  // lse staging: after the staging area (host computes the same offset)
  float* lse_stage = reinterpret_cast<float*>(smem_raw + (size_t)ROWS * D * 2 + (size_t)STG_BYTES);
  if ((lane & 3) == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int r = wm * 16 + (lane >> 2) + h * 8;
      lse_stage[wk * ROWS + r] = l[h] > 0.f ? m[h] + ptx_log2(l[h]) : kNegInf;
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
template <int D, int WM, int WK>
inline int level_smem(int stages_alloc) {
  constexpr int ROWS = 16 * WM;
  int kv = stages_alloc * 2 * 64 * D * 2;
  int stg = WK * ROWS * (D + 4) * 4;
  return ROWS * D * 2 + (kv > stg ? kv : stg) + WK * ROWS * 4;
}

}  // namespace cascade
}  // namespace fib
