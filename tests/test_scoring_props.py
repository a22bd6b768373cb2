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


# --- Spider's denotation equality: the pruned search decides what plain enumeration decides ---

values = st.sampled_from([1, 1.0, 2, 2.5, "a", "b", None])


@st.composite
def tables(draw):
    width, height = draw(st.integers(1, 3)), draw(st.integers(0, 4))
    row = st.tuples(*[values] * width)
    return draw(st.lists(row, min_size=height, max_size=height)), draw(st.lists(row, min_size=height, max_size=height))


def _spider_by_enumeration(gold, pred, ordered):
    from collections import Counter
    from itertools import permutations
    if not gold and not pred:
        return True
    if len(gold) != len(pred) or len(gold[0]) != len(pred[0]):
        return False
    def key(row):
        return tuple(sorted(row, key=lambda v: str(v) + str(type(v))))
    g, p = [key(r) for r in gold], [key(r) for r in pred]
    if not (g == p if ordered else set(g) == set(p)):
        return False
    for perm in permutations(range(len(gold[0]))):
        moved = [tuple(r[j] for j in perm) for r in pred]
        if (gold == moved) if ordered else Counter(gold) == Counter(moved):
            return True
    return False


@settings(max_examples=400, deadline=None)
@given(pair=tables(), ordered=st.booleans(), shuffle=st.randoms(use_true_random=False))
def test_spider_equality_matches_plain_enumeration(pair, ordered, shuffle):
    from evaluators.scoring.sql_exec import spider_equal
    gold, pred = pair
    assert spider_equal(gold, pred, ordered) == _spider_by_enumeration(gold, pred, ordered)
    # the gold with its columns permuted (and, unordered, its rows shuffled) is always equal
    cols = list(range(len(gold[0]))) if gold else []
    shuffle.shuffle(cols)
    moved = [tuple(r[j] for j in cols) for r in gold]
    if not ordered:
        shuffle.shuffle(moved)
    assert spider_equal(gold, moved, ordered)
