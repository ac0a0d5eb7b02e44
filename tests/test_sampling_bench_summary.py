"""benchmarks/sampling.py's acceptance summary (issue 5): the counts and misses per criterion, from a
synthetic grid and from a stored H100 grid (no GPU needed)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("fib_bench_sampling", REPO / "benchmarks" / "sampling.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(B, V, k, probs, fi_probs, logits, fi_logits, cake, sm_cake, joint, fi_joint):
    return {"B": B, "V": V, "logits": "peaked", "k": k, "ours_probs": probs, "fi_best_probs": fi_probs,
            "ratio_probs_vs_fi_best": probs / fi_probs, "ours_logits": logits, "fi_best_logits": fi_logits,
            "ratio_logits_vs_fi_best": logits / fi_logits, "fi_cake_probs": cake,
            "fi_softmax_cake": sm_cake, "ratio_logits_vs_softmax_cake": logits / sm_cake if sm_cake else None,
            "ours_logits_joint": joint, "ratio_joint_vs_fi": joint / fi_joint, "ours_logits_over_floor": 1.0}


def test_summary_counts_each_criterion_and_names_the_misses():
    m = _bench()
    grid = [
        _row(64, 128256, 50, 21.2, 21.0, 21.0, 66.0, 21.0, 66.0, 26.0, 160.0),  # probs 1.0095x cake; goal 1.0 ok
        _row(64, 32000, 50, 10.0, 10.4, 11.0, 24.0, 10.4, 24.0, 12.0, 44.0),  # goal missed 1.058
        _row(1, 32000, 2048, 15.0, 31.0, 15.5, 45.0, None, None, 12.0, 21.0),  # 2.07x / 2.90x
        _row(512, 128256, 2048, 150.0, 770.0, 150.0, 1080.0, None, None, 190.0, 570.0),  # 5.13x / 7.2x
    ]
    acc = m.acceptance(grid, [])
    assert [p["ratio"] for p in acc["slower_probs"]] == [1.01]
    assert acc["slower_logits"] == [] and acc["slower_joint"] == []
    assert acc["k_gt_1024_points_probs"] == 2
    assert [(p["B"], p["V"]) for p in acc["k_gt_1024_below_5x_probs"]] == [(1, 32000)]
    assert [(p["B"], p["V"], p["ratio"]) for p in acc["logits_goal_missed"]] == [(64, 32000, 1.058)]
    assert acc["logits_goal_points"] == 2
    assert acc["logits_at_most_half_of_softmax_cake"] is True
    host = {"host_enqueue_us": {"ours top_k_top_p_from_logits (tensors, out=, seed/offset tensors)": 6.9}}
    text = "\n".join(m.summary_lines(acc, host))
    assert "| no grid point slower than FlashInfer's best, from probs | not slower: 3/4; misses: B=64 V=128256" in text
    assert "from logits | not slower: 4/4 | yes |" in text
    assert "from probs | at least 5x: 1/2; misses: B=1 V=32000 peaked k=2048 2.067 | **no** |" in text
    assert "| host cost of one whole call <= 10 us | 6.90 us enqueue" in text and text.count("**no**") == 4


def test_summary_of_the_stored_h100_grid_matches_its_table():
    m = _bench()
    stored = json.loads((REPO / "benchmarks" / "results" / "sampling_h100_push_swizzle.json").read_text())
    acc = m.acceptance(stored["grid"], stored["extra"])
    # the grid's own rows: 60 points, every k=2048 point from logits at V >= 128256 at least 5x
    assert acc["grid_points"] == 60
    below = acc["k_gt_1024_below_5x_logits"]
    assert below and all(p["V"] == 32000 for p in below)
    assert len(acc["k_gt_1024_below_5x_probs"]) == acc["k_gt_1024_points_probs"] - 11
    assert acc["slower_logits"] == [] and acc["slower_joint"] == []
    lines = m.summary_lines(acc, stored["host_cost_us"])
    assert lines[0] == "## Acceptance summary (issue 5)" and len(lines) == 4 + 3 + 1 + 2 + 2 + 1 + 1 + 1


def test_summary_names_the_5x_misses_below_the_k50_samplers():
    # (H100 grid of 2372ecb: every k = 2048 miss from probs at V = 32000 would have to beat our k = 50
    # sampler and cake's; no miss from logits would have to beat ours)
    m = _bench()
    stored = json.loads((REPO / "benchmarks" / "results" / "sampling_h100_append_ge.json").read_text())
    acc = m.acceptance(stored["grid"], stored["extra"])
    lt = acc["k_gt_1024_5x_below_k50_probs"]
    assert len(lt) == 10 and {p["V"] for p in lt} == {32000} and all(p["ratio"] < 1 for p in lt)
    assert acc["k_gt_1024_5x_below_k50_logits"] == []
    text = "\n".join(m.summary_lines(acc, stored["host_cost_us"]))
    assert "| (5x misses from probs where 5x is below ours and cake's k = 50 time, same B, V, logits) | 10/19 (" in text
    assert "| (5x misses from logits where 5x is below ours k = 50 time, same B, V, logits) | 0/10 | |" in text
