"""The learned go/no-go of Validate (issue 27, item 3): P(beneficial) and P(harmful) of a full run
from its short runs' curve, its card and its record, with a threshold that bounds the harmful
share of what it authorizes.

Input: policies.curves.PairedRun (the one record of a short run beside its full run) and, where
known, the record's S, A and grade (its compiled Features). `fit` trains, `decide` applies, `evaluate` (policies/gonogo_eval.py) measures it
on held-out worlds or cards.

Model: two L2-regularised logistic regressions (scikit-learn), one-vs-rest, harmful vs the rest
and beneficial vs the rest, on standardised features. Why not a gradient-boosted model as in
TuneAhead: that fitted 370+ runs; the bank holds 24-72 paired runs (one to three seeds of 24
cards) and about 35 features, where trees memorise and a linear model with a fixed penalty
(C = DEFAULT_C, sklearn's default, chosen before any outcome was seen, not tuned) does not. Why
one-vs-rest and not multinomial: the decision reads P(harmful) alone, and a binary logistic's
log-odds are exactly the sum of its features' contributions (coefficient x standardised value),
which is what the report shows for every decision. A head whose training runs hold one class
only (e.g. no beneficial run) is a constant at the smoothed rate (k + 0.5) / (n + 1): say so, do
not pretend to learn.

Rule (`authorizes`): go iff P(harmful) <= t and P(beneficial) >= BENEFICIAL_FLOOR. t is chosen by
Learn-then-Test (policies/ltt.py) so that the harmful share of what P(harmful) <= t authorizes is
<= alpha with probability >= 1 - delta, on given calibration runs (a split) or, by default, the
training runs' own out-of-group scores (cross-fitted, approximate). Why the floor: a go is right when
the full run is beneficial, so the go more often right than wrong is P(beneficial) >= 1/2, the Bayes
rule for that loss; the threshold alone authorized every run it thought safe, neutral ones too (held
out by world on v7: accuracy 0.645 and 8 of 141 authorized harmful; with the floor 0.755 and 2 of 78,
docs/results/gonogo-v7b-w012.md). 1/2 is fixed by the loss, not fitted. What the bound covers: the
set P(harmful) <= t; the floor only narrows it, and a subset's harmful share is not certified by its
superset's, so the fit measures it on the same calibration runs (GoNoGo.floor_check) and the report
shows it. Why not choose t with the floor inside Learn-then-Test: tried, it certified no threshold in
two of three held-out folds (accuracy 0.612); dropping neutral runs from the authorized set leaves
too few runs at the low thresholds the sequence must pass first. Models stored before the floor
existed (beneficial_floor None) decide on P(harmful) alone.

Features: policies/gonogo_features.py owns their list and order.

Footing (policies.curves.footing_of): the curve features read the short runs against the parent,
as a loop's trial does, where every run in the fit (training and calibration) has the parent's
scores; otherwise every run against its matched control, and the model's `footing_note` says so.
The labels, the full runs' classes, are always against the matched control (policies.outcomes).

Stored as JSON (a Frozen record; never pickle): standardisation, coefficients, feature names,
the training-data hash, library version, alpha, delta and the threshold, and the rows it was fitted
on (feature vectors, labels, group keys), so that `refit` adds paired runs and fits again exactly:
the loop does at consolidation (agent/run/gonogo_refit.py, docs/gonogo.md). Prediction is computed
from the stored numbers; tests check it equals sklearn's predict_proba.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import sklearn
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from experience_bank.errors import BadInput
from experience_bank.hashing import content_hash
from experience_bank.frozen import Frozen, parse_model
from policies.curves import Footing, PairedRun, footing_of
from policies.gonogo_features import (FEATURE_NAMES, PRIOR_FEATURE_NAMES, Record, features, matrix, record_features,
                                      record_key)
from policies.ltt import Threshold, check_levels, choose_threshold, upper_bound
from policies.outcomes import OutcomeClass

BENEFICIAL_FLOOR = 0.5
"""The least P(beneficial) a go needs: the Bayes rule when a go is right iff the full run is beneficial."""
DEFAULT_C = 1.0
"""Inverse L2 strength of both heads: sklearn's default, not tuned on the bank's outcomes."""
TOP_CONTRIBUTIONS = 5
"""Contributions a decision's report shows (the largest by |value|)."""


# --- the stored model ------------------------------------------------------------------------------


class Head(Frozen):
    """One binary logistic P(class | x) = sigmoid(intercept + coef . z), z the standardised features."""

    coef: tuple[float, ...]
    intercept: float
    kind: Literal["logistic", "constant"]
    """constant: the training runs held one class only; the smoothed rate, coef all 0."""
    positives: int
    """Training runs of this head's class."""


