"""World seeds (issue 26): one recipe, many worlds; the eval-size table; compare pooled over worlds."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from agent.config import EVAL_SIZES, RunConfig, build_config, eval_sizes
from agent.experiments import compare as C
from agent.experiments.retrospective import eval_n
from agent.world.embedded import check_world_seed, recipe_for, recipe_sha256
from agent.world.source_contexts import FIXED_PARENT, SOURCE_PARENT, source_parents
from evaluators import tasks
from experience_bank.errors import BadInput


def test_a_world_seed_is_the_same_recipe_with_another_seed_and_another_id():
    r0, r1 = recipe_for("default"), recipe_for("default", 1)
    assert r1.seed == 1 and r0.seed == 0
    assert {k: v for k, v in vars(r0).items() if k != "seed"} == {k: v for k, v in vars(r1).items() if k != "seed"}
    assert recipe_sha256(r0) != recipe_sha256(r1)


@pytest.mark.parametrize("bad", [-1, 2**31, True, "1", 1.0])
def test_a_bad_world_seed_is_one_line(bad):
    with pytest.raises(BadInput, match="world seed"):
        check_world_seed(bad)


def test_a_world_seed_draws_other_pools_and_splits():
    a, b = tasks.items("sql/target", "adoption", 0, 200), tasks.items("sql/target", "adoption", 1, 200)
    assert len(a) == len(b) == 200 and [x["messages"] for x in a] != [x["messages"] for x in b]
    assert tasks.dataset_sha256("sql/target/train", 0) != tasks.dataset_sha256("sql/target/train", 1)


def test_source_parents_are_the_written_plan_in_world_zero_and_a_seeded_deal_elsewhere():
    assert source_parents(0) == SOURCE_PARENT
    deals = [source_parents(s) for s in (1, 2, 3)]
    for d in deals:
        assert set(d) == set(SOURCE_PARENT)
        assert Counter(d.values()) == Counter(SOURCE_PARENT.values())  # as many of each parent
        assert all(d[c] == SOURCE_PARENT[c] for c in FIXED_PARENT)
        assert d != SOURCE_PARENT
    assert deals[0] != deals[1] and source_parents(1) == deals[0]  # seeded: the same deal every time


def test_every_world_seed_has_200_items_on_every_decision_split():
    for seed in (0, 1, 2, 9):
        for task in ("sql/target", "finance/target", "function/target", "ifeval"):
            for split in ("validation", "adoption", "test"):
                assert len(tasks.items(task, split, seed, EVAL_SIZES["default"].target)) == 200


def test_an_outcome_split_is_read_at_its_size_or_whole_where_the_question_space_is_smaller():
    n = EVAL_SIZES["default"].outcome_target
    for task in ("finance/target", "function/target", "ifeval"):
        assert len(tasks.items(task, "adoption", 1, n)) == n
    sql = tasks.items("sql/target", "adoption", 1, n)
    ids = [x["id"] for x in sql]
    assert 200 < len(sql) < n and len(set(ids)) == len(ids)
    assert ids == [x["id"] for x in tasks.items("sql/target", "adoption", 1, 2 * n)]  # all there is
    assert ids[:200] == [x["id"] for x in tasks.items("sql/target", "adoption", 1, 200)]  # the loop's are a prefix


def test_one_eval_size_table_answers_the_loop_the_retrospective_and_the_seed_bank(tmp_path):
    cfg = RunConfig()
    assert (cfg.target_n, cfg.suite_n("sql/target"), cfg.suite_n("ifeval"), cfg.suite_n("captrack")) == (200, 200, 200, 210)
    test = RunConfig(world="test")
    assert (test.suite_n("sql/target"), test.suite_n("ifeval")) == (EVAL_SIZES["test"].target, EVAL_SIZES["test"].ifeval)
    assert RunConfig(eval_n=48, ifeval_n=100).suite_n("sql/target") == 48  # a config still overrides
    assert RunConfig(base_model="/m").world_kind == "local" and eval_sizes("anything-else") == EVAL_SIZES["local"]
    # trials read as the loop reads them; full runs (the outcome labels) at the outcome sizes
    assert eval_n("default", "validation") == (200, 200) and eval_n("default", "adoption") == (1000, 1000)
    assert eval_n("test", "validation") == (16, 16) and eval_n("test", "adoption") == (24, 16)
    from agent.world.seed_bank import seed_size

    class W:
        size = "default"
    assert (seed_size(W).eval_n, seed_size(W).retention_n) == (200, 200)


def test_one_table_gives_the_evaluation_batch_of_the_loop_and_of_the_offline_runner():
    from agent.world.runner import CardRunner

    class W:
        size = "default"
    # the loop (the manifest records cfg.eval_batch), the seed bank's and the retrospective's runner
    assert RunConfig().eval_batch == EVAL_SIZES["default"].batch == CardRunner(W, cache=None)._batch(None) == 128
    assert RunConfig(world="test").eval_batch == 16 and RunConfig(base_model="/m").eval_batch == 32
    assert RunConfig(eval_batch_size=8).eval_batch == 8 and CardRunner(W, cache=None, eval_batch_size=8)._batch(8) == 8
    assert build_config("runs/default.yaml").eval_batch == 128  # the shipped config takes the world's


def test_world_seed_is_a_config_key_and_a_flag(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("world: test\nworld_seed: 3\n")
    assert build_config(str(cfg)).world_seed == 3
    assert build_config(str(cfg), {"world_seed": 5}).world_seed == 5
    cfg.write_text("world_seed: -1\n")
    with pytest.raises(BadInput, match="world_seed"):
        build_config(str(cfg))


def test_a_local_world_refuses_a_world_seed():
    from agent.world.factory import world_for

    with pytest.raises(BadInput, match="world_seed"):
        world_for(RunConfig(base_model="/nowhere", world_seed=1))


def test_compare_cli_refuses_bad_world_seeds(capsys):
    from agent.cli.main import main

    for bad in ("0,x", "1,1", "-3"):
        assert main(["compare", "--policies", "bcit,no_memory", "--world-seeds", bad, "--config", "runs/test.yaml"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("--world-seeds" in err or "world seed" in err)


def test_compare_pools_paired_seeds_across_worlds(tmp_path):
    """Each world is a whole comparison in DIR/world-N; the pooled pairs are (world seed, seed)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_compare import FAKE_RUN, fake_run

    gain = 'gain = {"good": 4.0, "meh": 1.0, "idle": 0.0}[policy] + seed'
    assert gain in FAKE_RUN
    script = tmp_path / "fake_run.py"
    script.write_text(fake_run(FAKE_RUN).replace(
        gain, gain + ' + int(args[args.index("--world-seed") + 1])'))
    seen = []

    def argv_for(out, p, s, ws):
        seen.append((p, s, ws))
        argv = C.episode_argv(out, p, s, budget="10h", config=None, world_seed=ws)
        return [sys.executable, str(script)] + argv[argv.index("run") + 1:]

    out = tmp_path / "cmp"
    summary = C.compare_worlds(out, ["good", "meh"], [0, 1], [0, 2], argv_for=argv_for)
    assert sorted(seen) == sorted((p, s, w) for p in ("good", "meh") for s in (0, 1) for w in (0, 2))
    # good gains 4 + seed + world seed, meh 1 + seed + world seed: every pair differs by 3
    pooled = summary["pairs"]["good_vs_meh"]["endpoint"]
    assert pooled["seeds"] == ["w0-s0", "w0-s1", "w2-s0", "w2-s1"] and pooled["diffs"] == [3.0] * 4
    assert pooled["sign_flip_p"] == pytest.approx(2 / 16)
    assert summary["policies"]["good"]["n"] == 4
    # initial 40 on the test split at 39.5; good's final = 40 + 4 + seed + world seed - 0.5
    assert summary["policies"]["good"]["endpoint_mean"] == pytest.approx(39.5 + 4 + 0.5 + 1.0)
    per = summary["per_world"]
    assert set(per) == {"0", "2"} and per["2"]["policies"]["good"]["endpoint_mean"] == pytest.approx(39.5 + 4 + 0.5 + 2)
    assert per["0"]["pairs"]["good_vs_meh"]["endpoint"]["seeds"] == [0, 1]
    assert json.loads((out / "world-2" / "compare.json").read_text())["meta"]["world_seed"] == 2
    md = (out / "compare.md").read_text()
    assert "Worlds [0, 2] pooled" in md and "## Per world" in md and "MISMATCH" not in md
    assert "--world-seed" in C.episode_argv(out, "good", 0, budget=None, config=None, world_seed=2)


