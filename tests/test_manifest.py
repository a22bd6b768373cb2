"""The manifest's config is a typed RunConfig, and manifests written before stay readable:
tests/fixtures/manifests/v0.1-b0402c8.json was frozen by main at b0402c8 (config a plain dict)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.config import RunConfig
from agent.run.manifest import parse_manifest
from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json, content_hash

OLD = Path(__file__).parent / "fixtures" / "manifests" / "v0.1-b0402c8.json"


def _rehashed(doc: dict) -> str:
    """The manifest as its writer hashed it: over every field it holds but the hash."""
    body = {k: v for k, v in doc.items() if k != "manifest_hash"}
    return canonical_json(body | {"manifest_hash": content_hash(body)})


def test_a_manifest_from_before_reads_as_a_typed_config():
    m = parse_manifest(OLD.read_text(encoding="utf-8"))
    assert isinstance(m.config, RunConfig)
    assert (m.config.world, m.config.policy, m.config.approve, m.config.fallback_lease) == ("test", "bcit", "train", 1)
    # frozen again: the same bytes (fields added since, e.g. world_seed, are not set in it)
    assert canonical_json(m.model_dump(mode="json", exclude_unset=True)) == OLD.read_text(encoding="utf-8")
    assert m.config.world_seed == 0 and m.world.seed == 0


def test_a_manifest_from_before_a_config_key_existed_reads_it_at_its_default():
    doc = json.loads(OLD.read_text(encoding="utf-8"))
    for key in ("approve", "cards", "cards_only"):  # keys added to RunConfig after 0.1's first runs
        del doc["config"][key]
    m = parse_manifest(_rehashed(doc))
    assert (m.config.approve, m.config.cards, m.config.cards_only) == (None, None, False)
    assert m.manifest_hash == json.loads(_rehashed(doc))["manifest_hash"]


def test_an_edited_or_unknown_config_key_is_refused():
    doc = json.loads(OLD.read_text(encoding="utf-8"))
    edited = dict(doc, config=doc["config"] | {"seed": 7})
    with pytest.raises(BadInput, match="was edited"):
        parse_manifest(canonical_json(edited))
    dropped = dict(doc, config={k: v for k, v in doc["config"].items() if k != "approve"})
    with pytest.raises(BadInput, match="was edited"):  # a key removed is an edit too: the hash covered it
        parse_manifest(canonical_json(dropped))
    with pytest.raises(BadInput, match="config.colour"):
        parse_manifest(_rehashed(dict(doc, config=doc["config"] | {"colour": "red"})))
    with pytest.raises(BadInput, match="config.seed"):
        parse_manifest(_rehashed(dict(doc, config=doc["config"] | {"seed": "seven"})))