class TrainingRows(Frozen):
    """What a fit learned from, as data, so that `refit` can add rows and fit again exactly: each
    run's feature vector (the model's feature_names, on its footing), its label (the outcome class
    of its full run under the model's band and IFEval drop) and its group keys (groups_of)."""

    x: tuple[tuple[float, ...], ...]
    """Training runs x feature_names."""
    labels: tuple[OutcomeClass, ...]
    world_seeds: tuple[int, ...]
    card_ids: tuple[str, ...]
    calibration_x: tuple[tuple[float, ...], ...] | None = None
    """A split calibration's runs x feature_names (None: cross-fitted on the training runs)."""
    calibration_labels: tuple[OutcomeClass, ...] | None = None


class FloorCheck(Frozen):
    """The rule with its floor on the calibration runs the threshold was chosen on: what it authorizes,
    the harmful among them and their one-sided Clopper-Pearson bound at 1 - delta (measured: the
    Learn-then-Test bound is the threshold's alone)."""

    authorized: int
    harmful: int
    upper_bound: float | None
    """None when it authorizes none."""


class GoNoGo(Frozen):
    """A fitted go/no-go: everything prediction needs, as data (stored as JSON, never pickled)."""

    feature_names: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    harmful: Head
    beneficial: Head
    C: float
    alpha: float
    """Harmful among authorized the threshold bounds."""
    delta: float
    """The bound holds with probability 1 - delta."""
    threshold: Threshold
    band: float
    ifeval_drop_pp: float
    """The outcome rule's settings the labels were made with (policies.outcomes)."""
    n_train: int
    training_hash: str
    """training_hash of the runs and records it was fitted on."""
    library_version: int | None
    sklearn_version: str
    footing: Footing = "control"
    """What its curve features were read against (policies.curves.footing_of); `control` in models
    fitted before the parent footing existed, which read nothing else."""
    footing_note: str | None = None
    """Why it is not the loop's footing (None: it is)."""
    prior: GoNoGo | None = None
    """The prior-only go/no-go: the same fit (labels, alpha, delta, threshold choice) on
    PRIOR_FEATURE_NAMES alone, what is known before a trial; bcit_predictive skips the trial where it
    authorizes (policies.predictive.prior_decision). None in models fitted before it existed: never skip."""
    rows: TrainingRows | None = None
    """What it was fitted on, for `refit`; None in models fitted before the rows were kept (they load
    and decide as before; a refit of one is BadInput)."""
    beneficial_floor: float | None = None
    """A go needs P(beneficial) >= this (BENEFICIAL_FLOOR) besides P(harmful) <= the threshold; None in
    models fitted before the floor existed: they decide on P(harmful) alone."""
    floor_check: FloorCheck | None = None
    """The whole rule on the threshold's calibration runs (None: no floor, or no threshold)."""


def training_hash(runs: Sequence[PairedRun], records: Mapping[str, Record] | None = None) -> str:
    """content_hash of the training data: the runs in order and the records they read."""
    used = {record_key(r.world_seed, r.card_id) for r in runs}
    # A run without a parent curve hashes as before the field existed: a refit of the same runs keeps its hash.
    return content_hash({"runs": [r.model_dump(mode="json", exclude={"parent_curve"} if r.parent_curve is None else None)
                                  for r in runs],
                         "records": {k: record_features(v) for k, v in sorted((records or {}).items()) if k in used}})


def dumps(model: GoNoGo) -> str:
    return model.model_dump_json()


def loads(text: str) -> GoNoGo:
    """A stored go/no-go from its JSON; BadInput on any defect."""
    return parse_model(GoNoGo, text, "go/no-go model")


# --- fitting ------------------------------------------------------------------------------------------


def _labels(runs: Sequence[PairedRun], band: float, ifeval_drop_pp: float) -> list[str]:
    return [r.outcome(band=band, ifeval_drop_pp=ifeval_drop_pp) for r in runs]


def _head(z: np.ndarray, y: np.ndarray, C: float) -> Head:
    k = int(y.sum())
    if k in (0, len(y)):
        rate = (k + 0.5) / (len(y) + 1)
        return Head(coef=(0.0,) * z.shape[1], intercept=math.log(rate / (1 - rate)), kind="constant", positives=k)
    lr = LogisticRegression(C=C, max_iter=5000).fit(z, y)
    return Head(coef=tuple(float(c) for c in lr.coef_[0]), intercept=float(lr.intercept_[0]), kind="logistic",
                positives=k)


def _standardiser(x: np.ndarray) -> StandardScaler:
    return StandardScaler().fit(x)


