"""Typed, frozen records of the experience bank (docs/AUTHORIZER.md §2, §7): the contexts a card
is applied in, its applicability, the source evidence and provenance, and the two records built on
them (historical, proposal).

Every record that crosses a boundary (file, database, LLM output, CLI) is one of these, a card
(experience_bank/cards.py), or a decision or event built on them (experience_bank/decisions.py).
All are strict frozen models (experience_bank/frozen.py). Parse untrusted JSON with `parse_record`
(a record or proposal) or `experience_bank.frozen.parse_model` (any other record type).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, TypeAdapter, ValidationError, model_serializer, model_validator

from experience_bank.cards import CandidateCard, DatasetRef
from experience_bank.frozen import Family, Frozen, Grade, Ident, Sha256, omit_empty, one_line
from experience_bank.hashing import loads_strict


# --- contexts and applicability --------------------------------------------------------


class ModelRef(Frozen):
    id: Ident
    """Model id (e.g. `world-default/base` or a checkpoint id)."""
    sha256: Sha256
    """Content hash of the weights."""
    arch: Annotated[str, Field(min_length=1, max_length=64)]
    """Architecture family, e.g. `qwen3`."""
    chat_template_sha256: Sha256
    """Hash of the chat template the model was trained with."""
    lineage: tuple[Sha256, ...] = ()
    """Weights hashes of the models this one was trained from, oldest first (empty: a root, or
    not known). The parent field of the authorizer compares lineages (docs/AUTHORIZER.md §3)."""

    # A ref without lineage serialises exactly as before the field existed, so every record
    # and decision hashed before keeps its hash.
    _omit_empty_lineage = model_serializer(mode="wrap")(omit_empty("lineage"))


class SourceContext(Frozen):
    """x_s: where the evidence was observed."""

    parent: ModelRef
    """Source parent model."""
    stage: Annotated[int, Field(ge=0)]
    """Position in the training sequence (number of promotions before it)."""
    family: Family
    """Capability family evaluated."""
    task: Ident
    """Task variant evaluated, e.g. `sql/source`."""
    datasets: dict[str, Sha256]
    """Training data used: dataset id -> hash."""
    runtime: Ident
    """Trainer runtime, e.g. `trl-sft` or `trl-grpo`."""
    eval_protocol: Ident
    """Evaluation protocol identity."""
    output_protocol: Ident
    """Output protocol of the target task, e.g. `json-call`."""


class CurrentContext(Frozen):
    """x_t: the state the decision is taken in (structured metadata only, no outcomes)."""

    parent: ModelRef
    """Current parent model m_t."""
    stage: Annotated[int, Field(ge=0)]
    """Number of promotions so far."""
    families: tuple[Family, ...]
    """Capability families the run targets."""
    tasks: dict[str, Ident]
    """Target task variant per family, e.g. {"sql": "sql/target"}."""
    datasets: dict[str, Sha256]
    """Datasets available now: id -> hash."""
    runtimes: tuple[Ident, ...]
    """Trainer runtimes available, e.g. ("trl-sft", "trl-grpo", "peft-lora")."""
    eval_protocol: Ident
    """Evaluation protocol identity."""
    output_protocols: dict[str, Ident]
    """Output protocol per family."""


ContextField = Literal[
    "parent.id", "parent.sha256", "parent.arch", "parent.chat_template_sha256",
    "stage", "eval_protocol", "output_protocol", "task", "runtimes", "datasets",
]
"""Fields a conflict predicate may read. `output_protocol` and `task` are the current
context's values for the card's family; `runtimes` and `datasets` are collections (use
contains / not_contains)."""


class Conflict(Frozen):
    """A named hard conflict: it fires when `context[field] <op> value` is true."""

    name: Annotated[str, Field(min_length=1, max_length=120)]
    """Human-readable name, e.g. `requires output protocol json-call`."""
    field: ContextField
    """Context field the predicate reads."""
    op: Literal["eq", "ne", "lt", "le", "gt", "ge", "in", "not_in", "contains", "not_contains"]
    """Comparison (a closed vocabulary: predicates are data, never code)."""
    value: Union[int, str, tuple[str, ...]]
    """Right-hand side."""


class Applicability(Frozen):
    """B_i: the five compatibility fields' required values and the named hard conflicts."""

    family: Family
    """1. Capability family the update is for."""
    datasets: tuple[DatasetRef, ...]
    """2. Training data it needs, by id and hash."""
    runtime: Ident
    """3. Runtime it needs, e.g. `trl-grpo`."""
    parent_arch: Annotated[str, Field(min_length=1, max_length=64)]
    """4a. Parent architecture it was designed for."""
    chat_template_sha256: Sha256 | None = None
    """4b. Chat template it assumes (None: any)."""
    max_stage: Annotated[int, Field(ge=0)] | None = None
    """4c. Latest stage it is meant for (None: any)."""
    output_protocol: Ident
    """5. Output protocol it trains for."""
    conflicts: tuple[Conflict, ...] = ()
    """Named hard conflicts; any one firing sets H = 1."""


# --- evidence and provenance -----------------------------------------------------------


TrialCurve = dict[str, dict[str, float]]
"""A bounded trial's curve in a bank record: its share of the nominal steps (`0.05`, `0.10`,
`0.20`) -> {`target`: Delta_val in pp, each retention metric: pp vs the initial parent}
(experience_bank.results.TrialResult.curve_table). Serialised only where non-empty, so records
and events written before it existed keep their bytes and hashes."""


