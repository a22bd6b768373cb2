"""The run cache at the trainer and evaluator boundary: a run or evaluation of the same content
is served (files, weights hash, re-anchored result), one of other content is trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experience_bank.runcache import RunCache, was_cached
from test_train_world import build_parent, card, sft_examples
from trainers.checkpoint import weights_sha256
from trainers.run import run_cache_key, train


@pytest.fixture
def parent(tmp_path):
    return build_parent(tmp_path / "parent")


def test_a_run_of_the_same_content_is_served_reanchored_to_its_own_folder(tmp_path, parent):
    cache = RunCache(tmp_path / "cache")
    c, rows = card("sft", steps=12, lora=True), sft_examples(32)
    first = train(c, str(parent), rows, out_dir=str(tmp_path / "a"), run_key="ep1:a", threads=1, cache=cache)
    second = train(c, str(parent), rows, out_dir=str(tmp_path / "b"), run_key="ep2:b", threads=1, cache=cache)
    assert (cache.stats.hits, cache.stats.misses) == (1, 1) and was_cached(tmp_path / "b")
    assert second.checkpoint_sha256 == first.checkpoint_sha256 == weights_sha256(tmp_path / "b")
    assert second.checkpoint == str((tmp_path / "b").resolve()) and second.run_key == "ep2:b"
    assert second.adapter_dir == str((tmp_path / "b" / "adapter").resolve())
    assert Path(second.adapter_dir, "adapter_model.safetensors").is_file()
    assert second.wall_seconds == first.wall_seconds and second.steps == first.steps == 12
    # what the folder says is what the call returned
    assert json.loads((tmp_path / "b" / "result.json").read_text())["run_key"] == "ep2:b"
    # serving left the entry intact (its files are hard links): a third request is served too
    train(c, str(parent), rows, out_dir=str(tmp_path / "b2"), run_key="ep4:b2", threads=1, cache=cache)
    assert (cache.stats.hits, cache.stats.misses) == (2, 1)
    # another seed, more steps or other examples are other content: trained, not served
    train(c, str(parent), rows, out_dir=str(tmp_path / "c"), run_key="ep3:c", seed=1, threads=1, cache=cache)
    assert cache.stats.misses == 2 and not was_cached(tmp_path / "c")


def test_the_key_names_what_a_run_depends_on(tmp_path, parent):
    c, rows = card("sft", steps=12), sft_examples(32)
    key = run_cache_key(c, str(parent), rows, fraction=1.0, reward_funcs=None, resume_from=None, seed=0, threads=1,
                        launch=None)
    assert key["parent"]["weights"] == weights_sha256(parent) and key["card"] == c.content_hash()

    def changed(**kw):
        args = dict(fraction=1.0, reward_funcs=None, resume_from=None, seed=0, threads=1, launch=None) | kw
        return run_cache_key(kw.pop("card_", c), str(parent), kw.pop("rows_", rows), **{
            k: v for k, v in args.items() if k not in ("card_", "rows_")}) != key

    assert changed(seed=1) and changed(fraction=0.2) and changed(threads=2) and changed(rows_=sft_examples(31))
    assert changed(card_=card("sft", steps=13))
    assert not changed()
    # a reward-driven run's code version covers its reward functions' package (evaluators/) too
    rewarded = run_cache_key(c, str(parent), rows, fraction=1.0, reward_funcs={"numeric_match": len},
                             resume_from=None, seed=0, threads=1, launch=None)
    assert rewarded["code"] != key["code"] and rewarded["rewards"] == ["numeric_match"]


def test_an_evaluation_is_served_with_its_files_and_results(tmp_path):
    from agent.world.embedded import ensure_world
    from evaluators import evaluate

    world = ensure_world("test")
    cache = RunCache(tmp_path / "cache")
    suites = ["sql/target", "ifeval"]
    first = evaluate(world.base_dir, suites, "validation", out_dir=tmp_path / "e1", n=4, cache=cache)
    second = evaluate(world.base_dir, suites, "validation", out_dir=tmp_path / "e2", n=4, cache=cache)
    assert (cache.stats.hits, cache.stats.misses) == (1, 1) and was_cached(tmp_path / "e2")
    assert {k: v.model_dump() for k, v in second.items()} == {k: v.model_dump() for k, v in first.items()}
    assert sorted(p.name for p in (tmp_path / "e2").iterdir() if p.name != "provenance.json") == sorted(
        p.name for p in (tmp_path / "e1").iterdir() if p.name != "provenance.json")
    evaluate(world.base_dir, suites, "validation", out_dir=tmp_path / "e3", n=5, cache=cache)  # other items
    assert cache.stats.misses == 2
