"""The gate's numbers beside the noise: paired SE, exact McNemar p and the minimum item count for a
severe CapTrack verdict, on SuiteResults built item by item (metrics are the items' own rates)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats
from test_gate_factory import FAMILY_TARGETS, sha

from experience_bank.results import EvalIdentity, ItemResult, MetricSpec, SuiteResult
from policies.captrack import SEVERITIES, captrack_profile, judged_severity
from policies.gate import GateConfig, gate, uniform_gate_config
from policies.stats import paired_stats

SPECS = (
    MetricSpec(name="captrack.can_arith", group="CAN", sub="C1", direction="higher", floor=5.0),
    MetricSpec(name="captrack.will_format_rate", group="WILL", sub="W3", direction="lower", floor=5.0),
    MetricSpec(name="captrack.how_json_valid", group="HOW", sub="H2", direction="higher", floor=5.0),
    MetricSpec(name="captrack.how_json_correct", group="HOW", sub="H2", direction="higher", floor=5.0),
)


def _rate(xs: list[bool]) -> float:
    return 100.0 * sum(xs) / len(xs)


def result(name: str, items: list[ItemResult], metrics: dict, model: str) -> SuiteResult:
    ident = EvalIdentity(suite=name, split="adoption", data_sha256=sha(f"{name}/{len(items)}"), scorer_version="v1",
                         model_sha256=sha(model), chat_template_sha256=sha("tpl"), backend="transformers",
                         batch_size=8, max_new_tokens=64, seed=0)
    return SuiteResult(identity=ident, generations_sha256=sha(f"gen/{model}/{name}"), metrics=metrics,
                       items=tuple(items), n_unparseable=0, n_unknown=sum(i.correct is None for i in items))


def plain(name: str, correct: list[bool | None], model: str, metric: str) -> SuiteResult:
    """A suite without probes; its one metric is the known items' rate."""
    items = [ItemResult(item_id=f"{name}-{k}", correct=c) for k, c in enumerate(correct)]
    known = [c for c in correct if c is not None]
    return result(name, items, {metric: _rate(known)}, model)


def captrack(arith: list[bool], model: str, n_other: int = 40) -> SuiteResult:
    """can_arith items as given; will_format and how_json items all right (no drift there)."""
    items = [ItemResult(item_id=f"a{k}", correct=c, detail={"probe": "can_arith"}) for k, c in enumerate(arith)]
    items += [ItemResult(item_id=f"f{k}", correct=True, detail={"probe": "will_format", "markers": False})
              for k in range(n_other)]
    items += [ItemResult(item_id=f"j{k}", correct=True, detail={"probe": "how_json", "json_valid": True})
              for k in range(n_other)]
    metrics = {"can_arith": _rate(arith), "will_format_rate": 0.0, "how_json_valid": 100.0, "how_json_correct": 100.0}
    return result("captrack", items, metrics, model)


IFEVAL = [True] * 240 + [False] * 160


def world(model: str, *, arith: list[bool], ifeval=IFEVAL, sql=(True,) * 20 + (False,) * 20) -> dict[str, SuiteResult]:
    out = {"ifeval": plain("ifeval", list(ifeval), model, "prompt_strict"),
           "sql/target": plain("sql/target", list(sql), model, "exec_acc"),
           "finance/target": plain("finance/target", [True] * 10 + [False] * 30, model, "em"),
           "captrack": captrack(arith, model)}
    r = out["ifeval"]  # instruction level moves with the prompt level in these worlds
    out["ifeval"] = r.model_copy(update={"metrics": {**r.metrics, "inst_strict": r.metrics["prompt_strict"]}})
    return out


RUN_GATE = uniform_gate_config(ifeval_max_drop_pp=2.0, min_gain_pp=1.0, kappa_pp=10.0, alpha=0.05)
"""The gate a default run config builds."""


def judge(initial, child, cfg=RUN_GATE):
    return gate(initial, initial, child, cfg, SPECS, target_suite="sql/target", target_metric="exec_acc",
                family_targets=FAMILY_TARGETS)


def check(verdict, name):
    return next(c for c in verdict.checks if c.name == name)


SQL_UP = (True,) * 24 + (False,) * 16  # +10 pp on the target: the target check passes


