"""A card's training rows and reward functions, built the same way everywhere.

The loop, the seed bank, the retrospective and `agent train` all train cards; they must
see the same data for the same (card, seed), so this is the one place that resolves a
card's dataset ids to the world's pools (evaluators.tasks), mixes in self-replay generated
by the frozen parent (docs/GATE.md §3), and picks the GRPO reward functions.

`informative_examples` keeps a GRPO card's rows to the prompts that give it a gradient, for a
card whose recipe asks for it (`data.prompt_filter`; catalogue v6: docs/results/grpo-filter-v6-pilot.md
says why). It samples from the frozen parent, so it is given the parent's sampler like replay's
generator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from experience_bank.errors import BadInput
from experience_bank.cards import CandidateCard
from agent.world.store import EmbeddedTasks
from evaluators import served
from evaluators.generate import generate, sample
from experience_bank.runcache import source_version
from trainers.checkpoint import adapter_of, model_identity
from trainers.data import build_examples, group_rewards, informative, keep_informative, sample_recipe

if TYPE_CHECKING:
    from agent.world.interface import WorldData

REPLAY_NEW_TOKENS = 112
"""Replay completions are answers to short templated prompts: this bounds them."""
FILTER_CANDIDATES = 2
"""Prompts drawn per training row when a GRPO card's rows are filtered for a reward spread."""
Sample = Callable[[list, int, float], "list[list[str]]"]
"""(prompts, k, temperature) -> k completions per prompt, sampled from the frozen parent."""


def card_examples(card: CandidateCard, world: "WorldData | int", seed: int, *,
                  generate: Callable[[list], list[str]] | None = None, sample: Sample | None = None) -> list[dict]:
    """The card's mix sampled from the world's pools, plus replay rows the parent generates.

    `world`: any agent.world.interface.WorldData, or an int, the seed of the embedded world's
    generated tasks (`agent train --world-seed`). `generate(prompts) -> completions` and
    `sample` (see `Sample`) must be the frozen pre-update parent; they are only called when the
    recipe asks for replay or for a prompt filter.
    """
    if card.data.prompt_filter is not None:
        if sample is None:
            raise BadInput(f"card {card.id} keeps prompts by their rewards' spread under its parent: "
                           "its rows need the parent's sampler (agent.world.examples.parent_sampler)")
        return informative_examples(card, world, seed, sample)[0]
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


def parent_sampler(parent_dir: str, *, max_new_tokens: int, batch_size: int = 32, seed: int = 0) -> Sample:
    """Sampling by the frozen parent (transformers), as GRPO samples its groups."""
    def draw(prompts: list, k: int, temperature: float) -> list[list[str]]:
        return sample(parent_dir, prompts, k=k, temperature=temperature, max_new_tokens=max_new_tokens,
                      batch_size=batch_size, seed=seed)
    return draw


FILTER_CODE = ("agent/world/examples.py", "trainers/data.py", "evaluators")
"""The code a prompt filter's rows depend on (its run-cache key): rows, sampling and rewards."""


def filtered_examples(card: CandidateCard, world: "WorldData", seed: int, parent_dir: str, *,
                      batch_size: int = 32, cache=None) -> list[dict]:
    """`card_examples` of a prompt-filtered card, sampled from the parent at `parent_dir`, through
    the run cache: the filter samples k completions of twice the card's prompts (a minute on the
    default world), so the loop, the seed bank and the retrospective sample a (card, parent, seed)
    once, and a served run is not preceded by its sampling."""
    sample = parent_sampler(parent_dir, max_new_tokens=card.hparams.max_completion_length or REPLAY_NEW_TOKENS,
                            batch_size=batch_size, seed=seed)
    rows = lambda: card_examples(card, world, seed, sample=sample)  # noqa: E731
    if cache is None:
        return rows()
    import torch  # noqa: PLC0415
    from trainers.run import libraries  # noqa: PLC0415

    key = {"kind": "prompt-filter", "card": card.content_hash(), "parent": model_identity(parent_dir), "seed": seed,
           "batch": batch_size, "threads": torch.get_num_threads(), "code": source_version(FILTER_CODE),
           "libraries": libraries()}
    return cache.value(key, rows)


def informative_examples(card: CandidateCard, world: "WorldData | int", seed: int,
                         sample_fn: Sample) -> tuple[list[dict], dict[str, int]]:
    """A GRPO card's rows, kept to prompts that give it a gradient, and what the filter saw.

    FILTER_CANDIDATES times the card's rows are drawn from its mix; the frozen parent samples each
    prompt's group as the card would (num_generations completions at its temperature), the card's
    own rewards score them, and the rows whose group's rewards differ are kept (trainers.data.
    keep_informative): offline, the dynamic sampling of DAPO (Yu et al. 2025), which drops groups
    whose rewards are all equal because their advantages, and so their policy gradient, are zero."""
    if card.method != "grpo":
        raise BadInput(f"card {card.id}: prompts are filtered by their rewards' spread for grpo cards only")
    data = EmbeddedTasks(world) if isinstance(world, int) else world
    pools = {m.dataset.id: data.grpo_examples(m.dataset.id) for m in card.data.mix}
    rows = sample_recipe(card.data, pools, seed, n=FILTER_CANDIDATES * card.data.n_examples)
    k = card.hparams.num_generations or 1
    texts = sample_fn([r["prompt"] for r in rows], k, card.hparams.temperature or 1.0)
    if len(texts) != len(rows) or any(len(t) != k for t in texts):
        raise BadInput(f"the sampler returned {len(texts)} groups for {len(rows)} prompts (k={k} each expected)")
    rewards = card_rewards(card) or {}
    columns = [c for c in rows[0] if c != "prompt"]
    prompts = [r["prompt"] for r in rows for _ in range(k)]
    completions = [[{"role": "assistant", "content": t}] for group in texts for t in group]
    kwargs = {c: [r[c] for r in rows for _ in range(k)] for c in columns}
    flat = group_rewards([fn(prompts, completions, **kwargs) for fn in rewards.values()])
    flags = [informative(flat[i * k:(i + 1) * k]) for i in range(len(rows))]
    kept = keep_informative(rows, flags, card.data.n_examples, seed)
    return kept, {"candidates": len(rows), "informative": sum(flags), "rows": len(kept)}


def card_rewards(card: CandidateCard) -> dict | None:
    """TRL-form reward functions named by a GRPO card (None for SFT)."""
    if card.method != "grpo":
        return None
    from evaluators.rewards import REWARDS  # noqa: PLC0415 (numpy)

    return {name: REWARDS[name] for name in card.hparams.rewards}
