"""A card's training rows and reward functions, built the same way everywhere.

The loop, the seed bank, the retrospective and `agent train` all train cards; they must
see the same data for the same (card, seed), so this is the one place that resolves a
card's dataset ids to the world's pools (evaluators.tasks), mixes in self-replay generated
by the frozen parent (docs/GATE.md §3), and picks the GRPO reward functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from experience_bank.records import CandidateCard
from agent.world.store import EmbeddedTasks
from evaluators import served
from evaluators.generate import generate
from trainers.checkpoint import adapter_of
from trainers.data import build_examples

if TYPE_CHECKING:
    from agent.world.interface import WorldData

REPLAY_NEW_TOKENS = 112
"""Replay completions are answers to short templated prompts: this bounds them."""


def card_examples(card: CandidateCard, world: "WorldData | int", seed: int, *,
                  generate: Callable[[list], list[str]] | None = None) -> list[dict]:
    """The card's mix sampled from the world's pools, plus replay rows the parent generates.

    `world`: any agent.world.interface.WorldData, or an int, the seed of the embedded world's
    generated tasks (`agent train --world-seed`). `generate(prompts) -> completions` must be
    the frozen pre-update parent; it is only called when the recipe asks for replay.
    """

    data = EmbeddedTasks(world) if isinstance(world, int) else world
    make = data.sft_examples if card.method == "sft" else data.grpo_examples
    pools = {m.dataset.id: make(m.dataset.id) for m in card.data.mix}
    if card.data.replay_share == 0.0:
        return build_examples(card, pools, seed)
    n = max(1, round(card.data.n_examples * card.data.replay_share))
    prompts = {e: [x["messages"] for x in data.items(e, "train", n)] for e in card.data.replay_entries}
    return build_examples(card, pools, seed, replay_prompts=prompts, generate=generate)


def parent_generator(parent_dir: str, *, backend: str = "transformers", batch_size: int = 32,
                     seed: int = 0) -> Callable[[list], list[str]]:
    """Greedy generation by the frozen parent, for self-replay rows."""
    def replay(prompts: list) -> list[str]:
        if backend != "openai":
            return generate(parent_dir, prompts, backend=backend, batch_size=batch_size,
                            max_new_tokens=REPLAY_NEW_TOKENS, seed=seed)
        with served.serve(parent_dir, adapter_of(parent_dir)) as model:  # a LoRA parent: its adapter, loaded
            return generate(model.name, prompts, backend=backend, batch_size=batch_size,
                            max_new_tokens=REPLAY_NEW_TOKENS, seed=seed)
    return replay


def card_rewards(card: CandidateCard) -> dict | None:
    """TRL-form reward functions named by a GRPO card (None for SFT)."""
    if card.method != "grpo":
        return None
    from evaluators.rewards import REWARDS  # noqa: PLC0415 (numpy)

    return {name: REWARDS[name] for name in card.hparams.rewards}
