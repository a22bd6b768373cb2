"""Trained matched controls: the run a card's effect is measured against (docs/AUTHORIZER.md §2).

A matched pair is two trained runs that share parent, seed, data size, evaluation items and
budget; the control lacks the atomic intervention. An untrained parent is not a control:
compared with it, an effect measures "fine-tuning at all", not the intervention.

The control of a card is the same training with no signal in it, a placebo:
- SFT cards: full-weight SFT with the reference recipe (the standard cards' learning rate,
  schedule and batch) at the card's steps and number of examples, on prompts of the general
  instruction pool `ifeval/train` answered by the parent itself (greedy): the optimizer
  takes the same steps and the model is taught nothing it did not already say. (A control
  trained on the pool's gold answers was tried first and is wrong here: that pool is the
  retention suite's, so it gained 10 pp of IFEval and made every SFT card look harmful.)
- GRPO cards: full-weight GRPO with the reference recipe on the same prompts, rewarded by
  `placebo` (evaluators/rewards.py: a fair coin per completion), at the card's steps,
  examples and generations; completions up to `CONTROL_COMPLETION_TOKENS`.
A local world has no gold instruction pool of its own and takes the project's prompts.
The intervention's own choices (its data, learning rate, adapter, reward, replay) are what the
pair measures, so none of them is in the control.

The control depends on (method, steps, examples) and not on the card's family, so cards that
share parent, seed and budget share one control run (`control_key`), evaluated once on each
family's items. In the embedded catalogue every SFT card has 120 nominal steps and every GRPO
card 64, so one control per (parent, seed, method, fraction) serves them all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from experience_bank.hashing import content_hash
from experience_bank.cards import CandidateCard
from experience_bank.records import ModelRef
from agent.world.catalogue import reference_recipe
from agent.world.examples import card_examples
from trainers.data import replay_examples

if TYPE_CHECKING:
    from agent.world.interface import WorldData

CONTROL_POOL = "ifeval/train"
REFERENCE = {"sft": reference_recipe("sft"), "grpo": reference_recipe("grpo") | {"rewards": ("placebo",)}}
"""The reference recipe per method: the standard cards' (catalogue.REFERENCE_CARDS) hyperparameters,
owned by the catalogue; GRPO's reward is the placebo."""
CONTROL_COMPLETION_TOKENS = 64
CONTROL_TARGETS = "parent-greedy"
"""Where an SFT control's answers come from (part of every control key)."""


def control_card(card: CandidateCard, world: "WorldData") -> CandidateCard:
    """The matched control of `card` in `world` (same method, steps, examples and batch)."""
    body = card.model_dump()
    signal = "placebo reward" if card.method == "grpo" else "answered by the parent"
    body.update(id=f"CTRL-{card.method}", title=f"Matched control ({card.method}, reference recipe, "
                f"{CONTROL_POOL} prompts {signal})", nu="continue", adapter={"kind": "full"}, role="control")
    body["data"] = {"mix": ({"dataset": {"id": CONTROL_POOL, "sha256": world.datasets[CONTROL_POOL]}, "weight": 1.0},),
                    "n_examples": card.data.n_examples, "replay_share": 0.0, "replay_entries": ()}
    hp = body["hparams"] | REFERENCE[card.method]
    if card.method == "grpo":
        hp["max_completion_length"] = CONTROL_COMPLETION_TOKENS
    body["hparams"] = hp
    return CandidateCard.model_validate(body)


def is_control(card: CandidateCard) -> bool:
    """Whether a card is a matched control (its typed role, set by `control_card`; not its id)."""
    return card.role == "control"


def control_examples(control: CandidateCard, world: "WorldData", seed: int,
                     generate: Callable[[list], list[str]]) -> list[dict]:
    """The control's training rows: the pool's prompts, answered by the parent (`generate`) for
    SFT, as they are for GRPO (the placebo reward needs no answer)."""

    rows = card_examples(control, world, seed)
    if control.method != "sft":
        return rows
    return replay_examples([r["prompt"] for r in rows], generate)


def control_key(control: CandidateCard, parent: ModelRef, seed: int, fraction: float = 1.0) -> str:
    """Identity of a control run: what determines its weights (method, data, hyperparameters,
    adapter, steps), the parent (weights and chat template: the template shapes every training
    row), the seed and the share of the steps run. The family and the nominal device-hours
    label a control but do not change it: two cards whose controls have one key share one run."""
    body = control.model_dump(mode="json", include={"method", "data", "hparams", "adapter"})
    return content_hash({"control": body, "steps": control.budget.steps, "seed": seed, "fraction": fraction,
                         "parent": [parent.sha256, parent.chat_template_sha256], "targets": CONTROL_TARGETS})[:16]
