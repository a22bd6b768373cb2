"""At the producers: an evaluation's stored metrics (the adoption split the gate reads, the
initial parent's IFEval) and a run's stored result are re-derived from the served files, so an
edited value, even with the entry's seal recomputed, is recomputed and never reaches the gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experience_bank.hashing import canonical_json
from experience_bank.runcache import RunCache, was_cached
from experience_bank.sealing import seal


def _edit_value(cache: RunCache, change, reseal: bool = True) -> Path:
    (entry,) = cache.entries()
    meta = json.loads((entry.path / "entry.json").read_text())
    meta["value"] = change(meta["value"])
    if reseal:
        meta["seal"] = seal(meta)
    (entry.path / "entry.json").write_text(canonical_json(meta))
    return entry.path


def _metric(value: str, suite: str, metric: str, new: float) -> str:
    results = json.loads(value)
    results[suite]["metrics"][metric] = new
    return canonical_json(results)


@pytest.mark.parametrize("suite", ["sql/target", "ifeval"])
@pytest.mark.parametrize("reseal", [False, True], ids=["edited", "edited-and-resealed"])
def test_an_edited_evaluation_metric_is_recomputed_never_served(tmp_path, suite, reseal):
    from agent.world.embedded import ensure_world
    from evaluators import evaluate

    world = ensure_world("test")
    warnings: list[str] = []
    cache = RunCache(tmp_path / "cache", warn=warnings.append)
    suites = ["sql/target", "ifeval"]
    true = evaluate(world.base_dir, suites, "adoption", out_dir=tmp_path / "e1", n=4, cache=cache)
    metric = next(iter(true[suite].metrics))
    path = _edit_value(cache, lambda v: _metric(v, suite, metric, 100.0), reseal)
    again = evaluate(world.base_dir, suites, "adoption", out_dir=tmp_path / "e2", n=4, cache=cache)
    assert again[suite].metrics[metric] == true[suite].metrics[metric] != 100.0
    assert (cache.stats.hits, cache.stats.misses) == (0, 2) and not was_cached(tmp_path / "e2")
    assert len(warnings) == 1 and str(path) in warnings[0]
    # the recomputed entry is served again, unwarned
    evaluate(world.base_dir, suites, "adoption", out_dir=tmp_path / "e3", n=4, cache=cache)
    assert cache.stats.hits == 1 and len(warnings) == 1


def test_a_run_result_edited_so_it_no_longer_parses_is_retrained_not_a_traceback(tmp_path):
    from test_train_world import build_parent, card, sft_examples

    from trainers.run import train

    parent = build_parent(tmp_path / "parent")
    warnings: list[str] = []
    cache = RunCache(tmp_path / "cache", warn=warnings.append)
    c, rows = card("sft", steps=4), sft_examples(16)
    first = train(c, str(parent), rows, out_dir=str(tmp_path / "a"), run_key="ep1:a", threads=1, cache=cache)

    def impossible(value: str) -> str:
        result = json.loads(value)
        result.update(steps=1, log=result["log"] | {"loss": "not a number"})
        return json.dumps(result)

    path = _edit_value(cache, impossible)
    second = train(c, str(parent), rows, out_dir=str(tmp_path / "b"), run_key="ep2:b", threads=1, cache=cache)
    assert second.steps == first.steps == 4 and second.checkpoint_sha256 == first.checkpoint_sha256
    assert (cache.stats.hits, cache.stats.misses) == (0, 2) and len(warnings) == 1 and str(path) in warnings[0]
    # a parseable but different result (fewer steps charged), resealed: its result.json refuses it
    path = _edit_value(cache, lambda v: json.dumps(json.loads(v) | {"steps_run": 1, "wall_seconds": 0.01}))
    third = train(c, str(parent), rows, out_dir=str(tmp_path / "c"), run_key="ep3:c", threads=1, cache=cache)
    assert third.steps_run == first.steps_run and third.wall_seconds != 0.01
    assert cache.stats.misses == 3 and len(warnings) == 2 and str(path) in warnings[1]
