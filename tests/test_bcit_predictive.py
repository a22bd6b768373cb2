"""bcit_predictive (issue 27, item 3): BCIT's routing, the learned go/no-go's trial verdict, the
model file frozen into the run, and the contributions each decision reports.

The model is fitted by the real code (policies.gonogo.fit) on synthetic paired runs
(support/gonogo_fixture.py); the loop runs on the fakes of support/graph_fakes.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from agent.cli.decide import _frozen_gonogo
from agent.cli.main import main
from agent.run.gonogo_model import check_resume, frozen_model
from agent.run.rundir import RunDir
from experience_bank.bank import Bank
from experience_bank.errors import BadInput
from experience_bank.hashing import sha256_text
from policies import EpisodeState, PolicyConfig, authorize, gonogo, gonogo_features
from policies.audit import cells_from_entries, walk
from policies.decision_ledger import read_outcomes, verify_ledger
from policies.curves import CONTROL_FOOTING_WARNING, CardFields, trial_curve
from policies.features import features_from_row
from policies.predictive import verdict
from support.gonogo_fixture import fitted_model, write_model
from support.graph_fakes import make_ctx, run_fake

CARD = CardFields(family="sql", method="sft", adapter="lora", learning_rate=1e-4, nominal_steps=100, replay_share=0.0)
RISING = {f"{f:.2f}": {"target": 0.8 * f / 0.2, "ifeval.prompt_strict": 0.0} for f in (0.05, 0.10, 0.20)}
FALLING = {f"{f:.2f}": {"target": -0.6 * f / 0.2, "ifeval.prompt_strict": 0.0} for f in (0.05, 0.10, 0.20)}
ROW = {"id": "S01", "grade": "B", "is_new": False, "delta_src": 6.0, "kappa": 10.0, "family": 1.0, "data": 1.0,
       "runtime": 1.0, "parent": 1.0, "protocol": 1.0, "H": 0, "nu": "restart", "chi": 0}


@pytest.fixture(scope="module")
def model() -> gonogo.GoNoGo:
    return fitted_model()


def _decision(model, curve):
    features = features_from_row(ROW)
    record = features.model_dump(include={"S", "A", "grade"})
    return gonogo.decide(model, gonogo_features.probe_features(trial_curve(curve), CARD, record)), features


def _with_threshold(model, t, floor=None):
    return model.model_copy(update={"threshold": model.threshold.model_copy(update={"threshold": t}),
                                    "beneficial_floor": floor})


# --- routing ---------------------------------------------------------------------------------------


def test_it_routes_as_bcit_under_its_own_rule_names():
    for row in (ROW, ROW | {"H": 1}, ROW | {"nu": "none"}, ROW | {"grade": "A", "chi": 1, "delta_src": 10.0}):
        f, st, cfg = features_from_row(row), EpisodeState(), PolicyConfig()
        ours, bcit = authorize(f, "bcit_predictive", st, cfg), authorize(f, "bcit", st, cfg)
        assert ours.action == bcit.action and ours.rule == bcit.rule.replace("bcit.", "bcit_predictive.")


# --- the verdict -----------------------------------------------------------------------------------


def test_the_verdict_follows_the_models_threshold(model):
    d, features = _decision(model, FALLING)
    above, below = _with_threshold(model, math.floor(d.p_harmful * 100) / 100), _with_threshold(model, 0.99)
    assert verdict(below, "pass", FALLING, CARD, features)[0] == "pass"          # P(harmful) <= t: go
    label, why, _ = verdict(above, "pass", FALLING, CARD, features)
    assert label == "fail" and f"P(harmful) {d.p_harmful:.3f} above threshold" in why
    assert verdict(below, "inconclusive", FALLING, CARD, features)[0] == "pass"  # the model decides, no lease



def test_a_model_that_certified_no_threshold_has_no_say_the_trials_own_verdict_stands(model):
    # before stop 54 it failed every trial: bcit_predictive was "reject everything" on such a world
    d, features = _decision(model, RISING)
    deferring = _with_threshold(model, None, gonogo.BENEFICIAL_FLOOR)
    assert gonogo.defers(deferring) and not gonogo.defers(model)
    for own in ("pass", "inconclusive", "fail"):
        label, why, top = verdict(deferring, own, RISING, CARD, features)
        assert label == own and top == gonogo.top_contributions(d)
    assert verdict(deferring, "fail", RISING, CARD, features)[1].endswith("(a guardrail fired), kept")
    why = verdict(deferring, "inconclusive", RISING, CARD, features)[1]
    assert why == (f"go/no-go: certified no threshold, so the trial's own verdict (inconclusive) stands "
                   f"(P(harmful) {d.p_harmful:.3f}, P(beneficial) {d.p_beneficial:.3f})")


def test_the_floor_on_p_beneficial_stops_a_go_the_threshold_allows(model):
    d, features = _decision(model, FALLING)
    assert model.beneficial_floor == gonogo.BENEFICIAL_FLOOR and not d.go and d.p_beneficial < 0.5
    just_under, just_over = math.floor(d.p_beneficial * 1000) / 1000, math.ceil(d.p_beneficial * 1000) / 1000
    label, why, _ = verdict(_with_threshold(model, 0.99, just_over), "pass", FALLING, CARD, features)
    assert label == "fail" and f"P(beneficial) {d.p_beneficial:.3f} below floor {just_over:g}" in why
    assert f"P(harmful) {d.p_harmful:.3f} <= threshold 0.99" in why
    assert verdict(_with_threshold(model, 0.99, just_under), "pass", FALLING, CARD, features)[0] == "pass"
    # the floor never lets through what the threshold stops
    r, features_r = _decision(model, RISING)
    stops = _with_threshold(model, math.floor(r.p_harmful * 1000) / 1000 - 0.001, 0.0)
    assert verdict(stops, "pass", RISING, CARD, features_r)[0] == "fail"


def test_the_fixture_model_stops_a_falling_trial_and_lets_a_rising_one_go(model):
    assert model.threshold.threshold is not None and model.harmful.kind == "logistic"
    assert _decision(model, RISING)[0].go and not _decision(model, FALLING)[0].go


def test_a_trials_own_fail_stays_a_fail(model):
    d, features = _decision(model, RISING)
    assert d.go
    label, why, top = verdict(model, "fail", RISING, CARD, features)
    assert label == "fail" and "kept" in why and top == gonogo.top_contributions(d)


def test_the_contributions_are_the_coefficients_times_the_standardised_features(model):
    d, features = _decision(model, FALLING)
    record = {"S": features.S, "A": features.A, "grade": features.grade}
    x = np.array([gonogo_features.probe_features(trial_curve(FALLING), CARD, record)[n] for n in model.feature_names])
    z = (x - np.array(model.mean)) / np.array(model.scale)
    assert list(d.contributions.values()) == pytest.approx(list(np.array(model.harmful.coef) * z))
    # they sum, with the intercept, to P(harmful)'s log-odds
    assert model.harmful.intercept + sum(d.contributions.values()) == pytest.approx(
        math.log(d.p_harmful / (1 - d.p_harmful)))
    top = gonogo.top_contributions(d)
    assert len(top) == gonogo.TOP_CONTRIBUTIONS
    shown = [abs(d.contributions[name]) for name, _ in top]
    assert shown == sorted(shown, reverse=True) and [v for _, v in top] == [round(d.contributions[n], 4) for n, _ in top]
    assert min(shown) >= max(abs(v) for k, v in d.contributions.items() if k not in dict(top))


# --- the model file as a frozen boundary --------------------------------------------------------


def _listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("extra, needle", [
    ([], "agent gonogo SOURCES --model OUT.json"),
    (["--gonogo-model", "missing.json"], "go/no-go model missing.json does not exist"),
    (["--gonogo-model", "bad.json"], "--gonogo-model bad.json: invalid go/no-go model"),
    (["--gonogo-model", "cut.json"], "--gonogo-model cut.json: invalid go/no-go model: not valid JSON"),  # the file and the fix, not just the defect
])
def test_a_missing_or_defective_model_is_bad_input_and_writes_nothing(tmp_path, monkeypatch, capsys, extra, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text('{"feature_names": []}')
    (tmp_path / "cut.json").write_text('{"feature_names": [')
    before = _listing(tmp_path)
    assert main(["run", "--policy", "bcit_predictive", "--out", "runs/ep-x", "--bank", "b.sqlite", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and ("agent gonogo SOURCES --model OUT.json" in err[0] or "exist" in err[0])
    assert _listing(tmp_path) == before


def test_the_manifest_freezes_the_model_and_the_run_keeps_a_copy(tmp_path, model):
    path = write_model(tmp_path / "model.json")
    ctx, _, bank = make_ctx(tmp_path / "run", policy="bcit_predictive", gonogo_model=str(path))
    bank.close()
    info = ctx.manifest.gonogo
    assert info.sha256 == sha256_text(path.read_text()) == sha256_text(ctx.rundir.gonogo_file.read_text())
    assert (info.training_hash, info.threshold, info.alpha, info.delta, info.feature_names, info.sklearn_version) == (
        model.training_hash, model.threshold.threshold, model.alpha, model.delta, model.feature_names,
        model.sklearn_version)
    assert frozen_model(ctx.rundir, ctx.manifest) == model
    # the fixture's runs have no parent scores: the run uses the model and warns that its footing is not the loop's
    assert (model.footing, info.footing, info.footing_warning) == ("control", "control", CONTROL_FOOTING_WARNING)
    # every other policy's manifest holds none, and reads none
    other, _, bank = make_ctx(tmp_path / "bcit", policy="bcit", gonogo_model=str(path))
    bank.close()
    assert other.manifest.gonogo is None and frozen_model(other.rundir, other.manifest) is None


def test_a_changed_model_file_or_frozen_copy_refuses_the_resume(tmp_path):
    path = write_model(tmp_path / "model.json")
    ctx, _, bank = make_ctx(tmp_path / "run", policy="bcit_predictive", gonogo_model=str(path))
    bank.close()
    check_resume(ctx.rundir, ctx.manifest)  # unchanged: fine
    path.unlink()
    check_resume(ctx.rundir, ctx.manifest)  # the user's file gone: the frozen copy decides
    write_model(path, alpha=0.3)            # refit in place
    with pytest.raises(BadInput, match="changed since run started"):
        check_resume(ctx.rundir, ctx.manifest)
    write_model(path)
    ctx.rundir.gonogo_file.write_text(ctx.rundir.gonogo_file.read_text().replace('"alpha":0.1', '"alpha":0.25'))
    with pytest.raises(BadInput, match="differs from the model the run froze"):
        check_resume(ctx.rundir, ctx.manifest)


# --- the episode, its report and its audit ---------------------------------------------------------


def test_an_episode_reports_why_and_its_audit_recomputes_every_verdict_from_the_frozen_copy(tmp_path):
    path = write_model(tmp_path / "model.json")
    run = tmp_path / "run"
    run_fake(run, policy="bcit_predictive", gonogo_model=str(path), max_rejections=10)
    report = (run / "report.md").read_text()
    assert "Go/no-go: why each trial went on or stopped" in report and f"Warning: {CONTROL_FOOTING_WARNING}." in report
    path.write_text(gonogo.dumps(fitted_model(alpha=0.3)))  # the user's file no longer matters to the audit
    model = _frozen_gonogo(str(run))
    assert model == fitted_model()
    # the fake compiler's features do not recompile from the records (that is all verify_ledger finds);
    # the walk reads the frozen inputs as `agent audit` does: each cell's card from its frozen record
    problems, entries, _ = verify_ledger([json.loads(line) for line in (run / "decisions.jsonl").read_text().splitlines()])
    assert all("do not recompile" in p for p in problems)
    cells = cells_from_entries(entries, read_outcomes(run / "outcomes.jsonl"))
    walked = walk(cells, "bcit_predictive", entries[0].config, gonogo=model)
    bank = Bank.open(run / "bank.sqlite")
    events = bank.events("E-fake")
    bank.close()
    assert [w["action"] for w in walked] == [e.decision.action for e in entries]
    validated = [(c.candidate_id, w["authorized"]) for c, w in zip(cells, walked) if w["action"] == "validate"]
    assert validated and all(authorized is not None for _, authorized in validated)
    assert [(e.candidate_id, e.full_run == "ran") for e in events if e.action == "validate"] == validated
    assert all(e.trial_contributions for e in events if e.action == "validate")
    # the event records what the validate node decided with (acted.json), not a recomputation
    rundir = RunDir(run)
    for e in (e for e in events if e.action == "validate"):
        acted = rundir.acted(e.decision.decision_hash)
        assert acted is not None and e.trial_contributions == acted.contributions
        assert acted.verdict == ("pass" if e.full_run == "ran" else "fail")


def test_compare_refuses_bcit_predictive_without_a_model_before_any_episode(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "--policies", "bcit,bcit_predictive", "--seeds", "2", "--out", "c"]) == 2
    assert "agent gonogo SOURCES --model OUT.json" in capsys.readouterr().err and not (tmp_path / "c").exists()


def test_a_model_fitted_on_the_parent_footing_is_frozen_without_a_warning(tmp_path, model):
    from agent.config import RunConfig  # noqa: PLC0415
    from agent.run.gonogo_model import read_model  # noqa: PLC0415
    path = tmp_path / "parent.json"
    path.write_text(gonogo.dumps(model.model_copy(update={"footing": "parent"})))
    _, info = read_model(RunConfig(policy="bcit_predictive", gonogo_model=str(path)))
    assert (info.footing, info.footing_warning) == ("parent", None)
