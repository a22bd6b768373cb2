"""Each training sanity check fires on a constructed failure (real TRL runs) and passes on
healthy logs."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from test_train_world import build_parent, card, grpo_examples, sft_examples
from trainers import sanity
from trainers.run import train


def _failed(result) -> set[str]:
    return {c.name for c in result.sanity if not c.ok}


@pytest.fixture()
def parent(tmp_path):
    return build_parent(tmp_path / "parent")


def test_nan_loss_is_a_hard_failure(tmp_path, parent):
    weights = load_file(str(parent / "model.safetensors"))
    key = next(k for k in weights if k.endswith("input_layernorm.weight"))
    weights[key] = torch.full_like(weights[key], float("nan"))
    save_file(weights, str(parent / "model.safetensors"), metadata={"format": "pt"})
    result = train(card("sft", steps=3), str(parent), sft_examples(16), out_dir=str(tmp_path / "o"), run_key="k")
    assert "finite_loss" in _failed(result) and sanity.is_hard_failure(result)


def test_a_loss_that_did_not_move_is_a_hard_failure(tmp_path, parent):
    same = sft_examples(1) * 16  # identical batches: only learning could move the loss
    result = train(card("sft", steps=6, lr=1e-10, batch=4), str(parent), same, out_dir=str(tmp_path / "o"), run_key="k")
    assert "loss_moved" in _failed(result), result.sanity


def test_zero_reward_variance_and_all_clipped_completions_are_hard_failures(tmp_path, parent):
    # A parent that never saw an end token (max_length truncates it away), so it babbles past
    # the 4-token limit; rewarded by a constant.
    babble = [dict(r, completion=[{"role": "assistant", "content": "x y " * 40}]) for r in sft_examples(64)]
    bab = train(card("sft", steps=30, max_length=16), str(parent), babble, out_dir=str(tmp_path / "babble"), run_key="b")

    def constant(prompts, completions, **kwargs):
        return [0.5] * len(completions)

    result = train(card("grpo", steps=3, batch=8, num_generations=4, temperature=0.2), bab.checkpoint, grpo_examples(32),
                   out_dir=str(tmp_path / "g"), run_key="g", reward_funcs={"numeric_match": constant})
    assert {"reward_variance", "not_all_clipped", "weights_changed"} <= _failed(result), result.sanity


def test_checks_pass_on_healthy_logs_and_fire_on_constructed_ones():
    healthy = [{"step": 1, "loss": 2.0, "grad_norm": 1.0, "reward_std": 0.3, "completions/clipped_ratio": 0.5},
               {"step": 2, "loss": 1.0, "grad_norm": 0.5, "reward_std": 0.0, "completions/clipped_ratio": 1.0}]
    assert all(c.ok for c in (sanity.finite_loss(healthy), sanity.loss_moved(healthy),
                              sanity.reward_variance(healthy), sanity.not_all_clipped(healthy)))
    assert not sanity.finite_loss([{"loss": float("inf")}]).ok
    assert not sanity.loss_moved([{"loss": 1.0}, {"loss": 1.0}]).ok
    assert not sanity.reward_variance([{"reward_std": 0.0}] * 3).ok
    assert not sanity.not_all_clipped([{"completions/clipped_ratio": 1.0}] * 3).ok
