"""bcit_predictive's trial skip (issue 27, item 3: "whether evidence suffices to skip the trial"):
the go/no-go's prior-only head (card and record, no curve), fitted as the full model is, and the
routing that trains a plain historical Validate directly where that head authorizes.

The models are fitted by the real code on the synthetic paired runs and records of
support/gonogo_fixture.py; sklearn is the reference for every prediction."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from sklearn.preprocessing import StandardScaler

from policies import EpisodeState, PolicyConfig, authorize, gonogo, gonogo_features, ltt
from policies.authorize import SKIP_RULE, Prior, prior_input, undetermined
from policies.curves import CardFields
from policies.features import features_from_row
from policies.gonogo_eval import evaluate
from policies.predictive import prior_decision
from support.gonogo_fixture import RULE, fitted_model, skip_model, synthetic_records, synthetic_runs

CARD = CardFields(family="sql", method="sft", adapter="lora", learning_rate=1e-4, nominal_steps=100, replay_share=0.0)
ROW = {"id": "S01", "grade": "B", "is_new": False, "delta_src": 10.0, "kappa": 10.0, "family": 1.0, "data": 1.0,
       "runtime": 1.0, "parent": 1.0, "protocol": 1.0, "H": 0, "nu": "restart", "chi": 0}
CFG = PolicyConfig()


@pytest.fixture(scope="module")
def model() -> gonogo.GoNoGo:
    return skip_model()


def _prior_x(runs, records) -> np.ndarray:
    cols = [gonogo_features.FEATURE_NAMES.index(n) for n in gonogo_features.PRIOR_FEATURE_NAMES]
    return gonogo_features.matrix(runs, records)[:, cols]


def _with_prior_threshold(model: gonogo.GoNoGo, t: float | None) -> gonogo.GoNoGo:
    prior = model.prior.model_copy(update={"threshold": model.prior.threshold.model_copy(update={"threshold": t})})
    return model.model_copy(update={"prior": prior})


# --- the prior-only fit --------------------------------------------------------------------------


def test_the_prior_only_head_reads_no_curve_and_predicts_what_sklearn_predicts(model):
    runs, records = synthetic_runs(), synthetic_records()
    prior = gonogo.loads(gonogo.dumps(model)).prior
    assert prior.feature_names == gonogo_features.PRIOR_FEATURE_NAMES and len(prior.feature_names) == 20
    assert not any("@" in n or "slope" in n or n == "trial_hard_failure" for n in prior.feature_names)
    assert tuple(gonogo_features.prior_features(CARD, {"S": 0.5})) == gonogo_features.PRIOR_FEATURE_NAMES
    x = _prior_x(runs, records)
    labels = np.array([r.outcome(**RULE) for r in runs])
    p_ben, p_harm = gonogo.predict(prior, x)
    for p, cls in ((p_harm, "harmful"), (p_ben, "beneficial")):
        ref = make_pipeline(StandardScaler(), LogisticRegression(C=gonogo.DEFAULT_C, max_iter=5000)).fit(x, labels == cls)
        np.testing.assert_allclose(p, ref.predict_proba(x)[:, 1], rtol=1e-12, atol=1e-14)
    # the same settings and training data as the full model it sits in
    assert (prior.alpha, prior.delta, prior.band, prior.n_train, prior.training_hash, prior.prior) == (
        model.alpha, model.delta, model.band, model.n_train, model.training_hash, None)


def test_the_prior_threshold_is_learn_then_test_on_held_out_by_card_scores(model):
    """Each run's P(harmful) from sklearn fitted without its card, then the one threshold rule."""
    runs, records = synthetic_runs(), synthetic_records()
    x, labels = _prior_x(runs, records), np.array([r.outcome(**RULE) for r in runs])
    held = np.empty(len(runs))
    for i in range(len(runs)):  # one card per run: leave-one-card-out
        rest = np.arange(len(runs)) != i
        ref = make_pipeline(StandardScaler(), LogisticRegression(C=gonogo.DEFAULT_C, max_iter=5000))
        held[i] = ref.fit(x[rest], labels[rest] == "harmful").predict_proba(x[i:i + 1])[0, 1]
    want = ltt.choose_threshold(held, labels == "harmful", alpha=0.2, delta=0.2, calibration="cross-fitted")
    assert model.prior.threshold.threshold == want.threshold == 0.9
    assert (model.prior.threshold.authorized, model.prior.threshold.harmful) == (want.authorized, want.harmful) == (24, 0)
    assert model.prior.threshold.upper_bound == pytest.approx(want.upper_bound)


