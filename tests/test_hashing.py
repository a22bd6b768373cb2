"""Content hashes: independent of key order, stable across processes, strict parsing."""

import hashlib
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from experience_bank.errors import BadInput
import orjson

from experience_bank import hashing
from experience_bank.hashing import canonical_json, chain_hash, content_hash, loads_strict

keys = st.text(min_size=1, max_size=8)
scalars = st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.text(max_size=12) | \
    st.floats(allow_nan=False, allow_infinity=False)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
                      max_leaves=20)
objects = st.dictionaries(keys, values, max_size=6)


@given(objects, st.randoms())
def test_hash_is_independent_of_key_order(obj, rnd):
    items = list(obj.items())
    rnd.shuffle(items)
    assert content_hash(dict(items)) == content_hash(obj)


@given(objects)
def test_canonical_json_round_trips_to_the_same_hash(obj):
    assert content_hash(loads_strict(canonical_json(obj))) == content_hash(obj)


@settings(max_examples=25, deadline=None)
@given(st.lists(objects, min_size=1, max_size=25))
def test_hash_is_stable_across_processes(objs):
    # A fresh interpreter (new hash seed, new float repr state) must compute the same hashes.
    code = ("import json,sys; from experience_bank.hashing import content_hash;"
            "print(json.dumps([content_hash(o) for o in json.load(sys.stdin)]))")
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(objs), capture_output=True,
                         text=True, check=True, env={"PYTHONHASHSEED": "random", "PATH": ""})
    assert json.loads(out.stdout) == [content_hash(o) for o in objs]


def test_known_vector():
    # Pinned: changing the canonical form silently would orphan every stored hash.
    assert canonical_json({"b": 1.5, "a": [1, "x"]}) == '{"a":[1,"x"],"b":1.5}'
    assert content_hash({"b": 1.5, "a": [1, "x"]}) == hashlib.sha256(b'{"a":[1,"x"],"b":1.5}').hexdigest() == \
        "5efd1c99acaa74c2f0c237017fb8919dd43da056f9215ce8d63c998d4737c48e"


def test_chain_hash_depends_on_order_and_separator():
    a, b = "a" * 64, "b" * 64
    assert chain_hash(a, b) != chain_hash(b, a)
    assert len(chain_hash(a, b)) == 64


@pytest.mark.parametrize("text, word", [
    ('{"a": 1, "a": 2}', "duplicate"), ('{"a": NaN}', "NaN"), ('{"a": Infinity}', "Infinity"),
    ('{"a": 1', "not valid JSON"),
])
def test_loads_strict_rejects(text, word):
    with pytest.raises(BadInput, match=word):
        loads_strict(text)


def test_canonical_json_refuses_nan():
    with pytest.raises(ValueError):
        canonical_json({"a": float("nan")})


# --- the orjson path: the same bytes as json.dumps, or json.dumps itself ---------------------

finite = st.floats(allow_nan=False, allow_infinity=False)
# Around every place where float text changes form: 1e-5 and 1e-4 (orjson writes 0.00001,
# Python 1e-05), 1e16 (both switch to an exponent), subnormals and the largest doubles.
edges = st.sampled_from([1e-5, 1e-4, 1e16, 5e-324, 1.7976931348623157e308, -0.0, 2e-5, 9.99e-5, 1e15])
jsonish = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=12) | finite | edges,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=25)


@settings(max_examples=2000, deadline=None)
@given(jsonish)
def test_the_orjson_path_writes_json_dumps_bytes(value):
    # `validated=True` is what a record's dump gets: whatever orjson writes must be json.dumps's bytes.
    assert hashing._encode(value, validated=True) == json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@settings(max_examples=300, deadline=None)
@given(finite | edges, st.text(max_size=20), st.integers(0, 2**62))
def test_a_record_hashes_the_same_through_either_path(delta, title, stage):
    # Through real models (validation runs): the body, and the source context the row hashes apart.
    from support.bank_factory import record
    r = record(delta=delta, stage=stage)
    r = type(r).model_validate({**r.model_dump(), "card": {**r.card.model_dump(), "title": title or "t"}})
    assert canonical_json(r) == hashing.json_dumps_canonical(r)
    body, source = hashing.canonical_json_and_part(r, "source")
    assert (body, source) == (hashing.json_dumps_canonical(r), hashing.json_dumps_canonical(r.source))


def test_numbers_orjson_writes_otherwise_take_json_dumps():
    # The guard itself: these are the forms where orjson's text differs from Python's repr.
    for x in (1e-05, 2.5e-05, 1e-07, 1e16, 1.5e300):
        out = orjson.dumps([x])
        assert out.decode() != json.dumps([x]) or b"e+" in out  # orjson differs, or agrees on 1e+16
        assert hashing._maybe_not_repr(out)
    assert not hashing._maybe_not_repr(b'{"a":"e-mail, 0.000 too","h":"9e1f","x":0.0001}')
    assert hashing._maybe_not_repr(b'{"a":"a3e-5"}')  # a string may look like one: slow path, same bytes
    assert canonical_json({"lr": 1e-05}) == '{"lr":1e-05}'


def test_nan_in_a_plain_value_is_still_refused():
    # Plain values never take the orjson path, which would write NaN as null.
    with pytest.raises(ValueError):
        hashing._encode({"x": float("nan")}, validated=False)


@settings(max_examples=1000, deadline=None)
@given(jsonish)
def test_loads_strict_reads_canonical_text_as_the_strict_parser_does(value):
    # A canonical text (what the bank stores and exports) takes orjson's path; the value must be
    # the one the strict parser gives, and a text orjson would read otherwise must not take it.
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        strict = hashing.loads_strict(" " + text)  # the leading space: never canonical, the strict parser
    except BadInput:
        with pytest.raises(BadInput):
            hashing.loads_strict(text)
        return
    assert hashing.loads_strict(text) == strict
    assert json.dumps(hashing.loads_strict(text), sort_keys=True) == json.dumps(strict, sort_keys=True)


@pytest.mark.parametrize("text", ['{"a":1,"a":2}', "[9223372036854775808]", "[18446744073709551616]",
                                  "[1e400]", '["\\ud800"]', "[1e-05]", "[" * 101 + "]" * 101])
def test_texts_orjson_reads_otherwise_are_left_to_the_strict_parser(text):
    # Duplicate keys (orjson keeps the last), integers past 64 bits (orjson reads up to 2**64 - 1,
    # then floats), overflow, surrogates, exponent floats and deep nesting: none takes the fast path.
    assert hashing._canonical_value(text) is None
    if text != "[1e-05]":
        with pytest.raises(BadInput):
            hashing.loads_strict(text)
    else:
        assert hashing.loads_strict(text) == [1e-05]
