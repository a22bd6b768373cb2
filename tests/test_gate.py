"""The adoption gate: each check blocks on a constructed case and passes on its mirror."""

from __future__ import annotations

import pytest
from test_gate_factory import CAPTRACK_ITEMS, FAMILY_TARGETS, SPECS, suite, world

from experience_bank.errors import BadInput
from experience_bank.results import SanityCheck
from policies.gate import GateConfig, gate
from policies.stats import mcnemar_exact

INITIAL = world("initial")
CFG = GateConfig()


def judge(child, parent=INITIAL, cfg=CFG, sanity=()):
    return gate(INITIAL, parent, child, cfg, SPECS, target_suite="sql/target", target_metric="exec_acc",
                family_targets=FAMILY_TARGETS, sanity=sanity)


def check(verdict, name):
    return next(c for c in verdict.checks if c.name == name)


def test_good_child_is_promoted_with_every_number():
    v = judge(world("child", sql=50.0))
    assert v.promote and v.decided_by == "all_passed"
    assert [c.name for c in v.checks] == ["ifeval_guard", "target", "captrack", "hard_failures"]
    assert v.u_prom == pytest.approx((10 / 10 + 0 / 10) / 2)  # sql +10 pp, finance 0, kappa 10 each
    assert check(v, "target").numbers["target_gain_pp"] == pytest.approx(10.0)


def test_target_gain_does_not_buy_back_ifeval():
    v = judge(world("child", sql=50.0, prompt=57.5))
    assert not v.promote and v.decided_by == "ifeval_guard"
    assert check(v, "ifeval_guard").numbers["delta_prompt"] == pytest.approx(-2.5)
    assert check(v, "target").passed  # the target itself was fine: the guard is non-compensable


def test_ifeval_guard_instruction_level_blocks_and_exact_minus_two_passes():
    assert judge(world("child", sql=50.0, inst=67.5)).decided_by == "ifeval_guard"
    assert judge(world("child", sql=50.0, prompt=58.0, inst=68.0)).promote  # exactly -2 pp is within


def test_mcnemar_exact_hand_computed():
    assert mcnemar_exact(6, 0) == pytest.approx(2 * 0.5**6)           # 0.03125
    assert mcnemar_exact(6, 1) == pytest.approx(2 * (1 + 7) / 2**7)   # 0.125
    assert mcnemar_exact(0, 0) == 1.0


def test_significant_smaller_drop_blocks_only_when_configured():
    # 400 prompts, the child loses 6 it had and gains none: -1.5 pp, McNemar p = 2/64.
    lost = [True] * 234 + [False] * 6 + [False] * 160
    child = world("child", sql=50.0, prompt=58.5, ifeval_items=lost)
    plain = judge(child)
    assert plain.promote
    nums = check(plain, "ifeval_guard").numbers
    assert (nums["mcnemar_b"], nums["mcnemar_c"]) == (6, 0)
    assert nums["mcnemar_p"] == pytest.approx(0.03125)
    strict = judge(child, cfg=GateConfig(block_significant_smaller_drop=True))
    assert not strict.promote and strict.decided_by == "ifeval_guard"


def test_target_below_minimum_gain_blocks_and_minimum_passes():
    assert judge(world("child", sql=40.5)).decided_by == "target"  # +0.5 < 1.0 pp
    assert judge(world("child", sql=41.0)).promote


def test_u_prom_not_positive_blocks():
    v = judge(world("child", sql=44.0, fin=24.0))  # (4/10 - 6/10) / 2 = -0.1
    assert v.decided_by == "target" and v.u_prom == pytest.approx(-0.1)


def test_captrack_severe_sub_blocks_and_mild_passes():
    severe = judge(world("child", sql=50.0, captrack={"can_arith": 40.0}))  # C1 mean(-20, 0) = -10 %
    assert severe.decided_by == "captrack"
    nums = check(severe, "captrack").numbers
    assert nums["CAN/C1.drift_pct"] == pytest.approx(-10.0) and nums["CAN/C1.severity"] == "severe"
    assert nums["CAN.severity"] == "severe"
    mild = judge(world("child", sql=50.0, captrack={"can_arith": 46.0}))  # mean(-8, 0) = -4 %
    assert mild.promote and check(mild, "captrack").numbers["CAN/C1.severity"] == "mild"


def test_captrack_allowed_regime_comes_from_config():
    child = world("child", sql=50.0, captrack={"can_arith": 40.0})
    assert judge(child, cfg=GateConfig(allowed_regime="severe")).promote


def test_style_metric_change_in_either_direction_is_drift():
    up = judge(world("child", sql=50.0, captrack={"will_len": 130.0}))
    down = judge(world("child", sql=50.0, captrack={"will_len": 70.0}))
    for v in (up, down):
        assert v.decided_by == "captrack"
        assert check(v, "captrack").numbers["WILL/W3.severity"] == "catastrophic"


def test_zero_or_near_zero_base_is_reported_but_does_not_decide():
    zero = judge(world("child", sql=50.0, captrack={"will_refusal": 10.0}))  # lower is better, base 0
    assert zero.promote
    nums = check(zero, "captrack").numbers
    assert nums["captrack.will_refusal.drift_pct"] is None and nums["captrack.will_refusal.abs_delta"] == 10.0
    assert nums["WILL/W1.severity"] is None
    base = world("initial", captrack={"will_refusal": 0.5})  # below the 1.0 floor
    near = gate(base, base, world("child", sql=50.0, captrack={"will_refusal": 5.0}), CFG, SPECS,
                target_suite="sql/target", target_metric="exec_acc", family_targets=FAMILY_TARGETS)
    nums = check(near, "captrack").numbers
    assert near.promote and nums["captrack.will_refusal.drift_pct"] == pytest.approx(-900.0)
    assert nums["captrack.will_refusal.decides"] == "no"
    above = gate(world("initial", captrack={"will_refusal": 10.0}), INITIAL,
                 world("child", sql=50.0, captrack={"will_refusal": 12.0}), CFG, SPECS,
                 target_suite="sql/target", target_metric="exec_acc", family_targets=FAMILY_TARGETS)
    assert above.decided_by == "captrack"  # +20 % refusals on a real base: catastrophic


