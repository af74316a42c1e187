"""`optsched solve`'s output at scale: Allocation.to_dict's vectorized rows and
the --json writer give exactly the text the plain versions give."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optsched.cli.json_out import dumps_indented
from optsched.model import Allocation, _positive_rows

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=6), st.sampled_from(["é", "\n", '"', "\\", "\ud800", "\x00", "💡"]))
KEYS = st.one_of(st.text(max_size=5), st.sampled_from(["é", "\n", '"']))
DOCS = st.recursive(SCALARS, lambda c: st.one_of(
    st.lists(c, max_size=4), st.lists(c, max_size=3).map(tuple),
    st.dictionaries(KEYS, c, max_size=4),
    st.dictionaries(st.one_of(st.integers(), st.floats(), st.booleans(), st.none()), SCALARS, max_size=3)), max_leaves=25)


@settings(max_examples=400, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(doc=DOCS, indent=st.sampled_from([2, 0, 4]))
def test_json_writer_is_json_dumps(doc, indent):
    """Byte for byte, except that non-finite float values are null (keys stay json's strings)."""
    def finite(o):
        if isinstance(o, float):
            return o if math.isfinite(o) else None
        if isinstance(o, dict):
            return {k: finite(v) for k, v in o.items()}
        return [finite(v) for v in o] if isinstance(o, (list, tuple)) else o

    assert dumps_indented(doc, indent=indent) == json.dumps(finite(doc), indent=indent)


def test_json_writer_hands_everything_else_to_json_dumps():
    class F(float):
        def __repr__(self):
            return "F"

    cyclic: list = []
    cyclic.append(cyclic)
    for doc in ({"a": np.float64(0.1), "b": [1, 2]}, {"a": {"b": F(1.5)}}, {("t",): 1}, {"a": [{("t",): 1}]}):
        try:
            want = json.dumps(doc, indent=2)
        except TypeError as e:
            with pytest.raises(TypeError, match=str(e)):
                dumps_indented(doc)
        else:
            assert dumps_indented(doc) == want
    for doc in ({"a": np.int64(1)}, {"a": [cyclic]}, {"a": {1: object()}}):
        with pytest.raises((TypeError, ValueError)) as got:
            dumps_indented(doc)
        with pytest.raises(type(got.value), match=str(got.value)):
            json.dumps(doc, indent=2)


def reference_rows(values, names):
    return [{t: float(values[m, j]) for j, t in enumerate(names) if values[m, j] > 0} for m in range(len(values))]


@pytest.mark.parametrize("seed", range(30))
def test_positive_rows_match_the_row_loop(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(0, 300)), int(rng.choice([1, 2, 3, 5, 8, 63, 64]))
    values = np.where(rng.random((n, k)) < 0.8, rng.choice([0.0, -0.0, -1.0, np.nan, np.inf, 1e-300, 0.5, 1.0], size=(n, k)), 0.0)
    values = np.where(rng.random((n, k)) < 0.5, rng.random((n, k)), values)
    names = tuple(f"t{j}" for j in range(k))
    got, want = _positive_rows(values, names), reference_rows(values, names)
    assert json.dumps(got) == json.dumps(want) and [list(d) for d in got] == [list(d) for d in want]
    assert all(type(x) is float for d in got for x in d.values())


def test_to_dict_of_integer_and_boolean_fractions():
    for frac in (np.array([[1, 0], [0, 2]]), np.array([[True, False], [True, True]])):
        a = Allocation("p", "optimal", 1.0, 0.0, ("a", "b"), ("x", "y"), frac, np.array([1, 2]))
        d = a.to_dict()
        assert d["allocation"] == {"a": {"x": 1.0}, "b": {k: v for k, v in zip(("x", "y"), frac[1].astype(float)) if v > 0}}
        assert json.dumps(d["allocation"]) == json.dumps({jid: {t: float(frac[m, j]) for j, t in enumerate(("x", "y"))
                                                                if frac[m, j] > 0} for m, jid in enumerate(("a", "b"))})
        assert d["effective_throughput"] == {"a": 1.0, "b": 2.0} and type(d["effective_throughput"]["a"]) is float


def test_the_json_writer_never_writes_nan_or_infinity():
    """NaN and Infinity are not JSON: a strict parser refuses them. They are written as null."""
    from optsched.cli.json_out import dumps_indented

    doc = {"a": [1.0, float("inf")], "b": {"x": float("nan"), "y": [[2.0, -float("inf")]]}, "c": "text"}
    text = dumps_indented(doc)
    parsed = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in the output"))
    assert parsed == {"a": [1.0, None], "b": {"x": None, "y": [[2.0, None]]}, "c": "text"}
