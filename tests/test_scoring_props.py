"""Property tests for the scoring arithmetic (hypothesis)."""

from hypothesis import given, settings, strategies as st

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
@given(x=numbers)
def test_thousands_separators_do_not_matter(x):
    assert tatqa.normalize(f"{round(x, 2):,.2f}") == tatqa.normalize(fmt(x))