def test_paired_se_and_mcnemar_match_the_textbook_and_scipy():
    # 400 prompts: 6 lost, 2 gained, the rest unchanged.
    after = [False] * 6 + [True] * 234 + [True] * 2 + [False] * 158
    s = paired_stats(dict(enumerate(IFEVAL)), dict(enumerate(after)), "ifeval")
    n, b, c = 400, 6, 2
    assert (s.n, s.b, s.c, s.unknown) == (n, b, c, 0)
    assert s.delta_pp == pytest.approx(100.0 * (c - b) / n)
    assert s.se_pp == pytest.approx(100.0 * math.sqrt((b + c) - (b - c) ** 2 / n) / n)  # Agresti §10.1
    assert s.mcnemar_p == pytest.approx(stats.binomtest(b, b + c, 0.5).pvalue)


@given(st.lists(st.tuples(st.booleans() | st.none(), st.booleans() | st.none()), min_size=1, max_size=60))
def test_paired_stats_agree_with_the_formula_on_any_items(pairs):
    s = paired_stats({k: x for k, (x, _) in enumerate(pairs)}, {k: y for k, (_, y) in enumerate(pairs)}, "s")
    known = [(x, y) for x, y in pairs if x is not None and y is not None]
    b, c, n = sum(x and not y for x, y in known), sum(y and not x for x, y in known), len(known)
    assert (s.n, s.b, s.c, s.unknown) == (n, b, c, len(pairs) - n)
    if n:
        assert s.delta_pp == pytest.approx(100.0 * (c - b) / n)
        assert s.se_pp == pytest.approx(100.0 * math.sqrt((b + c) - (b - c) ** 2 / n) / n, abs=1e-9)
    else:
        assert s.delta_pp is None and s.se_pp is None
    assert s.mcnemar_p == (pytest.approx(stats.binomtest(b, b + c).pvalue) if b + c else 1.0)


@given(st.sampled_from(SEVERITIES), st.integers(0, 60), st.integers(0, 60), st.integers(0, 60), st.integers(1, 100),
       st.booleans())
def test_the_cap_only_lowers_and_only_without_enough_items_or_a_significant_loss(regime, lost, gained, same, minimum,
                                                                                  needs_loss):
    before = {f"i{k}": True for k in range(lost)} | {f"g{k}": False for k in range(gained)}
    before |= {f"s{k}": True for k in range(same)}
    after = {k: (not v if k[0] in "ig" else v) for k, v in before.items()}
    pairs = paired_stats(before, after, "sub")
    cfg = GateConfig(min_severe_items=minimum, severe_needs_significant_loss=needs_loss)
    judged, why = judged_severity(regime, pairs, cfg)
    assert SEVERITIES.index(judged) <= SEVERITIES.index(regime)
    significant = lost > gained and stats.binomtest(lost, lost + gained).pvalue < cfg.alpha
    stands = lost + gained + same >= minimum and (significant or not needs_loss)
    assert (judged == regime) == (stands or SEVERITIES.index(regime) <= SEVERITIES.index("moderate"))
    assert (why is None) == (judged == regime)
    if why is not None:
        assert judged == "moderate" and why == ("too few items" if pairs.n < minimum else "no significant loss")


def test_every_guard_reports_n_se_and_mcnemar():
    initial = world("initial", arith=[True] * 30 + [False] * 10)
    lost = [False] * 6 + [True] * 234 + [True] * 2 + [False] * 158  # IFEval -1 pp: within the guard
    sql_b1_c5 = (False,) + (True,) * 19 + (True,) * 5 + (False,) * 15  # 1 lost, 5 gained of 40
    v = judge(initial, world("child", arith=[True] * 30 + [False] * 10, ifeval=lost, sql=sql_b1_c5))
    guard, target, cap = (check(v, k).numbers for k in ("ifeval_guard", "target", "captrack"))
    assert v.promote
    assert (guard["n_items"], guard["mcnemar_b"], guard["mcnemar_c"]) == (400, 6, 2)
    assert guard["paired_se_pp"] == pytest.approx(100.0 * math.sqrt(8 - 16 / 400) / 400)
    assert guard["mcnemar_p"] == pytest.approx(stats.binomtest(6, 8).pvalue)
    assert (target["n_items"], target["mcnemar_b"], target["mcnemar_c"]) == (40, 1, 5)
    assert target["paired_delta_pp"] == pytest.approx(10.0) == target["target_gain_pp"]
    assert target["paired_se_pp"] == pytest.approx(100.0 * math.sqrt(6 - 16 / 40) / 40)
    assert target["mcnemar_p"] == pytest.approx(stats.binomtest(1, 6).pvalue)
    assert "McNemar p=" in check(v, "target").reason and "paired SE" in check(v, "ifeval_guard").reason
    # CapTrack: a metric reads its own probe's items; H2's two metrics share how_json's 40 items;
    # W3's only metric has a 0 % base, so it decides nothing and its sub rests on no item.
    assert (cap["CAN/C1.n_items"], cap["HOW/H2.n_items"], cap["HOW.n_items"], cap["WILL/W3.n_items"]) == (40, 40, 40, 0)
    assert cap["CAN/C1.paired_se_pp"] == 0.0 and cap["CAN/C1.mcnemar_p"] == 1.0


