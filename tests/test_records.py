"""Records: strict parsing, round trips and hashes of the shared typed records."""

import json

import pytest
from hypothesis import given, settings, strategies as st

from support.bank_factory import card, event, proposal, record
from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json, content_hash
from experience_bank.frozen import parse_model
from experience_bank.records import HistoricalRecord, parse_record
from experience_bank.decisions import Event

deltas = st.floats(-100, 100, allow_nan=False)
ids = st.from_regex(r"[A-Z][A-Za-z0-9_-]{0,10}", fullmatch=True)


@settings(max_examples=50, deadline=None)
@given(ids, deltas, st.sampled_from("BC"), st.integers(0, 5), st.integers(1, 10))
def test_record_round_trips_through_json(card_id, delta, grade, stage, reps):
    r = record(card_id, delta=delta, grade=grade, stage=stage, replicates=reps)
    back = parse_record(canonical_json(r))
    assert back == r
    assert content_hash(back) == content_hash(r)


@settings(max_examples=50, deadline=None)
@given(ids, st.randoms())
def test_record_hash_ignores_key_order_of_its_json(card_id, rnd):
    r = proposal(card_id)
    def shuffled(v):
        if isinstance(v, dict):
            items = [(k, shuffled(x)) for k, x in v.items()]
            rnd.shuffle(items)
            return dict(items)
        return [shuffled(x) for x in v] if isinstance(v, list) else v
    text = json.dumps(shuffled(json.loads(canonical_json(r))), indent=1)
    assert content_hash(parse_record(text)) == content_hash(r)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 1000), deltas)
def test_event_round_trips(seq, metric):
    e = event(seq=seq, metric=metric)
    assert parse_model(Event, canonical_json(e)) == e


def test_different_records_hash_differently():
    assert content_hash(record(delta=5.0)) != content_hash(record(delta=5.000001))
    assert content_hash(record(seed=1)) != content_hash(record(seed=2))


def _edit(text: str, fn) -> str:
    obj = json.loads(text)
    fn(obj)
    return json.dumps(obj)


GOOD = canonical_json(record())


@pytest.mark.parametrize("text, field", [
    (GOOD[:-1] + ',"kind":"historical"}', "duplicate JSON key 'kind'"),
    (GOOD.replace('"delta_point":5.0', '"delta_point":NaN'), "NaN"),
    (GOOD.replace('"delta_point":5.0', '"delta_point":Infinity'), "Infinity"),
    (_edit(GOOD, lambda o: o["card"].update(trust_remote_code=True)), "card.trust_remote_code"),
    (_edit(GOOD, lambda o: o["card"]["budget"].update(steps="100")), "card.budget.steps"),
    (_edit(GOOD, lambda o: o["evidence"].update(replicates=1.0)), "evidence.replicates"),
    (_edit(GOOD, lambda o: o["evidence"].update(grade="A", chi=1)), "grade A needs at least 2"),
    (_edit(GOOD, lambda o: o["evidence"].update(chi=1)), "chi must be 1 exactly when grade is A"),
    (_edit(GOOD, lambda o: o["card"].update(id="bad id!")), "card.id"),
    (_edit(GOOD, lambda o: o["card"]["data"]["mix"][0].update(weight=0.5)), "sum to 1"),
    (_edit(GOOD, lambda o: o["card"]["hparams"].update(learning_rate=1.0)), "learning_rate"),
    (_edit(GOOD, lambda o: o.pop("provenance")), "provenance"),
])
def test_strict_parsing_rejects(text, field):
    with pytest.raises(BadInput, match=None) as info:
        parse_record(text)
    assert field in str(info.value)
    assert "\n" not in str(info.value)


def test_a_proposal_cannot_carry_evidence():
    text = _edit(canonical_json(proposal()), lambda o: o.update(evidence=json.loads(GOOD)["evidence"]))
    with pytest.raises(BadInput, match="evidence"):
        parse_record(text)


def test_records_are_frozen():
    r = record()
    with pytest.raises(Exception):
        r.evidence = None
    assert isinstance(r, HistoricalRecord) and card().id == "S01"


@pytest.mark.parametrize("text, defect", [("{", "not valid JSON"), ('{"seq": 1, "seq": 2}', "duplicate JSON key"),
                                          ('{"seq": NaN}', "NaN"), ("[" * 5000 + "]" * 5000, "nested 5000 levels")])
def test_a_json_defect_names_what_was_parsed(text, defect):
    """`parse_model(cls, text, what)` named `what` for a field's defect but not for the JSON's own:
    `agent audit RUN` said "not valid JSON (...)" without saying which of the run's files."""
    with pytest.raises(BadInput) as info:
        parse_model(Event, text, "runs/ep/events/3.json")
    assert str(info.value).startswith("invalid runs/ep/events/3.json: ") and defect in str(info.value)
    assert "\n" not in str(info.value)
    with pytest.raises(BadInput) as info:  # no label: the caller names the source itself
        parse_model(Event, text)
    assert str(info.value).startswith(("not valid JSON", "duplicate", "JSON"))