def _fit_heads(x: np.ndarray, labels: Sequence[str], C: float) -> tuple[StandardScaler, Head, Head]:
    scaler = _standardiser(x)
    z = scaler.transform(x)
    y = np.array(labels)
    return scaler, _head(z, (y == "harmful").astype(int), C), _head(z, (y == "beneficial").astype(int), C)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def _proba(head: Head, z: np.ndarray) -> np.ndarray:
    return _sigmoid(head.intercept + z @ np.array(head.coef))


def predict(model: GoNoGo, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P(beneficial), P(harmful)) of each row of a features matrix, from the stored numbers alone."""
    z = (np.asarray(x, dtype=float) - np.array(model.mean)) / np.array(model.scale)
    return _proba(model.beneficial, z), _proba(model.harmful, z)


MIN_GROUPS = 3
"""Fewest held-out groups an evaluation runs on (policies.gonogo_eval.evaluate refuses fewer)."""


def groups_of(runs: Sequence[PairedRun]) -> tuple[Literal["world", "card"], list[str]]:
    """Held-out groups: one per world seed where runs carry at least MIN_GROUPS worlds, else one per
    card (all its seeds and worlds: two worlds are too few folds to hold one out, but a card held
    out of both still never informs its own prediction)."""
    return group_keys([r.world_seed for r in runs], [r.card_id for r in runs])


def group_keys(world_seeds: Sequence[int], card_ids: Sequence[str]) -> tuple[Literal["world", "card"], list[str]]:
    """groups_of from each run's world seed and card id (what a model's TrainingRows keep)."""
    if len(set(world_seeds)) >= MIN_GROUPS:
        return "world", [f"world {w}" for w in world_seeds]
    return "card", list(card_ids)


def out_of_group(x: np.ndarray, labels: Sequence[str], groups: Sequence[str], C: float) -> tuple[np.ndarray, np.ndarray]:
    """Each run's (P(beneficial), P(harmful)) from a model fitted without its group (the cross-fitted
    calibration scores)."""
    groups_arr, p_ben, p_harm = np.array(groups), np.empty(len(labels)), np.empty(len(labels))
    for g in dict.fromkeys(groups):
        inside = groups_arr == g
        scaler, harm, ben = _fit_heads(x[~inside], [lab for lab, i in zip(labels, inside) if not i], C)
        z = scaler.transform(x[inside])
        p_ben[inside], p_harm[inside] = _proba(ben, z), _proba(harm, z)
    return p_ben, p_harm


def defers(model: GoNoGo) -> bool:
    """The model certified no threshold (no P(harmful) bound passed Learn-then-Test on its calibration
    runs), so it has no say: bcit_predictive acts on the trial's own verdict, as bcit does
    (policies.predictive.verdict), and the held-out evaluation scores the trial's pass for it."""
    return model.threshold.threshold is None


def authorizes(p_beneficial: float, p_harmful: float, threshold: float | None, beneficial_floor: float | None) -> bool:
    """The go/no-go's rule, the one place it is written (deciding, and choosing the threshold, read it):
    go iff P(harmful) <= threshold (never, where there is none) and P(beneficial) >= the floor (where the
    model has one)."""
    return (threshold is not None and p_harmful <= threshold
            and (beneficial_floor is None or p_beneficial >= beneficial_floor))


class Settings(Frozen):
    """What a fit is made with besides its rows: a refit keeps every one of them."""

    alpha: float
    delta: float
    band: float
    ifeval_drop_pp: float
    C: float
    footing: Footing
    footing_note: str | None
    beneficial_floor: float | None = BENEFICIAL_FLOOR
    """GoNoGo.beneficial_floor (None: P(harmful) alone, the rule before the floor)."""


