"""Forgetting extrapolated to full length: a trial's IFEval change at 20 % of the steps -> the full run's.

Issue 27, item 2. A short trial under-reads forgetting: on the executed Retrospective-24 of world
v3 the SFT trials read an IFEval *gain* at 20 % and their full runs a loss. This module learns,
from the bank's own paired runs (policies/curves.py), how the retention change grows from the
trial's fraction to the full length, so that the trial's retention check can compare the
*extrapolated* change against the guard, beside the raw reading.

The model, and why. Every effect is a difference against a matched control, and one control run
serves every card of a method at a fraction and seed (agent/world/controls.control_key): its
binomial noise (~3 pp at 100-200 items) is shared by all runs of a group and makes the short
curves non-monotone (on v3 the SFT control reads 64 at 10 %, 69 at 20 %, 73 at full). A per-run
power law through three noisy points therefore fits noise (tried on v3 while this was written:
its leave-one-out error for SFT ran to hundreds of pp), and no per-run slope survives. What the
data support is a group-level growth added to the run's own reading:

    full_i = reading_i(f_t) + g        (per retention metric, per group)

with the growth g from one of three models, chosen per group and metric by the smallest held-out
mean absolute error on the group's own runs, a whole world held out at a time where they span
several world seeds (a fit is used on worlds it never saw), else one run (the data say which):

- `none`: g = 0, the raw reading. On the v7 worlds no growth predicted a held-out world better:
  the aggressive recipes forget at the trial already, and an offset learned from them moved
  standard runs past the guard (RMS choice: guard decision right on 192 of 216 held-out runs,
  raw 214; docs/results/extrapolation-v7-w012.md);
- `offset`: g = mean over the group of (full - reading); it absorbs the shared control's offset
  at f_t as well as the forgetting between f_t and 1;
- `power`: the group's change as a power law in steps, Delta(f) = c * f**b (Kalajdzievski 2024),
  fitted by least squares to every point (short and full) of every run of the group; then
  g = c * (1 - f_t**b), and b carries its standard error. Where the curves do follow a power
  law this recovers its exponent; where a shared control's noise bends them, `offset` wins.
  On v3 the exponent is not identified (it runs to MAX_EXPONENT) and the two models' held-out
  errors are within noise of each other (docs/results/extrapolation-v3.md).

The criterion is the mean absolute error, not the RMS, because the guard is a threshold and a few
runs whose trial already reads a collapse must not decide, through their squared errors, the growth
every other run is given. The interval of a prediction is +-t(0.975, n-1) times the RMS of the
chosen model's held-out residuals: out-of-sample errors, so the fit's own uncertainty is in it.

Groups are (method, adapter kind); a group with fewer than `min_runs` runs falls back to its
method over all adapters, then to all runs pooled, and a prediction names the group it used and
why. Out of scope: per-card covariates (learning rate, replay share) -- with 12 runs per method
the bank cannot yet support them -- and the go/no-go model (policies/gonogo.py).
The guard's value is a parameter: its one owner is the run config (`gate_ifeval_drop_pp`).

Footing (policies.curves.footing_of). A loop's trial reads IFEval against the initial parent,
not a matched control, so a fit reads the short runs (the reading and the power law's short
points) against the parent where every run has the parent's scores, and against the matched
control for every run otherwise (the fit's `footing_note` says so: world v3's published cells
have no parent scores). The full-run change it predicts stays against the matched control, the
outcome definition; on the parent footing `offset` then also absorbs how far the control moved
from the parent by the trial's fraction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy import optimize, stats

from experience_bank.errors import BadInput
from experience_bank.hashing import content_hash
from experience_bank.frozen import Frozen, parse_model
from experience_bank.records import ExtrapolatedRetention, TrialCurve
from policies.curves import (CONTROL_FOOTING_WARNING, RETENTION, CardFacts, CurvePoint, Footing, PairedRun, curve_on,
                             footing_of, trial_curve)
from policies.outcomes import retention_safe

ANY = "*"
"""A group key's wildcard: any adapter, or any method."""
MIN_RUNS = 4
"""Fewest runs a group is fitted on (its leave-one-out needs a few); smaller groups fall back."""
MAX_EXPONENT = 5.0
"""Upper end of the exponent search: at the trial's fractions (f <= 0.2) f**5 is below 4e-4, so a law
at the bound is a step at full length; a fit that runs to it says the curves hold no exponent."""
Model = Literal["none", "offset", "power"]
Choice = Literal["auto", "none", "offset", "power"]
"""auto: per group and metric, the model with the smallest held-out mean absolute error (`_metric_fit`);
or one model throughout. `none` is growth 0, the raw reading: chosen where no growth predicts better."""
MODELS: tuple[Model, ...] = ("none", "offset", "power")
"""Candidates in order of simplicity: a tie keeps the simpler."""