def test_seven_item_drift_of_minus_16_7_percent_is_capped_and_does_not_block():
    initial = world("initial", arith=[True] * 6 + [False])
    v = judge(initial, world("child", arith=[True] * 5 + [False] * 2, sql=SQL_UP))  # 6/7 -> 5/7
    nums = check(v, "captrack").numbers
    assert v.promote and check(v, "captrack").passed
    assert nums["CAN/C1.drift_pct"] == pytest.approx(-100.0 / 6)
    assert (nums["CAN/C1.raw_severity"], nums["CAN/C1.severity"], nums["CAN/C1.n_items"]) == ("severe", "moderate", 7)
    assert nums["CAN/C1.mcnemar_p"] == 1.0  # one lost item: b = 1, c = 0
    assert "CAN/C1: -16.7% on 7 items, below the 30 needed for a severe verdict" in check(v, "captrack").reason


def test_the_same_drift_on_60_items_is_severe_and_blocks():
    initial = world("initial", arith=[True] * 42 + [False] * 18)
    v = judge(initial, world("child", arith=[True] * 35 + [False] * 25, sql=SQL_UP))  # 42/60 -> 35/60
    nums = check(v, "captrack").numbers
    assert not v.promote and v.decided_by == "captrack"
    assert nums["CAN/C1.drift_pct"] == pytest.approx(-100.0 / 6)
    assert (nums["CAN/C1.severity"], nums["CAN/C1.n_items"], nums["CAN/C1.mcnemar_b"]) == ("severe", 60, 7)
    assert nums["CAN/C1.mcnemar_p"] == pytest.approx(stats.binomtest(7, 7).pvalue) and nums["CAN/C1.mcnemar_p"] < 0.05
    assert nums["capped"] is None and nums["CAN/C1.capped_by"] is None


def test_five_items_lost_of_40_is_no_significant_loss_under_the_run_gate_and_severe_under_the_old_one():
    initial = world("initial", arith=[True] * 30 + [False] * 10)
    child = world("child", arith=[True] * 25 + [False] * 15, sql=SQL_UP)  # 30/40 -> 25/40: -16.7 %, b 5, c 0
    v = judge(initial, child)
    nums = check(v, "captrack").numbers
    assert v.promote and nums["CAN/C1.mcnemar_p"] == pytest.approx(0.0625)
    assert (nums["CAN/C1.raw_severity"], nums["CAN/C1.severity"]) == ("severe", "moderate")
    assert nums["CAN/C1.capped_by"] == "no significant loss"
    assert ("CAN/C1: -16.7% on 40 items, 5 lost vs 0 gained (McNemar p=0.0625, not a significant loss at 0.05) "
            "for a severe verdict") in check(v, "captrack").reason
    # GateConfig()'s default is the rule of manifests frozen before the field: the items alone decide
    old = judge(initial, child, GateConfig())
    assert not old.promote and old.decided_by == "captrack"
    assert check(old, "captrack").numbers["CAN/C1.severity"] == "severe"


def test_two_paraphrase_items_of_30_do_not_veto_a_target_gain_and_a_significant_loss_does():
    # world 0 of compare-v7 (5 Dec 2026): a near-floor probe, 4 of its 30 items right before, 2 of
    # them lost and none gained: a -50 % drift, catastrophic by the percentage alone, McNemar p = 0.5.
    initial = world("initial", arith=[True] * 4 + [False] * 26)
    v = judge(initial, world("child", arith=[False] * 2 + [True] * 2 + [False] * 26, sql=SQL_UP))
    nums = check(v, "captrack").numbers
    assert nums["CAN/C1.drift_pct"] == pytest.approx(-50.0)
    assert (nums["CAN/C1.raw_severity"], nums["CAN/C1.severity"], nums["CAN/C1.n_items"]) == ("catastrophic", "moderate", 30)
    assert nums["CAN/C1.mcnemar_p"] == pytest.approx(0.5) and v.promote
    # world 1 (S11): 131 of 200 right before, 23 lost and 7 gained: -12.2 %, p = 0.0052, a real loss
    initial = world("initial", arith=[True] * 131 + [False] * 69)
    v = judge(initial, world("child", arith=[False] * 23 + [True] * 108 + [True] * 7 + [False] * 62, sql=SQL_UP))
    nums = check(v, "captrack").numbers
    assert (nums["CAN/C1.mcnemar_b"], nums["CAN/C1.mcnemar_c"]) == (23, 7)
    assert nums["CAN/C1.drift_pct"] == pytest.approx(-1600.0 / 131) and nums["CAN/C1.paired_delta_pp"] == pytest.approx(-8.0)
    assert nums["CAN/C1.mcnemar_p"] == pytest.approx(stats.binomtest(7, 30).pvalue)
    assert nums["CAN/C1.mcnemar_p"] < 0.05
    assert nums["CAN/C1.severity"] == "severe" and not v.promote and v.decided_by == "captrack"


