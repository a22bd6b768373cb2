"""The trial verdict a policy acts on (docs/AUTHORIZER.md §8): the trial's own, under the frozen
thresholds, or, for a policy in TRIAL_RULES, that policy's rule on what the trial measured.

One table from policy name to rule, and one function, `policy_verdict`, that the loop's validate
node (agent/loop/nodes.py) and the audit's counterfactual walk (policies.audit.walk) both call
with the same TrialFacts and episode state, so the verdict a policy acted on in an episode is
the one its audit recomputes. A rule may keep episode facts in EpisodeState (successive halving
keeps the gains it ranks) and returns the state after the trial, which policies.after_trial
then routes on. A rule may return no verdict (None) only where the audit lacks what it reads (a
ledger without a frozen go/no-go model or card): the walk then leaves the cell undetermined,
never guessed; in an episode every input a rule reads is frozen at the start, so it always decides.

Before any policy's rule, `acted_verdict` applies the trial's retention check at full length where
the run froze an extrapolation model (`RetentionGuard`; policies.extrapolate.trial_retention): the
trial's IFEval strict readings extrapolated to the full run, held to the guard. An extrapolated
change below it makes the verdict every policy acts on Fail (it is the trial's own retention
check, read at full length, not a policy's choice), with a reason naming the reading and the
extrapolation; the rule still runs on a Fail (successive halving still ranks its gain). The loop's
validate node and the audit's walk both call `acted_verdict`, never the two steps apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from experience_bank.records import ExtrapolatedRetention, TrialCurve
from experience_bank.decisions import Features
from policies import early_stop, halving, predictive
from policies.authorize import EpisodeState, Verdict
from policies.curves import CardFacts
from policies.extrapolate import Fit, retention_reason, trial_retention
from policies.gonogo import GoNoGo


@dataclass(frozen=True)
class RetentionGuard:
    """The run's frozen extrapolation model and the guard its predictions are held to."""

    fit: Fit
    """The extrapolation model (runs/ID/extrapolation.json, its sha256 in the manifest)."""
    drop_pp: float
    """The IFEval guard: the run's frozen gate (GateConfig.ifeval_max_drop_pp, from RunConfig.gate_ifeval_drop_pp)."""


@dataclass(frozen=True)
class TrialFacts:
    """Everything a trial rule may read about one trial, all frozen before its full run."""

    recorded: Verdict
    """The trial's own verdict under the run's frozen thresholds (trainers.trial.verdict)."""
    curve: TrialCurve
    """The trial's curve: share of the nominal steps (`0.05`) -> {`target`: pp, retention metric: pp}."""
    min_gain_pp: float
    """The gate's adoption threshold for the card's family."""
    gain: float | None = None
    """Delta_val on the target at the trial's end (pp); None where no trial ran (refused)."""
    card: CardFacts | None = None
    """The card's facts (policies.curves.card_facts); None where the audit has no frozen record."""
    features: Features | None = None
    """The decision's compiled features (the record's S, A and grade)."""
    gonogo: GoNoGo | None = None
    """The run's frozen go/no-go model (bcit_predictive); None where none was frozen."""
    retention: RetentionGuard | None = None
    """The run's frozen extrapolation model with its guard; None where none was frozen."""


class OwnVerdict(NamedTuple):
    verdict: Verdict | None
    """What the policy acts on; None: undetermined from what the audit holds."""
    reason: str | None
    """Why (None: the trial's own verdict, no rule of the policy's)."""
    contributions: tuple[tuple[str, float], ...] = ()
    """A learned rule's largest feature contributions (policies.gonogo.top_contributions)."""


Rule = Callable[[TrialFacts, EpisodeState], tuple[OwnVerdict, EpisodeState]]


def _early_stop(facts: TrialFacts, st: EpisodeState) -> tuple[OwnVerdict, EpisodeState]:
    curve = {float(k): p["target"] for k, p in facts.curve.items()}
    return OwnVerdict(*early_stop.verdict(curve, facts.min_gain_pp)), st


def _halving(facts: TrialFacts, st: EpisodeState) -> tuple[OwnVerdict, EpisodeState]:
    label, why, after = halving.verdict(facts.recorded, facts.gain, st)
    return OwnVerdict(label, why), after


def _predictive(facts: TrialFacts, st: EpisodeState) -> tuple[OwnVerdict, EpisodeState]:
    if facts.gonogo is None or facts.card is None:
        return OwnVerdict(None, "go/no-go: no frozen model or card to decide with"), st
    return OwnVerdict(*predictive.verdict(facts.gonogo, facts.recorded, facts.curve, facts.card, facts.features)), st


TRIAL_RULES: Mapping[str, Rule] = {
    "early_stop_extrapolation": _early_stop,
    "successive_halving": _halving,
    "bcit_predictive": _predictive,
}
"""Policy name -> its own trial rule; a policy not here acts on the trial's recorded verdict."""


def policy_verdict(policy: str, facts: TrialFacts, state: EpisodeState) -> tuple[OwnVerdict, EpisodeState]:
    """(the verdict `policy` acts on: its own rule's, or the trial's recorded one with reason None;
    the episode state after the trial)."""
    rule = TRIAL_RULES.get(policy)
    return rule(facts, state) if rule is not None else (OwnVerdict(facts.recorded, None), state)


def acted_verdict(policy: str, facts: TrialFacts,
                  state: EpisodeState) -> tuple[OwnVerdict, EpisodeState, ExtrapolatedRetention | None]:
    """The verdict `policy` acts on after the trial's retention check at full length (where the run
    froze an extrapolation model), the episode state after it, and the check (None: no model, or no
    IFEval reading to extrapolate)."""
    guard = facts.retention
    if guard is None:
        return (*policy_verdict(policy, facts, state), None)
    if facts.card is None:  # the audit of a ledger without frozen records: which group, it cannot tell
        return OwnVerdict(None, "extrapolated retention: no frozen card to choose the model's group"), state, None
    check = trial_retention(guard.fit, facts.curve, facts.card, drop_pp=guard.drop_pp)
    if check is None or check.safe:
        return (*policy_verdict(policy, facts, state), check)
    own, after = policy_verdict(policy, replace(facts, recorded="fail"), state)
    why = f"extrapolated retention below the guard: {retention_reason(check)}" + (f"; {own.reason}" if own.reason else "")
    return OwnVerdict("fail", why, own.contributions), after, check
