"""Decisions and events: what the authorizer decided about a candidate, and what an episode then did
(docs/AUTHORIZER.md §3, §7). The records they read (cards, contexts, evidence) are in
`experience_bank/cards.py` and `experience_bank/records.py`; the same strictness holds (frozen, unknown keys and NaN are errors).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_serializer, model_validator

from experience_bank.frozen import Action, Fraction, Frozen, Grade, Ident, Nu, Sha256, omit_empty
from experience_bank.records import ExtrapolatedRetention, TrialCurve


FieldScore = Literal[0.0, 0.5, 1.0]


class FieldScores(Frozen):
    family: FieldScore
    """1. capability-family match."""
    data: FieldScore
    """2. training-data availability and identity."""
    runtime: FieldScore
    """3. runtime availability."""
    parent: FieldScore
    """4. current-parent compatibility."""
    protocol: FieldScore
    """5. evaluation / output-protocol compatibility."""


class Features(Frozen):
    """Outcome-blind features of one candidate in one context (docs/AUTHORIZER.md §3)."""

    candidate_id: Ident
    """Card id."""
    record_hash: Sha256
    """Content hash of the record or proposal compiled."""
    context_hash: Sha256
    """Content hash of the current context."""
    is_new: bool
    """True for a proposal (no S, no chi)."""
    grade: Grade | None
    """Evidence grade (None for a proposal)."""
    delta_src: float | None
    """Source effect in pp (None for a proposal)."""
    kappa: float | None
    """Normalising scale (None for a proposal)."""
    S: Fraction | None
    """Source strength d(e) * clip(delta_src / kappa, 0, 1)."""
    fields: FieldScores
    """The five compatibility field scores."""
    A: Fraction
    """Mean of the five field scores."""
    H: Literal[0, 1]
    """1 iff a named hard conflict fired."""
    conflicts: tuple[str, ...]
    """Names of the conflicts that fired."""
    Q: Fraction | None
    """S * A (None for a proposal)."""
    nu: Nu
    """Validation feasibility."""
    chi: Literal[0, 1]
    """Replicated matched control (0 for a proposal)."""
    conflicted: bool = False
    """Consolidation found contradicting evidence for this candidate and context: no direct Train."""


class Decision(Frozen):
    """An authorization: a closed action with the rule that fired and the numbers behind it."""

    candidate_id: Ident
    """Card id."""
    action: Action
    """reject | validate | train."""
    rule: Annotated[str, Field(min_length=1, max_length=120)]
    """Name of the routing rule that fired, e.g. `bcit.hard_conflict`."""
    numbers: dict[str, float]
    """The numbers the rule compared (score, thresholds, quota used, ...)."""
    policy: Ident
    """Policy name."""
    policy_version: Ident
    """Policy version (thresholds and discounts are part of it)."""
    features: Features
    """The frozen inputs."""
    decision_hash: Sha256
    """sha256 of the canonical JSON of every other field."""


Outcome = Literal["rejected", "trial_failed", "promoted", "rolled_back", "not_started"]


class Event(Frozen):
    """An executed event of an episode (append-only, hash-chained in the bank)."""

    episode_id: Ident
    """Episode."""
    seq: Annotated[int, Field(ge=0)]
    """Position in the episode's history."""
    candidate_id: Ident
    """Card id."""
    decision: Decision
    """The decision with its features and hash."""
    action: Action
    """What was executed (equals decision.action)."""
    cost_device_hours: Annotated[float, Field(ge=0.0)]
    """Device-hours charged for this event (trial + full run + evaluations)."""
    wall_seconds: Annotated[float, Field(ge=0.0)]
    """Measured wall-clock seconds."""
    metrics: dict[str, float]
    """Measured metrics (empty for a rejection)."""
    fidelity: dict[str, float] | None = None
    """Trial vs full-run comparison where both ran."""
    outcome: Outcome
    """What happened."""
    reason: Annotated[str, Field(max_length=500)]
    """Frozen reason: the rule for a rejection, the deciding gate check otherwise."""
    artefacts: tuple[str, ...] = ()
    """Checkpoints and reports produced (paths relative to the run directory)."""
    trial_verdict: Literal["pass", "fail", "inconclusive"] | None = None
    """Verdict of the bounded trial, where one was decided (a refused trial is a fail)."""
    trial_delta: float | None = None
    """Delta_val of the trial on the target metric (pp), where it ran and was measured."""
    trial_device_hours: Annotated[float, Field(ge=0.0)] = 0.0
    """The part of cost_device_hours that the trial and its evaluation were charged."""
    trial_retention: dict[str, float] = {}
    """The trial's IFEval effects vs the initial parent on validation (pp), where measured."""
    trial_curve: TrialCurve = {}
    """The trial's curve (TrialCurve), where it ran and recorded one."""
    trial_contributions: tuple[tuple[str, float], ...] = ()
    """Why a learned trial rule decided as it did (bcit_predictive's go/no-go): its largest feature
    contributions to the log-odds of P(harmful), (feature, coefficient x standardised value), largest
    |value| first; positive pushes toward no-go. Empty for every other policy."""
    prior_contributions: tuple[tuple[str, float], ...] = ()
    """Why bcit_predictive skipped this candidate's trial (rule `bcit_predictive.prior_skip`): the prior-only
    go/no-go's largest contributions, as trial_contributions. Empty (and omitted) for every other decision."""
    trial_retention_extrapolated: ExtrapolatedRetention | None = None
    """The trial's retention check at full length, where the run froze an extrapolation model
    (`agent run --extrapolation-model`): below the guard, the verdict the policy acted on was Fail
    whatever trial_verdict (the trial's own) says. Omitted where None."""
    target_metric: str | None = None
    """The card's target metric key (`<family>/target.<metric>`), where a full run was judged."""
    target_gain: float | None = None
    """Child minus parent on the target metric, adoption split (pp), where a full run was judged."""
    gate_decided_by: Ident | None = None
    """The gate check that decided (`all_passed` on promotion), where a full run was judged."""
    retention: dict[str, float] = {}
    """The child's IFEval effects vs the initial parent on adoption (pp): `prompt_strict`, `inst_strict`."""
    full_run: Literal["ran", "not_authorized", "refused"] | None = None
    """Whether a full run happened after the decision (None for a rejection)."""
    refused: Annotated[str, Field(max_length=500)] | None = None
    """Why a trial or full run that the decision allowed was not started (budget, no bounded trial)."""

    _omit_empty_curve = model_serializer(mode="wrap")(omit_empty("trial_curve", "trial_contributions",
                                                                 "trial_retention_extrapolated", "prior_contributions"))

    @model_validator(mode="after")
    def _consistent(self) -> "Event":
        if self.action != self.decision.action:
            raise ValueError("event action differs from its decision's action")
        if self.action == "reject" and (self.metrics or self.fidelity or self.cost_device_hours):
            raise ValueError("a rejection carries only its frozen reason: no metrics, fidelity or cost")
        return self
