"""SFT and GRPO runs on the test-size world: parameters change, target score/reward moves,
LoRA children are merged with the adapter kept, runs are idempotent, bad input is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from experience_bank.errors import BadInput
from test_train_world import (answer_logprob, build_parent, card, grpo_examples, has_three_reward, sampled_reward,
                              sft_examples)
from trainers.checkpoint import weights_sha256
from trainers.run import train


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A random parent and an SFT child of it (150 steps), shared by the tests below."""
    root = tmp_path_factory.mktemp("world")
    parent = build_parent(root / "parent")
    result = train(card("sft", steps=150), str(parent), sft_examples(256), out_dir=str(root / "sft"), run_key="sft",
                   threads=1)
    return root, parent, result


def test_sft_changes_parameters_and_raises_the_answer_likelihood(world):
    root, parent, result = world
    assert result.steps == 150 and all(c.ok for c in result.sanity), result.sanity
    assert result.checkpoint_sha256 == weights_sha256(root / "sft") != result.parent_sha256
    before, after = answer_logprob(parent), answer_logprob(root / "sft")
    assert after > before + 1.0, (before, after)
    assert result.log["loss"] < result.log["loss_first"] and result.train_tokens > 0
    assert not result.never_promotable and not list(root.glob("sft.work*")) and not list(root.glob("sft.tmp-*"))


def test_grpo_changes_parameters_and_moves_its_reward(world):
    root, _, sft = world
    grpo_card = card("grpo", steps=20, lr=1e-3, batch=8, num_generations=4, temperature=1.0)
    result = train(grpo_card, sft.checkpoint, grpo_examples(256), out_dir=str(root / "grpo"), run_key="grpo",
                   reward_funcs={"numeric_match": has_three_reward}, threads=1)
    assert result.steps == 20 and all(c.ok for c in result.sanity), result.sanity
    assert result.checkpoint_sha256 != result.parent_sha256
    before = sampled_reward(Path(sft.checkpoint), 1.0, has_three_reward, samples=4)
    after = sampled_reward(root / "grpo", 1.0, has_three_reward, samples=4)
    assert after > before + 10.0, (before, after)


def test_lora_run_merges_the_child_and_keeps_the_adapter(world):
    root, parent, _ = world
    result = train(card("sft", steps=10, lora=True), str(parent), sft_examples(64), out_dir=str(root / "lora"),
                   run_key="lora", threads=1)
    child = load_file(str(root / "lora" / "model.safetensors"))
    assert not any("lora" in k for k in child), "the child must be merged"
    assert (Path(result.adapter_dir) / "adapter_model.safetensors").is_file()
    assert json.loads((Path(result.adapter_dir) / "adapter_config.json").read_text())["r"] == 4
    assert result.checkpoint_sha256 != result.parent_sha256


def test_a_finished_run_is_returned_without_training_and_keys_are_checked(world):
    root, parent, result = world
    again = train(card("sft", steps=150), str(parent), [], out_dir=str(root / "sft"), run_key="sft")
    assert again == result  # no examples needed: nothing was trained
    with pytest.raises(BadInput, match="another --out"):
        train(card("sft", steps=150), str(parent), sft_examples(8), out_dir=str(root / "sft"), run_key="other")


def test_bad_input_is_refused_before_anything_is_written(tmp_path, world):
    _, parent, _ = world
    with pytest.raises(BadInput, match="prompt/completion"):
        train(card("sft"), str(parent), [{"text": "x"}], out_dir=str(tmp_path / "a"), run_key="a")
    with pytest.raises(BadInput, match="reward functions"):
        train(card("grpo"), str(parent), grpo_examples(8), out_dir=str(tmp_path / "b"), run_key="b")
    with pytest.raises(BadInput, match="multiple of num_generations"):
        train(card("grpo", batch=6), str(parent), grpo_examples(8), out_dir=str(tmp_path / "c"), run_key="c",
              reward_funcs={"numeric_match": has_three_reward})
    with pytest.raises(BadInput, match="save_pretrained"):
        train(card("sft"), str(tmp_path), sft_examples(8), out_dir=str(tmp_path / "d"), run_key="d")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_trial_cut_short_after_its_last_checkpoint_resumes_to_the_same_child(world, monkeypatch):
    """A crash between a trial's last checkpoint (its stop step) and the publish: the resume must not
    train past the stop (the Trainer runs a step before a callback can stop it) and must give the
    child the uninterrupted trial gives (kill -9 on the real path, CI 5 Dec 2026)."""
    import trainers.run as run

    root, parent, _ = world
    trial_card = card("sft", steps=10)
    whole = train(trial_card, str(parent), sft_examples(80), out_dir=str(root / "whole"), run_key="t", fraction=0.2,
                  threads=1)
    assert whole.steps == 2

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed after the last checkpoint, before the publish")

    monkeypatch.setattr(run, "_publish", crash)
    with pytest.raises(KeyboardInterrupt):
        train(trial_card, str(parent), sft_examples(80), out_dir=str(root / "cut"), run_key="t", fraction=0.2, threads=1)
    work = next(root.glob("cut.work*"))
    assert sorted(p.name for p in work.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    monkeypatch.undo()
    resumed = train(trial_card, str(parent), sft_examples(80), out_dir=str(root / "cut"), run_key="t", fraction=0.2,
                    threads=1)
    assert (resumed.steps, resumed.log["resumed_step"]) == (2, 1.0)
    assert resumed.checkpoint_sha256 == whole.checkpoint_sha256
