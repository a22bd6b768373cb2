"""Prompts kept for a gradient (agent/world/examples.informative_examples) and the sampling behind it."""

import hashlib
import json

import pytest

from experience_bank.errors import BadInput
from trainers.data import group_rewards, informative, keep_informative


def test_rewards_sum_as_trl_sums_them_and_equal_rewards_give_no_gradient():
    # two functions over three completions; None adds nothing (TRL's nansum)
    assert group_rewards([[1.0, 0.0, None], [1.0, None, None]]) == [2.0, 0.0, 0.0]
    assert informative([0.0, 1.0, 0.0]) and not informative([1.0, 1.0, 1.0]) and not informative([0.5])
    with pytest.raises(ValueError):
        group_rewards([[1.0, 0.0], [1.0]])  # functions must score the same completions


def test_keep_informative_draws_n_rows_from_the_informative_ones():
    rows = [{"i": i} for i in range(6)]
    flags = [i % 3 == 0 for i in range(6)]  # rows 0 and 3
    kept = keep_informative(rows, flags, 5, seed=0)
    assert len(kept) == 5 and {r["i"] for r in kept} == {0, 3}  # fewer than n: further passes over them
    assert keep_informative(rows, [False] * 6, 4, seed=0) == rows[:4]  # none: nothing to prefer
    assert keep_informative(rows, flags, 5, seed=0) == kept  # seeded
    with pytest.raises(BadInput, match="5 informativeness flags for 6 rows"):
        keep_informative(rows, flags[:5], 3, seed=0)


def _even(prompt) -> bool:
    return hashlib.sha256(json.dumps(prompt).encode()).digest()[0] % 2 == 0


def test_informative_examples_keep_the_prompts_whose_group_the_cards_reward_tells_apart(monkeypatch, tmp_path):
    """A fake sampler at the generation boundary: for 'even' prompts one of the k completions is the
    gold answer (numeric_match 1) and the rest nonsense (0); for the others every completion is
    nonsense. The card's real reward scores them; only the even prompts are kept."""
    from agent.world.catalogue import card_by_id
    from agent.world.embedded import ensure_world
    from agent.world.examples import FILTER_CANDIDATES, informative_examples

    world = ensure_world("test", threads=1)
    card = card_by_id(world, "G01")
    seen = {}

    def sampler(prompts, k, temperature):
        seen.update(k=k, temperature=temperature, n=len(prompts))
        gold = {json.dumps(r["prompt"]): json.loads(r["reference"])["completion"]
                for r in world.grpo_examples("finance/target/train")}
        return [([gold[json.dumps(p)]] if _even(p) else ["no idea"]) + ["no idea"] * (k - 1) for p in prompts]

    rows, stats = informative_examples(card, world, 0, sampler)
    n = card.data.n_examples
    assert seen == {"k": card.hparams.num_generations, "temperature": card.hparams.temperature,
                    "n": FILTER_CANDIDATES * n}
    assert len(rows) == n == stats["rows"] and all(_even(r["prompt"]) for r in rows)
    assert 0 < stats["informative"] < stats["candidates"] == FILTER_CANDIDATES * n
    with pytest.raises(BadInput, match="grpo cards only"):
        informative_examples(card_by_id(world, "S01"), world, 0, sampler)
    with pytest.raises(BadInput, match="groups for"):
        informative_examples(card, world, 0, lambda p, k, t: [["x"] * k for _ in p[:-1]])


def test_sample_draws_k_seeded_completions_per_prompt(tmp_path):
    from evaluators import tasks
    from evaluators.generate import sample
    from tests.test_generate import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny")
    prompts = [x["messages"] for x in tasks.items("captrack", "test", 0, n=3)]
    out = sample(str(tiny), prompts, k=4, temperature=1.5, max_new_tokens=6, batch_size=8, seed=1)
    assert [len(g) for g in out] == [4, 4, 4] and all(isinstance(t, str) for g in out for t in g)
    assert len({t for g in out for t in g}) > 3  # sampled, not one greedy answer repeated
    assert sample(str(tiny), prompts, k=4, temperature=1.5, max_new_tokens=6, batch_size=8, seed=1) == out
    assert sample(str(tiny), [], k=4, temperature=1.0) == []
    with pytest.raises(BadInput, match="temperature > 0"):
        sample(str(tiny), prompts, k=2, temperature=0.0)


