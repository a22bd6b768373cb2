"""Outcome classes: the one definition of "beneficial", "harmful" and "neutral".

Every place that scores what an update did calls `outcome_class`: the audit of a recorded
episode (agent/loop/episode.py's RunAudit), the replay of the shipped Retrospective-24 cells
(policies/replay.py) and the executed retrospective (agent/experiments/retrospective.py).

- direction of an effect: 0 when |x| < band, else its sign;
- retention-safe: both IFEval strict effects (prompt and instruction level, measured
  against the initial parent) are at least `-ifeval_drop_pp`;
- harmful: retention is not safe (no target gain compensates for it, docs/AUTHORIZER.md §6), the
  target moves down, or the run hit a hard failure (a failed sanity check);
- beneficial: the target moves up and retention is safe;
- neutral: anything else.

An update that was never run to the end has no outcome class (None): it is counted as
undetermined by the audit, never guessed from its trial.
"""

from __future__ import annotations

from typing import Literal

OutcomeClass = Literal["beneficial", "harmful", "neutral"]
OUTCOME_CLASSES: tuple[OutcomeClass, ...] = ("beneficial", "harmful", "neutral")


def direction(delta: float, band: float) -> int:
    """-1, 0 or +1: the sign of an effect outside the neutral band."""
    return 0 if abs(delta) < band else (1 if delta > 0 else -1)


def retention_safe(ifeval_p: float, ifeval_i: float, ifeval_drop_pp: float) -> bool:
    """Both IFEval strict effects within the guard (pp, vs the initial parent)."""
    return min(ifeval_p, ifeval_i) >= -ifeval_drop_pp


def outcome_class(target: float, ifeval_p: float, ifeval_i: float, *, band: float, ifeval_drop_pp: float,
                  hard_failure: bool = False) -> OutcomeClass:
    """The class of one full run from its target effect and IFEval effects (all in pp)."""
    if hard_failure or not retention_safe(ifeval_p, ifeval_i, ifeval_drop_pp) or direction(target, band) < 0:
        return "harmful"
    return "beneficial" if direction(target, band) > 0 else "neutral"