def fit(runs: Sequence[PairedRun], records: Mapping[str, Record] | None = None, *, alpha: float, delta: float = 0.1,
        band: float, ifeval_drop_pp: float, C: float = DEFAULT_C, library_version: int | None = None,
        calibration: Sequence[PairedRun] | None = None, footing: Footing | None = None,
        beneficial_floor: float | None = BENEFICIAL_FLOOR) -> GoNoGo:
    """Fit both heads on `runs` and choose the threshold on `calibration` (None: cross-fitted scores
    of `runs` themselves, one model per held-out group of groups_of); the curve features on one
    footing for every run of both (policies.curves.footing_of; `footing` forces one). The prior-only
    model (GoNoGo.prior) is the same procedure on PRIOR_FEATURE_NAMES' columns of the same runs."""
    check_levels(alpha, delta)
    if len(runs) < 2:
        raise BadInput(f"a go/no-go needs at least 2 paired runs, got {len(runs)}: pass more retrospective cells")
    footing, note = footing_of([*runs, *(calibration or ())], footing)
    split = calibration is not None
    rows = TrainingRows(x=_rows_of(matrix(runs, records, footing)), labels=tuple(_labels(runs, band, ifeval_drop_pp)),
                        world_seeds=tuple(r.world_seed for r in runs), card_ids=tuple(r.card_id for r in runs),
                        calibration_x=_rows_of(matrix(calibration, records, footing)) if split else None,
                        calibration_labels=tuple(_labels(calibration, band, ifeval_drop_pp)) if split else None)
    return _fit_rows(rows, Settings(alpha=alpha, delta=delta, band=band, ifeval_drop_pp=ifeval_drop_pp, C=C,
                                    footing=footing, footing_note=note, beneficial_floor=beneficial_floor),
                     training_hash=training_hash(runs, records), library_version=library_version)


def _rows_of(x: np.ndarray) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in x)


def _fit_rows(rows: TrainingRows, s: Settings, *, training_hash: str, library_version: int | None) -> GoNoGo:
    """The go/no-go on every feature of the rows (which it keeps, for `refit`) and its prior-only head
    on PRIOR_FEATURE_NAMES' columns (GoNoGo.prior), each with its threshold on the split calibration
    rows or, where there are none, on the rows' own cross-fitted scores (one model per held-out
    group of group_keys)."""
    x, labels = np.array(rows.x, dtype=float), list(rows.labels)
    cal = None if rows.calibration_x is None else (np.array(rows.calibration_x, dtype=float),
                                                   list(rows.calibration_labels or ()))
    groups = group_keys(rows.world_seeds, rows.card_ids)[1] if cal is None else []
    shared = dict(C=s.C, alpha=s.alpha, delta=s.delta, band=s.band, ifeval_drop_pp=s.ifeval_drop_pp,
                  n_train=len(labels), training_hash=training_hash, library_version=library_version,
                  sklearn_version=sklearn.__version__, footing=s.footing, footing_note=s.footing_note,
                  beneficial_floor=s.beneficial_floor)
    model = _fit_on(FEATURE_NAMES, x, labels, groups, cal, shared)
    return model.model_copy(update={"rows": rows, "prior": _fit_on(PRIOR_FEATURE_NAMES, x, labels, groups, cal,
                                                                   shared)})


def _fit_on(names: tuple[str, ...], x: np.ndarray, labels: Sequence[str], groups: Sequence[str],
            calibration: tuple[np.ndarray, list[str]] | None, shared: dict[str, Any]) -> GoNoGo:
    """Both heads on the columns `names` of x (runs x FEATURE_NAMES) and the Learn-then-Test threshold
    on the calibration runs' (matrix, labels), or, None, on x's out-of-group scores by `groups`."""
    cols = [FEATURE_NAMES.index(n) for n in names]
    # C order, as the matrix came: numpy's sums (and so the scaler's mean) depend on the memory layout
    x = np.ascontiguousarray(x[:, cols])
    scaler, harm, ben = _fit_heads(x, labels, shared["C"])
    model = GoNoGo(feature_names=names, mean=tuple(float(v) for v in scaler.mean_),
                   scale=tuple(float(v) for v in scaler.scale_), harmful=harm, beneficial=ben,
                   threshold=Threshold(threshold=None, calibration="split", n_calibration=0,
                                       authorized=0, harmful=0, upper_bound=None), **shared)
    if calibration is not None:
        cal_labels = calibration[1]
        p_ben, p_harm = predict(model, np.ascontiguousarray(calibration[0][:, cols]))
        kind: Literal["cross-fitted", "split"] = "split"
    else:
        cal_labels, kind = list(labels), "cross-fitted"
        p_ben, p_harm = out_of_group(x, labels, groups, shared["C"])
    harmful = [lab == "harmful" for lab in cal_labels]
    chosen = choose_threshold(p_harm, harmful, alpha=shared["alpha"], delta=shared["delta"], calibration=kind)
    floor = shared["beneficial_floor"]
    check = None
    if floor is not None and chosen.threshold is not None:
        go = [authorizes(float(b), float(h), chosen.threshold, floor) for b, h in zip(p_ben, p_harm)]
        n, k = sum(go), sum(g and h for g, h in zip(go, harmful))
        check = FloorCheck(authorized=n, harmful=k, upper_bound=upper_bound(k, n, shared["delta"]) if n else None)
    return model.model_copy(update={"threshold": chosen, "floor_check": check})


# --- refitting with more paired runs (at consolidation: agent/run/gonogo_refit.py) ------------------

