"""The learned go/no-go (policies/gonogo.py), its held-out evaluation (policies/gonogo_eval.py) and `agent gonogo`."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from agent.cli.main import main
from agent.experiments.retro_cells import IFEVAL_DROP_PP, MIN_EFFECT_PP
from experience_bank.errors import BadInput
from policies import gonogo, gonogo_features, ltt
from policies.curves import CurvePoint, PairedRun, paired_run
from policies.gonogo_eval import evaluate, figures, markdown
from policies.stats import clopper_pearson

DOC = Path(__file__).parents[1] / "docs/results/retrospective-default.json"
RULE = dict(band=MIN_EFFECT_PP, ifeval_drop_pp=IFEVAL_DROP_PP)


def _point(fraction: float, target: float, retention: float) -> CurvePoint:
    return CurvePoint(fraction=fraction, target_pp=target,
                      retention_pp={"ifeval.prompt_strict": retention, "ifeval.inst_strict": retention})


def _run(rng, card: str, seed: int = 0, world: int = 0, **card_fields) -> PairedRun:
    """A run whose trial foretells its full run, with noise: harmful, neutral or beneficial."""
    kind = rng.integers(3)
    target, retention = [(-4.0, -3.0), (0.0, 0.0), (4.0, 1.0)][kind]
    curve = tuple(_point(f, target * f * 5 + rng.normal(0, 1), retention * f * 5 + rng.normal(0, 1))
                  for f in (0.05, 0.10, 0.20))
    return PairedRun(card_id=card, family="sql", method="sft", seed=seed, world_seed=world, curve=curve,
                     full=_point(1.0, target + rng.normal(0, 0.2), retention), **card_fields)


def _runs(n_cards: int = 12, seeds: int = 2, worlds: int = 1, rng_seed: int = 0) -> list[PairedRun]:
    rng = np.random.default_rng(rng_seed)
    return [_run(rng, f"C{c:02d}", s, w) for w in range(worlds) for c in range(n_cards) for s in range(seeds)]


# --- features ----------------------------------------------------------------------------------------


def test_features_are_named_deterministic_and_flag_what_is_unknown():
    cell = json.loads(DOC.read_text())["cells"][0]
    run = paired_run(cell, world_seed=0)
    f = gonogo_features.features(run)
    assert tuple(f) == gonogo_features.FEATURE_NAMES and f == gonogo_features.features(paired_run(cell, world_seed=0))
    assert f["target@0.20"] == cell["short"]["0.20"]["target"]
    assert f["ifeval.inst_strict@0.10"] == cell["short"]["0.10"]["ifeval"]["inst_strict"]
    assert f["target_slope"] == pytest.approx((2.4531 - 2.4531) / 0.15)
    assert f["retention_min_slope"] == pytest.approx((3.9473 - 0.0) / 0.15)
    assert f["family_finance"] == 1.0 and f["method_grpo"] == 0.0
    assert (f["log10_lr_missing"], f["adapter_missing"], f["S_missing"], f["grade_missing"]) == (1.0, 1.0, 1.0, 1.0)
    known = run.model_copy(update={"adapter": "lora", "learning_rate": 1e-3, "nominal_steps": 128, "replay_share": 0.25})
    g = gonogo_features.features(known, {"S": 0.4, "A": 0.9, "grade": "B"})
    assert (g["adapter_lora"], g["log10_lr"], g["log2_steps"], g["replay_share"]) == (1.0, -3.0, 7.0, 0.25)
    assert (g["S"], g["A"], g["grade_B"], g["grade_missing"], g["log10_lr_missing"]) == (0.4, 0.9, 1.0, 0.0, 0.0)


def test_a_missing_short_run_is_flagged_not_guessed():
    run = _runs(1, 1)[0]
    f = gonogo_features.features(run.model_copy(update={"curve": run.curve[1:]}))
    assert (f["missing@0.05"], f["target@0.05"], f["target_slope"], f["missing@0.20"]) == (1.0, 0.0, 0.0, 0.0)


# --- the stored model --------------------------------------------------------------------------------


def test_the_json_model_predicts_what_sklearn_predicts():
    runs = _runs()
    model = gonogo.fit(runs, alpha=0.2, **RULE)
    loaded = gonogo.loads(gonogo.dumps(model))
    assert loaded == model and loaded.harmful.kind == loaded.beneficial.kind == "logistic"
    x = gonogo_features.matrix(runs)
    labels = np.array([r.outcome(**RULE) for r in runs])
    p_ben, p_harm = gonogo.predict(loaded, x)
    for p, cls in ((p_harm, "harmful"), (p_ben, "beneficial")):
        ref = make_pipeline(StandardScaler(), LogisticRegression(C=gonogo.DEFAULT_C, max_iter=5000))
        ref.fit(x, labels == cls)
        np.testing.assert_allclose(p, ref.predict_proba(x)[:, 1], rtol=1e-12, atol=1e-14)
    assert loaded.training_hash == gonogo.training_hash(runs) != gonogo.training_hash(runs[1:])


def test_a_decision_carries_its_probabilities_and_log_odds_contributions():
    runs = _runs()
    model = gonogo.fit(runs, alpha=0.2, **RULE).model_copy(update={"threshold": ltt.Threshold(
        threshold=0.5, calibration="split", n_calibration=0, authorized=0, harmful=0, upper_bound=None)})
    d = gonogo.decide(model, gonogo_features.features(runs[0]))
    assert set(d.contributions) == set(gonogo_features.FEATURE_NAMES)
    log_odds = math.log(d.p_harmful / (1 - d.p_harmful))
    assert model.harmful.intercept + sum(d.contributions.values()) == pytest.approx(log_odds)
    assert d.go == (d.p_harmful <= 0.5)
    with pytest.raises(BadInput, match="features lack"):
        gonogo.decide(model, {"target@0.20": 1.0})


def test_a_head_with_one_class_is_a_stated_constant():
    runs = [r for r in _runs(20, 1) if r.outcome(**RULE) != "beneficial"]
    model = gonogo.fit(runs, alpha=0.2, **RULE)
    assert model.beneficial.kind == "constant" and model.beneficial.positives == 0
    assert gonogo.predict(model, gonogo_features.matrix(runs[:1]))[0][0] == pytest.approx(0.5 / (len(runs) + 1))


def test_a_broken_model_file_is_refused_in_one_line():
    with pytest.raises(BadInput, match="invalid go/no-go model"):
        gonogo.loads('{"feature_names": []}')


# --- Learn-then-Test ---------------------------------------------------------------------------------


def test_the_threshold_is_the_last_of_the_fixed_sequence_that_passes_the_bound():
    rng = np.random.default_rng(1)
    p = rng.uniform(size=400)
    harmful = rng.uniform(size=400) < p ** 3  # the harmful share grows with the score
    alpha, delta = 0.1, 0.1
    chosen = ltt.choose_threshold(p, harmful, alpha=alpha, delta=delta)
    conf = 1 - 2 * delta  # each threshold of the sequence is tested at delta, one-sided

    def bound(t):
        go = p <= t
        return clopper_pearson(int((go & harmful).sum()), int(go.sum()), conf)[1]

    tested = [t for t in ltt.THRESHOLDS if (p <= t).sum() >= ltt.min_authorized(alpha, delta)]
    assert chosen.threshold is not None and 0.05 < chosen.threshold < 1.0
    assert chosen.upper_bound == bound(chosen.threshold) <= alpha
    assert chosen.harmful / chosen.authorized <= alpha
    assert all(bound(t) <= alpha for t in tested if t <= chosen.threshold)
    assert bound(min(t for t in tested if t > chosen.threshold)) > alpha  # the sequence stopped there


def test_the_sequence_stops_at_the_first_failure_even_if_a_later_threshold_passes():
    # 30 clean runs at 0.1, 30 runs at 0.2 of which 10 harmful, then 300 clean runs at 0.3: t = 0.3 alone would
    # pass (10 / 360), but the sequence stops at t = 0.2 (10 / 60), so t = 0.15 (the same 30 runs as 0.1) is chosen
    p = [0.1] * 30 + [0.2] * 30 + [0.3] * 300
    harmful = [False] * 30 + [True] * 10 + [False] * 20 + [False] * 300
    chosen = ltt.choose_threshold(p, harmful, alpha=0.1, delta=0.1)
    assert (chosen.threshold, chosen.authorized, chosen.harmful) == (0.15, 30, 0)


def test_no_threshold_when_the_bound_cannot_be_met():
    n = ltt.min_authorized(0.1, 0.1)
    assert n == 22  # log(0.1) / log(0.9) = 21.9: the bound of 0 / 22 at one-sided 90 % is 0.0994
    assert ltt.choose_threshold([0.01] * (n - 1), [False] * (n - 1), alpha=0.1, delta=0.1).threshold is None
    assert ltt.choose_threshold([0.01] * n, [False] * n, alpha=0.1, delta=0.1).threshold == 1.0
    all_harmful = ltt.choose_threshold([0.01] * 500, [True] * 500, alpha=0.1, delta=0.1)
    assert (all_harmful.threshold, all_harmful.authorized) == (None, 0)
    with pytest.raises(BadInput, match="must lie in"):
        ltt.choose_threshold([0.1], [False], alpha=0.0, delta=0.1)


def test_the_floor_check_counts_what_the_whole_rule_authorizes_on_the_calibration_runs():
    runs = _runs(n_cards=24, seeds=2, rng_seed=3)
    model = gonogo.fit(runs[:24], alpha=0.3, delta=0.2, calibration=runs[24:], band=MIN_EFFECT_PP,
                       ifeval_drop_pp=IFEVAL_DROP_PP)
    assert model.beneficial_floor == gonogo.BENEFICIAL_FLOOR == 0.5 and model.threshold.threshold is not None
    x = gonogo_features.matrix(runs[24:], None, model.footing)
    p_ben, p_harm = gonogo.predict(model, x)
    harmful = [r.outcome(band=MIN_EFFECT_PP, ifeval_drop_pp=IFEVAL_DROP_PP) == "harmful" for r in runs[24:]]
    go = (p_harm <= model.threshold.threshold) & (p_ben >= 0.5)
    n, k = int(go.sum()), int((go & np.array(harmful)).sum())
    assert 0 < n < model.threshold.authorized  # the floor narrowed what the threshold alone authorized
    assert (model.floor_check.authorized, model.floor_check.harmful) == (n, k)
    assert model.floor_check.upper_bound == clopper_pearson(k, n, 1 - 2 * 0.2)[1]
    # every decision is the same rule
    assert [gonogo.decide(model, dict(zip(gonogo_features.FEATURE_NAMES, row))).go for row in x] == list(go)


def test_without_the_floor_a_model_decides_on_p_harmful_alone_as_models_stored_before_it():
    runs = _runs(n_cards=24, seeds=2, rng_seed=3)
    plain = gonogo.fit(runs, alpha=0.3, delta=0.2, band=MIN_EFFECT_PP, ifeval_drop_pp=IFEVAL_DROP_PP,
                       beneficial_floor=None)
    assert plain.beneficial_floor is None and plain.floor_check is None
    stored = json.loads(gonogo.dumps(plain))
    for key in ("beneficial_floor", "floor_check"):  # a file written before the floor existed
        del stored[key]
    old = gonogo.loads(json.dumps(stored))
    x = gonogo_features.matrix(runs, None, old.footing)
    p_harm = gonogo.predict(old, x)[1]
    assert [gonogo.decide(old, dict(zip(gonogo_features.FEATURE_NAMES, row))).go for row in x] == list(
        p_harm <= old.threshold.threshold)
    assert gonogo.refit(old, [], [], library_version=None).beneficial_floor is None  # a refit keeps its rule


def test_where_a_fold_certifies_no_threshold_the_evaluation_scores_the_deferral_rule():
    runs = _runs(n_cards=6, seeds=2, worlds=3, rng_seed=5)  # 8 training runs a fold: under min_authorized
    rule = dict(alpha=0.1, delta=0.1, band=MIN_EFFECT_PP, ifeval_drop_pp=IFEVAL_DROP_PP)
    rising = {"rising": lambda r: r.curve[-1].target_pp > 0}
    e = evaluate(runs, baselines=rising, deferral="rising", **rule)
    assert all(f.threshold is None for f in e.folds) and all(r.deferred for r in e.runs)
    assert e.rules["gonogo"] == e.rules["rising"] and e.rules["gonogo"].go > 0 and e.deferral == "rising"
    assert [r.go for r in e.runs] == [r.curve[-1].target_pp > 0 for r in runs]
    assert evaluate(runs, baselines=rising, **rule).rules["gonogo"].go == 0  # no deferral: no go
    with pytest.raises(BadInput, match="not among the baselines"):
        evaluate(runs, baselines=rising, deferral="trial pass @0.20", **rule)


# --- held-out evaluation -----------------------------------------------------------------------------


def test_each_fold_trains_on_the_other_cards_only():
    runs = _runs(6, 2)
    e = evaluate(runs, alpha=0.2, baselines={"trial up": lambda r: r.curve[-1].target_pp >= 1.0}, **RULE)
    assert e.grouping == "card" and [f.held_out for f in e.folds] == [f"C{c:02d}" for c in range(6)]
    for fold in e.folds:
        others = [r for r in runs if r.card_id != fold.held_out]
        assert fold.n_held_out == 2 and fold.training_hash == gonogo.training_hash(others)
    assert e.rules["trial up"].go == sum(r.curve[-1].target_pp >= 1.0 for r in runs)
    assert e.rules["none"].accuracy.k == e.outcomes["harmful"] + e.outcomes["neutral"]


def test_several_worlds_are_held_out_one_world_at_a_time():
    runs = _runs(4, 1, worlds=3)
    e = evaluate(runs, alpha=0.2, **RULE)
    assert e.grouping == "world" and [f.held_out for f in e.folds] == ["world 0", "world 1", "world 2"]
    for fold, w in zip(e.folds, range(3)):
        assert fold.training_hash == gonogo.training_hash([r for r in runs if r.world_seed != w])
        # the rule's figures on this world's runs alone, and they add up to the pooled ones
        mine = [h for h in e.runs if h.world_seed == w]
        assert fold.figures == figures([h.go for h in mine], [h.outcome for h in mine])
    assert sum(f.figures.accuracy.k for f in e.folds) == e.rules["gonogo"].accuracy.k
    assert sum(f.figures.go for f in e.folds) == e.rules["gonogo"].go
    for f in e.folds:
        assert f"| {f.held_out}{' (defers)' if f.threshold is None else ''} | {f.figures.go} |" in markdown(e)


def test_a_held_out_prediction_comes_from_a_model_without_that_card():
    runs = _runs(6, 2)
    e = evaluate(runs, alpha=0.2, **RULE)
    for r, h in list(zip(runs, e.runs))[::3]:
        model = gonogo.fit([q for q in runs if q.card_id != r.card_id], alpha=0.2, **RULE)
        p_ben, p_harm = gonogo.predict(model, gonogo_features.matrix([r]))
        assert (h.p_harmful, h.p_beneficial) == (pytest.approx(p_harm[0]), pytest.approx(p_ben[0]))


# --- agent gonogo --------------------------------------------------------------------------------------


def _doc(tmp_path, n: int = 8) -> Path:
    """The first n v3 cells (the first 8 hold a pass, a fail and an inconclusive trial)."""
    doc = json.loads(DOC.read_text())
    path = tmp_path / "retro.json"
    path.write_text(json.dumps({"cells": doc["cells"][:n]}))
    return path


def test_the_cli_prints_what_evaluate_computes(tmp_path, capsys):
    path = _doc(tmp_path)
    assert main(["gonogo", str(path), "--alpha", "0.2", "--json", "--model", str(tmp_path / "m.json")]) == 0
    out = json.loads(capsys.readouterr().out)
    cells = json.loads(path.read_text())["cells"]
    runs = [paired_run(c, world_seed=0) for c in cells]
    trial = {c["id"]: c["trial_verdict"] == "pass" for c in cells}
    want = evaluate(runs, alpha=0.2, delta=0.1, baselines={"trial pass @0.20": lambda r: trial[r.card_id]},
                    deferral="trial pass @0.20", **RULE)
    # 8 runs: no fold certifies a threshold, so the go/no-go's go is the trial's own pass, as in a loop
    assert all(r.deferred for r in want.runs) and out["deferral"] == "trial pass @0.20"
    assert out["rules"]["gonogo"] == want.rules["gonogo"].model_dump(mode="json") == out["rules"]["trial pass @0.20"]
    assert [r["p_harmful"] for r in out["runs"]] == [r.p_harmful for r in want.runs]
    # the baseline is the trial verdict each cell recorded (trainers.trial.verdict, its one owner)
    assert [r["baseline_go"]["trial pass @0.20"] for r in out["runs"]] == [c["trial_verdict"] == "pass" for c in cells]
    model = gonogo.loads((tmp_path / "m.json").read_text())
    assert model.training_hash == gonogo.training_hash(runs) and model.n_train == 8


def test_the_cli_says_what_the_written_model_will_do(tmp_path, capsys):
    from agent.cli.measure import _model_summary
    from support.gonogo_fixture import fitted_model
    path = _doc(tmp_path)  # 8 runs: no threshold can be certified
    assert main(["gonogo", str(path), "--alpha", "0.2", "--model", str(tmp_path / "m.json")]) == 0
    written = gonogo.loads((tmp_path / "m.json").read_text())
    assert gonogo.defers(written)
    assert ("m.json: certifies no threshold on P(harmful) (none passed on 8 cross-fitted runs): bcit_predictive "
            "acts on each trial's own verdict, as bcit does; prior-only threshold None") in capsys.readouterr().out
    model = fitted_model()
    c = model.floor_check
    assert _model_summary(model).startswith(
        f"threshold {model.threshold.threshold} on P(harmful) ({model.threshold.authorized} of 36 cross-fitted runs "
        f"authorized; with the floor 0.5 on P(beneficial), {c.authorized}, {c.harmful} of them harmful)")


@pytest.mark.parametrize("args, message", [
    (["missing-dir"], "not found"),
    (["{doc}", "--alpha", "1.5"], "must lie in"),
    (["{nocells}"], "no `cells` list"),
    (["{two}"], "at least 3 cards"),
])
def test_bad_input_exits_2_in_one_line_and_writes_nothing(tmp_path, capsys, args, message):
    (tmp_path / "nocells.json").write_text('{"table": {}}')
    paths = {"{doc}": str(_doc(tmp_path)), "{nocells}": str(tmp_path / "nocells.json"),
             "{two}": str(_doc(tmp_path, 2))}
    model = tmp_path / "m.json"
    assert main(["gonogo", *[paths.get(a, a) for a in args], "--model", str(model)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not model.exists()


def test_the_cli_reads_retrospective_directories_one_world_each(tmp_path, capsys):
    cells = json.loads(DOC.read_text())["cells"]
    dirs = []
    for ws in range(3):
        d = tmp_path / f"w{ws}"
        (d / "cells").mkdir(parents=True)
        (d / "ledger.json").write_text(json.dumps({"world_seed": ws}))
        rows = []
        for c in cells[ws * 4:(ws + 1) * 4]:
            (d / "cells" / c["id"] / "s0").mkdir(parents=True)
            (d / "cells" / c["id"] / "s0" / "cell.json").write_text(json.dumps(c))
            rows.append(json.dumps({"cell": c["id"], "features": {"S": 0.1 * ws, "A": 0.9, "grade": "B"}}))
        (d / "features.jsonl").write_text("\n".join(rows) + "\n")
        dirs.append(str(d))
    assert main(["gonogo", *dirs, "--alpha", "0.2", "--json", "--model", str(tmp_path / "m.json")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["grouping"] == "world" and [f["held_out"] for f in out["folds"]] == ["world 0", "world 1", "world 2"]
    model = gonogo.loads((tmp_path / "m.json").read_text())
    names = model.feature_names
    assert model.mean[names.index("S")] == pytest.approx(0.1) and model.mean[names.index("grade_B")] == 1.0


def test_agent_help_lists_gonogo(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0 and "gonogo" in capsys.readouterr().out


def test_the_curve_features_read_the_parent_footing_where_every_run_has_it_and_the_model_says_which():
    from support.footing_cells import cell  # noqa: PLC0415
    short = {"0.05": (1.0, -1.0, 0.5), "0.10": (2.0, 0.0, 1.0), "0.20": (3.0, 1.0, -0.5)}
    runs = [paired_run(cell(f"S{i}", short, (-5.0 + 5 * i, 0.0, 0.0), seed=s), world_seed=0)
            for i in range(3) for s in range(2)]
    f = gonogo_features.features(runs[0], footing="parent")
    # effect + control - parent (support/footing_cells.py): at 5 % target 1 + 40 - 48, prompt -1 + 70 - 70.
    assert (f["target@0.05"], f["ifeval.prompt_strict@0.05"], f["ifeval.inst_strict@0.20"]) == (-7.0, -1.0, -0.5)
    assert f["target_slope"] == pytest.approx((5.0 - -7.0) / 0.15)
    assert gonogo_features.features(runs[0])["target@0.05"] == 1.0  # the control footing: the effect itself
    model = gonogo.fit(runs, alpha=0.3, **RULE)
    assert (model.footing, model.footing_note) == ("parent", None)
    assert model.mean[gonogo_features.FEATURE_NAMES.index("target@0.20")] == 5.0
    # One run from before the parent's scores were kept: every run on the control footing, and said.
    old = runs[:-1] + [paired_run(cell("S2", short, (5.0, 0.0, 0.0), seed=1, parent=False), world_seed=0)]
    mixed = gonogo.fit(old, alpha=0.3, **RULE)
    assert mixed.footing == "control" and "1 of 6 paired runs lack" in mixed.footing_note
    assert mixed.mean[gonogo_features.FEATURE_NAMES.index("target@0.20")] == 3.0
    assert gonogo.loads(gonogo.dumps(mixed)) == mixed
    assert evaluate(runs, alpha=0.3, **RULE).footing == "parent"


def test_two_worlds_are_held_out_one_card_at_a_time_across_both():
    """Two worlds are too few folds: each card is held out of both worlds at once."""
    runs = _runs(4, 1, worlds=2)
    e = evaluate(runs, alpha=0.2, **RULE)
    assert e.grouping == "card" and len(e.folds) == 4
    for fold in e.folds:
        assert fold.n_held_out == 2  # one run per world
        assert fold.training_hash == gonogo.training_hash([r for r in runs if r.card_id != fold.held_out])


# --- the loop's other Validate rules, as baselines (agent/experiments/gonogo_baselines.py) ------------

F = (0.05, 0.10, 0.20)


def _trial_run(card: str, targets, retention=(0.0, 0.0, 0.0), *, full_retention: float = 0.0, seed: int = 0,
               world: int = 0) -> PairedRun:
    """A run whose short runs read `targets` and `retention` (both IFEval metrics) at 5, 10 and 20 %."""
    curve = tuple(_point(f, t, r) for f, t, r in zip(F, targets, retention))
    return PairedRun(card_id=card, family="sql", method="sft", seed=seed, world_seed=world, curve=curve,
                     full=_point(1.0, 0.0, full_retention))


def _evaluate_baselines(runs):
    from agent.experiments.gonogo_baselines import baselines
    plain, per_fold = baselines(runs)
    return evaluate(runs, alpha=0.2, baselines=plain, fold_baselines=per_fold, **RULE)


def test_early_stop_continues_where_the_curve_reaches_the_adoption_threshold_at_full_length():
    # Exact power laws c f^b with b on the rule's grid, so the fit returns c: 10, 0.3 (flat: b = 0), 0.9,
    # 2, -5 and 1.2 pp at full length against MIN_EFFECT_PP = 1: three continue. Their 20 % readings
    # (2.0, 0.3, 0.40, 0.89, -1.0, 0.80) give the trial's own verdict one pass, the rest inconclusive.
    laws = [(10.0, 1.0), (0.3, 0.0), (0.9, 0.5), (2.0, 0.5), (-5.0, 1.0), (1.2, 0.25)]
    runs = [_trial_run(f"C{i}", [c * f ** b for f in F]) for i, (c, b) in enumerate(laws)]
    e = _evaluate_baselines(runs)
    assert MIN_EFFECT_PP == 1.0
    assert [h.baseline_go["early stop extrapolation"] for h in e.runs] == [True, False, False, True, False, True]
    assert e.rules["early stop extrapolation"].go == 3 and e.rules["trial pass @0.20"].go == 1


def test_successive_halving_ranks_each_world_seed_episode_in_catalogue_order():
    # Episode (world 0, seed 0), catalogue order S01 S02 S03 S04 G01 G02, 20 % gains 1 3 2 5 4 6: the top
    # ceil(k / 5) so far continue, so S01 (k = 1), S02 (3 beats 1), S04 (5), not S03 (2 < 3) nor G01
    # (4 < 5); G02 (6, top 2 of 6) ranks in but its trial failed (IFEval -5 pp at 20 %). Episode seed 1,
    # gains 6 5 4 3 2 1: only S01. The runs come in a directory's order (G before S, by id): read in
    # that order, seed 0 would continue G01, G02 and S04 instead.
    ids = ("S01", "S02", "S03", "S04", "G01", "G02")
    gains = {0: (1.0, 3.0, 2.0, 5.0, 4.0, 6.0), 1: (6.0, 5.0, 4.0, 3.0, 2.0, 1.0)}
    runs = [_trial_run(card, [0.0, 0.0, gains[s][ids.index(card)]],
                       (0.0, 0.0, -5.0 if (card, s) == ("G02", 0) else 0.0), seed=s)
            for card in sorted(ids) for s in (0, 1)]
    e = _evaluate_baselines(runs)
    go = {(h.card_id, h.seed) for h in e.runs if h.baseline_go["successive halving"]}
    assert go == {("S01", 0), ("S02", 0), ("S04", 0), ("S01", 1)} and e.rules["successive halving"].go == 4
    from agent.experiments.gonogo_baselines import halving
    with pytest.raises(BadInput, match="came twice"):
        halving(runs + runs[:1])


def test_extrapolated_retention_fails_a_trial_whose_forgetting_at_full_length_breaks_the_guard():
    # Every run's IFEval change grows by exactly -3 pp from its 20 % reading to the full run, so the
    # `offset` model (leave-one-out error 0) predicts reading - 3 whatever fold it is fitted on: readings
    # 0, 0.5, 1.5, 2, 3, -1 pp extrapolate to -3, -2.5, -1.5, -1, 0, -4 against the -2 pp guard, so three
    # trials keep their pass (every trial gains 3 pp and no raw reading breaks the guard: six pass).
    readings = (0.0, 0.5, 1.5, 2.0, 3.0, -1.0)
    runs = [_trial_run(f"C{i}", [1.0, 2.0, 3.0], (r, r, r), full_retention=r - 3.0) for i, r in enumerate(readings)]
    e = _evaluate_baselines(runs)
    assert IFEVAL_DROP_PP == 2.0
    assert [h.baseline_go["trial pass, extrapolated retention"] for h in e.runs] == [False, False, True, True, True, False]
    assert e.rules["trial pass, extrapolated retention"].go == 3 and e.rules["trial pass @0.20"].go == 6


def test_the_extrapolation_of_a_fold_is_fitted_without_its_held_out_group():
    # Every trial reads +1.0 pp at 20 %; C0-C4 forget 3.5 pp more by full length, C5 nothing. Held out,
    # C5 is predicted from C0-C4 alone (growth exactly -3.5: -2.5 pp, past the guard): its trials fail.
    # A fit that saw C5 softens the growth (-2.8 in the other folds, -2.9 on every run) and lets it through.
    from agent.experiments.gonogo_baselines import extrapolated
    runs = [_trial_run(f"C{i}", [1.0, 2.0, 3.0], (1.0, 1.0, 1.0), full_retention=1.0 - (0.0 if i == 5 else 3.5),
                       seed=s) for i in range(6) for s in (0, 1)]
    e = _evaluate_baselines(runs)
    assert [h.baseline_go["trial pass, extrapolated retention"] for h in e.runs] == [True] * 10 + [False] * 2
    assert [extrapolated(runs)(r) for r in runs[10:]] == [True, True]
    with pytest.raises(BadInput, match="extrapolated retention.*at least 4 paired runs"):
        extrapolated(runs[:2])


def test_the_cli_measures_every_validate_rule_on_the_same_runs(tmp_path, capsys):
    from policies import early_stop
    path = _doc(tmp_path)
    assert main(["gonogo", str(path), "--alpha", "0.2"]) == 0
    table = capsys.readouterr().out
    rules = ("trial pass @0.20", "early stop extrapolation", "successive halving", "trial pass, extrapolated retention")
    assert all(f"| {name} |" in table for name in rules)
    assert main(["gonogo", str(path), "--alpha", "0.2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cells = json.loads(path.read_text())["cells"]
    # early stop is policies.early_stop's verdict on each trial's target curve at the gate's threshold
    want = [early_stop.verdict({float(f): e["target"] for f, e in c["short"].items()}, MIN_EFFECT_PP)[0] == "pass"
            for c in cells]
    assert [r["baseline_go"]["early stop extrapolation"] for r in out["runs"]] == want
    # v3's first 8 cells, one episode in catalogue order, 20 % gains 2.45 1.5 -4.42 1.5 4.02 4.02 0.89 0:
    # S01 (first), G01 (best of 5), G02 (ties G01 for the top 2 of 6); every other is out of the top share.
    go = [r["card_id"] for r in out["runs"] if r["baseline_go"]["successive halving"]]
    assert go == ["S01", "G01", "G02"] and out["rules"]["successive halving"]["go"] == 3


def _classed_run(card: str, outcome: str, *, world: int, seed: int = 0) -> PairedRun:
    """A run whose full run is `outcome` (beneficial: +4 pp target; harmful: IFEval -5 pp; neutral: nothing)."""
    target, retention = {"beneficial": (4.0, 0.0), "harmful": (0.0, -5.0), "neutral": (0.0, 0.0)}[outcome]
    run = _trial_run(card, [0.0, 0.5, 1.0], seed=seed, world=world)
    return PairedRun(**(run.model_dump() | {"full": _point(1.0, target, retention)}))


def test_the_card_memory_goes_where_the_same_card_was_mostly_beneficial_on_the_other_worlds():
    # A: beneficial, beneficial, harmful on worlds 0-2; B: beneficial, neutral, neutral; C: world 2 only.
    # Held out: A on world 2 (two of two elsewhere) goes; A on world 0 (one of two) and B on world 1
    # (one of two: no strict majority) do not; C was never seen elsewhere.
    table = {"A": ("beneficial", "beneficial", "harmful"), "B": ("beneficial", "neutral", "neutral")}
    runs = [_classed_run(c, o, world=w, seed=s) for c, outs in table.items() for w, o in enumerate(outs) for s in (0, 1)]
    runs += [_classed_run("C", "beneficial", world=2, seed=s) for s in (0, 1)]
    e = _evaluate_baselines(runs)
    from agent.experiments.gonogo_baselines import CARD_MEMORY, baselines
    go = {(h.card_id, h.world_seed) for h in e.runs if h.baseline_go[CARD_MEMORY]}
    assert go == {("A", 2)} and e.rules[CARD_MEMORY].go == 2
    # Right only on B's neutral runs (worlds 1, 2); its one go lands on A's harmful world.
    figures_ = e.rules[CARD_MEMORY]
    assert (figures_.accuracy.k, figures_.accuracy.n, figures_.harmful_among_authorized.k) == (4, 14, 2)
    # Held out by card (one world), a fold never saw its card: no card memory at all.
    assert CARD_MEMORY not in baselines([r for r in runs if r.world_seed == 0])[1]


def test_the_cell_majority_counts_each_cells_larger_side():
    # Cells (world, card): (0, A) beneficial x2 + neutral: 2 of 3; (1, A) harmful x2: 2 of 2; (0, B)
    # beneficial + harmful: 1 of 2; (1, B) beneficial: 1 of 1; (2, *) beneficial x2, neutral x2: 2 + 2.
    spec = [("A", 0, "beneficial"), ("A", 0, "beneficial"), ("A", 0, "neutral"), ("A", 1, "harmful"),
            ("A", 1, "harmful"), ("B", 0, "beneficial"), ("B", 0, "harmful"), ("B", 1, "beneficial"),
            ("A", 2, "beneficial"), ("A", 2, "beneficial"), ("B", 2, "neutral"), ("B", 2, "neutral")]
    runs = [_classed_run(c, o, world=w, seed=i) for i, (c, w, o) in enumerate(spec)]
    e = _evaluate_baselines(runs)
    assert (e.cell_majority.k, e.cell_majority.n) == (2 + 2 + 1 + 1 + 2 + 2, 12)
    assert f"right on {e.cell_majority.k}/12" in markdown(e)


def test_the_boosted_baseline_learns_per_fold_from_the_other_worlds_only():
    # On every world, six runs whose trial reads 1, 2, 4 pp and whose full runs gain 4 pp (beneficial) and
    # six that read nothing and change nothing (neutral): each fold's boosted model, fitted on the other
    # two worlds, goes on exactly the held-out world's beneficial runs.
    from agent.experiments.gonogo_baselines import BOOSTED, boosted

    def run(card, good, world, seed):
        r = _trial_run(card, [1.0, 2.0, 4.0] if good else [0.0, 0.0, 0.0], seed=seed, world=world)
        return PairedRun(**(r.model_dump() | {"full": _point(1.0, 4.0 if good else 0.0, 0.0)}))
    runs = [run(f"C{i}", i % 2 == 0, w, s) for w in range(3) for i in range(4) for s in range(3)]
    e = _evaluate_baselines(runs)
    assert [h.baseline_go[BOOSTED] for h in e.runs] == [h.outcome == "beneficial" for h in e.runs]
    assert (e.rules[BOOSTED].go, e.rules[BOOSTED].accuracy.k, e.rules[BOOSTED].accuracy.n) == (18, 36, 36)
    # A fold whose runs hold one class only goes as that class says, on any run.
    everything_good = [r for r in runs if r.outcome(**RULE) == "beneficial"]
    assert boosted(None, "control")(everything_good)(runs[1]) is True
    assert boosted(None, "control")([r for r in runs if r not in everything_good])(runs[0]) is False
