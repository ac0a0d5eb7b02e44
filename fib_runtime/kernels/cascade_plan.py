"""Host-side planning of fib's cascade attention: row tiles, KV splits, pipeline stages, shared
memory and the work lists of one level (pure Python, no GPU; :mod:`.cascade` runs the plans).
The per-level choices are checked by ``tests/test_cascade_api.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Sequence, Tuple

TILE_KV = 64
SUPPORTED_HEAD_DIMS = (64, 128, 256)
MAX_SPLITS = 128


@dataclass
class LevelPlan:
    """Host-side plan of one level (pure data; built by :func:`plan_level`)."""

    tile_rows: int
    work_group: List[int]
    work_row: List[int]
    num_splits: int
    kv_chunk: int
    stages_alloc: int
    max_kv_len: int
    kv_lens: List[int] = field(default_factory=list)
    qo_lens: List[int] = field(default_factory=list)

    @property
    def num_items(self) -> int:
        return len(self.work_group)


def tile_kv(head_dim: int, tile_rows: int) -> int:
    """Keys per KV tile of a kernel config (128-row tiles at head_dim 128 walk 32-key tiles)."""
    return 32 if (tile_rows == 128 and head_dim == 128) else TILE_KV


def max_stages(head_dim: int, tile_rows: int = 64) -> int:
    if tile_rows == 128 and head_dim == 128:
        return 4
    return 3 if head_dim <= 128 and tile_rows != 128 else 2


# Tuning knobs (benchmarks flip them to compare variants; defaults are what the plans use).
TUNING = {"max_tile_rows": 128}

# registers per thread of each (head_dim, tile_rows) kernel (ptxas, sm_90), for CPU-side planning
_REGS = {64: {16: 128, 32: 142, 64: 163, 128: 200}, 128: {16: 128, 32: 210, 64: 237, 128: 255},
         256: {16: 241, 32: 255, 64: 255}}


def default_ctas_per_sm(head_dim: int, tile_rows: int, stages_alloc: int) -> int:
    """Resident CTAs per SM estimate (H100/H200: 227 KB smem, 64K registers) when no GPU."""
    r = _REGS[head_dim][tile_rows]
    by_regs = 65536 // (((r + 7) // 8) * 8 * 128)
    by_smem = (228 * 1024) // (level_smem_bytes(head_dim, tile_rows, stages_alloc) + 1024)
    return max(1, min(by_regs, by_smem, 16))


def level_smem_bytes(head_dim: int, tile_rows: int, stages_alloc: int) -> int:
    wk = 1 if tile_rows >= 64 else 64 // tile_rows
    kv = stages_alloc * 2 * tile_kv(head_dim, tile_rows) * head_dim * 2
    stg = wk * tile_rows * (head_dim + 4) * 4
    return tile_rows * head_dim * 2 + max(kv, stg) + wk * tile_rows * 4


def choose_tile_rows(max_rows: int, head_dim: int = 128) -> int:
    """Rows (query x head-in-group pairs) per CTA tile: 16, 32, 64 or 128 (head_dim <= 128)."""
    if max_rows > 64 and head_dim <= 128 and TUNING.get("max_tile_rows", 128) >= 128:
        return 128
    if max_rows > 32:
        return 64
    if max_rows > 16:
        return 32
    return 16


def choose_splits(base_ctas: int, tiles: int, cap: int, max_splits: int = MAX_SPLITS) -> Tuple[int, int]:
    """(num_splits, tiles per split) minimising waves x tiles-per-CTA (ties: fewer splits)."""
    if tiles <= 0 or base_ctas <= 0:
        return 1, 1
    cap = max(1, cap)
    best = None
    for s in range(1, min(tiles, max_splits) + 1):
        per = -(-tiles // s)
        s_eff = -(-tiles // per)
        waves = -(-(base_ctas * s_eff) // cap)
        # per-CTA fixed cost (prologue, epilogue, fp32 partial write) ~ 2 tiles; merge of splits
        cost = waves * (per + 2) + (0.5 if s_eff > 1 else 0.0)
        if best is None or cost < best[0] - 1e-9:
            best = (cost, s_eff, per)
    return best[1], best[2]


def plan_level(
    qo_indptr: Sequence[int],
    kv_indptr: Sequence[int],
    last_page_len: Sequence[int],
    page_size: int,
    group_size: int,
    num_kv_heads: int,
    head_dim: int,
    num_sms: int = 132,
    ctas_per_sm=None,
    causal: bool = False,
) -> LevelPlan:
    """Pure-Python plan of one level: tile config, work list, KV split."""
    n = len(qo_indptr) - 1
    if n < 0 or len(kv_indptr) != n + 1 or len(last_page_len) < n:
        raise ValueError(
            f"level arrays disagree: len(qo_indptr)={len(qo_indptr)}, len(kv_indptr)={len(kv_indptr)}, "
            f"len(last_page_len)={len(last_page_len)} (need batch+1, batch+1, batch)"
        )
    qo_lens, kv_lens = [], []
    for g in range(n):
        ql = int(qo_indptr[g + 1]) - int(qo_indptr[g])
        npg = int(kv_indptr[g + 1]) - int(kv_indptr[g])
        if ql < 0 or npg < 0:
            raise ValueError(f"indptr must be non-decreasing (request {g})")
        if npg > 0:
            lp = int(last_page_len[g])
            if not (1 <= lp <= page_size):
                raise ValueError(f"last_page_len[{g}]={lp} outside [1, page_size={page_size}]")
            kl = (npg - 1) * page_size + lp
        else:
            kl = 0
        qo_lens.append(ql)
        kv_lens.append(kl)
    rows = [q * group_size for q in qo_lens]
    max_rows = max(rows) if rows else 0
    tile_rows = choose_tile_rows(max_rows, head_dim)
    wg, wr = [], []
    for g in range(n):
        for r0 in range(0, rows[g], tile_rows):
            wg.append(g)
            wr.append(r0)
    active_kv = [kv_lens[g] for g in range(n) if qo_lens[g] > 0]
    max_kv = max(active_kv) if active_kv else 0
    tiles = -(-max_kv // TILE_KV)  # 64-key units: kv_chunk stays a multiple of 64
    base = len(wg) * num_kv_heads
    if tiles == 0:
        splits, per = 1, 1
        stages = 1
    else:
        st_guess = min(max_stages(head_dim, tile_rows), tiles * (TILE_KV // tile_kv(head_dim, tile_rows)))
        occ = ctas_per_sm(head_dim, tile_rows, st_guess) if callable(ctas_per_sm) else (
            ctas_per_sm or default_ctas_per_sm(head_dim, tile_rows, st_guess))
        splits, per = choose_splits(base, tiles, num_sms * occ)
        stages = min(max_stages(head_dim, tile_rows), per * (TILE_KV // tile_kv(head_dim, tile_rows)))
    return LevelPlan(
        tile_rows=tile_rows,
        work_group=wg,
        work_row=wr,
        num_splits=splits,
        kv_chunk=per * TILE_KV,
        stages_alloc=max(1, stages),
        max_kv_len=max_kv,
        kv_lens=kv_lens,
        qo_lens=qo_lens,
    )


def _work_info(pl: LevelPlan, qo_indptr: Sequence[int], kv_indptr: Sequence[int]) -> List[List[int]]:
    """Per work item: qo_start, qo_len, first page slot, kv_len, first row, 0, 0, 0 (int32)."""
    return [[int(qo_indptr[g]), pl.qo_lens[g], int(kv_indptr[g]), pl.kv_lens[g], r0, 0, 0, 0]
            for g, r0 in zip(pl.work_group, pl.work_row)]