HOW_TO_REFIT = "fit it again with `agent gonogo SOURCES --model OUT.json`, which keeps the rows"


def settings(model: GoNoGo) -> Settings:
    """The settings a model was fitted with (what its refit keeps)."""
    return Settings(alpha=model.alpha, delta=model.delta, band=model.band, ifeval_drop_pp=model.ifeval_drop_pp,
                    C=model.C, footing=model.footing, footing_note=model.footing_note,
                    beneficial_floor=model.beneficial_floor)


def refit_refusal(model: GoNoGo) -> str | None:
    """Why the model cannot be refit (one line naming the fix), or None where it can."""
    if model.rows is None:
        return (f"the go/no-go model (training hash {model.training_hash[:12]}) carries no training rows (fitted "
                f"before they were kept), so it cannot be refit: {HOW_TO_REFIT}")
    if tuple(model.feature_names) != FEATURE_NAMES:  # its rows are vectors of another feature list
        return (f"the go/no-go model's {len(model.feature_names)} features differ from this code's "
                f"{len(FEATURE_NAMES)}, so it cannot be refit: {HOW_TO_REFIT}")
    return None


def refit(model: GoNoGo, runs: Sequence[PairedRun], records: Sequence[Record | None], *,
          library_version: int | None) -> GoNoGo:
    """The model fitted again on its own rows plus `runs` (each with its record, aligned), with the
    same alpha, delta, C, footing and outcome settings; the labels of the new runs are
    `_labels`' under the model's band and IFEval drop. Its training hash chains the old one and
    the added runs (unchanged when none is added: the same rows give the same coefficients).
    BadInput for a model without rows, or runs without the curve its footing reads."""
    if (why := refit_refusal(model)) is not None:
        raise BadInput(why)
    if len(records) != len(runs):
        raise BadInput(f"refit got {len(runs)} paired runs but {len(records)} records: give one record (or None) "
                       "per run")
    footing_of(runs, model.footing)  # BadInput where a run lacks the curve the model's footing reads
    old = model.rows
    rows = old.model_copy(update={
        "x": old.x + tuple(tuple(features(r, rec, model.footing)[n] for n in model.feature_names)
                           for r, rec in zip(runs, records)),
        "labels": old.labels + tuple(_labels(runs, model.band, model.ifeval_drop_pp)),
        "world_seeds": old.world_seeds + tuple(r.world_seed for r in runs),
        "card_ids": old.card_ids + tuple(r.card_id for r in runs)})
    return _fit_rows(rows, settings(model), training_hash=refit_hash(model.training_hash, runs, records),
                     library_version=library_version)


def refit_hash(base: str, runs: Sequence[PairedRun], records: Sequence[Record | None]) -> str:
    """The training hash of a refit: the base's, chained with the added runs and their records in order."""
    if not runs:
        return base
    added = [{"run": r.model_dump(mode="json"), "record": record_features(rec)} for r, rec in zip(runs, records)]
    return content_hash({"refit_of": base, "added": added})


# --- deciding -------------------------------------------------------------------------------------------


class GoDecision(Frozen):
    """One go/no-go with the numbers behind it, for the report."""

    go: bool
    p_beneficial: float
    p_harmful: float
    threshold: float | None
    contributions: dict[str, float]
    """Feature -> coefficient x standardised value in P(harmful)'s log-odds (positive: toward no-go)."""


def top_contributions(decision: GoDecision, k: int = TOP_CONTRIBUTIONS) -> tuple[tuple[str, float], ...]:
    """The k largest contributions by |value| (ties by feature order), rounded for a report."""
    ranked = sorted(decision.contributions.items(), key=lambda kv: -abs(kv[1]))
    return tuple((name, round(value, 4)) for name, value in ranked[:k])


def decide(model: GoNoGo, run_features: Mapping[str, float]) -> GoDecision:
    """The model's go (`authorizes`) with the numbers behind it."""
    missing = [n for n in model.feature_names if n not in run_features]
    if missing:
        raise BadInput(f"features lack {missing[:3]}: compute them with policies.gonogo_features.features")
    x = np.array([[float(run_features[n]) for n in model.feature_names]])
    p_ben, p_harm = (float(v[0]) for v in predict(model, x))
    z = (x[0] - np.array(model.mean)) / np.array(model.scale)
    contributions = {n: float(c * v) for n, c, v in zip(model.feature_names, model.harmful.coef, z)}
    t = model.threshold.threshold
    return GoDecision(go=authorizes(p_ben, p_harm, t, model.beneficial_floor), p_beneficial=p_ben, p_harmful=p_harm,
                      threshold=t,
                      contributions=contributions)

