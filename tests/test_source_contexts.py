"""L(0)'s source contexts differ from the current one as data: asserted from compiled features.

The records here are assembled by agent/world/source_contexts.py's own functions (parent_ref, source_context,
source_applicability) from the frozen plan; only the evidence numbers are fixed test values, and
no feature below reads them (S does, A and H do not)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from support import bank_factory as bf
from agent.world.catalogue import catalogue
from agent.world.records import current_context
from agent.world.source_contexts import (
    DATA_RELEASE, SOURCE_PARENT, parent_ref, source_applicability, source_context, templated,
)
from experience_bank.hashing import sha256_text
from experience_bank.records import HistoricalRecord, ModelRef, SourceEvidence
from policies import compile as compile_features
from policies.features import relation
from test_catalogue import fake_world

EARLY = ModelRef(id="world-x/early-700", sha256=sha256_text("early weights"), arch="qwen3",
                 chat_template_sha256=sha256_text("template"))


def world():
    w = fake_world()
    sources = {f"{f}/source/train": sha256_text(f) for f in ("finance", "sql", "function")}
    return replace(w, early_dir="/nonexistent/early", early_model=EARLY, datasets=w.datasets | sources,
                   model=w.model.model_copy(update={"lineage": (EARLY.sha256,)}))


def records(w):
    out = {}
    for card in catalogue(w):
        where = SOURCE_PARENT[card.id]
        parent = parent_ref(where, w, template_sha256=sha256_text(templated("template")),
                            stage1_sha256=sha256_text("stage-1 weights"))
        evidence = SourceEvidence(target_metric=f"{card.family}/source.x", delta_src=5.0, delta_point=5.0, kappa=10.0,
                                  grade="B", chi=0, replicates=1)
        out[card.id] = HistoricalRecord(card=card, source=source_context(card, w, parent, int(where == "stage1"), 0.25),
                                        evidence=evidence, applicability=source_applicability(card, w, parent),
                                        provenance=bf.provenance())
    return out


def features(w, ctx):
    return {cid: compile_features(r, ctx) for cid, r in records(w).items()}


def test_at_stage_0_the_parent_data_and_template_fields_vary_by_plan():
    w = world()
    f = features(w, current_context(w, w.model, 0))
    parent = {cid: x.fields.parent for cid, x in f.items()}
    assert {c for c, v in parent.items() if v == 1.0} == {c for c, p in SOURCE_PARENT.items() if p == "base"}
    assert set(parent.values()) == {0.5, 1.0}  # early, its templated copy and stage 1: one lineage, another stage
    assert {c for c, x in f.items() if x.fields.data == 0.5} == set(DATA_RELEASE)
    assert all(x.fields.family == x.fields.runtime == x.fields.protocol == 1.0 for x in f.values())
    fired = {c: x.conflicts for c, x in f.items() if x.H}
    assert set(fired) == {"G02", "G06", "G10"}  # they assume the chat template of the parent they ran on
    assert all(n[0].startswith("conflicts: parent chat template") for n in fired.values())
    assert Counter(x.A for x in f.values()) == {1.0: 4, 0.9: 18, 0.8: 2}  # v7: S06 names no earlier release


def test_after_a_promotion_the_stage_and_lineage_move():
    w = world()
    child = ModelRef(id="world-x/child-1", sha256=sha256_text("child"), arch="qwen3",
                     chat_template_sha256=w.chat_template_sha256, lineage=(EARLY.sha256, w.model.sha256))
    f = features(w, current_context(w, child, 1))
    assert all(x.fields.parent == 0.5 for x in f.values())  # no evidence was observed on this child
    stage_limited = {c for c, x in f.items() if any("later-stage parent" in n for n in x.conflicts)}
    assert stage_limited == {"G04", "S02", "S06", "S12"}  # v7: S02 and S06 carry S12's recipe, stage limit included


def test_relation_compares_identity_and_lineage():
    base = bf.record().source.parent
    child = base.model_copy(update={"sha256": bf.sha("child"), "lineage": (base.sha256,)})
    sibling = base.model_copy(update={"sha256": bf.sha("sibling"), "lineage": (base.sha256,)})
    stranger = base.model_copy(update={"sha256": bf.sha("stranger"), "lineage": (bf.sha("other root"),)})
    assert relation(base, base) == "same"
    assert relation(base, child) == relation(child, base) == relation(sibling, child) == "related"
    assert relation(stranger, child) == "unrelated"
    assert relation(base.model_copy(update={"sha256": bf.sha("x")}), base) == "unknown"  # no lineage on either side


def test_a_record_from_another_lineage_scores_parent_0():
    w = world()
    rec = records(w)["S05"]
    other = rec.source.parent.model_copy(update={"id": "team-b/model", "sha256": bf.sha("b"),
                                                 "lineage": (bf.sha("b-root"),)})
    imported = rec.model_copy(update={"source": rec.source.model_copy(update={"parent": other})})
    assert compile_features(imported, current_context(w, w.model, 0)).fields.parent == 0.0


def test_a_ref_without_lineage_hashes_as_before_the_field():
    ref = bf.record().source.parent
    assert "lineage" not in ref.model_dump(mode="json")
    assert ref.model_copy(update={"lineage": (bf.sha("root"),)}).content_hash() != ref.content_hash()