def test_a_split_calibration_holds_for_the_prior_too():
    runs, records = synthetic_runs(), synthetic_records()
    m = gonogo.fit(runs[:24], records, alpha=0.2, delta=0.2, calibration=runs[24:], **RULE)
    p_harm = gonogo.predict(m.prior, _prior_x(runs[24:], records))[1]
    want = ltt.choose_threshold(p_harm, [r.outcome(**RULE) == "harmful" for r in runs[24:]], alpha=0.2, delta=0.2)
    assert m.prior.threshold == want and want.calibration == "split" and want.n_calibration == 12


def test_without_records_the_prior_knows_too_little_and_never_authorizes():
    """The fixture's runs alone: the card facts do not foretell the class, no threshold passes."""
    assert fitted_model().prior.threshold.threshold is None


# --- the routing -----------------------------------------------------------------------------------


def _route(model, row=ROW, state=EpisodeState()):
    f = features_from_row(row)
    return authorize(f, "bcit_predictive", state, CFG, prior_input("bcit_predictive", model, CARD)), f


def test_the_skip_fires_exactly_where_the_prior_head_authorizes(model):
    f = features_from_row(ROW)
    d = prior_decision(model, CARD, f)
    record = {"S": f.S, "A": f.A, "grade": f.grade}
    x = np.array([[gonogo_features.prior_features(CARD, record)[n] for n in gonogo_features.PRIOR_FEATURE_NAMES]])
    assert d.p_harmful == pytest.approx(gonogo.predict(model.prior, x)[1][0]) and d.p_harmful < 0.1
    at = _with_prior_threshold(model, round(d.p_harmful, 6) + 1e-6)   # just above P(harmful): go
    below = _with_prior_threshold(model, round(d.p_harmful, 6) - 1e-6)  # just below: the trial runs
    skip, _ = _route(at)
    assert (skip.action, skip.rule) == ("train", SKIP_RULE)
    assert skip.numbers["prior_p_harmful"] == d.p_harmful and skip.numbers["prior_threshold"] == at.prior.threshold.threshold
    kept, _ = _route(below)
    assert (kept.action, kept.rule) == ("validate", "bcit_predictive.validate")
    assert kept.numbers["prior_p_harmful"] == d.p_harmful
    # apart from the prior's numbers, every decision is BCIT's
    bcit = authorize(f, "bcit", EpisodeState(), CFG)
    assert {k: v for k, v in kept.numbers.items() if not k.startswith("prior_")} == bcit.numbers
    # a prior-only head that authorizes nothing never skips and is not consulted: the decision is as without it
    nothing, _ = _route(_with_prior_threshold(model, None))
    assert prior_decision(_with_prior_threshold(model, None), CARD, f) is None
    assert nothing == authorize(f, "bcit_predictive", EpisodeState(), CFG) and nothing.numbers == bcit.numbers


def test_the_skip_needs_p_beneficial_at_the_floor_and_records_it(model):
    f = features_from_row(ROW)
    d = prior_decision(model, CARD, f)
    at = _with_prior_threshold(model, 0.99)
    above, below = (at.model_copy(update={"prior": at.prior.model_copy(update={"beneficial_floor": floor})})
                    for floor in (d.p_beneficial + 1e-6, d.p_beneficial - 1e-6))
    kept, _ = _route(above)
    assert (kept.action, kept.rule) == ("validate", "bcit_predictive.validate")
    assert kept.numbers["prior_p_beneficial"] == d.p_beneficial
    skip, _ = _route(below)
    assert (skip.action, skip.rule) == ("train", SKIP_RULE)
    # a prior without the floor (a model stored before it) keeps the numbers it had: its decisions hash as before
    plain, _ = _route(at.model_copy(update={"prior": at.prior.model_copy(update={"beneficial_floor": None})}))
    assert "prior_p_beneficial" not in plain.numbers and plain.rule == SKIP_RULE


