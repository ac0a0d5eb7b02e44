"""Generated Definitions: valid for the data model, references run, names parse back."""

from __future__ import annotations

import pytest
import torch

from fib_runtime.definitions import generate, norm, sampling
from fib_runtime.reference import compile_reference
from fib_runtime.schema import Definition


@pytest.mark.parametrize("vocab", [111, 32000, 128256])
@pytest.mark.parametrize("kind", sorted(sampling.KINDS))
def test_sampling_definitions_valid_and_run(kind, vocab):
    name = sampling.name(kind, vocab)
    assert sampling.parse_name(name) == (kind, vocab)
    d = Definition.model_validate(generate(name))
    assert d.name == name and d.op_type == "sampling"
    if vocab > 32000:
        return
    run = compile_reference(d)
    B = 5
    logits = torch.randn(B, vocab)
    vals = {"probs": logits.softmax(-1), "logits": logits,
            "top_k": torch.tensor([1, 5, 0, vocab, 50], dtype=torch.int32),
            "top_p": torch.tensor([0.5, 0.9, 1.0, 0.0, 0.3]), "min_p": torch.full((B,), 0.1)}
    out = run(*[vals[n] for n in d.inputs])
    spec = next(iter(d.outputs.values()))
    if spec.dtype == "int64":
        assert out.dtype == torch.int64 and out.shape == (B,)
        assert int(out.min()) >= 0 and int(out.max()) < vocab
        if "top_k" in d.inputs and "logits" not in d.inputs:
            # top_k = 1 keeps exactly the argmax
            assert int(out[0]) == int(vals["probs"][0].argmax())
    else:
        assert out.shape == (B, vocab)


def test_sampling_top_k_first_vs_joint_differ():
    p = torch.tensor([[0.5, 0.3, 0.2]])
    k, pp = torch.tensor([2], dtype=torch.int32), torch.tensor([0.6])
    first = compile_reference(Definition.model_validate(sampling.definition("top_k_top_p_sampling_from_probs", 3)))
    joint = compile_reference(Definition.model_validate(sampling.definition("top_k_top_p_sampling_from_probs_joint", 3)))
    torch.manual_seed(0)
    a = {int(first(p, k, pp)) for _ in range(200)}
    b = {int(joint(p, k, pp)) for _ in range(200)}
    # top_k_first renormalises to {0.625, 0.375}: the mass before token 1 (0.625) exceeds 0.6,
    # so only token 0; joint keeps token 1 (mass before it, 0.5, is within 0.6)
    assert a == {0} and b == {0, 1}


@pytest.mark.parametrize("kind", norm.KINDS)
def test_norm_definitions(kind):
    d = Definition.model_validate(generate(f"{kind}_h64"))
    run = compile_reference(d)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    args = [x, torch.randn(3, 64, dtype=torch.bfloat16)] if kind != "rmsnorm" else [x]
    out = run(*args, torch.ones(64, dtype=torch.bfloat16))
    assert out.shape == (3, 64) and out.dtype == torch.bfloat16


def test_public_fixture_names_agree():
    # the public dataset's sampling definitions use the same names and input contract
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "flashinfer-trace" / "definitions"
    if not root.exists():
        pytest.skip("no shared fixtures")
    for f in (root / "sampling").glob("*.json"):
        pub = json.loads(f.read_text())
        ours = generate(pub["name"])
        assert ours is not None, pub["name"]
        assert list(ours["inputs"]) == list(pub["inputs"])
        assert {k: v["dtype"] for k, v in ours["inputs"].items()} == {k: v["dtype"] for k, v in pub["inputs"].items()}
        assert list(ours["outputs"]) == list(pub["outputs"])
    for f in (root / "rmsnorm").glob("*.json"):
        pub = json.loads(f.read_text())
        ours = generate(pub["name"])
        assert list(ours["inputs"]) == list(pub["inputs"]) and ours["axes"] == {
            k: {kk: vv for kk, vv in v.items() if kk != "description"} for k, v in pub["axes"].items()}


def test_unknown_names():
    assert generate("gemm_n128_k2048") is None
    assert generate("top_k_sampling_from_probs_vX") is None
