"""Successive halving: the trial verdict of the `successive_halving` baseline (issue 27).

The multi-fidelity literature's standard budget baseline (Hyperband's inner loop): every
candidate runs to a first rung, here the bounded trial, and only the best 1/eta continue to the
full run. Synchronous halving ranks a whole rung at once, which needs every candidate's trial
before any full run; the loop decides candidates one at a time and never comes back to one, so
this is the asynchronous variant (ASHA, Li et al. 2020): when a trial ends, its candidate
continues if its target gain is among the top ceil(k / eta) of the k trial gains of the
episode so far, its own included. ceil, not floor: ASHA takes the top floor(k / eta) and
promotes a waiting candidate later, once its rung has grown; with no revisit here, floor would
stop the first four trials whatever they gained. Early trials therefore continue more often
than later ones (the first always; while k <= 5 the best so far, for k = 6..10 the best two
so far, ...); with gains in random order about 28 % of 24 trials continue (the sum of
ceil(k / 5) / k over k = 1..24, divided by 24), and the share tends to 1/eta.

The gain ranked is the trial's Delta_val on its target, the number the trial's own verdict
reads. Every trial that ran enters the rung, a failed one too (its gain is a rung result like
any other); a trial that never ran (refused: no bounded trial exists) has no gain and enters
nothing. The ranking never overrides a Fail: a hard failure or a retention breach still stops
the candidate. An Inconclusive trial in the top share continues (the rank decides it, not the
fallback lease).
"""

from __future__ import annotations

import math

from policies.authorize import EpisodeState, Verdict

ETA = 5
"""The reduction factor: about one trial in ETA continues to the full run (issue 27: eta = 5)."""


def top_share(k: int) -> int:
    """How many of k trial gains continue: ceil(k / ETA), at least one."""
    return math.ceil(k / ETA)


def verdict(recorded: Verdict, gain: float | None, state: EpisodeState) -> tuple[Verdict, str, EpisodeState]:
    """(Pass when the trial's target gain is in the episode's top share and the trial did not fail,
    else Fail; the reason; the state with this gain added to the episode's trial gains)."""
    if gain is None:  # no trial ran, so there is nothing to rank: its own verdict (a Fail) stands
        return recorded, "successive halving: no trial gain to rank", state
    gains = (*state.trial_gains, float(gain))
    keep = top_share(len(gains))
    cutoff = sorted(gains, reverse=True)[keep - 1]
    # a gain equal to the cut-off counts as in, so tied trials all continue (the rank cannot split them)
    top = gain >= cutoff
    label: Verdict = "pass" if top and recorded != "fail" else "fail"
    why = (f"successive halving (eta = {ETA}): trial gain {gain:.3g} pp is {'' if top else 'not '}among the top "
           f"{keep} of {len(gains)} trial gains (cut-off {cutoff:.3g} pp)" + ("; the trial failed" if recorded == "fail" else ""))
    return label, why, state.model_copy(update={"trial_gains": gains})
