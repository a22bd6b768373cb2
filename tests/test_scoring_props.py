"""Property tests for the scoring arithmetic (hypothesis)."""

from hypothesis import assume, given, settings, strategies as st

from evaluators.scoring import tatqa
from evaluators.tasks.finance import fmt

words = st.lists(st.sampled_from(["cloud", "retail", "demand", "new", "customers", "12.5", "3"]), min_size=1, max_size=3)
spans = st.lists(words.map(" ".join), min_size=1, max_size=3)
numbers = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(gold=spans, pred=spans, kind=st.sampled_from(["span", "multi-span"]))
def test_span_scores_are_bounded_and_em_implies_f1(gold, pred, kind):
    em, f1 = tatqa.em_f1(kind, gold, "", pred, "")
    assert 0.0 <= f1 <= 1.0 + 1e-9 and em in (0.0, 1.0)
    if em == 1.0:
        assert abs(f1 - 1.0) < 1e-9


@settings(max_examples=200, deadline=None)
@given(gold=spans)
def test_any_order_of_the_gold_bag_is_exact(gold):
    assert tatqa.em_f1("multi-span", gold, "", list(reversed(gold)), "") == (1.0, 1.0)


@settings(max_examples=300, deadline=None)
@given(x=numbers, scale=st.sampled_from(["", "thousand", "million", "percent"]))
def test_printed_answer_scores_exact_and_f1_equals_em(x, scale):
    text = fmt(x)
    assert tatqa.em_f1("arithmetic", [text], scale, [text], scale) == (1.0, 1.0)
    other = fmt(x + 1)
    assert tatqa.em_f1("arithmetic", [text], scale, [other], scale) == (0.0, 0.0)


@settings(max_examples=200, deadline=None)
@given(x=numbers, scale=st.sampled_from(["", "thousand", "million", "percent"]))
def test_thousands_separators_and_trailing_zeros_do_not_matter(x, scale):
    assume(round(x, 2) != 0)  # "-0.00" is -0.0, not 0, for the official (tests/test_official_semantics.py)
    assert tatqa.em_f1("arithmetic", [fmt(x)], scale, [f"{round(x, 2):,.2f}"], scale) == (1.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(gold=spans, pred=spans)
def test_f1_is_the_token_set_f1_of_the_joined_answers(gold, pred):
    # each answer is one string (a span that is a number renders as 4 decimals: "3" -> "3.0000")
    g = set(tatqa.normalize(tatqa.answer_string(gold, "")).split())
    p = set(tatqa.normalize(tatqa.answer_string(pred, "")).split())
    common = len(g & p)
    f1 = 0.0 if not common else 2 * common / (len(g) + len(p))
    assert tatqa.em_f1("multi-span", gold, "", pred, "")[1] == round(f1, 2)
