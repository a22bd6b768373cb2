"""Where L(0)'s evidence was observed: the source contexts x_s and the B_i its authors wrote.

A frozen plan (hashed into the seed bank's plan hash; it never looks at an outcome) and the pure
functions that turn it into records' source parents, source contexts and applicability
conditions. agent/world/seed_bank.py runs the plan; tests compile its records without training.

- `SOURCE_PARENT`: the parent each card was observed on. `early` is an earlier checkpoint of
  the base's own pretraining (agent/world/embedded.py), where the source tasks still have
  headroom; `base` is the current base itself (the standard recipes of the SQL and function
  families and the finance SFT one, re-run by a team that already had this model); `stage1`
  is the base after the finance standard recipe (S01's source run, seed 0) was promoted, a
  later parent; `early-template` is the early checkpoint served with another chat template
  (a default system message), as another team ran it. Each parent's ModelRef carries its
  lineage, so the authorizer's parent field sees identity, lineage and stage.
- `DATA_RELEASE`: cards whose B_i names a variant pool as the record's authors had it, an
  earlier release of the pool (the embedded world draws it with the next seed): present in
  the current context with another hash.
- Cards that assume a chat template assume their source parent's: on `early-template` that
  template differs from the current parent's, and the named hard conflict fires.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from experience_bank.errors import BadInput
from experience_bank.cards import CandidateCard, DataMix, DatasetRef
from experience_bank.records import Applicability, ModelRef, SourceContext

from agent.world.catalogue import applicability, catalogue_needs, runtime_of

if TYPE_CHECKING:
    from agent.world.interface import WorldData as World

SOURCE_PARENT = {
    "S01": "base", "S05": "base", "S09": "base", "G09": "base",
    "S07": "stage1", "G07": "stage1", "S11": "stage1", "G11": "stage1",
    "G02": "early-template", "G06": "early-template", "G10": "early-template",
    **{c: "early" for c in ("S02", "S03", "S04", "G01", "G03", "G04", "S06", "S08", "G05", "G08", "S10", "S12",
                            "G12")},
}
"""Frozen before any run: the parent each card's evidence was observed on (module docstring), in
world seed 0."""
FIXED_PARENT = ("S01",)
"""Cards whose source parent no world seed moves: S01's source run is the stage-1 parent itself
(seed_bank.STAGE1_PARENT), so it is observed on the base."""
DATA_RELEASE = {"S03": 1, "S10": 1}
"""Cards whose B_i names their variant pool at an earlier release (the world's seed + this)."""
SOURCE_SYSTEM_PROMPT = "You are a helpful assistant."
"""The default system message of the `early-template` parent's chat template."""


def source_parents(world_seed: int) -> dict[str, str]:
    """The source parent of every card in the world of `world_seed`: the written plan
    (SOURCE_PARENT) in world seed 0; in any other world the same parents (as many of each) dealt
    to the cards by a shuffle seeded with the world seed, so which evidence is foreign, which
    parent is later and which template conflicts fire differ from world to world."""
    if world_seed == 0:
        return dict(SOURCE_PARENT)
    movable = sorted(c for c in SOURCE_PARENT if c not in FIXED_PARENT)
    parents = [SOURCE_PARENT[c] for c in movable]
    random.Random(f"source-parents:{world_seed}").shuffle(parents)
    return {c: SOURCE_PARENT[c] for c in FIXED_PARENT} | dict(zip(movable, parents, strict=True))


def parent_ref(where: str, world: World, *, template_sha256: str = "", stage1_sha256: str = "") -> ModelRef:
    """The identity of a `SOURCE_PARENT` value in `world`: weights hash, chat template, lineage."""
    early = world.early_model or world.model  # a world without an early checkpoint: its base
    if where == "base":
        return world.model
    if where == "early":
        return early
    if where == "early-template":
        return early.model_copy(update={"id": f"{early.id}-template", "chat_template_sha256": template_sha256})
    if where == "stage1":
        return ModelRef(id=f"world-{world.size}/seed-stage1", sha256=stage1_sha256, arch=world.model.arch,
                        chat_template_sha256=world.chat_template_sha256,
                        lineage=(*world.model.lineage, world.model.sha256))
    raise BadInput(f"unknown source parent {where!r}: choose base, early, early-template or stage1")


def templated(chat_template: str) -> str:
    """The chat template with a default system message when the conversation has none (inserted
    into `messages`, so the template renders it in its own format)."""
    system = "{'role': 'system', 'content': '" + SOURCE_SYSTEM_PROMPT + "'}"
    return ("{%- if messages[0]['role'] != 'system' %}{%- set messages = [" + system + "] + messages %}"
            "{%- endif %}" + chat_template)


def source_context(card: CandidateCard, world: World, parent: ModelRef, stage: int, step_scale: float) -> SourceContext:
    """x_s of a card's record: its source parent, the source analogue's data, runtime and protocols."""
    src = source_card(card, world, step_scale)
    return SourceContext(parent=parent, stage=stage, family=card.family, task=f"{card.family}/source",
                         datasets={m.dataset.id: m.dataset.sha256 for m in src.data.mix}, runtime=runtime_of(card),
                         eval_protocol=world.eval_protocol, output_protocol=world.output_protocols[card.family])


def source_applicability(card: CandidateCard, world: World, parent: ModelRef) -> Applicability:
    """B_i as the record's authors wrote it: the catalogue's needs, with the chat template of
    the parent they observed on and their release of the card's variant pools."""
    needs = catalogue_needs(card, world)
    if needs.chat_template_sha256 is not None:
        needs = needs.model_copy(update={"chat_template_sha256": parent.chat_template_sha256})
    release = DATA_RELEASE.get(card.id)
    if release:
        mix = []
        for m in card.data.mix:
            sha = None if m.dataset.id.endswith("/target/train") else world.release_sha256(m.dataset.id, release)
            mix.append(m if sha is None else m.model_copy(update={"dataset": m.dataset.model_copy(update={"sha256": sha})}))
        card = card.model_copy(update={"data": card.data.model_copy(update={"mix": tuple(mix)})})
    return applicability(card, world, needs)


def source_card(card: CandidateCard, world: World, step_scale: float) -> CandidateCard:
    """The card's source-context analogue: its recipe on `<family>/source/train`, scaled steps."""
    ds = f"{card.family}/source/train"
    steps = max(2, round(card.budget.steps * step_scale))
    body = card.model_dump()
    body["data"]["mix"] = (DataMix(dataset=DatasetRef(id=ds, sha256=world.datasets[ds]), weight=1.0).model_dump(),)
    body["data"]["n_examples"] = max(1, round(card.data.n_examples * steps / card.budget.steps))
    body["budget"]["steps"] = steps
    return CandidateCard.model_validate(body)
