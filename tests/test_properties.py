"""Property tests (hypothesis): generated definitions, workloads and traces round-trip losslessly.

For every generated object: model -> dict equals the input (values, key order, unknown keys),
dict -> JSON -> model gives an equal model, and a dataset written with the store reads back the
same objects.
"""

import json
import keyword
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fib_runtime.schema import DTYPES, Definition, Trace, Workload, parse
from fib_runtime.store import Dataset

IDENT = st.text(string.ascii_lowercase + "_", min_size=1, max_size=8).filter(
    lambda s: s.isidentifier() and not keyword.iskeyword(s))
TEXT = st.text(min_size=0, max_size=20)
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                      st.floats(allow_nan=False, allow_infinity=False, width=32), TEXT)
JSON_VALUE = st.recursive(JSON_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(IDENT, inner, max_size=3)), max_leaves=6)
EXTRA_KEY = IDENT.map(lambda s: "x_" + s)  # never collides with a schema field


@st.composite
def definitions(draw):
    axis_names = draw(st.lists(IDENT, min_size=1, max_size=5, unique=True))
    axes = {}
    for a in axis_names:
        if draw(st.booleans()):
            axes[a] = {"type": "var"}
        else:
            axes[a] = {"type": "const", "value": draw(st.integers(0, 1 << 20))}
        if draw(st.booleans()):
            axes[a]["description"] = draw(TEXT)
    tensor_names = draw(st.lists(IDENT, min_size=2, max_size=6, unique=True))
    split = draw(st.integers(1, len(tensor_names) - 1))

    def spec():
        shape = draw(st.one_of(st.none(), st.lists(st.sampled_from(axis_names), max_size=3)))
        s = {"shape": shape, "dtype": draw(st.sampled_from(DTYPES))}
        if draw(st.booleans()):
            s["description"] = draw(TEXT)
        for k in draw(st.lists(EXTRA_KEY, max_size=2, unique=True)):
            s[k] = draw(JSON_VALUE)
        return s

    inputs = {n: spec() for n in tensor_names[:split]}
    outputs = {n: spec() for n in tensor_names[split:]}
    # every var axis must be bound by some shape: put the unused ones on the first input
    used = {a for s in list(inputs.values()) + list(outputs.values()) for a in (s["shape"] or [])}
    first = next(iter(inputs.values()))
    missing = [a for a in axis_names if axes[a]["type"] == "var" and a not in used]
    if missing:
        first["shape"] = (first["shape"] or []) + missing
    args = ", ".join(inputs)
    d = {"name": draw(IDENT), "op_type": draw(IDENT), "axes": axes, "inputs": inputs, "outputs": outputs,
         "reference": f"import torch\n\ndef run({args}):\n    return None\n"}
    optional = {
        "tags": st.lists(st.sampled_from(["status:verified", "fused", "model:x", "fi_api:a.b"]), max_size=3),
        "description": TEXT,
        "constraints": st.lists(st.sampled_from(["a == b + 1", "x > 0", "len(y) == 2"]), max_size=2),
    }
    for k, strat in optional.items():
        if draw(st.booleans()):
            d[k] = draw(strat)
    for k in draw(st.lists(EXTRA_KEY, max_size=2, unique=True)):
        d[k] = draw(JSON_VALUE)
    keys = draw(st.permutations(list(d)))
    return {k: d[k] for k in keys}


@st.composite
def workloads(draw):
    axes = draw(st.dictionaries(IDENT, st.integers(0, 1 << 31), max_size=4))
    kinds = st.one_of(
        st.just({"type": "random"}),
        st.builds(lambda v: {"type": "scalar", "value": v},
                  st.one_of(st.booleans(), st.integers(-2**40, 2**40),
                            st.floats(allow_nan=False, allow_infinity=False))),
        st.builds(lambda p, k: {"type": "safetensors", "path": f"./blob/workloads/{p}.safetensors",
                                "tensor_key": k}, IDENT, IDENT),
    )
    inputs = draw(st.dictionaries(IDENT, kinds, max_size=5))
    w = {"uuid": draw(st.uuids()).hex, "axes": axes, "inputs": inputs}
    keys = draw(st.permutations(list(w)))
    return {k: w[k] for k in keys}


def same(a, b) -> bool:
    """Equal values AND equal key order everywhere."""
    return a == b and json.dumps(a) == json.dumps(b)


@settings(max_examples=150, deadline=None)
@given(definitions())
def test_definition_round_trip(raw):
    d = parse(Definition, raw)
    out = d.to_dict()
    assert same(out, raw)
    again = parse(Definition, json.loads(d.to_json()))
    assert again == d and same(again.to_dict(), raw)
    pretty = parse(Definition, json.loads(d.to_json(indent=2)))
    assert same(pretty.to_dict(), raw)


@settings(max_examples=150, deadline=None)
@given(workloads())
def test_workload_round_trip(raw):
    w = parse(Workload, raw)
    assert same(w.to_dict(), raw)
    t = parse(Trace, {"definition": "d", "workload": raw, "solution": None, "evaluation": None})
    back = json.loads(t.to_json())
    assert same(back["workload"], raw)
    assert parse(Trace, back) == t


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(definitions(), st.lists(st.integers(0, 4096), min_size=1, max_size=4))
def test_store_round_trip(tmp_path_factory, raw, sizes):
    root = tmp_path_factory.mktemp("ds")
    ds = Dataset.open(root / "d", create=True)
    d = parse(Definition, raw)
    ds.add_definition(d)
    traces = []
    for i, n in enumerate(sizes):
        w = {"uuid": f"w{i}", "axes": {a: n for a in d.var_axes},
             "inputs": {name: {"type": "random"} if spec.shape is not None else {"type": "scalar", "value": n}
                        for name, spec in d.inputs.items()}}
        traces.append(parse(Trace, {"definition": d.name, "workload": w, "solution": None, "evaluation": None}))
    ds.add_workloads(traces)
    again = Dataset.open(root / "d")
    assert again.problems == []
    assert same(again.definitions[d.name].to_dict(), raw)
    assert [t.to_dict() for t in again.workloads_for(d.name)] == [t.to_dict() for t in traces]
