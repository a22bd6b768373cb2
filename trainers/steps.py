"""How many optimizer steps a run may take: the one rule for a trial's share of a card.

A bounded trial may spend at most `fraction` (<= 20%, docs/AUTHORIZER.md §5) of the card's nominal
steps, so its step count is the FLOOR of fraction x nominal steps: rounding up would let a
GRPO trial of 32 nominal steps run 7 (21.9%) while the budget said 20%. Where that floor is
under one step no bounded trial exists, and `trial_steps` refuses it with `TrialRefused`
(the loop records the refusal as a Fail that never ran, with its reason). The ledger charges
a run for the steps it actually ran (trainers.ledger.run_hours), never for the fraction
asked for.

Pure and torch-free, so that the loop and the ledger can ask it without loading a trainer.
"""

from __future__ import annotations

import math

from experience_bank.errors import BadInput
from experience_bank.cards import CandidateCard
from experience_bank.results import SHORT_FRACTIONS

MAX_TRIAL_FRACTION = 0.20
_ROUND_OFF = 1e-9  # 0.29 * 100 is 28.999999999999996 in floats: the share is 29 steps, not 28


class TrialRefused(BadInput):
    """No run of at least one step fits in the share asked for: it is not started.

    A BadInput so that `agent train` prints it as one line; the loop catches this type and
    records a Fail verdict with `reason` instead of stopping the episode."""

    def __init__(self, card_id: str, nominal_steps: int, fraction: float):
        self.card_id, self.nominal_steps, self.fraction = card_id, nominal_steps, fraction
        self.reason = (f"card {card_id}: {fraction:g} of its {nominal_steps} nominal steps is "
                       f"{fraction * nominal_steps:.3g} steps, under one, so no bounded trial exists; "
                       f"a trial at {fraction:g} needs a card of at least {math.ceil(1 / fraction - _ROUND_OFF)} steps")
        super().__init__(self.reason)


def share_steps(card: CandidateCard, fraction: float) -> int:
    """Steps of a run covering `fraction` of the card's nominal steps: never more (floor)."""
    if not 0.0 < fraction <= 1.0:
        raise BadInput(f"fraction {fraction} is outside (0, 1]: pass e.g. --fraction 0.2")
    steps = math.floor(fraction * card.budget.steps + _ROUND_OFF)
    if steps < 1:
        raise TrialRefused(card.id, card.budget.steps, fraction)
    return steps


def trial_steps(card: CandidateCard, fraction: float = MAX_TRIAL_FRACTION) -> int:
    """Steps of the card's bounded trial at `fraction` (<= 20%); TrialRefused under one step."""
    if not 0.0 < fraction <= MAX_TRIAL_FRACTION:
        raise BadInput(f"trial fraction {fraction} must be in (0, {MAX_TRIAL_FRACTION}]: pass e.g. 0.2")
    return share_steps(card, fraction)


def plan_steps(card: CandidateCard, fraction: float) -> tuple[int, int]:
    """(schedule length, steps to run) for a share of the card's nominal steps.

    A nu = continue prefix keeps the full run's schedule, so that continuing it reaches the
    uninterrupted run; any other short run is its own compressed schedule."""
    nominal = card.budget.steps
    stop_at = share_steps(card, fraction)
    schedule = nominal if (card.nu == "continue" or fraction == 1.0) else stop_at
    return schedule, stop_at




def curve_steps(card: CandidateCard, fraction: float = MAX_TRIAL_FRACTION) -> tuple[tuple[float, int], ...]:
    """(share, step) of each point a trial at `fraction` is measured at before its last step:
    the floor of each experience_bank.results.SHORT_FRACTIONS share under `fraction`, where that
    is at least one step and before the trial's own last step (a short card has fewer points, none
    if its shares coincide)."""
    last = trial_steps(card, fraction)
    points: dict[int, float] = {}
    for f in SHORT_FRACTIONS:
        step = math.floor(f * card.budget.steps + _ROUND_OFF)
        if f < fraction and 1 <= step < last:
            points.setdefault(step, f)
    return tuple((f, s) for s, f in sorted(points.items()))