def test_the_minimum_is_a_frozen_gate_field():
    initial = world("initial", arith=[True] * 6 + [False])
    child = world("child", arith=[True] * 5 + [False] * 2, sql=SQL_UP)
    assert judge(initial, child, GateConfig(min_severe_items=7)).decided_by == "captrack"
    frozen = RUN_GATE.model_dump(mode="json")  # what the manifest freezes
    assert (frozen["min_severe_items"], frozen["severe_needs_significant_loss"]) == (30, True)
    assert GateConfig.model_validate({k: v for k, v in frozen.items()
                                      if k != "severe_needs_significant_loss"}).severe_needs_significant_loss is False
    prof = captrack_profile(initial, child, SPECS, RUN_GATE)
    assert {c.name: c.severity for c in prof.subs + prof.groups}["CAN"] == "moderate"


def test_unknown_items_are_left_out_and_counted():
    before = IFEVAL[:]
    before[0] = None
    after = IFEVAL[:]
    after[0], after[1], after[300] = None, None, None
    initial = world("initial", arith=[True] * 30 + [False] * 10, ifeval=before)
    v = judge(initial, world("child", arith=[True] * 30 + [False] * 10, ifeval=after, sql=SQL_UP))
    nums = check(v, "ifeval_guard").numbers
    assert (nums["n_items"], nums["unknown_pairs"]) == (397, 3)
    assert (nums["mcnemar_b"], nums["mcnemar_c"], nums["paired_se_pp"]) == (0, 0, 0.0)
    assert not v.promote and v.decided_by == "hard_failures"  # an UNKNOWN item still never passes


def test_a_metric_no_probe_explains_fails_closed():
    initial = world("initial", arith=[True] * 30 + [False] * 10)
    specs = (*SPECS, MetricSpec(name="captrack.can_fact", group="CAN", sub="C1", direction="higher", floor=5.0))
    child = world("child", arith=[True] * 30 + [False] * 10, sql=SQL_UP)
    for r in (initial, child):
        r["captrack"] = r["captrack"].model_copy(update={"metrics": {**r["captrack"].metrics, "can_fact": 50.0}})
    v = gate(initial, initial, child, GateConfig(), specs, target_suite="sql/target", target_metric="exec_acc",
             family_targets=FAMILY_TARGETS)
    assert not v.promote and v.decided_by == "hard_failures" and "matches no probe" in v.checks[0].reason


def test_the_report_shows_each_check_beside_its_noise():
    from agent.views.report import NOISE_HEADER, noise_rows

    initial = world("initial", arith=[True] * 6 + [False])
    v = judge(initial, world("child", arith=[True] * 5 + [False] * 2, sql=SQL_UP))
    rows = {r[2]: dict(zip(NOISE_HEADER, r)) for r in noise_rows([(3, "S08", v)])}
    assert set(rows) == {"ifeval_guard", "target", "captrack CAN/C1", "captrack CAN", "captrack WILL", "captrack HOW"}
    c1 = rows["captrack CAN/C1"]
    assert (c1["items"], c1["passed"], c1["regime"]) == (7, "pass", "moderate (capped from severe: too few items)")
    old = check(v, "captrack").numbers.copy()
    del old["CAN/C1.capped_by"]  # a verdict stored before the gate said why: too few items was the only reason
    verdict = v.model_copy(update={"checks": tuple(c.model_copy(update={"numbers": old}) if c.name == "captrack" else c
                                                   for c in v.checks)})
    assert {r[2]: r[-1] for r in noise_rows([(3, "S08", verdict)])}["captrack CAN/C1"] == c1["regime"]
    target = check(v, "target").numbers
    assert rows["target"]["paired SE pp"] == target["paired_se_pp"] and rows["target"]["items"] == 40
