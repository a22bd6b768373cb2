"""Held-out evaluation of the learned go/no-go (policies/gonogo.py) beside the existing rule.

Leave-one-group-out (gonogo.groups_of: one world seed at a time where the runs carry several,
else one card at a time with all its seeds): the model and its threshold are fitted on the other
groups only (the threshold on their cross-fitted scores) and decide the held-out group's runs.
Truth: go = the full run is beneficial (policies.outcomes, through PairedRun.outcome). Every fold
reads the curves on the one footing of all the runs (policies.curves.footing_of), never its own.

Rules compared on the same held-out runs, each with accuracy, precision, recall and harmful
among authorized, every rate with its 95 % Clopper-Pearson interval:
- `gonogo`: the fold model's rule (gonogo.authorizes: P(beneficial) at least its floor and
  P(harmful) at most its Learn-then-Test threshold); where the fold's model certified no threshold
  (gonogo.defers), the `deferral` rule's go (the trial's own pass, what bcit_predictive then acts
  on), or no go where none is given;
- `p_harmful<0.5` and `p_beneficial>=0.5`: the same models at a fixed, uncalibrated 0.5 (how
  well they rank, apart from what the alpha bound allows);
- each of `baselines` (by name): an existing rule that learns nothing, e.g. the 20 % trial's pass,
  decided on every run at once (a rule may read other runs, as successive halving ranks a trial
  among its episode's);
- each of `fold_baselines` (by name): an existing rule that learns from paired runs (e.g. the trial's
  retention check with the forgetting extrapolation), made per fold from the fold's training runs
  only, so it decides the held-out group as the go/no-go does, never on its own training data;
- `none`: authorize nothing, the floor any rule has to beat where beneficial runs are rare.
- `prior-only gonogo` (and `prior-only p_harmful<0.5`): the fold model's prior-only head
  (GoNoGo.prior: card and record, no curve) under its own threshold, the one that lets
  bcit_predictive skip a trial; its go count says whether the skip can fire at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal, NamedTuple

import numpy as np
from sklearn.metrics import roc_auc_score

from experience_bank.errors import BadInput
from experience_bank.frozen import Frozen
from policies import gonogo, gonogo_features, ltt
from policies.curves import Footing, PairedRun, footing_of
from policies.stats import clopper_pearson


Baseline = Callable[[PairedRun], bool]
"""An existing rule's go for a run (e.g. the 20 % trial's pass), for the comparison."""
FoldBaseline = Callable[[Sequence[PairedRun]], Baseline]
"""A learning rule's maker: the fold's training runs (never the held-out group's) -> its go for a run."""


class Rate(Frozen):
    k: int
    n: int
    value: float | None
    """k / n; None when n = 0."""
    ci95: tuple[float, float] | None
    """Clopper-Pearson 95 %; None when n = 0."""


class RuleFigures(Frozen):
    go: int
    """Runs the rule authorized."""
    accuracy: Rate
    precision: Rate
    """Beneficial among authorized."""
    recall: Rate
    """Authorized among beneficial."""
    harmful_among_authorized: Rate


class Fold(Frozen):
    held_out: str
    n_held_out: int
    training_hash: str
    """gonogo.training_hash of the runs the fold's model was fitted on (never the held-out group's)."""
    threshold: float | None
    prior_threshold: float | None = None
    """The fold's prior-only threshold (None: it authorizes nothing, never skips)."""
    floor_check: gonogo.FloorCheck | None = None
    """The fold model's whole rule (with its P(beneficial) floor) on its calibration runs."""
    figures: RuleFigures | None = None
    """The `gonogo` rule's figures on this fold's held-out runs (the per-world accuracy the issue asks for)."""


class HeldOut(Frozen):
    """One run's held-out prediction."""

    card_id: str
    seed: int
    world_seed: int
    outcome: str
    p_beneficial: float
    p_harmful: float
    go: bool
    prior_p_harmful: float | None = None
    """The prior-only head's held-out P(harmful)."""
    prior_go: bool = False
    """The prior-only head authorizes it: bcit_predictive would skip its trial."""
    deferred: bool = False
    """Its fold's model certified no threshold: the `gonogo` rule's go is the deferral rule's."""
    baseline_go: dict[str, bool]
    """Each baseline's go, by name."""


class Evaluation(Frozen):
    grouping: Literal["world", "card"]
    n_runs: int
    outcomes: dict[str, int]
    alpha: float
    delta: float
    rules: dict[str, RuleFigures]
    auc_harmful: float | None
    """ROC AUC of the held-out P(harmful) for harmful runs; None with one class only."""
    auc_harmful_prior: float | None = None
    """The same of the prior-only head's P(harmful)."""
    folds: tuple[Fold, ...]
    runs: tuple[HeldOut, ...]
    footing: Footing = "control"
    """What every fold's curve features were read against."""
    footing_note: str | None = None
    """Why not the loop's footing (None: it is)."""
    deferral: str | None = None
    """The name of the rule `gonogo` defers to where a fold certified no threshold (None: no go there)."""
    cell_majority: Rate | None = None
    """Accuracy of going on each (world seed, card) cell's own majority class, in-sample: not a rule (it
    reads the runs it scores), the accuracy of knowing each card on its world exactly but not the draw of
    the training seed; a rule reading no run's own curve cannot beat it on these runs. None in evaluations
    written before it existed."""


def rate(k: int, n: int) -> Rate:
    return Rate(k=k, n=n, value=k / n if n else None, ci95=clopper_pearson(k, n) if n else None)


def cell_majority(runs: Sequence[PairedRun], outcome: Sequence[str]) -> Rate:
    """Evaluation.cell_majority: each (world seed, card) cell's runs decided by the cell's larger side
    (beneficial or not), right on that side's count."""
    cells: dict[tuple[int, str], list[bool]] = {}
    for r, o in zip(runs, outcome, strict=True):
        cells.setdefault((r.world_seed, r.card_id), []).append(o == "beneficial")
    return rate(sum(max(sum(c), len(c) - sum(c)) for c in cells.values()), len(runs))


def figures(go: Sequence[bool], outcome: Sequence[str]) -> RuleFigures:
    """A go/no-go rule's figures against the full runs' classes (go is right iff beneficial)."""
    g, ben = np.asarray(go, dtype=bool), np.array([o == "beneficial" for o in outcome])
    harm = np.array([o == "harmful" for o in outcome])
    return RuleFigures(go=int(g.sum()), accuracy=rate(int((g == ben).sum()), len(g)),
                       precision=rate(int((g & ben).sum()), int(g.sum())),
                       recall=rate(int((g & ben).sum()), int(ben.sum())),
                       harmful_among_authorized=rate(int((g & harm).sum()), int(g.sum())))


def text(r: Rate) -> str:
    """`k/n = value [low, high]` (or `0/0`), three decimals."""
    if r.value is None or r.ci95 is None:
        return f"{r.k}/{r.n}"
    return f"{r.k}/{r.n} = {r.value:.3f} [{r.ci95[0]:.3f}, {r.ci95[1]:.3f}]"


def markdown(e: Evaluation) -> str:
    """The evaluation's tables (rules, then folds' thresholds) as Markdown."""
    auc = "undefined (one class)" if e.auc_harmful is None else f"{e.auc_harmful:.3f}"
    footing = ("Curve features read against the parent (the loop's footing)." if e.footing == "parent"
               else f"Curve features read against the matched control: {e.footing_note}.")
    lines = [footing, "", f"{e.n_runs} paired runs ({', '.join(f'{k} {v}' for k, v in e.outcomes.items())}), held out one {e.grouping} "
             f"at a time ({len(e.folds)} folds); alpha = {e.alpha}, delta = {e.delta}; held-out ROC AUC of "
             f"P(harmful) for harmful runs: {auc}.", "",
             "| rule | go | accuracy | precision (beneficial / go) | recall (go / beneficial) | harmful / go |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {name} | {f.go} | {text(f.accuracy)} | {text(f.precision)} | {text(f.recall)} | "
              f"{text(f.harmful_among_authorized)} |" for name, f in e.rules.items()]
    if e.cell_majority is not None:
        lines += ["", f"Not a rule, for scale: going on each (world, card) cell's own majority class (in-sample; it "
                  f"knows each card on its world but not the training seed's draw) is right on "
                  f"{text(e.cell_majority)}."]
    thresholds = [f.threshold for f in e.folds]
    lines += ["", f"Fold thresholds on P(harmful): {sum(t is None for t in thresholds)} of {len(thresholds)} folds "
              f"certify none (no threshold passed the bound; there `gonogo` is the deferral rule, "
              f"{e.deferral or 'none: no go'}); the others: "
              f"{sorted(t for t in thresholds if t is not None) or 'none'}. Any threshold needs at least "
              f"{ltt.min_authorized(e.alpha, e.delta)} authorized calibration runs, none of them harmful, "
              f"to pass at this alpha and delta."]
    checks = [f"{f.held_out}: {c.harmful} of {c.authorized} (bound {c.upper_bound:.3f})" if c.upper_bound is not None
              else f"{f.held_out}: 0 of 0" for f in e.folds if (c := f.floor_check) is not None]
    if checks:
        lines += ["", "With the P(beneficial) floor, harmful among what the fold's rule authorizes on its own calibration "
                  f"runs (measured; the Learn-then-Test bound is the threshold's): {'; '.join(checks)}."]
    if e.grouping == "world" and all(f.figures is not None for f in e.folds):
        lines += ["", "The `gonogo` rule per held-out world:", "",
                  "| held out | go | accuracy | precision (beneficial / go) | harmful / go |", "|---|---|---|---|---|"]
        lines += [f"| {f.held_out}{' (defers)' if f.threshold is None else ''} | {f.figures.go} | {text(f.figures.accuracy)} | "
                  f"{text(f.figures.precision)} | {text(f.figures.harmful_among_authorized)} |" for f in e.folds]
    prior = [f.prior_threshold for f in e.folds]
    auc_prior = "undefined (one class)" if e.auc_harmful_prior is None else f"{e.auc_harmful_prior:.3f}"
    lines += ["", f"Prior-only go/no-go (card and record, no curve: whether bcit_predictive may skip the trial): "
              f"held-out ROC AUC of P(harmful) {auc_prior}; {sum(t is None for t in prior)} of {len(prior)} folds "
              f"authorize nothing (never skip); the others: {sorted(t for t in prior if t is not None) or 'none'}."]
    return "\n".join(lines) + "\n"


class _HeldOutFits(NamedTuple):
    """Every fold's fit and its decisions on the runs it held out (indices into the runs)."""
    folds: list[Fold]
    tests: list[list[int]]
    held: dict[int, gonogo.GoDecision]
    held_prior: dict[int, gonogo.GoDecision]
    deferred: set[int]
    fold_go: dict[str, dict[int, bool]]


def _fit_folds(runs: Sequence[PairedRun], groups: Sequence, records: Mapping[str, gonogo.Record] | None,
               fold_baselines: Mapping[str, FoldBaseline], footing: Footing, **fit) -> _HeldOutFits:
    """Leave one group out at a time: fit the model (and each fold baseline) on the other groups and
    decide the held-out group's runs with it, on the runs' one footing."""
    out = _HeldOutFits([], [], {}, {}, set(), {name: {} for name in fold_baselines})
    for g in dict.fromkeys(groups):
        train = [r for r, gr in zip(runs, groups) if gr != g]
        test = [i for i, gr in enumerate(groups) if gr == g]
        model = gonogo.fit(train, records, footing=footing, **fit)
        x = gonogo_features.matrix([runs[i] for i in test], records, footing)
        for i, row in zip(test, x):
            named = dict(zip(gonogo_features.FEATURE_NAMES, row))
            out.held[i], out.held_prior[i] = gonogo.decide(model, named), gonogo.decide(model.prior, named)
        if gonogo.defers(model):
            out.deferred.update(test)
        out.tests.append(test)
        for name, make in fold_baselines.items():
            rule = make(train)
            out.fold_go[name] |= {i: rule(runs[i]) for i in test}
        out.folds.append(Fold(held_out=g, n_held_out=len(test), training_hash=model.training_hash,
                              threshold=model.threshold.threshold, prior_threshold=model.prior.threshold.threshold,
                              floor_check=model.floor_check))
    return out


def evaluate(runs: Sequence[PairedRun], records: Mapping[str, gonogo.Record] | None = None, *, alpha: float,
             delta: float = 0.1, band: float, ifeval_drop_pp: float, C: float = gonogo.DEFAULT_C,
             baselines: Mapping[str, Baseline] | None = None,
             fold_baselines: Mapping[str, FoldBaseline] | None = None, deferral: str | None = None) -> Evaluation:
    """Leave-one-group-out go/no-go figures of the model and of each baseline on the same runs;
    `deferral`: the name of the baseline whose go counts where a fold's model defers (gonogo.defers)."""
    ltt.check_levels(alpha, delta)
    if deferral is not None and deferral not in (baselines or {}):
        raise BadInput(f"the deferral rule {deferral!r} is not among the baselines: name one of {sorted(baselines or {})}")
    grouping, groups = gonogo.groups_of(runs)
    if len(set(groups)) < gonogo.MIN_GROUPS:
        raise BadInput(f"held-out evaluation needs at least {gonogo.MIN_GROUPS} {grouping}s, got {len(set(groups))}: "
                       "pass more retrospective cells or worlds")
    footing, note = footing_of(runs)
    fits = _fit_folds(runs, groups, records, fold_baselines or {}, footing, alpha=alpha, delta=delta, band=band,
                      ifeval_drop_pp=ifeval_drop_pp, C=C)
    held, held_prior, deferred = fits.held, fits.held_prior, fits.deferred
    outcome = [r.outcome(band=band, ifeval_drop_pp=ifeval_drop_pp) for r in runs]
    p_ben = [held[i].p_beneficial for i in range(len(runs))]
    p_harm = [held[i].p_harmful for i in range(len(runs))]
    base = {name: [rule(r) for r in runs] for name, rule in (baselines or {}).items()}
    base |= {name: [go[i] for i in range(len(runs))] for name, go in fits.fold_go.items()}
    go = [(deferral is not None and base[deferral][i]) if i in deferred else held[i].go for i in range(len(runs))]
    folds = [f.model_copy(update={"figures": figures([go[i] for i in t], [outcome[i] for i in t])})
             for f, t in zip(fits.folds, fits.tests)]
    rules = {"gonogo": figures(go, outcome),
             "p_harmful<0.5": figures([p < 0.5 for p in p_harm], outcome),
             "p_beneficial>=0.5": figures([p >= 0.5 for p in p_ben], outcome),
             "none": figures([False] * len(runs), outcome),
             "prior-only gonogo": figures([held_prior[i].go for i in range(len(runs))], outcome),
             "prior-only p_harmful<0.5": figures([held_prior[i].p_harmful < 0.5 for i in range(len(runs))], outcome)}
    rules |= {name: figures(go, outcome) for name, go in base.items()}
    harm = [o == "harmful" for o in outcome]
    two_classes = 0 < sum(harm) < len(harm)
    p_harm_prior = [held_prior[i].p_harmful for i in range(len(runs))]
    return Evaluation(
        grouping=grouping, n_runs=len(runs), outcomes={k: outcome.count(k) for k in ("beneficial", "harmful", "neutral")},
        alpha=alpha, delta=delta, rules=rules,
        auc_harmful=float(roc_auc_score(harm, p_harm)) if two_classes else None,
        auc_harmful_prior=float(roc_auc_score(harm, p_harm_prior)) if two_classes else None,
        folds=tuple(folds), footing=footing, footing_note=note, deferral=deferral,
        cell_majority=cell_majority(runs, outcome),
        runs=tuple(HeldOut(card_id=r.card_id, seed=r.seed, world_seed=r.world_seed, outcome=o, p_beneficial=held[i].p_beneficial,
                           p_harmful=held[i].p_harmful, go=go[i], prior_p_harmful=held_prior[i].p_harmful,
                           prior_go=held_prior[i].go, deferred=i in deferred, baseline_go={name: go[i] for name, go in base.items()})
                   for i, (r, o) in enumerate(zip(runs, outcome))))
