"""Group-relative policy optimisation through TRL's GRPOTrainer (wrapped, never subclassed).

Examples are `{"prompt": [messages], **reference columns}`; the caller passes the reward
functions in TRL's `(prompts, completions, **kwargs) -> list[float]` form, keyed by the
card's reward names, and they read the reference columns from `kwargs`. Rewards are summed
(TRL's default weights of 1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from experience_bank.errors import BadInput
from experience_bank.cards import CandidateCard

RewardFunc = Callable[..., list[float]]


def check_examples(examples: Sequence[dict]) -> None:
    for i, row in enumerate(examples):
        if not isinstance(row.get("prompt"), list):
            raise BadInput(f"grpo example {i} has no conversational 'prompt': give {{'prompt': [messages], **reference}}")


def pick_rewards(card: CandidateCard, reward_funcs: Mapping[str, RewardFunc] | None) -> list[RewardFunc]:
    """The card's rewards, in the card's order; every named reward must be supplied."""
    names = card.hparams.rewards
    missing = [n for n in names if not reward_funcs or n not in reward_funcs]
    if missing:
        raise BadInput(f"card {card.id} needs reward functions {missing}: pass reward_funcs={{name: fn}} for each")
    return [reward_funcs[n] for n in names]


def check_batch(card: CandidateCard) -> None:
    h = card.hparams
    if h.batch_size % h.num_generations:
        raise BadInput(
            f"card {card.id}: batch_size {h.batch_size} must be a multiple of num_generations "
            f"{h.num_generations} (the batch is prompts x generations)"
        )


def grpo_trainer(model, tokenizer, examples: Sequence[dict], card: CandidateCard, rewards: list[RewardFunc],
                 common: dict, callbacks: list) -> GRPOTrainer:
    """A GRPOTrainer for one card; `common` holds the run's shared TrainingArguments."""
    h = card.hparams
    config = GRPOConfig(
        **common,
        per_device_train_batch_size=h.batch_size,
        num_generations=h.num_generations,
        max_completion_length=h.max_completion_length,
        beta=h.beta,  # 0 loads no reference model
        temperature=h.temperature,
        use_vllm=False,
    )
    return GRPOTrainer(
        model=model,
        reward_funcs=rewards,
        args=config,
        train_dataset=Dataset.from_list(list(examples)),
        processing_class=tokenizer,
        callbacks=callbacks,
    )
