"""How well the forgetting extrapolation (policies/extrapolate.py) predicts a full run it never saw.

Each paired run is predicted by a fit on the runs outside its hold-out unit (its cell, every seed
of it together, or its whole world seed), and compared with its full run: |predicted - full| for
the raw 20 % reading against the extrapolation, per IFEval strict metric and method, and how often
the guard decision comes out right either way. `agent extrapolate` (agent/experiments/extrapolation.py)
prints and publishes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from scipy import stats

from experience_bank.errors import BadInput
from experience_bank.frozen import Frozen
from policies.curves import RETENTION, Footing, PairedRun, curve_on, footing_of
from policies.extrapolate import MIN_RUNS, Choice, MetricPrediction, fit, safe, predict
from policies.stats import clopper_pearson, mean_interval

Holdout = Literal["cell", "world"]


class HeldOutRun(Frozen):
    """One run predicted by a fit that never saw it (nor any run of its cell, or of its world)."""

    card_id: str
    world_seed: int
    seed: int
    method: str
    group: str
    fallback: str | None
    metrics: dict[str, MetricPrediction]
    full_pp: dict[str, float]
    """The full run's retention change: the truth."""
    breach: bool
    """The full run breaks the guard (not policies.outcomes.retention_safe)."""
    raw_breach: bool
    extrapolated_breach: bool


class ErrorSummary(Frozen):
    """|predicted - full| over held-out runs, raw reading against extrapolation, for one metric and method."""

    n: int
    raw_mean_pp: float
    raw_mean_ci: tuple[float, float] | None
    raw_median_pp: float
    raw_median_ci: tuple[float, float]
    extrapolated_mean_pp: float
    extrapolated_mean_ci: tuple[float, float] | None
    extrapolated_median_pp: float
    extrapolated_median_ci: tuple[float, float]
    covered: int
    """Held-out full values inside their 95 % prediction interval."""


class GuardSummary(Frozen):
    """How often the guard decision (full-length change below -drop_pp) comes out right."""

    n: int
    breaches: int
    """Held-out runs whose full run breaks the guard."""
    raw_right: int
    raw_right_ci: tuple[float, float]
    extrapolated_right: int
    extrapolated_right_ci: tuple[float, float]


class ErrorReport(Frozen):
    holdout: Holdout
    footing: Footing = "control"
    """What every fold read the short runs against (the one footing of all the runs)."""
    footing_note: str | None = None
    drop_pp: float
    min_runs: int
    choice: Choice
    runs: tuple[HeldOutRun, ...]
    errors: dict[str, dict[str, ErrorSummary]]
    """metric -> method ('all' for every run) -> summary."""
    open_errors: dict[str, dict[str, ErrorSummary]] = {}
    """The same on the runs whose raw reading keeps within the guard (not raw_breach): the runs where a
    full-length prediction decides the trial's retention check, since a reading already past the guard
    fails it as it is. A collapsing run (-50 pp at the trial, -60 at full length) weighs on `errors`'
    means without any decision at stake. Empty in reports written before it existed."""
    guard: dict[str, GuardSummary]
    """method ('all' for every run) -> the guard decision's accuracy."""


def _unit(holdout: Holdout) -> Callable[[PairedRun], tuple]:
    # A cell's every seed leaves together: another seed of the same card would leak its full run.
    return (lambda r: (r.world_seed,)) if holdout == "world" else (lambda r: (r.world_seed, r.card_id))


