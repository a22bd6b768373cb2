"""The candidate catalogue: 24 valid cards, 8 per family, 4 SFT + 4 GRPO each, a stable hash."""

from collections import Counter

import pytest

from agent.world.catalogue import applicability, card_ids, catalogue, catalogue_sha256
from agent.world.store import World
from experience_bank.hashing import sha256_text
from experience_bank.cards import CandidateCard
from experience_bank.records import Applicability, ModelRef

DATASETS = ("finance/target/train", "finance/target-cot/train", "sql/target/train", "sql/target-evidence/train",
            "sql/target-schema/train", "function/target/train", "function/target-random/train")


def fake_world(size: str = "default") -> World:
    tsha = sha256_text("template")
    model = ModelRef(id="world-x/base", sha256=sha256_text("weights"), arch="qwen3", chat_template_sha256=tsha)
    return World(size=size, seed=0, recipe_sha256=sha256_text("recipe"), root="/nonexistent", base_dir="/nonexistent/base",
                 model=model, chat_template_sha256=tsha, datasets={d: sha256_text(d) for d in DATASETS})


def test_24_cards_8_per_family_4_sft_4_grpo():
    cards = catalogue(fake_world())
    assert len(cards) == 24 and all(isinstance(c, CandidateCard) for c in cards)
    assert len({c.id for c in cards}) == 24
    assert Counter(c.family for c in cards) == {"finance": 8, "sql": 8, "function": 8}
    assert Counter((c.family, c.method) for c in cards) == {(f, m): 4 for f in ("finance", "sql", "function")
                                                            for m in ("sft", "grpo")}
    assert sorted(c.id for c in cards if c.method == "sft") == [f"S{i:02d}" for i in range(1, 13)]
    assert sorted(c.id for c in cards if c.method == "grpo") == [f"G{i:02d}" for i in range(1, 13)]


def test_practitioner_menu_is_varied():
    cards = catalogue(fake_world())
    assert any(c.data.replay_share > 0 for c in cards)
    assert any(c.adapter.kind == "lora" for c in cards)
    assert {r for c in cards for r in c.hparams.rewards} == {"execution", "ast_match", "numeric_match", "format"}
    assert {c.nu for c in cards} == {"continue", "restart", "none"}
    assert all(2.0 <= c.budget.device_hours <= 6.0 for c in cards)


def test_applicability_has_five_values_and_named_conflicts():
    world = fake_world()
    for card in catalogue(world):
        app = applicability(card, world)
        assert isinstance(app, Applicability) and app.family == card.family
        assert {d.id for d in app.datasets} == {m.dataset.id for m in card.data.mix}
        assert app.conflicts and all(c.name for c in app.conflicts)
    by_id = {c.id: applicability(c, world) for c in catalogue(world)}
    assert any(c.field == "stage" and c.op == "gt" for a in by_id.values() for c in a.conflicts)
    assert any(c.value == "json-call" for c in by_id["G09"].conflicts)
    assert by_id["S08"].runtime == "peft-lora"


def test_hash_is_stable_and_cards_scale_with_size():
    assert catalogue_sha256() == catalogue_sha256() and len(catalogue_sha256()) == 64
    assert card_ids()[0] == "S01"
    small, big = catalogue(fake_world("test")), catalogue(fake_world("default"))
    assert all(s.budget.steps < b.budget.steps for s, b in zip(small, big))
    assert all(s.budget.device_hours == b.budget.device_hours for s, b in zip(small, big))


def test_missing_dataset_is_loud():
    world = fake_world()
    world = World(**{**world.__dict__, "datasets": {}})
    with pytest.raises(KeyError):
        catalogue(world)
