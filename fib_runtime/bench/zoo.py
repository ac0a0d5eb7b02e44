"""A zoo of python solutions with known verdicts, for any value-returning definition.

Each wraps the definition's own reference (so it works at any shape) and breaks it in one way.
Used by the tests and by ``benchmarks/run_fib_bench_gpu.sh --quick`` as a self-check of the
runner on the real device::

    for name, (solution, expected_status) in zoo(definition).items(): ...

Entries: ``correct`` (PASSED), ``wrong`` (values off: INCORRECT_NUMERICAL), ``raises``
(RUNTIME_ERROR), ``hangs`` (TIMEOUT), ``wrong_shape`` (INCORRECT_SHAPE), ``wrong_dtype``
(INCORRECT_DTYPE), ``syntax`` (COMPILE_ERROR), ``crashes`` (the process dies: RUNTIME_ERROR),
``mutates_input`` (writes into an input: INCORRECT_NUMERICAL), and two destination-passing ones,
``dps_correct`` (PASSED) and ``dps_overflow`` (writes past its output: INCORRECT_NUMERICAL).
For sampling definitions ``wrong`` samples without the filter and ``biased`` always returns
the most likely token (inside the support, wrong distribution: INCORRECT_NUMERICAL by TVD).
"""

from __future__ import annotations

from typing import Dict, Tuple

from ..schema import Solution

def _src(body: str, definition) -> str:
    # the reference is embedded (no sibling module: ``_ref`` would be shared between solutions)
    return ("import os, time, torch\n\n_NS = {}\n"
            f"exec(compile({definition.reference!r}, '<reference>', 'exec'), _NS)\n"
            f"_ref = _NS[{definition.reference_entry!r}]\n\n" + body)


def _first(expr: str) -> str:
    # apply expr to the first (or only) output, keep the others
    return ("def run(*args):\n    out = _ref(*args)\n"
            "    if isinstance(out, (tuple, list)):\n"
            f"        o = out[0]\n        return ({expr},) + tuple(out[1:])\n"
            f"    o = out\n    return {expr}\n")


def zoo(definition, include=None) -> Dict[str, Tuple[Solution, str]]:
    outs = list(definition.outputs.values())
    dt = outs[0].dtype
    is_float = "float" in dt
    sampling = definition.op_type == "sampling" and not is_float
    other_dtype = "torch.float64" if dt == "float32" else ("torch.float32" if is_float else "torch.int32" if dt == "int64" else "torch.int64")
    if sampling:
        lead = "probs" if "probs" in definition.inputs else "logits"
        li = list(definition.inputs).index(lead)
        wrong = ("def run(*args):\n"
                 f"    x = args[{li}].float()\n"
                 + ("    x = torch.softmax(x, -1)\n" if lead == "logits" else "")
                 + "    return torch.multinomial(x, 1).reshape(-1).to(torch.int64)\n")
        biased = (f"def run(*args):\n    return args[{li}].float().argmax(-1).to(torch.int64)\n")
    else:
        wrong = _first("o * 1.5 + 0.25" if is_float else "o + 1")
        biased = None
    bodies = {
        "correct": ("def run(*args):\n    return _ref(*args)\n", "PASSED"),
        "wrong": (wrong, "INCORRECT_NUMERICAL"),
        "raises": ("def run(*args):\n    raise RuntimeError('deliberate failure of the zoo')\n", "RUNTIME_ERROR"),
        "hangs": ("def run(*args):\n    while True:\n        time.sleep(0.05)\n", "TIMEOUT"),
        "wrong_shape": (_first("o.reshape(-1)[:-1]" if outs[0].shape else "o.reshape(1, 1)"), "INCORRECT_SHAPE"),
        "wrong_dtype": (_first(f"o.to({other_dtype})"), "INCORRECT_DTYPE"),
        "syntax": ("def run(*args) return _ref(*args)\n", "COMPILE_ERROR"),
        "crashes": ("def run(*args):\n    os._exit(7)\n", "RUNTIME_ERROR"),
        "mutates_input": ("def run(*args):\n    out = _ref(*args)\n    t = [a for a in args if torch.is_tensor(a) and a.numel() > 0][0]\n"
                          "    t.view(-1)[0] = t.view(-1)[0] + 1\n    return out\n", "INCORRECT_NUMERICAL"),
    }
    if biased is not None:
        bodies["biased"] = (biased, "INCORRECT_NUMERICAL")
    n_in = len(definition.inputs)
    dps_copy = "".join(f"    args[{n_in + i}].copy_(res[{i}])\n" for i in range(len(outs)))
    dps_head = (f"def run(*args):\n    res = _ref(*args[:{n_in}])\n"
                "    res = res if isinstance(res, (tuple, list)) else (res,)\n")
    if not sampling:
        bodies["dps_correct"] = (dps_head + dps_copy, "PASSED")
        bodies["dps_overflow"] = (dps_head + dps_copy +
                                  f"    o = args[{n_in}]\n    torch.as_strided(o, (o.numel() + 8,), (1,)).view(-1)[-1:] = 7\n",
                                  "INCORRECT_NUMERICAL")
    out: Dict[str, Tuple[Solution, str]] = {}
    for name, (body, status) in bodies.items():
        if include and name not in include:
            continue
        sol = Solution.model_validate({
            "name": f"zoo_{name}_{definition.name}", "definition": definition.name, "author": "zoo",
            "spec": {"language": "python", "target_hardware": ["cpu", "cuda"], "entry_point": "main.py::run",
                     "dependencies": [], "destination_passing_style": name.startswith("dps_")},
            "sources": [{"path": "main.py", "content": _src(body, definition)}],
            "description": f"zoo solution '{name}': expected {status}",
        })
        out[name] = (sol, status)
    return out