@pytest.mark.parametrize("change, action, rule", [
    ({"H": 1}, "reject", "bcit_predictive.hard_conflict"),                  # the veto stands
    ({"delta_src": 0.0}, "reject", "bcit_predictive.below_tau_l"),          # below tau_l
    ({"nu": "none"}, "reject", "bcit_predictive.no_faithful_trial"),
    ({"grade": "A", "chi": 1}, "train", "bcit_predictive.replicated_above_tau_h"),  # Train stays Train
    ({"grade": "A", "chi": 1, "conflicted": True}, "validate", "bcit_predictive.conflicted_validate"),
    ({"grade": None, "is_new": True, "delta_src": None, "kappa": None}, "validate", "bcit_predictive.new_validate"),
])
def test_the_skip_never_overrides_bcits_other_rules(model, change, action, rule):
    """A prior that authorizes everything (threshold 1) changes only the plain historical Validate."""
    d, f = _route(_with_prior_threshold(model, 1.0), ROW | change)
    assert (d.action, d.rule) == (action, rule)
    assert d.rule.replace("bcit_predictive.", "bcit.") == authorize(f, "bcit", EpisodeState(), CFG).rule
    assert not any(k.startswith("prior_") for k in d.numbers)


def test_a_model_file_without_the_prior_never_skips(model, tmp_path):
    old = json.loads(gonogo.dumps(_with_prior_threshold(model, 1.0)))
    del old["prior"]  # as `agent gonogo --model` wrote it before the prior-only head existed
    loaded = gonogo.loads(json.dumps(old))
    assert loaded.prior is None and prior_decision(loaded, CARD, features_from_row(ROW)) is None
    d, f = _route(loaded)
    plain = authorize(f, "bcit_predictive", EpisodeState(), CFG)
    assert (d.action, d.rule, d.decision_hash) == ("validate", "bcit_predictive.validate", plain.decision_hash)


def test_the_routing_input_is_only_bcit_predictives_and_missing_inputs_are_undetermined(model):
    assert prior_input("bcit", model, CARD) is None and prior_input("bcit_predictive", None, CARD) is None
    assert prior_input("bcit_predictive", model, None) is None
    assert prior_input("bcit_predictive", model, CARD) == Prior(model, CARD)
    f = features_from_row(ROW)
    plain = authorize(f, "bcit_predictive", EpisodeState(), CFG)
    assert undetermined(plain, None) and not undetermined(plain, Prior(model, CARD))
    assert not undetermined(authorize(f, "bcit", EpisodeState(), CFG), None)
    assert not undetermined(authorize(features_from_row(ROW | {"H": 1}), "bcit_predictive", EpisodeState(), CFG), None)
    # another policy ignores a model it was given
    assert authorize(f, "bcit", EpisodeState(), CFG, Prior(model, CARD)) == authorize(f, "bcit", EpisodeState(), CFG)


# --- the held-out figures ----------------------------------------------------------------------------


def test_the_evaluation_reports_the_prior_heads_held_out_figures():
    runs, records = synthetic_runs(), synthetic_records()
    e = evaluate(runs[:18], records, alpha=0.2, delta=0.2, **RULE)
    prior_go = [r.prior_go for r in e.runs]
    assert e.rules["prior-only gonogo"].go == sum(prior_go)
    assert e.rules["prior-only p_harmful<0.5"].go == sum(r.prior_p_harmful < 0.5 for r in e.runs)
    # each held-out run's prior P(harmful) is the fold model's, fitted without its card
    fold = gonogo.fit(runs[1:18], records, alpha=0.2, delta=0.2, footing=e.footing, **RULE)
    assert e.runs[0].prior_p_harmful == pytest.approx(
        gonogo.predict(fold.prior, _prior_x(runs[:1], records))[1][0], rel=1e-12)
    assert e.folds[0].prior_threshold == fold.prior.threshold.threshold
    assert e.auc_harmful_prior is not None and 0.0 <= e.auc_harmful_prior <= 1.0


