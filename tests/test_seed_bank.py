"""L(0): evidence arithmetic (fast, pure) and a real seed bank on the test-size world (slow)."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.world.catalogue import card_by_id
from agent.world.seed_bank import GRADE_PLAN, KAPPA, evidence_from
from agent.world.source_contexts import source_card
from support.bank_factory import record
from experience_bank.consolidate import merged_evidence
from experience_bank.evidence import lower_bound
from test_catalogue import fake_world  # tests/ is on sys.path (rootdir-relative import mode)


def summary(scores, prompt=80.0, inst=85.0):
    return {"items": {f"i{k}": float(v) for k, v in enumerate(scores)}, "metric": "exec_acc",
            "ifeval": {"prompt_strict": prompt, "inst_strict": inst}}


CARD = card_by_id(fake_world(), "S05")
CONTROL = summary([0, 0, 1, 1, 0, 1, 0, 0, 1, 0])


def test_grade_a_agreeing_replicates_use_a_lower_bound():
    runs = [summary([1, 0, 1, 1, 1, 1, 0, 0, 1, 0], prompt=70.0), summary([1, 1, 1, 1, 0, 1, 0, 0, 1, 0], prompt=74.0)]
    ev = evidence_from(CARD, [CONTROL, CONTROL], runs, "A")
    assert ev.grade == "A" and ev.chi == 1 and ev.replicates == 2
    assert ev.delta_point == pytest.approx(20.0) and ev.delta_src < ev.delta_point
    assert ev.kappa == KAPPA["sql"] and ev.target_metric == "sql/source.exec_acc"
    assert {r.metric: r.delta for r in ev.retention}["ifeval.prompt_strict"] == pytest.approx(-8.0)


EFFECTS = [12.0, 4.0, 8.0, 10.0, 6.0]  # mean 8, sd sqrt(10), n 5


def test_delta_src_is_the_one_sided_95_lower_bound():
    # 8 - t(0.95, df 4) * sqrt(10) / sqrt(5) = 8 - 2.131847 * 1.414214 (a two-sided 95% end would be 4.073)
    assert lower_bound(EFFECTS) == pytest.approx(4.985113, abs=1e-6)
    assert lower_bound([3.0, 3.0]) == 3.0
    with pytest.raises(ValueError, match="at least two"):
        lower_bound([3.0])


def test_seed_bank_and_consolidation_give_the_same_bound_on_the_same_effects():
    # The seed bank's paired units are items: two agreeing replicates scoring d/100 above a zero control.
    control = {"items": {f"i{k}": 0.0 for k in range(5)}, "metric": "exec_acc",
               "ifeval": {"prompt_strict": 80.0, "inst_strict": 85.0}}
    run = {**control, "items": {f"i{k}": d / 100 for k, d in enumerate(EFFECTS)}}
    seeded = evidence_from(CARD, [control, control], [run, run], "A").delta_src
    # Consolidation's paired units are replicate records with those effects.
    merged = merged_evidence([record(delta=d, seed=k) for k, d in enumerate(EFFECTS)]).delta_src
    assert seeded == pytest.approx(merged, abs=1e-6) == pytest.approx(lower_bound(EFFECTS), abs=1e-6)


def test_disagreeing_replicates_are_not_grade_a():
    runs = [summary([1, 0, 1, 1, 1, 1, 0, 0, 1, 0]), summary([0, 0, 0, 1, 0, 1, 0, 0, 1, 0])]
    ev = evidence_from(CARD, [CONTROL, CONTROL], runs, "A")
    assert ev.grade == "B" and ev.chi == 0 and ev.replicates == 2
    assert ev.delta_src == ev.delta_point == pytest.approx(5.0)


def test_grade_b_is_the_paired_point_estimate_and_c_the_logged_difference():
    ev = evidence_from(CARD, [CONTROL], [summary([0, 0, 0, 0, 0, 1, 0, 0, 1, 0])], "B")
    assert (ev.grade, ev.chi, ev.replicates) == ("B", 0, 1) and ev.delta_src == pytest.approx(-20.0)
    half = {"items": dict(list(summary([1] * 10)["items"].items())[5:]), "metric": "exec_acc",
            "ifeval": {"prompt_strict": 80.0, "inst_strict": 85.0}}
    ev = evidence_from(CARD, [CONTROL], [half], "C")
    assert ev.grade == "C" and ev.delta_src == ev.delta_point == pytest.approx(60.0)


def test_source_card_swaps_data_for_the_source_task_and_scales_steps():
    world = fake_world()
    world.datasets["sql/source/train"] = "0" * 64
    card = card_by_id(world, "S07")
    src = source_card(card, world, 0.25)
    assert [m.dataset.id for m in src.data.mix] == ["sql/source/train"]
    assert src.budget.steps == round(card.budget.steps * 0.25) and src.hparams == card.hparams
    assert src.id == card.id and src.adapter == card.adapter


def test_each_replicate_is_paired_with_its_own_trained_control():
    # seed 1's control already scores what its intervention does: that pair shows no effect,
    # where pairing it with seed 0's control would have shown +20 pp
    runs = [summary([1, 0, 1, 1, 1, 1, 0, 0, 1, 0]), summary([1, 0, 1, 1, 1, 1, 0, 0, 1, 0])]
    ev = evidence_from(CARD, [CONTROL, runs[1]], runs, "A")
    assert ev.grade == "B" and ev.delta_point == pytest.approx(10.0)  # (20 + 0) / 2; 0 breaks the sign agreement
    with pytest.raises(ValueError):
        evidence_from(CARD, [CONTROL], runs, "A")  # a replicate without its control


def test_grade_plan_covers_the_catalogue_and_is_frozen():
    from agent.world.catalogue import card_ids
    from agent.world.source_contexts import SOURCE_PARENT

    assert set(GRADE_PLAN) == set(card_ids()) == set(SOURCE_PARENT)
    assert set(SOURCE_PARENT.values()) == {"base", "early", "early-template", "stage1"}
    assert sorted(GRADE_PLAN.values()) == ["A"] * 8 + ["B"] * 8 + ["C"] * 8  # catalogue v7: S02, S06 logged only


@pytest.mark.slow
def test_seed_bank_on_the_test_world(tmp_path, monkeypatch):
    import time

    from agent.world.seed_bank import build_seed_bank, seed_dir, seed_records
    from agent.world.source_contexts import SOURCE_PARENT
    from agent.world.embedded import ensure_world
    from experience_bank.bank import Bank

    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "cache"))
    world = ensure_world("test")
    cards = ["S05", "S06", "G09", "S08"]  # A, C (aggressive, catalogue v7), A, C (LoRA + replay)
    t0 = time.monotonic()
    version = build_seed_bank(world, tmp_path / "bank.sqlite", cards=cards)
    print(f"seed bank ({len(cards)} cards) in {time.monotonic() - t0:.1f} s")
    with Bank.open(tmp_path / "bank.sqlite") as bank:
        entries = bank.library_records(version)
        assert len(entries) == len(cards)
        assert not bank.verify()
    for rec in seed_records(world, cards=cards):
        ev = rec.evidence
        assert ev.chi == (1 if ev.grade == "A" else 0)
        assert ev.replicates == (2 if GRADE_PLAN[rec.card.id] == "A" else 1)
        if ev.grade == "A":
            assert ev.delta_src <= ev.delta_point
        else:
            assert ev.delta_src == ev.delta_point
        parent = {"base": world.model.sha256, "early": world.early_model.sha256}[SOURCE_PARENT[rec.card.id]]
        assert rec.source.task == f"{rec.card.family}/source" and rec.source.parent.sha256 == parent
        assert world.early_model.sha256 in world.model.lineage  # the early checkpoint is the base's ancestor
        assert all((tmp_path / a).exists() for a in rec.provenance.artefacts)
    # 6 pairs (S05, G09 at seeds 0 and 1, S06, S08 at 0); S08 (LoRA + replay, on the early
    # checkpoint) matches S06's seed-0 control on parent, seed, steps and examples: one run less
    import json

    timing = json.loads((seed_dir(world) / "timing.json").read_text())
    assert (timing["pairs"], timing["control_runs"], timing["control_runs_saved"]) == (6, 5, 1)
    t1 = time.monotonic()
    assert build_seed_bank(world, tmp_path / "bank.sqlite", cards=cards) == version  # cached, idempotent
    assert time.monotonic() - t1 < 10



class _Runs:
    """The trainer and evaluator boundary (CardRunner.train, CardRunner.evaluate): a child's scores
    follow the learning rate that trained it; the parent and the controls score as lr 0."""

    def __init__(self):
        self.trained: dict[str, float] = {}

    def train(self, card, parent_dir, *, out_dir, run_key, seed, **_):
        self.trained[out_dir] = 0.0 if run_key.startswith("control-") else card.hparams.learning_rate
        return SimpleNamespace(checkpoint=out_dir, checkpoint_sha256=f"w-{run_key}", sanity=())

    def evaluate(self, model_dir, suites, split, *, out_dir, n, seed):
        Path(out_dir).mkdir(parents=True, exist_ok=True)  # as the evaluator writes its results there
        lr = self.trained[model_dir]
        identity = lambda suite: SimpleNamespace(suite=suite, model_dump=lambda mode: {"suite": suite})  # noqa: E731
        items = [SimpleNamespace(item_id=f"i{k}", score=min(1.0, 0.5 + 100 * lr), correct=None) for k in range(4)]
        return {s: SimpleNamespace(items=items, identity=identity(s), generations_sha256=f"g-{model_dir}",
                                   metrics={"prompt_strict": 80.0 - 1000 * lr, "inst_strict": 85.0}) for s in suites}


def test_an_edited_card_under_the_same_id_is_run_again_not_served_the_old_recipes_scores(tmp_path, monkeypatch):
    """Found with catalogue v7: S06's new recipe got v6 S06's cached evaluation, because a source
    run's evaluation was cached under the card's id, where and seed only (seed_bank.run_name)."""
    import dataclasses

    from agent.world import seed_bank
    from experience_bank.hashing import sha256_text

    base = fake_world()
    world = dataclasses.replace(base, root=str(tmp_path),
                                datasets=base.datasets | {d: sha256_text(d) for d in ("sql/source/train", "ifeval/train")})
    runs = _Runs()
    monkeypatch.setattr(seed_bank, "CardRunner", lambda w: runs)
    card = card_by_id(world, "S06")  # grade C in v7: one seed; its source parent is the base or the early checkpoint
    edited = card.model_copy(update={"hparams": card.hparams.model_copy(update={"learning_rate": card.hparams.learning_rate / 10})})

    first = seed_bank._Runner(world, None, total=1).record(card)
    again = seed_bank._Runner(world, None, total=1).record(edited)
    assert first.evidence.retention[0].delta == pytest.approx(-1000 * card.hparams.learning_rate)
    assert again.evidence.retention[0].delta == pytest.approx(-1000 * edited.hparams.learning_rate)  # the bug: the first one's
    assert first.provenance.artefacts != again.provenance.artefacts
    trained = len(runs.trained)
    assert seed_bank._Runner(world, None, total=1).record(card).evidence == first.evidence
    assert len(runs.trained) == trained  # the same content again: served from the cached evaluation, not retrained
