"""Supervised fine-tuning through TRL's SFTTrainer (wrapped, never subclassed).

Examples are TRL's conversational prompt-completion rows, `{"prompt": [messages],
"completion": [{"role": "assistant", "content": ...}]}`; SFTTrainer applies the chat
template and masks the prompt, so the loss is on the completion only.
"""

from __future__ import annotations

from collections.abc import Sequence

from datasets import Dataset
from trl import SFTConfig, SFTTrainer

from experience_bank.errors import BadInput
from experience_bank.cards import CandidateCard


def check_examples(examples: Sequence[dict]) -> None:
    """Refuse rows that are not conversational prompt-completion pairs."""
    for i, row in enumerate(examples):
        if not isinstance(row.get("prompt"), list) or not isinstance(row.get("completion"), list):
            raise BadInput(
                f"sft example {i} is not a prompt/completion pair: give {{'prompt': [messages], "
                "'completion': [{'role': 'assistant', 'content': ...}]}}"
            )


def sampling_strategy(card: CandidateCard) -> str:
    """How a card's SFT batches are drawn.

    One pool: batches of similar lengths (`group_by_length`). A card's rows run from ~20 tokens to
    ~180 (SQL with a schema), so random batches are mostly padding; bench/training.py measured
    25.0 / 29.5 / 28.4 % MFU on S01 / S05 / S09 with it against 26.9 / 25.5 / 21.6 % without.
    A mix of pools or self-replay: random batches. There the mix within a batch is the
    intervention, and length groups would sort it apart (replay rows are short, function calls
    long): the kill test's finance + function + replay recipe, whose child passed every gate
    check with random batches, lost 7.4 pp of IFEval and most function outputs' parseability
    with length groups; the world's pretraining collapsed the same way (agent/world/embedded.py).
    GRPO keeps TRL's own prompt sampler, which this setting does not reach."""
    one_pool = len(card.data.mix) == 1 and not card.data.replay_share
    return "group_by_length" if one_pool else "random"


def sft_trainer(model, tokenizer, examples: Sequence[dict], card: CandidateCard, common: dict, callbacks: list) -> SFTTrainer:
    """An SFTTrainer for one card; `common` holds the run's shared TrainingArguments."""
    h = card.hparams
    config = SFTConfig(
        **common,
        per_device_train_batch_size=h.batch_size,
        max_length=h.max_length,
        completion_only_loss=True,
        packing=False,  # packing would mix examples across the completion mask boundary
        train_sampling_strategy=sampling_strategy(card),
    )
    # Only the two columns SFT reads: task-specific reference columns would be dropped anyway.
    rows = [{"prompt": r["prompt"], "completion": r["completion"]} for r in examples]
    return SFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=callbacks,
    )
