"""Recipe sampling and Task-Bank Self-Replay mixing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from experience_bank.errors import BadInput
from experience_bank.cards import CandidateCard
from test_train_world import card
from trainers.data import build_examples, mix_replay, sample_recipe, split_counts

SHA = "0" * 64


def _pool(tag, n):
    return [{"prompt": [{"role": "user", "content": f"{tag} {i}"}], "completion": [{"role": "assistant", "content": tag}]}
            for i in range(n)]


def _card(mix, rho=0.0, entries=()):
    base = json.loads(card("sft").model_dump_json())
    base["data"] = {"mix": [{"dataset": {"id": d, "sha256": SHA}, "weight": w} for d, w in mix], "n_examples": 40,
                    "replay_share": rho, "replay_entries": list(entries)}
    return CandidateCard.model_validate_json(json.dumps(base))


@given(st.integers(0, 10_000), st.lists(st.floats(0.01, 1.0), min_size=1, max_size=6))
def test_split_counts_sum_to_the_total(total, weights):
    counts = split_counts(total, weights)
    assert sum(counts) == total and all(c >= 0 for c in counts)


def test_mix_ratios_and_determinism():
    c = _card([("a/train", 0.75), ("b/train", 0.25)])
    pools = {"a/train": _pool("a", 100), "b/train": _pool("b", 5)}
    rows = sample_recipe(c.data, pools, seed=3)
    tags = [r["completion"][0]["content"] for r in rows]
    assert len(rows) == 40 and tags.count("a") == 30 and tags.count("b") == 10  # b's pool of 5 is cycled
    assert rows == sample_recipe(c.data, pools, seed=3) != sample_recipe(c.data, pools, seed=4)
    with pytest.raises(BadInput, match="no pool"):
        sample_recipe(c.data, {"a/train": _pool("a", 3)}, seed=0)


def test_self_replay_mixes_parent_generations_at_share_rho():
    c = _card([("a/train", 1.0)], rho=0.25, entries=("ifeval", "captrack"))
    calls = []

    def parent_generate(prompts):
        calls.append(len(prompts))
        return [f"parent says {p[0]['content']}" for p in prompts]

    replay = {"ifeval": [[{"role": "user", "content": f"if {i}"}] for i in range(8)],
              "captrack": [[{"role": "user", "content": f"cap {i}"}] for i in range(8)]}
    rows = build_examples(c, {"a/train": _pool("a", 100)}, seed=0, replay_prompts=replay, generate=parent_generate)
    replayed = [r for r in rows if r["completion"][0]["content"].startswith("parent says")]
    assert len(rows) == 40 and len(replayed) == 10 and calls == [10]
    assert sum(r["prompt"][0]["content"].startswith("if") for r in replayed) == 5
    with pytest.raises(BadInput, match="parent generator"):
        build_examples(c, {"a/train": _pool("a", 100)}, seed=0)
    assert mix_replay(rows, replay, parent_generate, 0.0, seed=0) == rows
