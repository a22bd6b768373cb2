"""Routing rules and boundaries of docs/AUTHORIZER.md §4 and the comparison policies of §8."""

import json

import pytest

from experience_bank.errors import BadInput
from policies import POLICIES, EpisodeState, PolicyConfig, after_trial, authorize, features_from_row, next_state
from policies.authorize import decision_hash

CFG = PolicyConfig()


def row(**kw):
    base = dict(grade="A", delta_src=2.0, kappa=2.0, family=1, data=1, runtime=1, parent=1, protocol=1,
                H=0, nu="continue", chi=1, is_new=False)
    return features_from_row({**base, **kw})


def act(f, policy="bcit", state=EpisodeState()):
    d = authorize(f, policy, state, CFG)
    return d.action, d.rule


def test_hard_conflict_rejects_even_the_strongest_record():
    assert act(row(H=1)) == ("reject", "bcit.hard_conflict")


def test_q_exactly_tau_l_is_not_rejected_and_just_below_is():
    f = row(grade="B", chi=0, delta_src=2.0, family=1, data=0.5, runtime=0, parent=0.5, protocol=0)  # S=.75, A=.4
    assert (f.S, f.A, f.Q) == (0.75, 0.4, 0.3)
    assert act(f) == ("validate", "bcit.validate")
    g = row(grade="B", chi=0, delta_src=1.9, family=1, data=0.5, runtime=0, parent=0.5, protocol=0)
    assert g.Q < 0.3 and act(g) == ("reject", "bcit.below_tau_l")


def test_q_exactly_tau_h_trains_with_chi_and_validates_without_grade_a():
    f = row(delta_src=1.4)  # S = 0.7, A = 1
    assert f.Q == 0.7 and act(f) == ("train", "bcit.replicated_above_tau_h")
    assert act(row(delta_src=1.38))[0] == "validate"  # Q = 0.69
    # high Q but grade B (chi = 0): validation is never skipped
    b = row(grade="B", chi=0, delta_src=4.0)
    assert b.Q == 0.75 and act(b) == ("validate", "bcit.validate")


def test_chi_without_grade_a_is_refused_and_grade_a_without_chi_validates():
    with pytest.raises(BadInput, match="chi=1 needs grade A"):
        row(grade="B", chi=1)
    assert act(row(chi=0)) == ("validate", "bcit.validate")


def test_nu_none_rejects_what_would_be_validated_but_not_what_trains():
    assert act(row(grade="B", chi=0, nu="none")) == ("reject", "bcit.no_faithful_trial")
    assert act(row(nu="none")) == ("train", "bcit.replicated_above_tau_h")


def new(**kw):
    return row(grade=None, delta_src=None, kappa=None, chi=0, is_new=True, **kw)


def test_new_proposals_validate_only_without_conflict_and_within_quota():
    assert act(new()) == ("validate", "bcit.new_validate")
    assert act(new(H=1)) == ("reject", "bcit.new_hard_conflict")
    assert act(new(nu="none")) == ("reject", "bcit.new_no_faithful_trial")
    state = EpisodeState()
    for _ in range(3):
        d = authorize(new(), "bcit", state, CFG)
        state = next_state(state, d)
    assert state.new_proposals_used == 3
    assert act(new(), state=state) == ("reject", "bcit.quota_exhausted")


def test_conflicted_never_trains_directly():
    f = features_from_row({**json.loads(json.dumps(dict(grade="A", delta_src=2.0, kappa=2.0, family=1, data=1, runtime=1,
                          parent=1, protocol=1, H=0, nu="continue", chi=1, is_new=False))), "conflicted": True})
    assert act(f) == ("validate", "bcit.conflicted_validate")
    # Only the evidence-based skip needs agreeing replicates: reuse_all trains every positive
    # source by definition, and reject_unresolved rejects what BCIT would validate.
    assert act(f, "reuse_all") == ("train", "reuse_all.positive_source")
    assert act(f, "reject_unresolved") == ("reject", "reject_unresolved.unresolved")
    assert act(f, "validate_all") == ("validate", "validate_all.validate")
    assert act(f.model_copy(update={"conflicted": False})) == ("train", "bcit.replicated_above_tau_h")


def test_multiplicative_refuses_what_additive_buys_off():
    # strong replicated source, badly mismatched context with a named conflict
    f = row(delta_src=5.0, family=1, data=0, runtime=1, parent=0, protocol=0.5, H=1, conflicts=["requires json-call"])
    assert f.S == 1.0 and f.A == 0.5 and f.Q == 0.5
    assert act(f, "bcit") == ("reject", "bcit.hard_conflict")
    assert act(f, "flat_additive") == ("validate", "flat_additive.validate")  # (1 + .5 + 0)/3 = .5
    # without the conflict, the additive score trains a context the product sends to validation
    h = row(delta_src=5.0, family=1, data=0, runtime=0, parent=1, protocol=1)  # A = .6, Q = .6
    assert act(h, "bcit") == ("validate", "bcit.validate")
    assert act(h, "flat_additive") == ("train", "flat_additive.replicated_above_tau_h")  # (1 + .6 + 1)/3 = .867


def test_every_policy_routes_and_hashes_deterministically():
    f = row(grade="B", chi=0, delta_src=1.0)  # S = .375, Q = .375
    for p in POLICIES:
        d1, d2 = authorize(f, p, EpisodeState(), CFG), authorize(f, p, EpisodeState(), CFG)
        assert d1 == d2 and d1.policy == p
        assert d1.decision_hash == decision_hash(d1.model_dump(mode="json"))
    assert act(f, "reject_unresolved") == ("reject", "reject_unresolved.unresolved")
    assert act(f, "reuse_all")[0] == "train"
    assert act(row(delta_src=-1.0), "reuse_all") == ("reject", "reuse_all.nonpositive_source")
    assert act(f, "validate_all")[0] == "validate"
    assert act(f, "no_memory") == ("validate", "no_memory.new_validate")
    assert act(row(H=1), "no_hard_veto")[0] == "train"
    assert act(row(), "applicability_only") == ("validate", "applicability_only.validate")


def test_version_changes_with_the_config_and_unknown_policy_is_bad_input():
    assert PolicyConfig().version() != PolicyConfig(tau_l=0.25).version()
    with pytest.raises(BadInput, match="unknown policy"):
        authorize(row(), "greedy", EpisodeState(), CFG)


def test_fallback_lease_is_spent_once():
    st = EpisodeState()
    a, _, st = after_trial("inconclusive", st, CFG)
    b, rule, st = after_trial("inconclusive", st, CFG)
    assert (a, b, rule) == ("train", "reject", "trial.inconclusive_no_lease")
    assert after_trial("pass", st, CFG)[0] == "train" and after_trial("fail", st, CFG)[0] == "reject"
