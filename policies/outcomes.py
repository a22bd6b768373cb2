"""Outcome classes: the one definition of "beneficial", "harmful" and "neutral" (and "uncertain").

Every place that scores what an update did calls `outcome_class` or, where effects come with
intervals, `outcome_class_interval`: the audit of a recorded episode (agent/run/audit.py), the
replay of the shipped Retrospective-24 cells (policies/replay.py) and the executed retrospective
(agent/experiments/retrospective.py). `outcome_class` is the interval rule on point intervals.

- direction of an effect: 0 when |x| < band, else its sign;
- retention-safe: both IFEval strict effects (prompt and instruction level, measured
  against the initial parent) are at least `-ifeval_drop_pp`;
- harmful: retention is not safe (no target gain compensates for it, docs/AUTHORIZER.md §6), the
  target moves down, or the run hit a hard failure (a failed sanity check);
- beneficial: the target moves up and retention is safe;
- neutral: anything else.

With intervals (a seeded cell: the 95 % Student-t interval over its per-seed effects), a class
is decided only where the whole interval lies on one side of each boundary it needs:
- harmful: a hard failure on any seed, or the target interval lies wholly in "down"
  (high <= -band), or an IFEval interval lies wholly below the guard (high < -ifeval_drop_pp);
- beneficial: the target interval lies wholly in "up" (low >= band) and both IFEval
  intervals' low ends are >= -ifeval_drop_pp;
- neutral: the target interval lies within (-band, +band) and both IFEval low ends are
  >= -ifeval_drop_pp;
- uncertain: anything else (an interval straddles a boundary). It is counted apart, never in
  a class's figures.
A point (low = high) always lands in one of the first three, exactly as the rule above.

An update that was never run to the end has no outcome class (None): it is counted as
undetermined by the audit, never guessed from its trial.
"""

from __future__ import annotations

from typing import Literal, cast

OutcomeClass = Literal["beneficial", "harmful", "neutral"]
OUTCOME_CLASSES: tuple[OutcomeClass, ...] = ("beneficial", "harmful", "neutral")
IntervalClass = Literal["beneficial", "harmful", "neutral", "uncertain"]
"""An outcome class decided from intervals: "uncertain" where they do not clear a boundary."""
UNCERTAIN: IntervalClass = "uncertain"
Interval = tuple[float, float]
"""(low, high) in pp; a point estimate is (x, x)."""


def direction(delta: float, band: float) -> int:
    """-1, 0 or +1: the sign of an effect outside the neutral band."""
    return 0 if abs(delta) < band else (1 if delta > 0 else -1)


def retention_safe(ifeval_p: float, ifeval_i: float, ifeval_drop_pp: float) -> bool:
    """Both IFEval strict effects within the guard (pp, vs the initial parent)."""
    return min(ifeval_p, ifeval_i) >= -ifeval_drop_pp


def outcome_class_interval(target: Interval, ifeval_p: Interval, ifeval_i: Interval, *, band: float,
                           ifeval_drop_pp: float, hard_failure: bool = False) -> IntervalClass:
    """The class of one cell from the intervals of its target and IFEval effects (all in pp)."""
    (t_lo, t_hi), (p_lo, p_hi), (i_lo, i_hi) = target, ifeval_p, ifeval_i
    if hard_failure or not retention_safe(p_hi, i_hi, ifeval_drop_pp) or direction(t_hi, band) < 0:
        return "harmful"
    if not retention_safe(p_lo, i_lo, ifeval_drop_pp):
        return UNCERTAIN
    if direction(t_lo, band) > 0:
        return "beneficial"
    return "neutral" if direction(t_lo, band) == 0 and direction(t_hi, band) == 0 else UNCERTAIN


def outcome_class(target: float, ifeval_p: float, ifeval_i: float, *, band: float, ifeval_drop_pp: float,
                  hard_failure: bool = False) -> OutcomeClass:
    """The class of one full run from its target effect and IFEval effects (all in pp)."""
    return cast(OutcomeClass, outcome_class_interval((target, target), (ifeval_p, ifeval_p), (ifeval_i, ifeval_i),
                                                     band=band, ifeval_drop_pp=ifeval_drop_pp,
                                                     hard_failure=hard_failure))