class MetricFit(Frozen):
    """How one retention metric's change grows from the trial's fraction to the full run, in one group."""

    growth_offset_pp: float
    """Mean of (full - trial reading) over the group's runs."""
    power_c_pp: float
    """c of the group's power law Delta(f) = c f^b (f: share of the nominal steps)."""
    power_b: float
    """b, the exponent in steps, searched in [0, MAX_EXPONENT]."""
    power_b_se: float | None
    """Standard error of b (least squares covariance); None where it is undefined."""
    growth_power_pp: float
    """c (1 - f_t^b): the growth the power law predicts from the trial's fraction to full."""
    loo_rmse_offset_pp: float
    """RMS of the offset model's leave-one-out errors on the group's runs."""
    loo_rmse_power_pp: float
    """The same for the power law."""
    model: Model
    """The model predictions use: the one with the smallest held-out mean absolute error, unless the
    fit's choice names one."""
    growth_pp: float
    """The chosen model's growth."""
    residual_sd_pp: float
    """The RMS of the chosen model's held-out errors: the scale of a prediction's interval."""
    heldout_mae_pp: dict[str, float] | None = None
    """Each candidate model's held-out mean absolute error (None in fits from before it was recorded)."""
    heldout: str | None = None
    """How it was held out: `world` (leave one world seed out, where the group's runs span several) or
    `run` (leave one run out); None in fits from before it was recorded."""


class GroupFit(Frozen):
    method: str
    """A method, or ANY."""
    adapter: str
    """An adapter kind, or ANY."""
    n_runs: int
    trial_fraction: float
    """The fraction the runs' trials stopped at (their last short point)."""
    metrics: dict[str, MetricFit]


class Fit(Frozen):
    """Every group the paired runs allowed, most specific first; `skipped` says which could not be fitted."""

    groups: tuple[GroupFit, ...]
    min_runs: int
    choice: Choice
    skipped: tuple[str, ...]
    """Groups with too few runs (e.g. 'grpo/lora: 1 run'); their runs fall back to a wider group."""
    footing: Footing = "control"
    """What the short readings were read against (policies.curves.footing_of); `control` in fits
    from before the parent footing existed."""
    footing_note: str | None = None
    """Why it is not the loop's footing (None: it is)."""
    n_runs: int | None = None
    """Paired runs it was fitted on (None in fits from before it was recorded)."""
    training_hash: str | None = None
    """content_hash of those runs (None in fits from before it was recorded)."""


def dumps(fit_: Fit) -> str:
    """A fit as the JSON file `agent extrapolate --model OUT.json` writes and `agent run
    --extrapolation-model` reads."""
    return fit_.model_dump_json()


def loads(text: str) -> Fit:
    """A stored fit from its JSON; BadInput on any defect."""
    return parse_model(Fit, text, "extrapolation model")


class MetricPrediction(Frozen):
    reading_pp: float
    """The trial's raw reading at its fraction."""
    predicted_pp: float
    """The extrapolated full-length change."""
    interval_pp: tuple[float, float]
    """95 % prediction interval of the full-length change."""


class Prediction(Frozen):
    group: str
    """The group the prediction used, 'method/adapter' ('*' = any)."""
    fallback: str | None
    """Why a wider group than (method, adapter) was used; None when it was not."""
    trial_fraction: float
    metrics: dict[str, MetricPrediction]


class GuardCheck(Frozen):
    """The trial's retention check, both ways: the raw reading and the extrapolated change against the guard."""

    drop_pp: float
    raw_safe: bool
    """Every raw reading is at least -drop_pp (policies.outcomes.retention_safe)."""
    extrapolated_safe: bool
    """Every extrapolated full-length change is at least -drop_pp."""
    reasons: tuple[str, ...]
    """One line per metric with both values."""


# --- fitting -----------------------------------------------------------------------------