def test_unparseable_share_blocks_above_threshold():
    assert judge(world("child", sql=50.0, sql_unparseable=3)).decided_by == "hard_failures"  # 3/10 > 0.2
    assert judge(world("child", sql=50.0, sql_unparseable=2)).promote                         # 2/10 = 0.2


def test_failed_sanity_check_blocks():
    bad = (SanityCheck(name="finite_loss", ok=False, detail="loss=nan at step 3"),)
    good = (SanityCheck(name="finite_loss", ok=True, detail="loss=0.41"),)
    v = judge(world("child", sql=50.0), sanity=bad)
    assert v.decided_by == "hard_failures" and check(v, "hard_failures").numbers["failed_sanity"] == "finite_loss"
    assert judge(world("child", sql=50.0), sanity=good).promote


UNKNOWABLE = [("ifeval", "prompt_strict", "ifeval_guard"), ("ifeval", "inst_strict", "ifeval_guard"),
              ("sql/target", "exec_acc", "target"), ("finance/target", "em", "target"),
              ("captrack", "can_arith", "captrack"), ("captrack", "will_refusal", "captrack")]


@pytest.mark.parametrize(("suite_name", "metric", "first"), UNKNOWABLE)
def test_an_unknown_metric_never_passes(suite_name, metric, first):
    child = world("child", sql=50.0)
    r = child[suite_name]
    child[suite_name] = r.model_copy(update={"metrics": {**r.metrics, metric: None}})
    v = judge(child)
    assert not v.promote and v.decided_by == first
    assert not check(v, "hard_failures").passed


def test_an_unknown_item_never_passes():
    child = world("child", sql=50.0)
    child["captrack"] = suite("captrack", child["captrack"].metrics, [None] + CAPTRACK_ITEMS[1:], model="child")
    v = judge(child)
    assert v.decided_by == "hard_failures" and check(v, "hard_failures").numbers["unknown.child"] == 1


def test_only_adoption_splits_are_judged():
    with pytest.raises(BadInput, match="adoption"):
        judge(world("child", sql=50.0, split="validation"))


def test_different_data_or_missing_suite_fails_closed():
    # The loop must not abort on a suite it cannot judge: the child is rolled back with the reason.
    child = world("child", sql=50.0)
    child["ifeval"] = suite("ifeval", child["ifeval"].metrics, [True] * 400, model="child", data="other")
    v = judge(child)
    assert not v.promote and v.decided_by == "hard_failures" and "different data" in v.checks[0].reason
    child = world("child", sql=50.0)
    del child["captrack"]
    v = judge(child)
    assert not v.promote and v.decided_by == "hard_failures" and "captrack" in v.checks[0].reason


def test_severity_regime_boundaries():
    from policies.captrack import severity
    cases = {-0.99: "none", -1.0: "mild", -4.99: "mild", -5.0: "moderate", -10.0: "severe",
             -19.99: "severe", -20.0: "catastrophic", 15.0: "none"}
    for drift, regime in cases.items():
        assert severity(drift) == regime


# --- a parent that is not the initial model: IFEval is guarded against the INITIAL parent,
# the target gain is measured against the current parent.


def test_a_child_within_2pp_of_its_parent_but_more_below_the_initial_is_blocked():
    parent = world("parent", prompt=58.5, inst=69.0, sql=45.0)  # an earlier promotion, within the guard
    child = world("child", prompt=57.5, inst=68.5, sql=50.0)    # prompt -1.0 pp vs parent, -2.5 pp vs initial
    v = judge(child, parent=parent)
    assert not v.promote and v.decided_by == "ifeval_guard"
    nums = check(v, "ifeval_guard").numbers
    assert (nums["initial_prompt"], nums["child_prompt"]) == (60.0, 57.5)
    assert nums["delta_prompt"] == pytest.approx(-2.5) and nums["delta_instruction"] == pytest.approx(-1.5)
    assert check(v, "target").passed and check(v, "target").numbers["target_gain_pp"] == pytest.approx(5.0)
    assert len({v.initial_sha256, v.parent_sha256, v.child_sha256}) == 3


def test_a_child_more_than_2pp_below_its_parent_but_within_2pp_of_the_initial_passes():
    parent = world("parent", prompt=63.0, inst=73.0, sql=45.0)  # the parent had gained on IFEval
    child = world("child", prompt=60.5, inst=70.5, sql=50.0)    # -2.5 pp vs parent, +0.5 pp vs initial
    v = judge(child, parent=parent)
    assert v.promote and v.decided_by == "all_passed"
    nums = check(v, "ifeval_guard").numbers
    assert nums["delta_prompt"] == pytest.approx(0.5) and nums["delta_instruction"] == pytest.approx(0.5)
    assert check(v, "target").numbers["target_gain_pp"] == pytest.approx(5.0)  # 50 vs the parent's 45, not the initial's 40
    assert v.u_prom == pytest.approx((5 / 10 + 0 / 10) / 2)
