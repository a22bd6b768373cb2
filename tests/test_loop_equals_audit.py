"""The guarantee behind "one owner per rule": for every policy, the decisions the real loop
takes equal policies.audit's counterfactual walk over the same frozen inputs.

The loop's nodes, the policy code, the ledger, the audit writer and the run directory are
real; fakes stand only at the world / trainer / evaluator boundary: the compiler's features
and each trial's verdict are drawn by hypothesis, a training run writes a fake model.
bcit_predictive reads a small go/no-go fitted by the real code on synthetic paired runs
(support/gonogo_fixture.py), frozen into the run as `agent run` freezes it; the walk reads
the run's frozen copy; a model whose prior-only head authorizes (support/gonogo_fixture.skip_model)
makes bcit_predictive skip trials, in the loop's routing and in the walk's alike. A run may also freeze a forgetting extrapolation (support/extrapolation_fixture.py):
then, for every policy, a trial whose IFEval change extrapolated to full length breaks the guard is a
Fail in the loop and in the walk alike (policies.trial_rules.acted_verdict).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.loop.episode import drive
from agent.run.extrapolation_model import frozen_guard
from agent.run.gonogo_model import frozen_model
from policies import POLICIES
from policies.audit import Cell, walk
from policies.decision_ledger import read_outcomes, verify_ledger
from policies.authorize import NEEDS_GONOGO
from policies.curves import card_facts
from policies.features import features_from_row
from policies.gonogo import top_contributions
from policies.predictive import prior_decision
from policies.trial_rules import TRIAL_RULES
from support import extrapolation_fixture
from support.gonogo_fixture import write_model, write_skip_model
from support.graph_fakes import FakePorts, make_ctx

SCORE = st.sampled_from([0.0, 0.5, 1.0])


@st.composite
def candidate(draw, i: int) -> dict:
    new = draw(st.booleans()) if i % 3 == 2 else False
    grade = None if new else draw(st.sampled_from(["A", "B", "C"]))
    return {"id": f"S{i:02d}", "grade": grade, "is_new": new,
            "delta_src": None if new else draw(st.sampled_from([-2.0, 0.0, 3.0, 6.0, 10.0])),
            "kappa": None if new else 10.0, "family": draw(SCORE), "data": draw(SCORE), "runtime": 1.0,
            "parent": draw(SCORE), "protocol": 1.0, "H": draw(st.sampled_from([0, 0, 0, 1])),
            "nu": draw(st.sampled_from(["continue", "restart", "none"])),
            "chi": 1 if grade == "A" and draw(st.booleans()) else 0, "conflicted": draw(st.booleans()) if grade == "A" else False}


class DrawnPorts(FakePorts):
    """FakePorts whose features and trial verdicts are the drawn ones."""

    def __init__(self, run_dir, rows, verdicts, gains, shapes=None, retention=None):
        super().__init__(run_dir)
        self.rows, self.verdicts, self.gains, self.shapes = rows, verdicts, gains, shapes or {}
        self.retention = retention or {}

    def compile(self, entry, ctx):
        return features_from_row(self.rows[entry.record.card.id])

    def trial(self, card, parent_dir, out_dir, run_key, measure):
        from experience_bank.results import TrialResult

        from experience_bank.results import TrialPoint

        run = self._train(card, parent_dir, out_dir, run_key, self.gains[card.id] * 0.2, "trial")
        # the trial's curve (read by a policy with its own trial rule): none, or the target growing
        # as f (linear) or f**0.3 (early) towards its 20 % reading
        shape, end = self.shapes.get(card.id), self.gains[card.id] * 0.2
        shares = (0.05, 0.10, 0.2) if shape else (0.2,)
        # both IFEval strict readings: 0 on the way, the drawn one (default 0) at the trial's end
        ifeval = lambda f: {m: self.retention.get(card.id, 0.0) if f == 0.2 else 0.0  # noqa: E731
                            for m in ("ifeval.prompt_strict", "ifeval.inst_strict")}
        curve = tuple(TrialPoint(fraction=f, step=max(1, round(f * 100)), retention_deltas=ifeval(f),
                                 delta_val=end * (f / 0.2) ** (1.0 if shape == "linear" else 0.3)) for f in shares)
        return TrialResult(verdict=self.verdicts[card.id], delta_val=end, retention_deltas=ifeval(0.2),
                           reasons=("drawn",), train=run, curve=curve)

    def train(self, card, parent_dir, out_dir, run_key, resume_from):
        return self._train(card, parent_dir, out_dir, run_key, self.gains[card.id], "train")


def _run(run_dir: Path, policy: str, lease: int, rows: list[dict], verdicts: dict, gains: dict,
         shapes: dict | None = None, retention: dict | None = None, skip: bool = False):
    """Drive one episode in `run_dir`: (events, outcome cells by decision hash, policy config, cells
    as the audit builds them, the run's frozen go/no-go, its frozen retention guard). `retention`:
    each card's IFEval readings at 20 %; given, the run freezes the extrapolation fixture. `skip`: the
    go/no-go is the skip fixture (its prior-only threshold 0.5: grade A and B evidence skips the trial)."""
    cards = tuple(r["id"] for r in rows)
    ports = DrawnPorts(run_dir, {r["id"]: r for r in rows}, verdicts, gains, shapes, retention)
    model = None
    if policy in NEEDS_GONOGO:
        model = str(write_skip_model(run_dir / "model.json", prior_threshold=0.5) if skip
                    else write_model(run_dir / "model.json"))
    fit = str(extrapolation_fixture.write_model(run_dir / "fit.json")) if retention is not None else None
    ctx, initial, bank = make_ctx(run_dir, policy=policy, fallback_lease=lease, cards=cards, ports=ports,
                                  max_rejections=len(rows) + 1, gonogo_model=model, extrapolation_model=fit)
    try:
        drive(ctx, initial, run_dir / "checkpoints.sqlite")
        events = bank.events("E-fake")
    finally:
        bank.close()
    outcomes = read_outcomes(ctx.rundir.outcomes_file if ctx.rundir.outcomes_file.exists() else None)
    facts = {e.record.card.id: card_facts(e.record.card) for e in ctx.entries.values()}
    cells = [Cell(e.candidate_id, "E-fake", e.decision.features, e.decision.features, e.decision.features.nu,
                  outcomes.get(e.decision.decision_hash), facts[e.candidate_id]) for e in events]
    return (events, outcomes, ctx.manifest.policy.config, cells, frozen_model(ctx.rundir, ctx.manifest),
            frozen_guard(ctx.rundir, ctx.manifest))


def _episode(policy: str, lease: int, rows: list[dict], verdicts: dict, gains: dict, shapes: dict | None = None,
             retention: dict | None = None, skip: bool = False):
    """(events, outcome cells, policy config, cells as the audit builds them, the run's frozen go/no-go
    and retention guard)."""
    run_dir = Path(tempfile.mkdtemp(prefix="loop-audit-"))
    try:
        return _run(run_dir, policy, lease, rows, verdicts, gains, shapes, retention, skip)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(sorted(POLICIES)), lease=st.integers(0, 2), data=st.data())
def test_loop_decides_as_the_audit_walk_says(policy, lease, data):
    _loop_equals_walk(policy, lease, data, n=st.integers(3, 7), gain=st.sampled_from([-3.0, 0.0, 4.0]))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(sorted(TRIAL_RULES)), lease=st.integers(0, 1), data=st.data())
def test_a_policy_with_its_own_trial_rule_decides_in_the_loop_as_in_the_walk(policy, lease, data):
    """The same property for every policy whose trial verdict is its own (drawn at every run, not by
    chance among all policies), with more candidates and gains, so successive halving ranks past
    k = 5 and meets ties."""
    _loop_equals_walk(policy, lease, data, n=st.integers(4, 9), gain=st.sampled_from([-3.0, 0.0, 1.0, 2.5, 4.0]))


def _loop_equals_walk(policy: str, lease: int, data, n, gain) -> None:
    n = data.draw(n, label="candidates")
    rows = [data.draw(candidate(i), label=f"row{i}") for i in range(n)]
    verdicts = {r["id"]: data.draw(st.sampled_from(["pass", "fail", "inconclusive"])) for r in rows}
    gains = {r["id"]: data.draw(gain) for r in rows}
    shapes = {r["id"]: data.draw(st.sampled_from([None, "linear", "early"])) for r in rows}
    # with an extrapolation model (growth -3 pp), a 20 % reading of 0 breaks the -2 pp guard at full length, 2.5 not
    retention = ({r["id"]: data.draw(st.sampled_from([0.0, 2.5])) for r in rows}
                 if data.draw(st.booleans(), label="extrapolation model") else None)
    skip = policy in NEEDS_GONOGO and data.draw(st.booleans(), label="a go/no-go whose prior-only head skips")
    events, _, config, cells, model, guard = _episode(policy, lease, rows, verdicts, gains, shapes, retention, skip)
    assert [e.candidate_id for e in events] == [r["id"] for r in rows]  # every candidate was decided
    assert (guard is None) == (retention is None)

    walked = walk(cells, policy, config, gonogo=model, retention=guard)
    assert [(e.action, e.decision.rule) for e in events] == [(w["action"], w["rule"]) for w in walked]
    # after the trial: what the walk authorizes is exactly what the loop trained
    for e, w in zip(events, walked):
        if e.action != "reject":
            assert (e.full_run == "ran") == bool(w["authorized"]), (e.candidate_id, e.outcome, w)


def test_no_memory_spends_its_quota_in_the_loop(tmp_path):
    """Six historical candidates under no_memory: three validate, then the quota is spent."""
    rows = [{"id": f"S{i:02d}", "grade": "B", "is_new": False, "delta_src": 6.0, "kappa": 10.0, "family": 1.0,
             "data": 1.0, "runtime": 1.0, "parent": 1.0, "protocol": 1.0, "H": 0, "nu": "restart", "chi": 0}
            for i in range(6)]
    events = _episode("no_memory", 1, rows, {r["id"]: "fail" for r in rows}, {r["id"]: 0.0 for r in rows})[0]
    assert [e.action for e in events] == ["validate"] * 3 + ["reject"] * 3
    assert {e.decision.rule for e in events[3:]} == {"no_memory.quota_exhausted"}


def test_early_stop_extrapolation_acts_on_the_curve_and_records_the_trials_own_verdict():
    """Three candidates whose trials all 'pass' at 20 %: early stop trains the one whose curve reaches
    the 1 pp adoption threshold at full length (4 pp, linear), rejects the one that stays at 0 and
    leaves the one without a curve to the lease (0: rejected); every event keeps the trial's own verdict."""
    rows = [{"id": f"S{i:02d}", "grade": "B", "is_new": False, "delta_src": 6.0, "kappa": 10.0, "family": 1.0,
             "data": 1.0, "runtime": 1.0, "parent": 1.0, "protocol": 1.0, "H": 0, "nu": "restart", "chi": 0}
            for i in range(3)]
    gains = {"S00": 4.0, "S01": 0.0, "S02": 4.0}
    events, _, config, cells, _, _ = _episode("early_stop_extrapolation", 0, rows, {r["id"]: "pass" for r in rows}, gains,
                                           {"S00": "early", "S01": "linear", "S02": None})
    assert [e.trial_verdict for e in events] == ["pass"] * 3
    assert [e.full_run for e in events] == ["ran", "not_authorized", "not_authorized"]
    assert "extrapolated to 0 pp" in events[1].reason and "no curve" in events[2].reason
    assert [w["authorized"] for w in walk(cells, "early_stop_extrapolation", config)] == [True, False, False]
    assert [w["authorized"] for w in walk(cells, "validate_all", config)] == [True, True, True]


def test_successive_halving_continues_the_top_fifth_in_the_loop_and_in_the_audit(tmp_path):
    """Eight candidates whose trial gains are 3 1 4 1 5 9 2 6 pp (a fifth of the full gains), lease 0.
    By hand, eta = 5: k = 1..5 keep the top 1 (cut-offs 3 3 4 4 5), k = 6..8 the top 2 (cut-offs 5 5 6),
    so S00, S02, S04, S05 and S07 rank in. S02's trial is Inconclusive: its rank continues it without a
    lease; S05's trial Fails: it stays rejected, and its 9 pp still holds a place (S07 ranks second).
    validate_all, on the same cells, trains every Pass and nothing else."""
    rows = [{"id": f"S{i:02d}", "grade": "B", "is_new": False, "delta_src": 6.0, "kappa": 10.0, "family": 1.0,
             "data": 1.0, "runtime": 1.0, "parent": 1.0, "protocol": 1.0, "H": 0, "nu": "restart", "chi": 0}
            for i in range(8)]
    gains = dict(zip((r["id"] for r in rows), (15.0, 5.0, 20.0, 5.0, 25.0, 45.0, 10.0, 30.0)))
    verdicts = {r["id"]: "pass" for r in rows} | {"S02": "inconclusive", "S05": "fail"}
    events, _, config, cells, _, _ = _run(tmp_path, "successive_halving", 0, rows, verdicts, gains)
    assert [e.action for e in events] == ["validate"] * 8
    assert [e.trial_verdict for e in events] == [verdicts[r["id"]] for r in rows]  # the trial's own
    ran = [e.candidate_id for e in events if e.full_run == "ran"]
    assert ran == ["S00", "S02", "S04", "S07"]
    assert "not among the top 1 of 2" in events[1].reason and "the trial failed" in events[5].reason
    # the ledger freezes each decision's episode state: the gains of the trials before it (none: no key)
    states = [json.loads(line)["inputs"]["state"] for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert "trial_gains" not in states[0]
    assert states[7]["trial_gains"] == pytest.approx([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0])
    assert [w["authorized"] for w in walk(cells, "successive_halving", config)] == [
        True, False, True, False, True, False, False, True]
    assert [w["authorized"] for w in walk(cells, "validate_all", config)] == [
        True, True, False, True, True, False, True, True]


def test_bcit_predictive_acts_on_the_go_no_go_and_the_audit_recomputes_it():
    """Three candidates BCIT validates: a trial that passes with a rising curve goes on (the model's
    P(harmful) is under its threshold), one that passes with a falling curve is stopped, and one
    whose own verdict is Fail stays a Fail whatever its curve; the walk over the frozen model agrees."""
    rows = [{"id": f"S{i:02d}", "grade": "B", "is_new": False, "delta_src": 6.0, "kappa": 10.0, "family": 1.0,
             "data": 1.0, "runtime": 1.0, "parent": 1.0, "protocol": 1.0, "H": 0, "nu": "restart", "chi": 0}
            for i in range(3)]
    events, _, config, cells, model, _ = _episode("bcit_predictive", 0, rows, {"S00": "pass", "S01": "pass", "S02": "fail"},
                                               {"S00": 4.0, "S01": -3.0, "S02": 4.0},
                                               {"S00": "linear", "S01": "linear", "S02": "linear"})
    assert [e.decision.rule for e in events] == ["bcit_predictive.validate"] * 3
    assert [e.full_run for e in events] == ["ran", "not_authorized", "not_authorized"]
    assert [e.trial_verdict for e in events] == ["pass", "pass", "fail"]  # the trial's own, recorded
    # a stopped trial's reason is the model's; a trained one's is the gate's, its contributions kept beside
    assert "-> no-go" in events[1].reason and "kept" in events[2].reason and events[0].reason.startswith("gate:")
    assert all(len(e.trial_contributions) == 5 for e in events)
    assert [w["authorized"] for w in walk(cells, "bcit_predictive", config, gonogo=model)] == [True, False, False]
    # without the frozen model the audit cannot tell: undetermined, never guessed
    assert [w["authorized"] for w in walk(cells, "bcit_predictive", config)] == [None, None, None]


def test_the_extrapolated_retention_fails_a_passing_trial_in_the_loop_and_in_the_audit(tmp_path):
    """Two candidates validate_all validates, both trials a Pass at 20 %, under the extrapolation
    fixture (full length = 20 % reading - 3 pp). S00 reads 0 at 20 %: -3 at full length, below the
    -2 pp guard, so the verdict acted on is Fail though the trial passed; S01 reads 2.5: -0.5, it goes
    on. Under early stop, whose own rule would pass a 4 pp curve, a reading of 0 is a Fail as well.
    The event keeps the trial's own Pass beside both numbers; the walk over the frozen model agrees,
    and without it the walk would have trained every one."""
    rows = [{"id": f"S{i:02d}", "grade": "B", "is_new": False, "delta_src": 6.0, "kappa": 10.0, "family": 1.0,
             "data": 1.0, "runtime": 1.0, "parent": 1.0, "protocol": 1.0, "H": 0, "nu": "restart", "chi": 0}
            for i in range(2)]
    events, _, config, cells, _, guard = _run(tmp_path, "validate_all", 0, rows, {"S00": "pass", "S01": "pass"},
                                              {"S00": 4.0, "S01": 4.0}, retention={"S00": 0.0, "S01": 2.5})
    assert [e.trial_verdict for e in events] == ["pass", "pass"]  # the trial's own
    assert [e.full_run for e in events] == ["not_authorized", "ran"]
    x = [e.trial_retention_extrapolated for e in events]
    assert [(v.reading_pp["ifeval.prompt_strict"], v.predicted_pp["ifeval.inst_strict"], v.safe) for v in x] == [
        (0.0, -3.0, False), (2.5, -0.5, True)]
    # the fixture holds sft runs without an adapter kind: the card's (sft, adapter) group falls back to sft/*
    assert (x[0].group, x[0].footing, x[0].drop_pp, guard.drop_pp) == ("sft/*", "parent", 2.0, 2.0)
    assert "has fewer than 4 runs" in x[0].fallback
    assert ("IFEval prompt strict +0.0 pp at 20 %, extrapolated -3.0 pp at full length [-3.0, -3.0]"
            in events[0].reason and "guard -2 pp" in events[0].reason)
    assert [w["authorized"] for w in walk(cells, "validate_all", config, retention=guard)] == [False, True]
    assert [w["authorized"] for w in walk(cells, "validate_all", config)] == [True, True]
    # `agent audit RUN_DIR` reads the run's frozen copy and its guard, as the loop did
    from agent.cli.decide import _frozen_retention  # noqa: PLC0415
    assert _frozen_retention(str(tmp_path)) == guard
    report = (tmp_path / "report.md").read_text()
    assert "IFEval prompt at full length pp [95 %]" in report and "-3.00 [-3.00, -3.00]" in report
    # an event without the check keeps its bytes: the field is omitted, not null
    assert "trial_retention_extrapolated" not in events[0].model_copy(
        update={"trial_retention_extrapolated": None}).model_dump_json()

    early = tmp_path / "early"
    early.mkdir()
    events, _, config, cells, _, guard = _run(early, "early_stop_extrapolation", 0, rows[:1], {"S00": "pass"},
                                              {"S00": 4.0}, {"S00": "linear"}, retention={"S00": 0.0})
    assert (events[0].trial_verdict, events[0].full_run) == ("pass", "not_authorized")
    assert [w["authorized"] for w in walk(cells, "early_stop_extrapolation", config, retention=guard)] == [False]
    assert [w["authorized"] for w in walk(cells, "early_stop_extrapolation", config)] == [True]


def test_bcit_predictive_skips_the_trial_where_the_prior_authorizes_in_the_loop_and_in_the_audit(tmp_path):
    """Three candidates under the skip fixture (prior-only threshold 0.5). S00, grade B evidence of
    10 pp: BCIT validates it, the prior-only P(harmful) is far under 0.5, so it trains without a
    trial. S01, grade C evidence of 6 pp: BCIT validates it, P(harmful) is above 0.5, its trial runs.
    S02, S00's evidence under a hard conflict: the veto stands. The walk over the frozen model
    agrees; without it the two Validates are undetermined (either could have been a skip)."""
    base = {"grade": "B", "is_new": False, "delta_src": 10.0, "kappa": 10.0, "family": 1.0, "data": 1.0,
            "runtime": 1.0, "parent": 1.0, "protocol": 1.0, "H": 0, "nu": "restart", "chi": 0}
    rows = [base | {"id": "S00"}, base | {"id": "S01", "grade": "C", "delta_src": 6.0}, base | {"id": "S02", "H": 1}]
    events, _, config, cells, model, _ = _run(tmp_path, "bcit_predictive", 0, rows, {r["id"]: "pass" for r in rows},
                                              {r["id"]: 4.0 for r in rows}, {r["id"]: "linear" for r in rows}, skip=True)
    assert model.prior.threshold.threshold == 0.5
    assert [(e.action, e.decision.rule) for e in events] == [
        ("train", "bcit_predictive.prior_skip"), ("validate", "bcit_predictive.validate"),
        ("reject", "bcit_predictive.hard_conflict")]
    skipped, tried = events[0], events[1]
    p00, p01 = (prior_decision(model, c.card, c.features) for c in cells[:2])
    assert p00.p_harmful < 0.5 < p01.p_harmful
    assert skipped.decision.numbers["prior_p_harmful"] == p00.p_harmful and skipped.decision.numbers["prior_threshold"] == 0.5
    assert tried.decision.numbers["prior_p_harmful"] == p01.p_harmful
    # the skipped candidate ran no trial, trained, and says why; the other ran its trial
    assert (skipped.trial_verdict, skipped.trial_device_hours, skipped.full_run) == (None, 0.0, "ran")
    assert skipped.prior_contributions == top_contributions(p00) and len(skipped.prior_contributions) == 5
    assert tried.trial_verdict == "pass" and not tried.prior_contributions and tried.trial_contributions
    walked = walk(cells, "bcit_predictive", config, gonogo=model)
    assert [(w["action"], w["rule"]) for w in walked] == [(e.action, e.decision.rule) for e in events]
    assert [w["authorized"] for w in walked][0] is True and walked[0]["spent"] == cells[0].outcome.full_device_hours
    blind = walk(cells, "bcit_predictive", config)
    assert [w["action"] for w in blind] == [None, None, "reject"]
    # `agent audit RUN_DIR`: the frozen copy recomputes every decision; without it, the two Validates cannot be
    lines = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert [p for p in verify_ledger(lines, model)[0] if "do not recompile" not in p] == []
    unverified = [p for p in verify_ledger(lines)[0] if "do not recompile" not in p]
    assert [p.split(":")[0] for p in unverified] == ["line 1", "line 2"]
    assert all("reads the run's frozen go/no-go model" in p for p in unverified)
    report = (tmp_path / "report.md").read_text()
    assert "Go/no-go: trials skipped on the evidence" in report and f"| {round(p00.p_harmful, 3)} | 0.5 |" in report
