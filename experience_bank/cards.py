"""The candidate card: the atomic update i a policy decides on (docs/AUTHORIZER.md §2), its data
recipe, hyper-parameters, adapter and nominal budget. Trainers read it; records carry it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_serializer, model_validator

from experience_bank.frozen import Family, Frozen, Ident, Method, Nu, PromptFilter, Reward, Role, Sha256, omit_empty


class DatasetRef(Frozen):
    id: Ident
    """Dataset id in the world's registry, e.g. `sql/target/train`."""
    sha256: Sha256
    """Content hash of the dataset's canonical JSONL."""


class DataMix(Frozen):
    dataset: DatasetRef
    """One dataset of the mix."""
    weight: Annotated[float, Field(gt=0.0, le=1.0)]
    """Share of the training examples drawn from it; a recipe's weights sum to 1."""


class DataRecipe(Frozen):
    mix: tuple[DataMix, ...] = Field(min_length=1)
    """Datasets and mix ratios of the new-task examples."""
    n_examples: Annotated[int, Field(ge=1, le=1_000_000)]
    """Number of training examples drawn from the mix (before replay)."""
    replay_share: Annotated[float, Field(ge=0.0, le=0.5)] = 0.0
    """rho: share of Task-Bank Self-Replay examples mixed in (docs/GATE.md §3); 0 = none."""
    replay_entries: tuple[Ident, ...] = ()
    """Task-bank entries the frozen parent generates replay examples for."""
    prompt_filter: PromptFilter | None = None
    """`reward_spread`: a GRPO card's rows are kept to prompts whose group, sampled from the frozen
    parent, gets rewards that differ (agent/world/examples.informative_examples: DAPO's dynamic
    sampling, offline). Written only when set, so a recipe's JSON and hash are those it had before."""

    _omit_unset_filter = model_serializer(mode="wrap")(omit_empty("prompt_filter"))

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> "DataRecipe":
        total = sum(m.weight for m in self.mix)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"mix weights sum to {total:.6f}, they must sum to 1")
        if self.replay_share > 0 and not self.replay_entries:
            raise ValueError("replay_share > 0 needs at least one replay_entries name")
        return self


class HyperParams(Frozen):
    learning_rate: Annotated[float, Field(gt=0.0, le=1e-2)]
    """Peak learning rate."""
    batch_size: Annotated[int, Field(ge=1, le=4096)]
    """Per-step batch (SFT examples, or GRPO prompts x generations)."""
    lr_scheduler: Literal["cosine", "linear", "constant"] = "cosine"
    """Learning-rate schedule."""
    warmup_ratio: Annotated[float, Field(ge=0.0, le=0.5)] = 0.0
    """Share of steps spent warming up."""
    max_length: Annotated[int, Field(ge=16, le=32768)] = 256
    """Maximum tokens of prompt + completion."""
    num_generations: Annotated[int, Field(ge=2, le=64)] | None = None
    """GRPO only: completions per prompt."""
    max_completion_length: Annotated[int, Field(ge=4, le=8192)] | None = None
    """GRPO only: new tokens per completion."""
    beta: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    """GRPO only: KL coefficient (0 loads no reference model)."""
    temperature: Annotated[float, Field(gt=0.0, le=2.0)] | None = None
    """GRPO only: sampling temperature."""
    rewards: tuple[Reward, ...] = ()
    """GRPO only: verifiable rewards, summed."""


class Adapter(Frozen):
    kind: Literal["full", "lora"]
    """Full weights, or a LoRA adapter merged for evaluation and promotion."""
    rank: Annotated[int, Field(ge=1, le=256)] | None = None
    """LoRA rank (lora only)."""
    alpha: Annotated[int, Field(ge=1, le=512)] | None = None
    """LoRA alpha (lora only)."""
    targets: tuple[str, ...] = ()
    """LoRA target module names (lora only)."""

    @model_validator(mode="after")
    def _lora_fields(self) -> "Adapter":
        if self.kind == "lora" and (self.rank is None or not self.targets):
            raise ValueError("a lora adapter needs rank and targets")
        if self.kind == "full" and (self.rank is not None or self.targets):
            raise ValueError("full weights take no rank or targets")
        return self


class NominalBudget(Frozen):
    steps: Annotated[int, Field(ge=1, le=10_000_000)]
    """Optimizer steps of the full run."""
    device_hours: Annotated[float, Field(gt=0.0, le=100_000.0)]
    """Nominal device-hours of the full run (the cost model charges fractions of it)."""


class CandidateCard(Frozen):
    id: Ident
    """Stable id of the atomic update, e.g. `S03` or `P-llm-1`."""
    title: Annotated[str, Field(min_length=1, max_length=200)]
    """A practitioner's name for the update."""
    method: Method
    """Training method."""
    family: Family
    """Capability family it targets."""
    data: DataRecipe
    """Data recipe."""
    hparams: HyperParams
    """Hyper-parameters."""
    adapter: Adapter
    """Full weights or LoRA."""
    budget: NominalBudget
    """Nominal full budget."""
    nu: Nu
    """Validation feasibility: the trial is a prefix (continue), a separate short run (restart), or impossible (none)."""
    role: Role = "candidate"
    """`control`: a matched control (agent.world.controls.control_card), trained on its placebo
    recipe and never decided. Written only on a control, so a candidate's JSON and content hash
    are those it had before the field existed."""

    @model_serializer(mode="wrap")
    def _role_only_on_controls(self, handler):
        data = handler(self)
        if self.role == "candidate" and isinstance(data, dict):
            data.pop("role", None)
        return data

    @model_validator(mode="after")
    def _method_fields(self) -> "CandidateCard":
        h = self.hparams
        grpo_fields = (h.num_generations, h.max_completion_length, h.beta, h.temperature)
        if self.method == "grpo" and (any(v is None for v in grpo_fields) or not h.rewards):
            raise ValueError("a grpo card needs num_generations, max_completion_length, beta, temperature and rewards")
        if self.method == "sft" and (any(v is not None for v in grpo_fields) or h.rewards):
            raise ValueError("an sft card takes no grpo hyper-parameters")
        if self.method == "sft" and self.data.prompt_filter is not None:
            raise ValueError("prompt_filter keeps prompts by their rewards' spread: it is for grpo cards only")
        return self
