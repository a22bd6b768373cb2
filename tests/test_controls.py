"""Trained matched controls: what they share with their cards, and when two cards share one."""

from __future__ import annotations

import itertools

from agent.world.catalogue import REFERENCE_CARDS, catalogue
from agent.world.controls import CONTROL_POOL, control_card, control_examples, control_key, is_control
from agent.world.source_contexts import source_card
from support.bank_factory import sha
from evaluators.rewards import placebo
from experience_bank.records import ModelRef

def fake_world():
    from test_catalogue import fake_world as bare

    w = bare()
    w.datasets.update({d: sha(d) for d in (CONTROL_POOL, "finance/source/train", "sql/source/train",
                                           "function/source/train")})
    return w


PARENT = ModelRef(id="p", sha256=sha("p"), arch="qwen3", chat_template_sha256=sha("t"))


def test_a_control_keeps_the_budget_and_drops_the_intervention():
    w = fake_world()
    for card in catalogue(w):
        ctrl = control_card(card, w)
        assert (ctrl.method, ctrl.budget.steps, ctrl.data.n_examples, ctrl.hparams.batch_size) == (
            card.method, card.budget.steps, card.data.n_examples, card.hparams.batch_size)
        assert [m.dataset.id for m in ctrl.data.mix] == [CONTROL_POOL] and ctrl.data.replay_share == 0.0
        assert ctrl.adapter.kind == "full"
        assert ctrl.hparams.rewards == (("placebo",) if card.method == "grpo" else ())


def test_a_control_trains_with_its_methods_standard_card_recipe():
    """The catalogue owns the reference recipe: a control of any card trains at the learning rate,
    schedule and warm-up of the standard card of its method (S01, G05), and GRPO at its KL weight and
    temperature, whatever the card's own (v4 lowered S01 to 1e-4 while the controls kept 5e-4)."""
    w = fake_world()
    cards = {c.id: c for c in catalogue(w)}
    for card in cards.values():
        ref = cards[REFERENCE_CARDS[card.method]].hparams
        ctrl = control_card(card, w).hparams
        assert (ctrl.learning_rate, ctrl.lr_scheduler, ctrl.warmup_ratio, ctrl.beta, ctrl.temperature) == (
            ref.learning_rate, ref.lr_scheduler, ref.warmup_ratio, ref.beta, ref.temperature)
    assert control_card(cards["S12"], w).hparams.learning_rate == cards["S01"].hparams.learning_rate == 1e-4


def test_controls_are_shared_where_and_only_where_the_match_keys_coincide():
    w = fake_world()
    cards = catalogue(w)
    keys = {c.id: control_key(control_card(c, w), PARENT, 0) for c in cards}
    # every SFT card of the catalogue has 120 nominal steps and every GRPO card 64: one control each
    assert len({keys[c.id] for c in cards if c.method == "sft"}) == 1
    assert len({keys[c.id] for c in cards if c.method == "grpo"}) == 1
    assert len(set(keys.values())) == 2
    ctrl = control_card(cards[0], w)
    other_template = PARENT.model_copy(update={"chat_template_sha256": sha("t2")})
    variants = [control_key(ctrl, PARENT, 0), control_key(ctrl, PARENT, 1), control_key(ctrl, PARENT, 0, 0.2),
                control_key(ctrl, PARENT.model_copy(update={"sha256": sha("q")}), 0), control_key(ctrl, other_template, 0),
                control_key(ctrl.model_copy(update={"budget": ctrl.budget.model_copy(update={"steps": 7})}), PARENT, 0),
                control_key(control_card(source_card(cards[0], w, 0.25), w), PARENT, 0)]
    assert len(set(variants)) == len(variants)  # seed, fraction, weights, template, steps: each makes a new run
    # what labels a control without changing it does not split it
    relabelled = ctrl.model_copy(update={"family": "sql", "budget": ctrl.budget.model_copy(update={"device_hours": 9.0})})
    assert control_key(relabelled, PARENT, 0) == control_key(ctrl, PARENT, 0)


def test_placebo_reward_is_a_deterministic_fair_coin():
    prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(400)]
    completions = [[{"role": "assistant", "content": f"a{i}"}] for i in range(400)]
    first, again = placebo(prompts, completions), placebo(prompts, completions)
    assert first == again and set(first) == {0.0, 1.0}
    assert 160 <= sum(first) <= 240  # about half, whatever the text says
    assert all(len(set(placebo([p] * 2, [c, c]))) == 1 for p, c in itertools.islice(zip(prompts, completions), 5))


def test_an_sft_control_learns_the_parents_own_answers_and_a_grpo_control_its_prompts():
    w = fake_world()
    sft, grpo = (next(c for c in catalogue(w) if c.method == m) for m in ("sft", "grpo"))
    asked = []

    def parent(prompts):  # the generator boundary: what the frozen parent would answer
        asked.extend(prompts)
        return [f"parent says {i}" for i in range(len(prompts))]

    rows = control_examples(control_card(sft, w), w, 0, parent)
    assert len(rows) == sft.data.n_examples == len(asked)
    assert [r["completion"][0]["content"] for r in rows[:2]] == ["parent says 0", "parent says 1"]
    assert all(r["prompt"] == p for r, p in zip(rows, asked))  # the pool's prompts, none of its gold answers
    asked.clear()
    g = control_examples(control_card(grpo, w), w, 0, parent)
    assert asked == [] and len(g) == grpo.data.n_examples and all("completion" not in r for r in g)
    assert is_control(control_card(sft, w)) and not is_control(sft)


def test_a_control_is_known_by_its_typed_role_not_by_its_id():
    from experience_bank.hashing import canonical_json
    from experience_bank.cards import CandidateCard
    from experience_bank.frozen import parse_model

    w = fake_world()
    card = next(iter(catalogue(w)))
    ctrl = control_card(card, w)
    assert ctrl.role == "control" and is_control(ctrl)
    assert is_control(parse_model(CandidateCard, canonical_json(ctrl)))  # the role survives its JSON
    assert not is_control(card.model_copy(update={"id": "CTRL-sft"}))  # an id is a name, not a role
    # a candidate's JSON is the one it had before the field existed: old records load, hashes hold
    assert "role" not in card.model_dump() and parse_model(CandidateCard, canonical_json(card)) == card
    assert "role" not in parse_model(CandidateCard, canonical_json(card)).model_dump(mode="json")
