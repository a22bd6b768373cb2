"""The trial verdict a policy acts on (docs/AUTHORIZER.md §8): the trial's own, under the frozen
thresholds, or, for a policy in OWN_TRIAL_RULE, that policy's rule on what the trial measured.

One table from policy name to rule, and one function, `policy_verdict`, that the loop's validate
node and the audit's counterfactual walk both call with the same inputs, so the two cannot
differ. A rule may keep episode facts in EpisodeState (successive halving keeps the gains it
ranks); it returns the state after the trial, which policies.after_trial then routes on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from policies import early_stop, halving
from policies.authorize import EpisodeState, Verdict


@dataclass(frozen=True)
class TrialSeen:
    """What a trial rule may read of one trial."""

    verdict: Verdict
    """The trial's own verdict under the frozen thresholds."""
    gain: float | None
    """Delta_val on the target at the trial's end (pp); None where no trial ran (refused)."""
    curve: Mapping[str, float]
    """The trial's curve: share (`"0.05"`) -> target delta (pp)."""


OwnRule = Callable[[TrialSeen, EpisodeState, float], tuple[Verdict, str, EpisodeState]]
"""(trial, episode state, the family's adoption threshold) -> (verdict, reason, state after)."""

OWN_TRIAL_RULE: dict[str, OwnRule] = {
    "early_stop_extrapolation": lambda t, st, min_gain_pp: (
        *early_stop.verdict({float(k): v for k, v in t.curve.items()}, min_gain_pp), st),
    "successive_halving": lambda t, st, _: halving.verdict(t.verdict, t.gain, st),
}
"""Policies whose trial verdict is their own rule, not the trial's verdict under the frozen thresholds."""


def policy_verdict(policy: str, trial: TrialSeen, state: EpisodeState, min_gain_pp: float
                   ) -> tuple[Verdict, str | None, EpisodeState]:
    """(the verdict `policy` acts on, its rule's reason (None: the trial's own verdict), the state after)."""
    rule = OWN_TRIAL_RULE.get(policy)
    if rule is None:
        return trial.verdict, None, state
    return rule(trial, state, min_gain_pp)
