"""The statistical sampling evaluator: support check, TVD vs the exact filtered distribution."""

from __future__ import annotations

import uuid

import pytest
import torch

from fib_runtime.bench import BenchConfig, SamplingConfig, run_bench
from fib_runtime.bench.sampling_eval import evaluate_sampling, exact_distribution, filter_kind
from fib_runtime.bench.zoo import zoo
from fib_runtime.definitions import sampling
from fib_runtime.reference import compile_reference
from fib_runtime.schema import Definition, Trace
from fib_runtime.store import Dataset

SMALL = SamplingConfig(support_trials=10, tvd_samples=4000, tvd_max_rows=1024)


def _defn(kind, V=128):
    return Definition.model_validate(sampling.definition(kind, V))


def test_filter_kinds():
    assert filter_kind(_defn("top_k_top_p_sampling_from_probs")) == "top_k_top_p"
    assert filter_kind(_defn("top_k_top_p_sampling_from_probs_joint")) == "top_k_top_p_joint"
    assert filter_kind(_defn("top_p_sampling_from_probs")) == "top_p"
    assert filter_kind(_defn("min_p_sampling_from_probs")) == "min_p"
    assert filter_kind(_defn("sampling_from_logits")) == "none"


def test_exact_distribution_matches_reference_support():
    d = _defn("top_k_top_p_sampling_from_probs", 64)
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(3, 64, generator=g) * 3, -1)
    inputs = {"probs": probs, "top_k": torch.tensor([5, 0, 64], dtype=torch.int32),
              "top_p": torch.tensor([0.9, 0.5, 1.0])}
    q = exact_distribution(d, inputs)
    assert torch.allclose(q.sum(-1), torch.ones(3, dtype=torch.float64))
    assert int((q[0] > 0).sum()) <= 5
    assert int((q[2] > 0).sum()) == 64           # k >= V and p = 1: everything
    ref = compile_reference(d)
    seen = torch.stack([ref(**inputs) for _ in range(200)])
    for row in range(3):
        assert bool((q[row, seen[:, row]] > 0).all())   # reference samples lie in the exact support


@pytest.mark.parametrize("kind", ["top_p_sampling_from_probs", "top_k_top_p_sampling_from_logits"])
def test_zoo_samplers_judged(kind):
    d = _defn(kind, 128)
    g = torch.Generator().manual_seed(1)
    B = 4
    x = torch.randn(B, 128, generator=g) * 4
    inputs = {("probs" if "probs" in d.inputs else "logits"): (torch.softmax(x, -1) if "probs" in d.inputs else x)}
    if "top_k" in d.inputs:
        inputs["top_k"] = torch.tensor([10, 50, 0, 3], dtype=torch.int32)
    inputs["top_p"] = torch.tensor([0.5, 0.8, 0.9, 0.7])

    def as_call(src_solution):
        ns = {}
        exec(compile(src_solution.sources[0].content, "<zoo>", "exec"), ns)
        return lambda named: ns["run"](*named.values())

    z = zoo(d, include=["correct", "wrong", "biased"])
    ok = evaluate_sampling(d, as_call(z["correct"][0]), inputs, SMALL)
    assert ok.status == "PASSED", ok.message
    assert ok.extra["tvd"] < 0.2 and len(ok.extra["tvds_per_batch"]) == B
    assert ok.extra["tvd_noise"] < 0.1 and ok.extra["tvd_samples"] >= 4000
    wrong = evaluate_sampling(d, as_call(z["wrong"][0]), inputs, SMALL)
    assert wrong.status == "INCORRECT_NUMERICAL" and wrong.extra["reason"] == "sample_outside_support"
    biased = evaluate_sampling(d, as_call(z["biased"][0]), inputs, SMALL)
    assert biased.status == "INCORRECT_NUMERICAL" and biased.extra["tvd"] > 0.2


def test_large_support_uses_equal_mass_bins():
    d = _defn("top_p_sampling_from_probs", 2048)
    probs = torch.full((2, 2048), 1 / 2048)
    inputs = {"probs": probs, "top_p": torch.tensor([1.0, 1.0])}
    cfg = SamplingConfig(support_trials=2, tvd_samples=1500, tvd_max_rows=64, bins=16)
    good = evaluate_sampling(d, lambda n: torch.multinomial(n["probs"], 1).reshape(-1), inputs, cfg)
    assert good.status == "PASSED" and good.extra["tvd_mode"] == "bins"
    # mass only in the first half of the vocabulary: inside the support, badly weighted
    half = lambda n: torch.randint(0, 1024, (n["probs"].shape[0],))
    bad = evaluate_sampling(d, half, inputs, cfg)
    assert bad.status == "INCORRECT_NUMERICAL" and bad.extra["tvd"] > 0.4


def test_sampling_through_the_runner(tmp_path):
    ds = Dataset.open(tmp_path / "ds", create=True)
    d = _defn("top_k_sampling_from_probs", 96)
    ds.add_definition(d)
    # a fixed workload (its uuid seeds the random inputs) of 8 rows: with a fresh uuid4 and 3 rows,
    # ~7% of runs drew rows whose filtered distributions were concentrated enough for argmax
    # ("biased") to pass the TVD check
    ds.add_workloads([Trace.model_validate({"definition": d.name, "workload": {
        "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, "fib-runtime/test_sampling_through_the_runner")),
        "axes": {"batch_size": 8}, "inputs": {n: {"type": "random"} for n in d.inputs}}})])
    for s, _ in zoo(d, include=["correct", "biased", "wrong_dtype"]).values():
        ds.add_solution(s)
    summary = run_bench(ds, cfg=BenchConfig(warmup=1, iterations=2, trials=1, sampling=SMALL, cpu_threads=1), devices="cpu:0",
                        inline=True, progress=False, reference=True)
    got = {t.solution: t.evaluation for t in summary.traces}
    assert got[f"zoo_correct_{d.name}"].status.value == "PASSED"
    assert got[f"reference_{d.name}"].status.value == "PASSED"
    assert got[f"zoo_biased_{d.name}"].status.value == "INCORRECT_NUMERICAL"
    assert got[f"zoo_wrong_dtype_{d.name}"].status.value == "INCORRECT_DTYPE"
    extra = got[f"zoo_correct_{d.name}"].correctness.extra
    assert extra["tvd"] <= extra["tvd_bound"] == 0.2 and "tvds_per_batch" in extra
    assert (tmp_path / "ds" / "solutions" / "reference").is_dir()


def test_large_batch_measures_a_row_subset():
    d = _defn("top_k_sampling_from_probs", 64)
    g = torch.Generator().manual_seed(3)
    B = 40
    inputs = {"probs": torch.softmax(torch.randn(B, 64, generator=g) * 2, -1),
              "top_k": torch.full((B,), 8, dtype=torch.int32)}
    ref = compile_reference(d)
    cfg = SamplingConfig(support_trials=3, tvd_samples=3000, tvd_rows=4, tvd_max_rows=400)
    v = evaluate_sampling(d, lambda n: ref(*n.values()), inputs, cfg)
    assert v.status == "PASSED", v.message
    assert len(v.extra["tvds_per_batch"]) == 4 and v.extra["tvd_rows"][0] == 0 and v.extra["tvd_rows"][-1] == B - 1
