"""Regenerate the FlashInfer 0.7.2 dialect samples in tests/data/ (needs flashinfer-python 0.7.2).

    python tests/data/make_flashinfer_dumps.py

Writes, with FlashInfer's own emitter (``<api>.fi_trace(save_dir=...)``, the code behind
``FLASHINFER_TRACE_DUMP=1``; no GPU needed):
- ``flashinfer_dump/``: a flat dump folder of 11 definitions traced with concrete CPU tensors
  (sampling, rmsnorm, fused_add_rmsnorm, merge_state, merge_state_in_place) plus the cases the
  format doc lists: a ``top_k`` passed as a Python int (dtype ``unknown``) and a call without
  arguments (const axis without value);
- ``flashinfer_templates_0.7.2.tar.xz``: every registered trace template traced without
  arguments (201 definitions), as ``templates/<name>.json``.
- ``flashinfer_apply/solutions/``: solutions built with ``flashinfer.trace.solution.Solution``
  and written with its ``to_dict()`` (``json.dumps(..., indent=2)``): a ``cutedsl`` one with an
  empty secondary source, and a hand-trimmed one without ``destination_passing_style`` (which
  FlashInfer reads as ``False``).
The definitions are byte-for-byte what FlashInfer wrote (``json.dumps(result, indent=2)``, no newline).
"""

from __future__ import annotations

import importlib
import io
import shutil
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def concrete(out: Path) -> None:
    import torch
    import flashinfer.cascade as c
    import flashinfer.norm as n
    import flashinfer.sampling as s

    B, V = 4, 128256
    probs = torch.rand(B, V)
    k = torch.full((B,), 50, dtype=torch.int32)
    p = torch.full((B,), 0.9)
    bf = dict(dtype=torch.bfloat16)
    s.top_k_sampling_from_probs.fi_trace(save_dir=out, probs=probs, top_k=k)
    s.top_k_sampling_from_probs.fi_trace(save_dir=out, name="top_k_sampling_int_top_k_v128256",
                                         probs=probs, top_k=50)
    s.top_k_sampling_from_probs.fi_trace(save_dir=out)  # no arguments: const axis without value
    s.top_p_sampling_from_probs.fi_trace(save_dir=out, probs=torch.rand(B, 151936), top_p=p)
    s.top_k_top_p_sampling_from_probs.fi_trace(save_dir=out, probs=probs, top_k=k, top_p=p)
    s.min_p_sampling_from_probs.fi_trace(save_dir=out, probs=probs, min_p=p)
    s.sampling_from_probs.fi_trace(save_dir=out, probs=probs)
    n.rmsnorm.fi_trace(save_dir=out, input=torch.randn(3, 4096, **bf), weight=torch.randn(4096, **bf))
    n.fused_add_rmsnorm.fi_trace(save_dir=out, input=torch.randn(3, 4096, **bf),
                                 residual=torch.randn(3, 4096, **bf), weight=torch.randn(4096, **bf))
    h = dict(dtype=torch.float16)
    c.merge_state.fi_trace(save_dir=out, v_a=torch.randn(5, 32, 128, **h), s_a=torch.randn(5, 32),
                           v_b=torch.randn(5, 32, 128, **h), s_b=torch.randn(5, 32))
    c.merge_state_in_place.fi_trace(save_dir=out, v=torch.randn(5, 32, 128, **h), s=torch.randn(5, 32),
                                    v_other=torch.randn(5, 32, 128, **h), s_other=torch.randn(5, 32))


def solutions(out: Path) -> None:
    import json

    from flashinfer.trace.solution import BuildSpec, Solution, SourceFile

    out.mkdir(parents=True)
    a = Solution(name="cute_top_k_v128256", definition="top_k_sampling_v128256", author="bob",
                 spec=BuildSpec(language="cutedsl", target_hardware=["sm90"], entry_point="kernel.py::run"),
                 sources=[SourceFile("kernel.py", "import torch\n\ndef run(probs, top_k):\n"
                                                  "    return torch.argmax(probs, dim=-1)\n"),
                          SourceFile("notes.txt", "")],
                 description="written by flashinfer.trace.solution.Solution.to_dict")
    (out / "cute_top_k_v128256.json").write_text(json.dumps(a.to_dict(), indent=2))
    b = Solution(name="py_rmsnorm_h4096", definition="rmsnorm_h4096", author="bob",
                 spec=BuildSpec(language="python", target_hardware=["sm90"], entry_point="main.py::run"),
                 sources=[SourceFile("main.py", "def run(input, weight, eps=1e-6):\n    return input\n")])
    d = b.to_dict()
    del d["spec"]["destination_passing_style"]  # a file written without the key
    (out / "py_rmsnorm_h4096.json").write_text(json.dumps(d, indent=2))


def all_templates(out: Path) -> int:
    import flashinfer
    from flashinfer import api_logging as al

    base = Path(flashinfer.__file__).parent
    for f in sorted(base.iterdir()):  # importing the API modules registers their templates
        if f.suffix == ".py" and not f.name.startswith("_"):
            mod = f.stem
        elif f.is_dir() and (f / "__init__.py").exists() and f.name not in ("jit", "moe_ep", "data"):
            mod = f.name
        else:
            continue
        try:
            importlib.import_module(f"flashinfer.{mod}")
        except Exception:
            pass
    for func, tpl, _label in al._TRACE_REGISTRY:
        tpl.build_fi_trace_fn(al._trace_fi_api_for(func))(save_dir=out)
    return len(list(out.glob("*.json")))


def main() -> None:
    dump = HERE / "flashinfer_dump"
    if dump.exists():
        shutil.rmtree(dump)
    dump.mkdir()
    concrete(dump)
    apply = HERE / "flashinfer_apply"
    if apply.exists():
        shutil.rmtree(apply)
    solutions(apply / "solutions")
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp) / "templates"
        t.mkdir()
        n = all_templates(t)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:xz", preset=9) as tf:
            for f in sorted(t.glob("*.json")):
                info = tarfile.TarInfo(f"templates/{f.name}")
                data = f.read_bytes()
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tf.addfile(info, io.BytesIO(data))
        (HERE / "flashinfer_templates_0.7.2.tar.xz").write_bytes(buf.getvalue())
    print(f"{len(list(dump.glob('*.json')))} concrete dumps, {n} template dumps")


if __name__ == "__main__":
    main()
