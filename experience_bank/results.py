"""Typed results that cross package boundaries: evaluations, training runs, trials, gate verdicts.

They live here (not in evaluators/ or trainers/) because policies/ must read them and may
import only experience_bank. A score of None means UNKNOWN (an evaluator error), never 0.
The range of a run's seed lives here for the same reason: trainers/ and agent/ both check it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from experience_bank.errors import BadInput
from experience_bank.frozen import Frozen, Ident, Sha256

Group = Literal["CAN", "WILL", "HOW"]
Direction = Literal["higher", "lower", "change"]
Severity = Literal["none", "mild", "moderate", "severe", "catastrophic"]

MAX_SEED = 2**32 - 1
"""The largest seed of a training run or an evaluation: transformers.set_seed seeds numpy, whose
seeding takes 0..2**32 - 1 (torch.manual_seed overflows only past 2**64)."""


def check_seed(seed: int) -> None:
    """BadInput unless `seed` is a run seed in 0..MAX_SEED. A negative one is refused too: torch would
    take it, but random.Random(-s) draws what random.Random(s) does, so two seeds would be one run."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise BadInput(f"seed {seed!r} is not an integer in 0..{MAX_SEED}: pass --seed N in that range")


class ItemResult(Frozen):
    """One scored item (kept for paired retention and McNemar)."""

    item_id: Ident
    """Stable id of the item within its suite and split."""
    correct: bool | None
    """Primary correctness; None = UNKNOWN (scorer error)."""
    score: float | None = None
    """Graded score where the suite has one (e.g. TAT-QA F1); None = UNKNOWN or not graded."""
    parsed: bool = True
    """False when the output could not be parsed in the suite's protocol."""
    detail: dict[str, float | bool | str | None] = {}
    """Suite-specific per-item values (e.g. per-instruction IFEval results)."""
    error: Annotated[str, Field(max_length=500)] | None = None
    """Scorer error, timeout or sandbox refusal, if any."""


class EvalIdentity(Frozen):
    """Everything that determines a score, stored beside the raw generations."""

    suite: Ident
    """Suite name, e.g. `sql/target`, `ifeval`, `captrack`."""
    split: Literal["train", "validation", "adoption", "test"]
    """Data role."""
    data_sha256: Sha256
    """Hash of the split's items."""
    scorer_version: Ident
    """Scorer identity and version."""
    model_sha256: Sha256
    """Weights evaluated."""
    chat_template_sha256: Sha256
    """Chat template used to render prompts."""
    backend: Ident
    """Generation backend (transformers, vllm, openai)."""
    batch_size: Annotated[int, Field(ge=1)]
    """Generation batch size."""
    max_new_tokens: Annotated[int, Field(ge=1)]
    """Generation length limit."""
    seed: int
    """Seed for generation and for seeded scorers."""


class SuiteResult(Frozen):
    """Scores of one model on one suite split, recomputable from the stored generations."""

    identity: EvalIdentity
    """What was evaluated and how."""
    generations_sha256: Sha256
    """Hash of the stored raw generations (jsonl)."""
    metrics: dict[str, float | None]
    """Suite metrics on a 0-100 scale (None = UNKNOWN), e.g. {"exec_acc": 41.0}."""
    items: tuple[ItemResult, ...]
    """Per-item results."""
    n_unparseable: Annotated[int, Field(ge=0)]
    """Outputs that could not be parsed."""
    n_unknown: Annotated[int, Field(ge=0)]
    """Items the scorer could not decide."""


class MetricSpec(Frozen):
    """How the CapTrack profile reads one metric."""

    name: Ident
    """Metric key, `suite.metric`, e.g. `captrack.can_arith`."""
    group: Group
    """CAN / WILL / HOW."""
    sub: Ident
    """Sub-capability, e.g. `C1`, `W3`, `H2`."""
    direction: Direction
    """higher is better, lower is better, or any change is drift (style)."""
    floor: Annotated[float, Field(ge=0.0)]
    """Absolute baseline below which a relative drift is reported but does not decide."""


class SanityCheck(Frozen):
    name: Ident
    """e.g. `finite_loss`, `reward_variance`, `not_all_clipped`, `loss_moved`."""
    ok: bool
    """False turns the run into a hard failure."""
    detail: Annotated[str, Field(max_length=300)]
    """The numbers behind it."""


def _steps_after_prefix(data: dict) -> int:
    # Results written before steps_run existed: the steps a run executed were always its total
    # minus the continued prefix, which the log has carried from the start.
    return data["steps"] - int(data["log"].get("continued_from_step", 0.0))


SHORT_FRACTIONS = (0.05, 0.10, 0.20)
"""The shares of a card's nominal steps a short run is read at: the retrospective's short runs,
a trial's curve (trainers.steps.curve_steps; its end is the 20 % trial) and the outcome cell's
`short` keys."""


class Snapshot(Frozen):
    """A model saved part-way through a trial (the points of its curve)."""

    step: Annotated[int, Field(ge=1)]
    """Optimizer step it was saved at."""
    fraction: Annotated[float, Field(gt=0.0, le=1.0)]
    """The share of the nominal steps it stands for (trainers.steps.curve_steps)."""
    path: str
    """Its model directory (merged when LoRA), relative to the run's checkpoint directory."""
    sha256: Sha256
    """Hash of its weights."""
    log: dict[str, float] = {}
    """Training loss and gradient norm logged at that step, where finite."""


