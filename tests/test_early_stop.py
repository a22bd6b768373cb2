"""The early-stop extrapolation rule (policies/early_stop.py): a power law through the origin."""

import pytest

from policies.authorize import EpisodeState
from policies.early_stop import fit, verdict
from policies.trial_rules import OwnVerdict, TrialFacts, policy_verdict


@pytest.mark.parametrize("b", [0.3, 0.5, 1.0])
def test_an_exact_power_law_is_recovered(b):
    c, got = fit({f: 6.0 * f ** b for f in (0.05, 0.10, 0.20)})
    assert (c, got) == (pytest.approx(6.0, abs=1e-6), b)


def test_an_accelerating_curve_is_held_to_a_straight_line():
    # 0.1, 0.4, 1.6 grows as f**2; the fit may not accelerate, so b = 1 and c is the least squares line
    c, b = fit({0.05: 0.1, 0.10: 0.4, 0.20: 1.6})
    assert b == 1.0 and c == pytest.approx((0.05 * 0.1 + 0.1 * 0.4 + 0.2 * 1.6) / (0.05**2 + 0.1**2 + 0.2**2))


def test_the_verdict_compares_the_full_length_value_with_the_adoption_threshold():
    assert verdict({0.05: 0.25, 0.10: 0.5, 0.20: 1.0}, 1.0)[0] == "pass"   # linear: 5 pp at full length
    assert verdict({0.05: 0.8, 0.10: 0.8, 0.20: 0.8}, 1.0)[0] == "fail"    # flat: 0.8 pp
    label, why = verdict({0.20: 3.0}, 1.0)
    assert label == "inconclusive" and "no curve" in why


def test_only_a_policy_with_its_own_rule_departs_from_the_recorded_verdict():
    facts, st = TrialFacts("pass", {k: {"target": 0.0} for k in ("0.05", "0.10", "0.20")}, 1.0), EpisodeState()
    assert policy_verdict("bcit", facts, st) == (OwnVerdict("pass", None), st)
    assert policy_verdict("early_stop_extrapolation", facts, st)[0].verdict == "fail"