class ExtrapolatedRetention(Frozen):
    """A trial's retention check on the extrapolated full-length IFEval changes (policies/extrapolate.py,
    `trial_retention`): the trial's reading beside the change the run's frozen extrapolation model
    predicts at full length, per IFEval strict metric, against the guard."""

    group: str
    """The fit's group the prediction used, `method/adapter` (`*`: any)."""
    fallback: str | None = None
    """Why a wider group than the card's (method, adapter) was used; None when it was not."""
    fraction: float
    """The trial's share of the nominal steps the reading is at."""
    footing: Literal["parent", "control"]
    """What the model's short readings were read against (`parent`: as the trial reads them)."""
    drop_pp: float
    """The guard the extrapolated changes were held to (the run config's gate_ifeval_drop_pp)."""
    reading_pp: dict[str, float]
    """The trial's own reading by metric (pp vs the initial parent)."""
    predicted_pp: dict[str, float]
    """The extrapolated full-length change by metric (pp)."""
    interval_pp: dict[str, tuple[float, float]]
    """Its 95 % prediction interval by metric."""
    safe: bool
    """Every extrapolated change is within the guard (policies.outcomes.retention_safe)."""


class ActedTrial(Frozen):
    """What a policy acted on after its trial (policies.trial_rules.acted_verdict), as the validate node
    decided it: kept in the decision's step folder so the commit records the reasons that decided
    rather than recomputing them from the frozen models."""

    verdict: Literal["pass", "fail", "inconclusive"]
    """The verdict the policy acted on (its own rule's, else the trial's own)."""
    reason: str | None = None
    """Why, where a rule of the policy's decided (None: the trial's own verdict)."""
    contributions: tuple[tuple[str, float], ...] = ()
    """A learned rule's largest feature contributions (Event.trial_contributions)."""
    retention_extrapolated: ExtrapolatedRetention | None = None
    """The trial's retention check at full length (Event.trial_retention_extrapolated)."""


class RetentionEffect(Frozen):
    metric: Ident
    """Retention metric, e.g. `ifeval.prompt_strict`."""
    delta: float
    """Observed change in percentage points (child - control)."""


class SourceEvidence(Frozen):
    """E_s: what was observed in the source context."""

    target_metric: Ident
    """Metric of the source effect, e.g. `sql/source.exec_acc`."""
    delta_src: float
    """Source effect in pp: lower confidence bound when replicated, else the point estimate."""
    delta_point: float
    """Point estimate of the effect in pp (mean over replicates)."""
    kappa: Annotated[float, Field(gt=0.0)]
    """Pre-specified normalising scale in pp."""
    grade: Grade
    """A: replicated matched control; B: one paired run; C: log-only point estimate."""
    chi: Literal[0, 1]
    """1 iff the evidence is a replicated matched control (grade A)."""
    retention: tuple[RetentionEffect, ...] = ()
    """Retention effects seen alongside."""
    replicates: Annotated[int, Field(ge=1)]
    """Number of replicates behind the evidence."""
    trial_curve: TrialCurve = {}
    """The bounded trial's curve where one ran (an episode's observation); see TrialCurve."""

    _omit_empty_curve = model_serializer(mode="wrap")(omit_empty("trial_curve"))

    @model_validator(mode="after")
    def _chi_iff_a(self) -> "SourceEvidence":
        if (self.chi == 1) != (self.grade == "A"):
            raise ValueError("chi must be 1 exactly when grade is A")
        if self.grade == "A" and self.replicates < 2:
            raise ValueError("grade A needs at least 2 replicates")
        return self


class Provenance(Frozen):
    """rho_i: hashes of the artefacts behind a record."""

    model_sha256: Sha256
    """Weights of the model the evidence (or proposal) was produced on."""
    data_sha256: dict[str, Sha256]
    """Datasets used."""
    config_sha256: Sha256
    """Canonical hash of the run config / card."""
    eval_sha256: Sha256
    """Hash of the evaluation artefacts (stored generations + scorer identity)."""
    artefacts: tuple[str, ...] = ()
    """Paths (relative to the bank) of stored artefacts, checked by consolidation."""
    produced_by: Annotated[str, Field(max_length=200)] = ""
    """What produced the record, e.g. `world seed-bank` or `episode E12`."""


class HistoricalRecord(Frozen):
    """c_i_hist = (i, x_s, E_s, B_i, rho_i)."""

    kind: Literal["historical"] = "historical"
    card: CandidateCard
    """The atomic update i."""
    source: SourceContext
    """x_s."""
    evidence: SourceEvidence
    """E_s."""
    applicability: Applicability
    """B_i."""
    provenance: Provenance
    """rho_i."""


class Proposal(Frozen):
    """c_i_prop = (i, ⊥, ⊥, B_i, rho_i): no evidence fields exist, so none can be faked."""

    kind: Literal["proposal"] = "proposal"
    card: CandidateCard
    """The atomic update i."""
    applicability: Applicability
    """B_i."""
    provenance: Provenance
    """rho_i."""


Record = Annotated[Union[HistoricalRecord, Proposal], Field(discriminator="kind")]
_RECORD = TypeAdapter(Record)


# --- parsing untrusted input -----------------------------------------------------------


def parse_record(text: str) -> HistoricalRecord | Proposal:
    """Parse one record or proposal from JSON text; BadInput on any defect."""
    loads_strict(text)  # duplicate keys / NaN before validation
    try:
        return _RECORD.validate_json(text)
    except ValidationError as exc:
        raise one_line(exc, "record") from None
