"""bcit_predictive's trial verdict (issue 27, item 3): the learned go/no-go (policies/gonogo.py)
decides whether a trial that did not fail earns the full run.

Inputs, all frozen before the full run: the trial's curve (its target and IFEval effects at 5 %,
10 % and 20 % of the nominal steps), the card's facts and the decision's compiled features (the
record's S, A and grade); the model is the run's frozen copy (runs/ID/gonogo.json, its sha256 in
the manifest), never a file a user may have changed since.

Rule: a trial whose own verdict is Fail stays a Fail. Every Fail is a guardrail that fired (the
target fell by the fail margin, a retention metric fell past its bound, a hard failure or a
training sanity check: trainers.trial.verdict), and a model fitted on a few dozen paired runs
is no reason to override one. Otherwise (Pass or Inconclusive) the model decides: Pass iff it
authorizes the full run (policies.gonogo.authorizes: P(beneficial) at least its floor and P(harmful)
at most its frozen Learn-then-Test threshold), else Fail. So where the model decides, the rule never
returns Inconclusive and never spends the fallback lease.

A model that certified no threshold (policies.gonogo.defers: no P(harmful) bound passed on its
calibration runs) has no say: the trial's own verdict stands, Inconclusive and its lease included,
so the policy is bcit there. Before stop 54 such a model failed every trial, which made the policy
"reject everything after the trial" on any world whose fold certified nothing (world 1 of v7):
the degenerate policy the method is built to avoid, where bcit's own trial rule had the better
held-out record (docs/results/gonogo-v7b-w012.md).

Skip (before the trial): the model carries a prior-only go/no-go (GoNoGo.prior), fitted the same
way on what is known before a trial (the card's facts, the record's S, A and grade). Where BCIT's
routing gives a plain historical Validate and the prior-only model authorizes it (the same rule,
with its own Learn-then-Test threshold), bcit_predictive trains directly (policies.authorize.bcit_predictive,
rule `bcit_predictive.prior_skip`): the evidence suffices to skip the trial. `prior_decision` is
that reading; a model file without the prior (fitted before it existed), or whose prior-only
threshold is None (it authorizes nothing, as on v4), never skips and leaves the decision as BCIT's.

Footing: a trial's curve is measured against the parent (target) and the initial parent
(retention); a model fitted on cells that keep the parent's scores read their short runs the same
way (GoNoGo.footing `parent`). One fitted on older cells read them against matched controls
(`control`); the run uses it and its manifest and report say so (agent/run/gonogo_model.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from experience_bank.decisions import Features
from policies.authorize import Verdict
from policies.curves import CardFacts, trial_curve
from policies.gonogo import GoDecision, GoNoGo, decide, defers, top_contributions
from policies.gonogo_features import prior_features, probe_features


def prior_decision(model: GoNoGo, card: CardFacts, features: Features | None) -> GoDecision | None:
    """The prior-only go/no-go's reading of a candidate before any trial; `go` means the trial may be
    skipped. None where it can never skip: the model has no prior-only head (fitted before it
    existed) or the head's threshold is None (it authorizes nothing); the decision then carries none
    of its numbers, and hashes as without it."""
    if model.prior is None or model.prior.threshold.threshold is None:
        return None
    return decide(model.prior, prior_features(card, record_of(features)))


def record_of(features: Features | None) -> dict | None:
    """The record numbers the go/no-go reads of a decision's compiled features: S, A and grade (the
    refit at consolidation reads them the same way, agent/run/gonogo_refit.py)."""
    return features.model_dump(include={"S", "A", "grade"}) if features is not None else None


def verdict(model: GoNoGo, recorded: Verdict, curve: Mapping[str, Mapping[str, float]], card: CardFacts,
            features: Features | None) -> tuple[Verdict, str, tuple[tuple[str, float], ...]]:
    """(verdict, reason, top contributions) of one trial under the frozen model."""
    d = decide(model, probe_features(trial_curve(curve), card, record_of(features)))
    top = top_contributions(d)
    if recorded == "fail":
        return "fail", "go/no-go: the trial's own verdict is Fail (a guardrail fired), kept", top
    if defers(model):
        return recorded, (f"go/no-go: certified no threshold, so the trial's own verdict ({recorded}) stands "
                          f"(P(harmful) {d.p_harmful:.3f}, P(beneficial) {d.p_beneficial:.3f})"), top
    return ("pass" if d.go else "fail"), f"go/no-go: {reading(model, d)}", top


def reading(model: GoNoGo, d: GoDecision) -> str:
    """A decision's numbers against the model's rule, for a reason: which bound holds or fails. Only
    a model with a threshold decides (one without defers, `verdict`), so the threshold is a number."""
    assert d.threshold is not None, "a model that certified no threshold defers; it has no reading"
    harm_ok = d.p_harmful <= d.threshold
    shown = ", ".join(f"{name} {value:+.2f}" for name, value in top_contributions(d)[:3])
    if model.beneficial_floor is None:
        ben = f"P(beneficial) {d.p_beneficial:.3f}"
    else:
        ben = (f"P(beneficial) {d.p_beneficial:.3f} {'>=' if d.p_beneficial >= model.beneficial_floor else 'below'} "
               f"floor {model.beneficial_floor:g}")
    return (f"P(harmful) {d.p_harmful:.3f} {'<=' if harm_ok else 'above'} threshold {d.threshold:g}, {ben} -> "
            f"{'go' if d.go else 'no-go'} (top: {shown})")
