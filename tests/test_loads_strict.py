"""loads_strict's bounds: nesting depth, 64-bit integers, finite numbers, unpaired surrogates; each
refusal is one BadInput, never RecursionError or ValueError, and the depth scan stays cheap."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from experience_bank.errors import BadInput
from experience_bank.hashing import INT_BOUNDS, MAX_DEPTH, loads_strict


def test_depth_at_the_bound_is_read_and_one_more_is_refused():
    assert loads_strict("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(BadInput, match=f"nested {MAX_DEPTH + 1} levels"):
        loads_strict("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


def test_brackets_inside_strings_do_not_count():
    text = json.dumps({"a": "[" * 10_000 + '\\"{' * 100})
    assert loads_strict(text) == json.loads(text)


@pytest.mark.parametrize("depth", [3_000, 5_000, 100_000, 1_000_000])
def test_deep_documents_are_refused_before_any_parser_runs(depth, monkeypatch):
    # The depth scan refuses first, so no recursive parser ever sees the document (a wall-clock
    # bound here failed on a loaded machine; that the scan is cheap is a benchmark's claim).
    import orjson

    def parser_called(*args, **kwargs):
        raise AssertionError("a parser ran on a document the depth scan must refuse")

    monkeypatch.setattr(json, "loads", parser_called)
    monkeypatch.setattr(orjson, "loads", parser_called)
    with pytest.raises(BadInput, match=f"nested {depth} levels"):
        loads_strict("[" * depth)


def test_integers_at_the_64_bit_bounds():
    lo, hi = INT_BOUNDS
    assert loads_strict(f"[{lo}, {hi}]") == [lo, hi]
    for digits in (str(hi + 1), str(lo - 1), "1" + "0" * 400, "9" * 5000, "-" + "9" * 100_000):
        with pytest.raises(BadInput, match="does not fit in 64 bits"):
            loads_strict('{"stage": ' + digits + "}")


@pytest.mark.parametrize("text, needle", [
    ("1e999", "overflows"), ('{"x": -1e400}', "overflows"), ('"\\ud800"', "unpaired surrogate"),
    ('{"k\\udfff": 1}', "unpaired surrogate"), ("[1,]", "not valid JSON"),
])
def test_other_refusals(text, needle):
    with pytest.raises(BadInput, match=needle):
        loads_strict(text)


def test_bytes_are_refused():
    with pytest.raises(BadInput, match="must be text"):
        loads_strict(b"{}")  # type: ignore[arg-type]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(*INT_BOUNDS) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=25)


@given(json_values)
def test_every_bounded_value_round_trips(value):
    assert loads_strict(json.dumps(value, ensure_ascii=False)) == value