def test_a_bank_seeded_in_another_world_is_named():
    from types import SimpleNamespace as NS

    from agent.world.seed_bank import foreign_seed_bank

    world = NS(size="default", recipe_sha256="a" * 64)
    rec = lambda tag: NS(provenance=NS(artefacts=(f"artefacts/seed-{tag}/S01/source",)))  # noqa: E731
    assert foreign_seed_bank(world, [rec("default-" + "b" * 12)]) == "default-" + "b" * 12
    assert foreign_seed_bank(world, [rec("default-" + "b" * 12), rec("default-" + "a" * 12)]) is None
    assert foreign_seed_bank(world, [rec("test-" + "b" * 12), NS(provenance=NS(artefacts=()))]) is None
    assert foreign_seed_bank(world, []) is None


def test_the_current_context_does_not_depend_on_the_order_of_the_worlds_protocols():
    """A freshly built world listed finance, sql, function; the same world loaded from its
    world.json lists them sorted: both must give one context (one decision hash)."""
    from types import SimpleNamespace as NS

    from agent.world.records import current_context
    from experience_bank.records import ModelRef

    parent = ModelRef(id="m", sha256="a" * 64, arch="qwen3", chat_template_sha256="b" * 64)
    protocols = {"finance": "answer-scale", "sql": "sql", "function": "json-call"}
    make = lambda p: NS(output_protocols=p, datasets={}, eval_protocol="e")  # noqa: E731
    built = current_context(make(protocols), parent, 0)
    loaded = current_context(make(dict(sorted(protocols.items()))), parent, 0)
    assert built == loaded and built.families == ("finance", "function", "sql")


def test_sft_batches_are_length_grouped_only_where_a_batch_draws_from_one_pool():
    from agent.world.catalogue import catalogue
    from trainers.sft import sampling_strategy
    from types import SimpleNamespace as NS

    world = NS(size="default", step_scale=1.0, datasets={d: "a" * 64 for d in tasks.DATASET_IDS},
               chat_template_sha256="b" * 64)
    by_id = {c.id: sampling_strategy(c) for c in catalogue(world) if c.method == "sft"}
    # one pool: S01, S02, S04, S05, S06, S09, S10, S12; replay (S08, S11) or a mix (S03, S07): random
    assert {c for c, s in by_id.items() if s == "group_by_length"} == {"S01", "S02", "S04", "S05", "S06", "S09", "S10", "S12"}
    assert {c for c, s in by_id.items() if s == "random"} == {"S03", "S07", "S08", "S11"}
