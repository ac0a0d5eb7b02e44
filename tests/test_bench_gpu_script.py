"""CPU rehearsal of benchmarks/run_fib_bench_gpu.sh's Python half, with the fake FlashInfer of
tests/fakes: the traced run (adapter + tracer) records every definition the GPU run benches, the
FlashInfer baselines of those definitions are generated, and a slice of the bench + report runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory, request):
    fake = _load("fib_bench_fake_flashinfer", ROOT / "tests" / "fakes" / "fake_flashinfer.py")
    gpu = _load("fib_bench_gpu_helpers", ROOT / "benchmarks" / "fib_bench_gpu.py")
    tmp = tmp_path_factory.mktemp("gpu_script")
    ds = str(tmp / "dataset")
    import os

    saved = {k: os.environ.get(k) for k in ("FIB_ENABLE_TRACING", "FIB_ENABLE_APPLY", "FIB_TRACE_PATH")}
    ctx = fake.installed()
    ctx.__enter__()
    try:
        try:
            info = gpu.record(ds, True, dev="cpu", vocabs=[256], tiny=True)
        except Exception as e:  # the adapter/tracer are other owners' code: say what broke
            pytest.fail(f"traced run failed: {type(e).__name__}: {e}")
        from fib_runtime.bench import BenchConfig, SamplingConfig, run_bench

        summary = run_bench(ds, definitions=["merge_state_*", "top_k_top_p_sampling_from_probs_*"],
                            cfg=BenchConfig(warmup=1, iterations=2, trials=1, cpu_threads=1,
                                            sampling=SamplingConfig(support_trials=3, tvd_samples=1000)),
                            devices="cpu:0", inline=True, progress=False, baseline="on", reference=True)
    finally:
        ctx.__exit__(None, None, None)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        try:
            import fib_runtime.tracer as tracer

            tracer.disable()
        except Exception:
            pass
    return gpu, ds, info, summary, tmp


def test_traced_run_records_every_definition(rehearsal):
    gpu, ds, info, summary, tmp = rehearsal
    want = {f"{k}_v256" for k in gpu.SAMPLING_KINDS} | {"merge_state_h32_d128",
                                                         "multi_level_cascade_run_h32_kv8_d128_ps16"}
    assert want <= {n for n, c in info["workloads"].items() if c > 0}, info
    assert not info["errors"], info["errors"]
    assert info["direct"] == [], "the adapter should have recorded these: " + ", ".join(info["direct"])


def test_baselines_exist_for_the_gpu_definitions(rehearsal):
    from fib_runtime.bench.extras import baseline_solution
    from fib_runtime.store import Dataset

    gpu, ds, info, summary, tmp = rehearsal
    d = Dataset.open(ds)
    for name, defn in d.definitions.items():
        s = baseline_solution(defn)
        assert s is not None, name
        compile(s.sources[0].content, name, "exec")


def test_bench_report_summary(rehearsal):
    from fib_runtime.bench.report import build_report

    gpu, ds, info, summary, tmp = rehearsal
    got = {(t.definition, t.solution): t.evaluation.status.value for t in summary.traces}
    assert got and all(v == "PASSED" for (dn, sn), v in got.items() if sn.startswith("reference_")), got
    assert any(sn.startswith("flashinfer_baseline_") and v == "PASSED" for (dn, sn), v in got.items())
    build_report(ds, tmp / "report")
    gpu.summary(ds, str(tmp / "report"), str(tmp / "summary.json"))
    s = json.loads((tmp / "summary.json").read_text())
    assert "merge_state_h32_d128" in s["definitions"]
