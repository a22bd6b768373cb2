"""The successive-halving rule (policies/halving.py): asynchronous, eta = 5, top ceil(k / eta) of the
episode's trial gains continue, ties with the cut-off in, a Fail never continues."""

from experience_bank.hashing import content_hash
from policies import EpisodeState, PolicyConfig, after_trial, authorize, features_from_row
from policies.halving import ETA, top_share, verdict
from policies.trial_rules import TrialFacts, policy_verdict


def after(*gains: float) -> EpisodeState:
    return EpisodeState(trial_gains=gains)


def test_eta_is_five_and_the_top_share_rounds_up():
    assert ETA == 5
    assert [top_share(k) for k in (1, 4, 5, 6, 10, 11)] == [1, 1, 1, 2, 2, 3]


def test_the_first_trial_continues_whatever_its_gain():
    label, why, st = verdict("pass", -3.0, EpisodeState())
    assert label == "pass" and st.trial_gains == (-3.0,)
    assert "among the top 1 of 1" in why


def test_five_trials_continue_the_top_one():
    assert verdict("pass", 5.0, after(1.0, 2.0, 3.0, 4.0))[0] == "pass"
    label, why, st = verdict("pass", 3.5, after(1.0, 2.0, 3.0, 4.0))
    assert label == "fail" and "not among the top 1 of 5" in why and "cut-off 4 pp" in why
    assert st.trial_gains == (1.0, 2.0, 3.0, 4.0, 3.5)


def test_six_trials_continue_the_top_two():
    assert verdict("pass", 4.5, after(1.0, 2.0, 3.0, 4.0, 5.0))[0] == "pass"  # 5, 4.5
    assert verdict("pass", 3.9, after(1.0, 2.0, 3.0, 4.0, 5.0))[0] == "fail"  # 5, 4 above it


def test_a_tie_with_the_cut_off_continues():
    assert verdict("pass", 4.0, after(1.0, 2.0, 3.0, 4.0))[0] == "pass"       # 4 and 4 share the one place
    assert [verdict("pass", 0.0, after(*[0.0] * k))[0] for k in range(7)] == ["pass"] * 7


def test_a_failed_trial_never_continues_but_its_gain_is_ranked():
    label, why, st = verdict("fail", 9.0, after(1.0))
    assert label == "fail" and why.endswith("the trial failed") and st.trial_gains == (1.0, 9.0)
    # the failed trial's 9 pp holds the one place of the next five trials
    assert verdict("pass", 8.0, st)[0] == "fail"


def test_an_inconclusive_trial_in_the_top_share_continues_without_a_lease():
    assert verdict("inconclusive", 2.0, after(1.0))[0] == "pass"
    assert verdict("inconclusive", 0.5, after(1.0))[0] == "fail"


def test_a_trial_that_never_ran_keeps_its_verdict_and_enters_no_rank():
    assert verdict("fail", None, after(1.0)) == ("fail", "successive halving: no trial gain to rank", after(1.0))


def test_a_hand_computed_episode_through_the_shared_dispatch():
    """Gains 3 1 4 1 5 9 2 6: k = 1..5 keep the top 1 (cut-offs 3 3 4 4 5), k = 6..8 the top 2 (cut-offs 5 5 6)."""
    st, cfg, out = EpisodeState(), PolicyConfig(fallback_lease=0), []
    for gain in (3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0):
        (label, _, _), st = policy_verdict("successive_halving", TrialFacts("pass", {}, 1.0, gain), st)
        then, _, st = after_trial(label, st, cfg)
        out.append(then)
    assert out == ["train", "reject", "train", "reject", "train", "train", "reject", "train"]
    assert st.trial_gains == (3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0)


def test_only_successive_halving_keeps_trial_gains():
    st = EpisodeState()
    for policy in ("bcit", "validate_all", "early_stop_extrapolation"):
        assert policy_verdict(policy, TrialFacts("pass", {"0.20": {"target": 4.0}}, 1.0, 4.0), st)[1] == st


def test_an_empty_state_serialises_and_hashes_as_before_the_field():
    assert EpisodeState().model_dump(mode="json") == {"new_proposals_used": 0, "leases_used": 0}
    assert content_hash(EpisodeState()) == content_hash({"new_proposals_used": 0, "leases_used": 0})
    assert after(1.5).model_dump(mode="json")["trial_gains"] == [1.5]


def test_routes_as_validate_all():
    base = dict(grade="B", delta_src=1.0, kappa=2.0, family=1, data=1, runtime=1, parent=1, protocol=1, H=1, chi=0,
                is_new=False)
    for nu, action in (("restart", "validate"), ("none", "reject")):
        f = features_from_row({**base, "nu": nu})
        sh, va = (authorize(f, p, EpisodeState(), PolicyConfig()) for p in ("successive_halving", "validate_all"))
        assert (sh.action, sh.rule) == (va.action, va.rule.replace("validate_all", "successive_halving"))
        assert sh.action == action


def test_order_decides_in_the_asynchronous_variant():
    """With no revisit, a rising sequence continues every trial (each is the best so far) and a falling
    one only the first (each later one ranks last among k >= 2, below the top ceil(k / 5) < k)."""
    def run(gains):
        st, out = EpisodeState(), []
        for g in gains:
            label, _, st = verdict("pass", g, st)
            out.append(label)
        return out
    assert run([float(g) for g in range(12)]) == ["pass"] * 12
    assert run([float(-g) for g in range(12)]) == ["pass"] + ["fail"] * 11