def held_out(runs: Sequence[PairedRun], *, drop_pp: float, holdout: Holdout = "cell",
             min_runs: int = MIN_RUNS, choice: Choice = "auto") -> tuple[HeldOutRun, ...]:
    """Each run predicted by a fit on the runs outside its hold-out unit (its cell, or its world seed)."""
    unit = _unit(holdout)
    if holdout == "world" and len({r.world_seed for r in runs}) < 2:
        raise BadInput("leave-one-world-out needs paired runs of at least two world seeds: "
                       "pass several executed retrospectives (one per world) or hold out cells")
    out, footing = [], footing_of(runs)[0]  # every fold on the footing of all the runs, never its own
    for key in sorted({unit(r) for r in runs}):
        fitted = fit([r for r in runs if unit(r) != key], min_runs=min_runs, choice=choice, footing=footing)
        for run in (r for r in runs if unit(r) == key):
            p = predict(fitted, curve_on(run, footing), method=run.method, adapter=run.adapter)
            full = dict(run.full.retention_pp)
            out.append(HeldOutRun(card_id=run.card_id, world_seed=run.world_seed, seed=run.seed, method=run.method,
                                  group=p.group, fallback=p.fallback, metrics=p.metrics, full_pp=full,
                                  breach=not safe(full, drop_pp),
                                  raw_breach=not safe({m: v.reading_pp for m, v in p.metrics.items()}, drop_pp),
                                  extrapolated_breach=not safe({m: v.predicted_pp for m, v in p.metrics.items()},
                                                                drop_pp)))
    return tuple(out)


def _median_ci(x: np.ndarray) -> tuple[float, float]:
    ci = stats.quantile_test(x, q=float(np.median(x)), p=0.5).confidence_interval(0.95)
    return float(ci.low), float(ci.high)


def _errors(rows: Sequence[HeldOutRun], metric: str) -> ErrorSummary:
    raw = np.array([abs(r.metrics[metric].reading_pp - r.full_pp[metric]) for r in rows])
    ext = np.array([abs(r.metrics[metric].predicted_pp - r.full_pp[metric]) for r in rows])
    covered = sum(lo <= r.full_pp[metric] <= hi for r in rows for lo, hi in [r.metrics[metric].interval_pp])
    (rm, rci), (em, eci) = mean_interval(raw), mean_interval(ext)
    return ErrorSummary(n=len(rows), raw_mean_pp=rm, raw_mean_ci=rci, raw_median_pp=float(np.median(raw)),
                        raw_median_ci=_median_ci(raw), extrapolated_mean_pp=em, extrapolated_mean_ci=eci,
                        extrapolated_median_pp=float(np.median(ext)), extrapolated_median_ci=_median_ci(ext),
                        covered=covered)


def _guard(rows: Sequence[HeldOutRun]) -> GuardSummary:
    raw = sum(r.raw_breach == r.breach for r in rows)
    ext = sum(r.extrapolated_breach == r.breach for r in rows)
    return GuardSummary(n=len(rows), breaches=sum(r.breach for r in rows), raw_right=raw,
                        raw_right_ci=clopper_pearson(raw, len(rows)), extrapolated_right=ext,
                        extrapolated_right_ci=clopper_pearson(ext, len(rows)))


def extrapolation_error(runs: Sequence[PairedRun], *, drop_pp: float, holdout: Holdout = "cell",
                        min_runs: int = MIN_RUNS, choice: Choice = "auto") -> ErrorReport:
    """Leave-one-out (over cells, or over world seeds): |predicted - full| raw against extrapolated,
    per metric and method, and how often the guard decision is right either way."""
    rows = held_out(runs, drop_pp=drop_pp, holdout=holdout, min_runs=min_runs, choice=choice)
    by = _by_method(rows)
    opened = _by_method([r for r in rows if not r.raw_breach])
    footing, note = footing_of(runs)
    return ErrorReport(holdout=holdout, footing=footing, footing_note=note, drop_pp=drop_pp, min_runs=min_runs,
                       choice=choice, runs=rows,
                       errors={m: {k: _errors(v, m) for k, v in by.items()} for m in RETENTION},
                       open_errors={m: {k: _errors(v, m) for k, v in opened.items() if v} for m in RETENTION},
                       guard={k: _guard(v) for k, v in by.items()})


def _by_method(rows: Sequence[HeldOutRun]) -> dict[str, list[HeldOutRun]]:
    """'all' -> every row, then each method -> its rows."""
    return {"all": list(rows)} | {m: [r for r in rows if r.method == m] for m in sorted({r.method for r in rows})}