def test_the_pilots_summary_and_learning_rate_variant():
    from bench.grpo_filter import summary, with_filter, with_lr
    from agent.world.catalogue import card_by_id
    from agent.world.embedded import ensure_world

    rows = [{"card": "G05", "variant": v, "seed": s, "scores": {"target": t}}
            for v, s, t in (("as-is", 0, 50.0), ("as-is", 1, 54.0), ("informative", 0, 57.0))]
    out = summary(rows, {"G05": {"target": 52.0}})
    # as-is: changes -2 and +2 -> mean 0, SD sqrt(8) = 2.83; informative: one seed, +5, no SD
    assert out[0] == {"card": "G05", "variant": "as-is", "seeds": 2, "mean": 0.0, "sd": pytest.approx(2.828427)}
    assert out[1] == {"card": "G05", "variant": "informative", "seeds": 1, "mean": 5.0, "sd": None}
    card = card_by_id(ensure_world("test", threads=1), "G05")
    fast = with_lr(card, 1e-4)
    assert fast.hparams.learning_rate == 1e-4 and fast.data == card.data and card.hparams.learning_rate == 1e-5
    off, on = with_filter(card, False), with_filter(card, True)
    assert (off.data.prompt_filter, on.data.prompt_filter, card.data.prompt_filter) == (None, "reward_spread", "reward_spread")
    assert off.content_hash() != on.content_hash() == card.content_hash() and off.hparams == card.hparams
    with pytest.raises(ValueError):
        with_lr(card, 1.0)  # above the record's bound (1e-2): refused as any card is


def test_a_filtered_card_is_grpo_only_and_an_unfiltered_recipe_keeps_its_bytes():
    from agent.world.catalogue import card_by_id
    from agent.world.embedded import ensure_world
    from experience_bank.cards import CandidateCard

    world = ensure_world("test", threads=1)
    grpo, sft = card_by_id(world, "G09"), card_by_id(world, "S09")
    assert grpo.data.prompt_filter == "reward_spread" and sft.data.prompt_filter is None
    assert "prompt_filter" not in sft.model_dump(mode="json")["data"]  # written only when set: old hashes hold
    body = sft.model_dump()
    body["data"]["prompt_filter"] = "reward_spread"
    with pytest.raises(ValueError, match="for grpo cards only"):
        CandidateCard.model_validate(body)


def test_the_runner_samples_a_filtered_cards_rows_from_its_parent_once(tmp_path):
    """The real path a loop, a seed bank and a retrospective take (CardRunner.examples): the parent
    samples each candidate prompt's group, the card's reward keeps the rows, and the run cache
    serves the same rows the second time without sampling again."""
    from agent.world.catalogue import card_by_id
    from agent.world.controls import control_card
    from agent.world.embedded import ensure_world
    from agent.world.examples import card_examples
    from agent.world.runner import CardRunner
    from experience_bank.runcache import RunCache

    world = ensure_world("test", threads=1)
    card = card_by_id(world, "G05")
    cache = RunCache(tmp_path / "runs")
    runner = CardRunner(world, cache=cache, threads=1)
    rows = runner.examples(card, str(world.base_dir), 0)
    assert len(rows) == card.data.n_examples and cache.stats.misses == 1
    again = runner.examples(card, str(world.base_dir), 0)
    assert json.dumps(again, sort_keys=True) == json.dumps(rows, sort_keys=True) and cache.stats.hits == 1
    with pytest.raises(BadInput, match="parent's sampler"):
        card_examples(card, world, 0)
    ctrl = control_card(card, world)  # the placebo control trains unfiltered at the reference rate
    assert ctrl.data.prompt_filter is None and ctrl.hparams.learning_rate == card.hparams.learning_rate == 1e-5


def test_a_recipe_of_another_card_changes_the_schedule_and_keeps_the_cards_own_data():
    from bench.grpo_filter import _variant
    from agent.world.catalogue import card_by_id
    from agent.world.embedded import ensure_world

    world = ensure_world("test", threads=1)
    name, card = _variant(world, "S05", None, "S12")  # standard sql SFT with the aggressive card's recipe
    own, donor = card_by_id(world, "S05"), card_by_id(world, "S12")
    assert name == "S05@S12" and card.data == own.data and card.adapter == own.adapter
    assert (card.hparams.learning_rate, card.hparams.lr_scheduler, card.hparams.warmup_ratio) == (3e-3, "constant", 0.3)
    assert card.hparams.learning_rate == donor.hparams.learning_rate != own.hparams.learning_rate
    name, card = _variant(world, "G05", 2e-4, "G03")  # both: the donor's recipe at another rate
    assert name == "G05@G03@lr0.0002" and card.hparams.learning_rate == 2e-4
    assert (card.hparams.beta, card.hparams.temperature) == (0.0, 1.2) and card.hparams.rewards == ("execution",)
    with pytest.raises(BadInput, match="same method"):
        _variant(world, "S05", None, "G03")
