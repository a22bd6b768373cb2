"""policies.stats against brute force on small inputs."""

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from policies import stats

small = st.lists(st.integers(-20, 20).map(lambda x: x / 4).filter(lambda x: x != 0), min_size=2, max_size=7)


@settings(max_examples=30, deadline=None)
@given(small)
def test_sign_flip_matches_enumeration(d):
    obs = abs(sum(d) / len(d))
    flips = [abs(sum(s * x for s, x in zip(signs, d)) / len(d)) for signs in itertools.product((1, -1), repeat=len(d))]
    brute = sum(m >= obs - 1e-12 for m in flips) / len(flips)
    assert math.isclose(stats.sign_flip_test(d), brute, rel_tol=1e-9)


def test_six_positive_pairs_give_2_of_64():
    assert stats.sign_flip_test([2.1, 2.9, 2.4, 3.0, 2.6, 2.8]) == 2 / 64


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12))
def test_mcnemar_matches_binomial_sum(b, c):
    n = b + c
    brute = 1.0 if n == 0 else min(1.0, 2 * sum(binom.pmf(k, n, 0.5) for k in range(min(b, c) + 1)))
    assert math.isclose(stats.mcnemar_exact(b, c), brute, rel_tol=1e-9)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 15).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_clopper_pearson_tails_are_exactly_alpha_over_2(kn):
    k, n = kn
    lo, hi = stats.clopper_pearson(k, n)
    if k > 0:
        assert math.isclose(binom.sf(k - 1, n, lo), 0.025, rel_tol=1e-6)
    if k < n:
        assert math.isclose(binom.cdf(k, n, hi), 0.025, rel_tol=1e-6)


def test_published_intervals():
    lo, hi = stats.clopper_pearson(2, 8)
    assert (round(100 * lo, 1), round(100 * hi, 1)) == (3.2, 65.1)
    lo, hi = stats.clopper_pearson(20, 24)
    assert (round(100 * lo, 1), round(100 * hi, 1)) == (62.6, 95.3)
    assert stats.mcnemar_exact(0, 3) == 0.25


@settings(max_examples=30, deadline=None)
@given(st.permutations(list(range(8))))
def test_spearman_matches_rank_formula_without_ties(perm):
    rho = stats.spearman(list(range(8)), perm)
    brute = 1 - 6 * sum((i - p) ** 2 for i, p in enumerate(perm)) / (8 * 63)
    assert math.isclose(rho, brute, abs_tol=1e-12)


def test_paired_t_interval_contains_the_mean_and_is_symmetric():
    m, lo, hi = stats.paired_t_interval([47.1, 46.8, 47.5, 46.6, 47.2, 46.9], [44.5, 44.2, 44.8, 44.1, 44.6, 44.3])
    assert lo < m < hi and math.isclose(m - lo, hi - m)
