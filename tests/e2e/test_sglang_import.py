"""The SGLang adapter against the real ``sglang==0.5.23`` modules (import level, CPU).

Runs ``sglang_checks.py`` in the engines venv (``bash tests/e2e/setup_engines.sh``), which
imports SGLang's sampler, renorm, layernorm and FlashInfer attention-backend modules, runs the
plugin's ``register()`` (twice), and exercises SGLang's own ``Sampler._sample_from_probs`` on
the pytorch and flashinfer backends and the ``fib`` backend. Skipped without the venv unless
``FIB_E2E_REQUIRED=1``. About 25 s.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
VENV = Path(os.environ.get("FIB_ENGINES_VENV", "/work/venv-vllm"))
PY = VENV / "bin" / "python"


@pytest.fixture(scope="module")
def result():
    if not PY.exists() or subprocess.run([str(PY), "-c", "import sglang"], capture_output=True,
                                         timeout=120).returncode != 0:
        if os.environ.get("FIB_E2E_REQUIRED") == "1":
            pytest.fail(f"FIB_E2E_REQUIRED=1 but no sglang in {VENV}")
        pytest.skip(f"no engines venv with sglang at {VENV}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIB_")}
    r = subprocess.run([str(PY), str(HERE / "sglang_checks.py")], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_every_target_reached_or_reported_missing(result):
    assert result["sglang_version"] == "0.5.23"
    assert result["unaccounted"] == []
    assert "sglang.srt.layers.sampler:top_k_top_p_min_p_sampling_from_probs_torch" in result["patched"]
    # the CUDA-only names (LazyImport set by the test as on CUDA) are patched; absent ones reported
    assert "sglang.srt.layers.sampler:top_k_top_p_sampling_from_probs" in result["patched"]
    assert any(m.startswith("sglang.srt.layers.layernorm:rmsnorm") for m in result["missing"])
    assert all(v == "imported" for v in result["modules"].values()), result["modules"]


def test_sampler_paths_dispatched_with_joint_semantics(result):
    assert result["pytorch_path_calls"] == ["top_k_top_p_sampling_from_probs_joint_v97"]
    assert result["flashinfer_path_calls"] == ["top_k_top_p_sampling_from_probs_joint_v97"]
    assert result["flashinfer_path_dtype"] == "torch.int32" and result["ids_dtype"] == "torch.int32"
    assert result["top1_is_argmax"]


def test_sampling_backend_fib_resolves_to_our_sampler(result):
    assert result["backend_choices_has_fib"] and result["parsed_backend"] == "fib"
    assert result["factory_registered"] and result["create_sampler"] == "FibSampler"
    assert result["fib_backend_calls"] == ["top_k_top_p_sampling_from_probs_joint_v97"]
    assert result["fib_ids_dtype"] == "torch.int32"
    # seeded (deterministic) requests run SGLang's own sampler, never ours
    assert result["seeded_calls"] == []


def test_batch_top_k_bound_noted_on_the_sampler_tensor(result):
    """The real SamplingBatchInfo, observed: the smallest requested top_k (300; -1 is TOP_K_ALL) is
    noted on top_ks; a batch with a top_k <= 128 gets no note; a merge takes the smaller bound and a
    filter keeps it (a lower bound of the kept rows); the fib backend dispatches that tensor."""
    h = result["hint"]
    assert h["new_values"] == [300, 1 << 30, 500] and h["new"] == 300
    assert h["small"] is None
    assert h["merged_values"] == [300, 1 << 30, 500, 200] and h["merged"] == 200
    assert h["filtered_values"] == [300, 200] and h["filtered"] == 200
    assert h["dispatched_same_tensor"] is True


def test_activation_waits_for_the_sampler(result):
    # register() in the main process patches nothing (the dispatcher and prometheus_client start
    # only where a sampler is built); create_sampler() -- each scheduler's ModelRunner -- activates
    assert result["patched_before_create"] is False
    assert result["created_plain"] == "Sampler"


def test_uninstrument_restores(result):
    assert result["restored"]


def test_pth_autoload_registers_in_a_real_sglang_process(tmp_path):
    """The ``.pth`` hook (for SGLang without plugins): with FIB_ENABLE_APPLY=1, importing SGLang's
    sampler calls register() (marker line, ``fib`` backend); without it nothing of ours loads."""
    if not PY.exists():
        pytest.skip("no engines venv")
    src = Path(__file__).resolve().parents[2] / "adapters" / "sglang" / "fib_runtime_autoload.pth"
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / src.name).write_text(src.read_text())
    code = (
        "import site, sys; site.addsitedir(%r); sys.path.insert(0, %r); "
        "import sglang_checks as c; c.stub_torchvision(); "
        "loaded_before = 'fib_runtime' in sys.modules; "
        "import sglang.srt.layers.sampler as sm; "
        "print(loaded_before, 'fib' in sm._CUSTOM_SAMPLER_FACTORIES)" % (str(site_dir), str(HERE)))
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("FIB_")}
    for flag, expect in (("1", "True True"), (None, "False False")):
        marker = tmp_path / f"marker_{flag}.txt"
        env = dict(base_env, FIB_PLUGIN_MARKER=str(marker), SGLANG_PLUGINS="none_of_them")
        if flag:
            env["FIB_ENABLE_APPLY"] = flag
        r = subprocess.run([str(PY), "-c", code], capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        assert r.stdout.strip().splitlines()[-1] == expect, (flag, r.stdout, r.stderr[-2000:])
        if flag:
            assert "sglang register" in marker.read_text()
        else:
            assert not marker.exists()