class TrainResult(Frozen):
    """A finished TRL run or trial."""

    card_id: Ident
    """Card trained."""
    run_key: Ident
    """Idempotency key (episode, decision hash, role)."""
    parent_sha256: Sha256
    """Parent weights it started from."""
    checkpoint: str
    """Directory of the merged child (safetensors)."""
    checkpoint_sha256: Sha256
    """Hash of the child's weights."""
    adapter_dir: str | None = None
    """Kept LoRA adapter, if any."""
    steps: Annotated[int, Field(ge=0)]
    """Optimizer steps run in total (a continued run counts the trial's steps too)."""
    nominal_steps: Annotated[int, Field(ge=1)] | None = None
    """The card's nominal step count the run is a share of (None in results written before
    1 Dec 2026, which did not record it)."""
    fraction: Annotated[float, Field(gt=0.0, le=1.0)]
    """Share of the card's nominal steps this run was asked to cover (it ran the floor of it)."""
    wall_seconds: Annotated[float, Field(ge=0.0)]
    """Measured seconds of this run (not of a resumed prefix)."""
    train_tokens: Annotated[int, Field(ge=0)] = 0
    """Tokens processed (for throughput)."""
    log: dict[str, float] = {}
    """Final training metrics (loss, reward, reward_std, clipped_ratio, ...)."""
    steps_run: Annotated[int, Field(ge=0, default_factory=_steps_after_prefix)]
    """Steps this run executed itself: `steps` minus a continued trial's prefix (a crash
    resume counts as this run). The ledger charges these (trainers.ledger.run_hours)."""
    sanity: tuple[SanityCheck, ...] = ()
    """Sanity checks; any failed one is a hard failure."""
    never_promotable: bool = False
    """True for trial checkpoints."""
    resumed_from: str | None = None
    """Checkpoint it continued from (nu = continue), if any."""
    snapshots: tuple[Snapshot, ...] = ()
    """Models saved before the last step (a trial's curve), ascending in step."""

    @model_validator(mode="after")
    def _steps_agree(self):
        if self.steps_run > self.steps or (self.nominal_steps is not None and self.steps > self.nominal_steps):
            raise ValueError(f"steps_run {self.steps_run} <= steps {self.steps} <= nominal_steps {self.nominal_steps} must hold")
        return self


class TrialPoint(Frozen):
    """One point of a trial's curve: the trial's measurement of the model at that share."""

    fraction: Annotated[float, Field(gt=0.0, le=1.0)]
    """Share of the card's nominal steps."""
    step: Annotated[int, Field(ge=1)]
    """Optimizer step."""
    delta_val: float
    """Target change vs the parent on validation (pp)."""
    retention_deltas: dict[str, float]
    """Retention metric changes vs the initial parent (pp)."""
    hard_failures: tuple[str, ...] = ()
    """Format / parse / execution failures of this model's measurement."""
    metrics: dict[str, float] = {}
    """Every metric of this model's validation evaluation (`suite.metric`; CapTrack groups included
    where the run evaluates them), and the training loss and gradient norm at that step."""


class TrialResult(Frozen):
    """A bounded validation trial (docs/AUTHORIZER.md §5)."""

    verdict: Literal["pass", "fail", "inconclusive"]
    """Pass -> Train, Fail -> Reject, Inconclusive -> the frozen fallback lease decides."""
    delta_val: float
    """Target gain on the validation split in pp."""
    retention_deltas: dict[str, float]
    """Retention metric changes in pp vs the initial parent."""
    reasons: tuple[str, ...]
    """Which conditions fired."""
    train: TrainResult
    """The trial run (never promotable)."""
    curve: tuple[TrialPoint, ...] = ()
    """The trial measured at each of its snapshots and at its end (ascending in fraction; the
    last point is delta_val and retention_deltas). Empty in trials from before 2 Dec 2026."""
    paired_se_pp: dict[str, float | None] = {}
    """Standard error (pp) of each delta, paired by item id as the gate's checks
    (policies.gate.trial_paired_se): `target` for delta_val, the retention suite's name (`ifeval`)
    for its strict deltas. Empty where the items were not at hand (a trial from before this field)."""

    def curve_table(self) -> dict[str, dict[str, float]]:
        """The curve as the bank keeps it (experience_bank.records.TrialCurve)."""
        return {f"{p.fraction:.2f}": {"target": p.delta_val, **p.retention_deltas} for p in self.curve}


class GateCheck(Frozen):
    name: Literal["ifeval_guard", "target", "captrack", "hard_failures"]
    """Which of the four checks."""
    passed: bool
    """Whether it holds."""
    numbers: dict[str, float | str | None]
    """Every number it looked at."""
    reason: Annotated[str, Field(max_length=500)]
    """One line a person can read."""


class GateVerdict(Frozen):
    """The shared adoption rule g, applied to one child."""

    promote: bool
    """True iff every check passed."""
    decided_by: Ident
    """The first failing check, or `all_passed`."""
    checks: tuple[GateCheck, ...]
    """All four checks with their numbers."""
    u_prom: float | None
    """mean_r(Delta_r / kappa_r) over the run's capabilities."""
    child_sha256: Sha256
    """Child weights judged."""
    parent_sha256: Sha256
    """Current parent."""
    initial_sha256: Sha256
    """Initial (OOB) parent the guards compare against."""