def _reading(run: PairedRun) -> CurvePoint:
    if not run.curve:
        raise BadInput(f"paired run {run.card_id} has no short runs: extrapolation needs a trial curve")
    return run.curve[-1]


def _scale(f: np.ndarray, y: np.ndarray, b: float) -> float:
    g = np.power(f, b)  # for a fixed exponent the scale is linear least squares
    return float(g @ y / (g @ g))


def _sse(f: np.ndarray, y: np.ndarray, b: float) -> float:
    return float(np.sum((y - _scale(f, y, b) * np.power(f, b)) ** 2))


def _points(runs: Sequence[PairedRun], metric: str) -> tuple[np.ndarray, np.ndarray]:
    points = [(p.fraction, p.retention_pp[metric]) for r in runs for p in (*r.curve, r.full)]
    f, y = (np.array(v, dtype=float) for v in zip(*points))
    return f, y


def _power_cb(f: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    b = float(optimize.minimize_scalar(lambda b: _sse(f, y, b), bounds=(0.0, MAX_EXPONENT), method="bounded").x)
    return _scale(f, y, b), b


def power_fit(runs: Sequence[PairedRun], metric: str) -> tuple[float, float, float]:
    """(c, b, se of b) of the group law Delta(f) = c f^b, least squares over every point of every run;
    se from the Gauss-Newton covariance s^2 (J'J)^-1 (inf where J'J is singular, e.g. c = 0)."""
    f, y = _points(runs, metric)
    c, b = _power_cb(f, y)
    g = np.power(f, b)
    jac = np.column_stack([g, c * g * np.log(f)])
    s2 = _sse(f, y, b) / max(len(y) - 2, 1)
    try:
        se = float(np.sqrt(s2 * np.linalg.inv(jac.T @ jac)[1, 1]))
    except np.linalg.LinAlgError:
        se = math.inf
    return c, b, se


def _growth(model: Model, runs: Sequence[PairedRun], metric: str, f_t: float) -> float:
    if model == "none":
        return 0.0
    if model == "offset":
        return float(np.mean([r.full.retention_pp[metric] - _reading(r).retention_pp[metric] for r in runs]))
    c, b = _power_cb(*_points(runs, metric))
    return c * (1.0 - f_t ** b)


def _folds(runs: Sequence[PairedRun], by_world: bool) -> list[tuple[list[PairedRun], list[PairedRun]]]:
    """(held out, fitted on) per fold: a whole world seed at a time, or one run at a time."""
    if by_world:
        return [([r for r in runs if r.world_seed == w], [r for r in runs if r.world_seed != w])
                for w in sorted({r.world_seed for r in runs})]
    return [([run], [*runs[:i], *runs[i + 1:]]) for i, run in enumerate(runs)]


def _fold_errors(model: Model, runs: Sequence[PairedRun], metric: str, f_t: float, *, by_world: bool) -> list[float]:
    """Each run's prediction error by the model fitted without its fold."""
    errors = []
    for held, rest in _folds(runs, by_world):
        g = _growth(model, rest, metric, f_t)
        errors += [_reading(r).retention_pp[metric] + g - r.full.retention_pp[metric] for r in held]
    return errors


def _rms(errors: Sequence[float]) -> float:
    return float(np.sqrt(np.mean(np.square(errors))))


def _metric_fit(runs: Sequence[PairedRun], metric: str, f_t: float, choice: Choice) -> MetricFit:
    """The chosen model by held-out *mean absolute* error: the guard is a threshold, and a few runs
    whose trial already reads a collapse (an aggressive recipe at -60 pp) must not decide, through
    their squared errors, the growth every other run is given (on the v7 worlds the RMS choice
    gave standard SFT an offset learned from those runs, and the guard decision got worse than the
    raw reading's: docs/results/extrapolation-v7-w012.md).

    A fit is used on worlds it was not fitted on, so where the group's runs span several world
    seeds the choice holds out a whole world at a time; otherwise one run. The leave-one-run-out
    RMS is recorded beside it either way (`loo_rmse_*`)."""
    c, b, se = power_fit(runs, metric)
    by_world = len({r.world_seed for r in runs}) > 1
    per_run = {m: _fold_errors(m, runs, metric, f_t, by_world=False) for m in MODELS}
    held = {m: _fold_errors(m, runs, metric, f_t, by_world=True) for m in MODELS} if by_world else per_run
    mae = {m: float(np.mean(np.abs(e))) for m, e in held.items()}
    model: Model = choice if choice != "auto" else min(MODELS, key=lambda m: (mae[m], MODELS.index(m)))
    growth = {"none": 0.0, "offset": _growth("offset", runs, metric, f_t), "power": c * (1.0 - f_t ** b)}
    return MetricFit(growth_offset_pp=growth["offset"], power_c_pp=c, power_b=b,
                     power_b_se=se if math.isfinite(se) else None, growth_power_pp=growth["power"],
                     loo_rmse_offset_pp=_rms(per_run["offset"]), loo_rmse_power_pp=_rms(per_run["power"]),
                     model=model, growth_pp=growth[model], residual_sd_pp=_rms(held[model]),
                     heldout_mae_pp=mae, heldout="world" if by_world else "run")


def _group_fit(method: str, adapter: str, runs: Sequence[PairedRun], choice: Choice) -> GroupFit:
    fractions = {_reading(r).fraction for r in runs}
    if len(fractions) != 1:
        raise BadInput(f"group {method}/{adapter} mixes trial fractions {sorted(fractions)}: "
                       "pass paired runs whose trials stopped at the same fraction")
    f_t = fractions.pop()
    return GroupFit(method=method, adapter=adapter, n_runs=len(runs), trial_fraction=f_t,
                    metrics={m: _metric_fit(runs, m, f_t, choice) for m in RETENTION})


def _adapter(run: PairedRun) -> str:
    return run.adapter or ANY


def _seated(runs: Sequence[PairedRun], footing: Footing) -> list[PairedRun]:
    """The runs with `curve` holding their short readings on `footing` (what every fitting step reads)."""
    return [r.model_copy(update={"curve": curve_on(r, footing)}) for r in runs]


def fit(runs: Sequence[PairedRun], *, min_runs: int = MIN_RUNS, choice: Choice = "auto",
        footing: Footing | None = None) -> Fit:
    """Per (method, adapter), per method and pooled: every group with at least `min_runs` runs; the
    short readings on one footing for every run (policies.curves.footing_of; `footing` forces one)."""
    if min_runs < 3:
        raise BadInput(f"min_runs {min_runs} is below 3, the fewest runs a group's fit and its leave-one-out "
                       "need: pass --min-runs 3 or more")
    if len(runs) < min_runs:
        raise BadInput(f"extrapolation needs at least {min_runs} paired runs (min_runs), got {len(runs)}: "
                       "pass more executed retrospective cells")
    footing, note = footing_of(runs, footing)
    runs = _seated(runs, footing)
    keys = sorted({(r.method, _adapter(r)) for r in runs} | {(r.method, ANY) for r in runs}) + [(ANY, ANY)]
    groups, skipped = [], []
    for method, adapter in keys:
        members = [r for r in runs if method in (ANY, r.method) and adapter in (ANY, _adapter(r))]
        if len(members) < min_runs:
            skipped.append(f"{method}/{adapter}: {len(members)} run{'s' * (len(members) != 1)}")
        else:
            groups.append(_group_fit(method, adapter, members, choice))
    return Fit(groups=tuple(groups), min_runs=min_runs, choice=choice, skipped=tuple(skipped), footing=footing,
               footing_note=note, n_runs=len(runs),
               training_hash=content_hash([r.model_dump(mode="json") for r in runs]))


# --- predicting and checking ---------------------------------------------------------------


def _group_for(fit_: Fit, method: str, adapter: str | None) -> tuple[GroupFit, str | None]:
    wanted = (method, adapter or ANY)
    for g in fit_.groups:
        if (g.method, g.adapter) == wanted:
            return g, None
    for g in fit_.groups:
        if g.method in (method, ANY) and g.adapter == ANY:
            return g, f"{wanted[0]}/{wanted[1]} has fewer than {fit_.min_runs} runs: used {g.method}/{g.adapter}"
    raise BadInput(f"the fit has no group for {method}/{adapter}: fit on paired runs that include a pooled group")


def predict(fit_: Fit, curve: Sequence[CurvePoint], *, method: str, adapter: str | None = None) -> Prediction:
    """The full-length retention change a trial's curve extrapolates to, per metric, with its 95 % interval
    (the curve on the fit's footing: a loop's trial is on the parent footing)."""
    if not curve:
        raise BadInput("a trial curve needs at least one short run to extrapolate from")
    group, why = _group_for(fit_, method, adapter)
    reading = curve[-1]
    if not math.isclose(reading.fraction, group.trial_fraction):
        raise BadInput(f"the trial stopped at {reading.fraction:.2f} but group {group.method}/{group.adapter} "
                       f"was fitted at {group.trial_fraction:.2f}: fit on runs with the trial's fraction")
    t = float(stats.t.ppf(0.975, group.n_runs - 1))
    out = {}
    for m, mf in group.metrics.items():
        p = reading.retention_pp[m] + mf.growth_pp
        out[m] = MetricPrediction(reading_pp=reading.retention_pp[m], predicted_pp=p,
                                  interval_pp=(p - t * mf.residual_sd_pp, p + t * mf.residual_sd_pp))
    return Prediction(group=f"{group.method}/{group.adapter}", fallback=why, trial_fraction=reading.fraction,
                      metrics=out)


def safe(values: dict[str, float], drop_pp: float) -> bool:
    """Both IFEval strict changes (metric -> pp) within the guard (policies.outcomes.retention_safe)."""
    return retention_safe(values["ifeval.prompt_strict"], values["ifeval.inst_strict"], drop_pp)


def guard_check(prediction: Prediction, *, drop_pp: float) -> GuardCheck:
    """Both readings against the guard; `drop_pp` from its one owner (RunConfig.gate_ifeval_drop_pp)."""
    raw = {m: p.reading_pp for m, p in prediction.metrics.items()}
    ext = {m: p.predicted_pp for m, p in prediction.metrics.items()}
    pct = round(100 * prediction.trial_fraction)
    reasons = tuple(f"{m}: {pct} % reading {p.reading_pp:+.1f} pp, extrapolated full length {p.predicted_pp:+.1f} pp "
                    f"[{p.interval_pp[0]:+.1f}, {p.interval_pp[1]:+.1f}] ({prediction.group}); guard -{drop_pp:g} pp"
                    for m, p in prediction.metrics.items())
    return GuardCheck(drop_pp=drop_pp, raw_safe=safe(raw, drop_pp), extrapolated_safe=safe(ext, drop_pp),
                      reasons=reasons)


def trial_retention(fit_: Fit, curve: TrialCurve, card: CardFacts, *, drop_pp: float) -> ExtrapolatedRetention | None:
    """The trial's retention check at full length: its last reading (an episode's trial curve, on the
    parent footing) extrapolated by the card's (method, adapter) group and held to the guard
    (`drop_pp` from its one owner, RunConfig.gate_ifeval_drop_pp). None where the curve lacks an
    IFEval strict reading (nothing to extrapolate: the trial's own verdict stands)."""
    points = trial_curve(curve)
    if not points or any(m not in points[-1].retention_pp for m in RETENTION):
        return None
    p = predict(fit_, points, method=card.method, adapter=card.adapter)
    return ExtrapolatedRetention(
        group=p.group, fallback=p.fallback, fraction=p.trial_fraction, footing=fit_.footing, drop_pp=drop_pp,
        reading_pp={m: v.reading_pp for m, v in p.metrics.items()},
        predicted_pp={m: v.predicted_pp for m, v in p.metrics.items()},
        interval_pp={m: v.interval_pp for m, v in p.metrics.items()},
        safe=safe({m: v.predicted_pp for m, v in p.metrics.items()}, drop_pp))


def retention_reason(x: ExtrapolatedRetention) -> str:
    """One line naming both numbers per metric: `IFEval prompt strict -0.8 pp at 20 %, extrapolated
    -3.1 pp at full length [-4.5, -1.7]; ... (group sft/lora); guard -2 pp`."""
    pct = round(100 * x.fraction)
    parts = [f"IFEval {m.partition('.')[2].replace('_', ' ')} {x.reading_pp[m]:+.1f} pp at {pct} %, extrapolated "
             f"{x.predicted_pp[m]:+.1f} pp at full length [{x.interval_pp[m][0]:+.1f}, {x.interval_pp[m][1]:+.1f}]"
             for m in x.predicted_pp]
    warn = f"; {CONTROL_FOOTING_WARNING}" if x.footing == "control" else ""
    return f"{'; '.join(parts)} (group {x.group}); guard -{x.drop_pp:g} pp{warn}"