def test_the_manifest_freezes_the_prior_threshold(tmp_path, model):
    from agent.config import RunConfig  # noqa: PLC0415
    from agent.run.gonogo_model import read_model  # noqa: PLC0415
    path = tmp_path / "skip.json"
    path.write_text(gonogo.dumps(model))
    info = read_model(RunConfig(policy="bcit_predictive", gonogo_model=str(path)))[1]
    assert (info.threshold, info.prior_threshold) == (model.threshold.threshold, model.prior.threshold.threshold) == (0.9, 0.9)
    old = json.loads(gonogo.dumps(model))
    del old["prior"]
    path.write_text(json.dumps(old))
    assert read_model(RunConfig(policy="bcit_predictive", gonogo_model=str(path)))[1].prior_threshold is None


# --- agent authorize --gonogo-model: the same routing from the command line -----------------------------


def _authorize_cli(tmp_path, capsys, *extra: str) -> tuple[int, list[dict]]:
    from agent.cli.main import main  # noqa: PLC0415

    code = main(["authorize", "--bank", str(tmp_path / "bank.sqlite"), "--context", str(tmp_path / "ctx.json"),
                 "--policy", "bcit_predictive", "--json", *extra])
    return code, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_the_authorize_command_skips_as_the_loop_does_with_the_model(tmp_path, capsys):
    from experience_bank.bank import Bank  # noqa: PLC0415
    from experience_bank.records import CurrentContext  # noqa: PLC0415
    from policies import decide  # noqa: PLC0415
    from policies.curves import card_facts  # noqa: PLC0415
    from support import bank_factory as bf  # noqa: PLC0415
    from support.gonogo_fixture import write_skip_model  # noqa: PLC0415
    from test_bad_input_corpus import _context  # noqa: PLC0415

    records = [bf.record(c, delta=d) for c, d in (("S01", 5.0), ("S02", 1.0), ("S03", 8.0))]
    with Bank.init(tmp_path / "bank.sqlite") as bank:
        bank.import_records(records, library_note="skip")
    (tmp_path / "ctx.json").write_text(_context())
    # the skip itself, on P(harmful) alone: these records' prior P(beneficial) is under the floor
    path = write_skip_model(tmp_path / "m.json", prior_threshold=0.9, prior_floor=None)
    code, plain = _authorize_cli(tmp_path, capsys)
    assert code == 0 and [r["rule"] for r in plain] == ["bcit_predictive.validate", "bcit_predictive.below_tau_l",
                                                        "bcit_predictive.validate"]
    code, skipped = _authorize_cli(tmp_path, capsys, "--gonogo-model", str(path))
    assert code == 0 and [(r["action"], r["rule"]) for r in skipped] == [
        ("train", SKIP_RULE), ("reject", "bcit_predictive.below_tau_l"), ("train", SKIP_RULE)]
    model, ctx = gonogo.loads(path.read_text()), CurrentContext.model_validate_json(_context())
    expected = [decide(r, ctx, "bcit_predictive", EpisodeState(), PolicyConfig(),
                       prior=prior_input("bcit_predictive", model, card_facts(r.card))) for r in records]
    assert [r["decision_hash"] for r in skipped] == [d.decision_hash for d in expected]


@pytest.mark.parametrize("extra, needle", [(("--policy", "bcit"), "not --policy bcit"),
                                           (("--features", "rows.jsonl"), "a features row does not carry")])
def test_the_authorize_command_refuses_a_model_it_cannot_use(tmp_path, capsys, extra, needle):
    from agent.cli.main import main  # noqa: PLC0415
    from support.gonogo_fixture import write_skip_model  # noqa: PLC0415

    path = write_skip_model(tmp_path / "m.json")
    (tmp_path / "rows.jsonl").write_text("")
    argv = ["authorize", "--gonogo-model", str(path), "--policy", "bcit_predictive", "--bank", "missing.sqlite",
            "--context", "missing.json", *extra]
    if "--features" in extra:  # instead of --bank and --context
        argv = argv[:5] + ["--features", str(tmp_path / "rows.jsonl")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err
