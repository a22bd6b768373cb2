"""Consolidation arithmetic: de-duplication, replicate merging and conflict review (BCIT §7).

Pure functions over records; `Bank.consolidate` does the reading and writing. Evidence is
grouped by (card id, source-context hash, target metric): the metric is part of the key so
that effects on different metrics are never averaged together.

Out of scope here: deciding which side of a conflict is right. Contradicting evidence is kept
whole and flagged, and the authorizer refuses a direct Train on a flagged record.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

from experience_bank.evidence import lower_bound  # delta_src of merged replicates: the one definition
from experience_bank.hashing import content_hash
from experience_bank.records import HistoricalRecord, Proposal, Provenance, RetentionEffect, SourceEvidence

NOISE_PP = 1.0
"""Effects within +-1 pp of zero count as noise: only effects beyond it can contradict."""
_GRADE_ORDER = {"A": 0, "B": 1, "C": 2}
# Grades A and B come from matched-control (paired) runs; grade C is a log-only estimate.
_MATCHED = ("A", "B")

Key = tuple[str, str, str]


@dataclass(frozen=True)
class Fact:
    """What consolidation needs of one stored record, read by index without parsing its body."""

    hash: str
    """Content hash of the record."""
    kind: str
    """`historical` or `proposal`."""
    card_id: str
    """Its card's id."""
    source_hash: str | None = None
    """Content hash of its source context (None for a proposal)."""
    target_metric: str | None = None
    """Its evidence's target metric (None for a proposal)."""
    delta_point: float | None = None
    """Its evidence's point effect in pp (None for a proposal)."""
    artefacts: tuple[str, ...] = ()
    """Provenance artefacts it names."""


def fact_of(record: HistoricalRecord | Proposal, record_hash: str, source_hash: str | None) -> Fact:
    if isinstance(record, Proposal):
        return Fact(record_hash, record.kind, record.card.id, artefacts=record.provenance.artefacts)
    return Fact(record_hash, record.kind, record.card.id, source_hash, record.evidence.target_metric,
                record.evidence.delta_point, record.provenance.artefacts)


@dataclass(frozen=True)
class Planned:
    """One entry of a new library version."""

    hash: str | None
    """Content hash of the listed record (None for a new merge: the bank hashes it as it stores it)."""
    record: HistoricalRecord | None = None
    """A new merged record to store first (None: the stored record is listed as it is)."""
    members: tuple[str, ...] = ()
    """Hashes of the raw observations merged into it (empty when it is not a merge)."""
    conflicted: bool = False
    """Contradicting evidence exists for its card and context."""
    artefacts: tuple[str, ...] = ()
    """Provenance artefacts it names."""


def fact_key(fact: Fact) -> Key:
    return (fact.card_id, fact.source_hash or "", fact.target_metric or "")


def evidence_key(record: HistoricalRecord) -> Key:
    return (record.card.id, content_hash(record.source), record.evidence.target_metric)


def contradicting(effects: list[float], noise_pp: float = NOISE_PP) -> bool:
    """True when some effect is clearly positive and another clearly negative."""
    return any(e > noise_pp for e in effects) and any(e < -noise_pp for e in effects)


def contradicts(records: list[HistoricalRecord], noise_pp: float = NOISE_PP) -> bool:
    return contradicting([r.evidence.delta_point for r in records], noise_pp)


def _retention(members: list[HistoricalRecord]) -> tuple[RetentionEffect, ...]:
    by_metric: dict[str, list[float]] = defaultdict(list)
    for m in members:
        for effect in m.evidence.retention:
            by_metric[effect.metric].append(effect.delta)
    return tuple(RetentionEffect(metric=k, delta=statistics.fmean(v)) for k, v in sorted(by_metric.items()))


def merged_evidence(members: list[HistoricalRecord]) -> SourceEvidence:
    """Evidence of agreeing replicates: grade A from two or more matched controls, else the best grade."""
    first = members[0].evidence
    matched = [m for m in members if m.evidence.grade in _MATCHED]
    if len(matched) >= 2:
        effects = [m.evidence.delta_point for m in matched]
        return SourceEvidence(
            target_metric=first.target_metric, delta_src=lower_bound(effects),
            delta_point=statistics.fmean(effects), kappa=first.kappa, grade="A", chi=1,
            retention=_retention(matched), replicates=sum(m.evidence.replicates for m in matched))
    best = min((m.evidence.grade for m in members), key=_GRADE_ORDER.__getitem__)
    top = [m for m in members if m.evidence.grade == best]
    return SourceEvidence(
        target_metric=first.target_metric, delta_src=statistics.fmean(m.evidence.delta_src for m in top),
        delta_point=statistics.fmean(m.evidence.delta_point for m in members), kappa=first.kappa,
        grade=best, chi=1 if best == "A" else 0, retention=_retention(members),
        replicates=sum(m.evidence.replicates for m in members))


def _merged_provenance(members: list[HistoricalRecord], label: str) -> Provenance:
    first = members[0].provenance
    data: dict[str, str] = {}
    for m in members:
        data.update(m.provenance.data_sha256)
    # The merged record's evaluation identity is the set of its members' evaluations.
    return Provenance(
        model_sha256=first.model_sha256, data_sha256=data, config_sha256=first.config_sha256,
        eval_sha256=content_hash(sorted(m.provenance.eval_sha256 for m in members)),
        artefacts=tuple(sorted({a for m in members for a in m.provenance.artefacts})),
        produced_by=f"{label}: {len(members)} replicates"[:200])


def merge(members: list[HistoricalRecord], label: str) -> HistoricalRecord:
    """One record standing for several observations of the same card, context and metric
    (members in content-hash order, as `plan` passes them)."""
    first = members[0]
    return HistoricalRecord(card=first.card, source=first.source, evidence=merged_evidence(members),
                            applicability=first.applicability, provenance=_merged_provenance(members, label))


def _groups(facts: list[Fact]) -> dict[Key, list[Fact]]:
    """Historical facts by evidence key, each group in hash order: one pass over a dict, never
    pairs, and only groups of two or more sorted (most are single observations)."""
    groups: dict[Key, list[Fact]] = defaultdict(list)
    for f in facts:
        if f.kind == "historical":
            groups[fact_key(f)].append(f)
    for members in groups.values():
        if len(members) > 1:
            members.sort(key=lambda f: f.hash)
    return groups


def plan(facts: list[Fact], load: Callable[[list[str]], list[HistoricalRecord]], label: str,
         noise_pp: float = NOISE_PP, merged: dict[frozenset[str], Fact] | None = None) -> list[Planned]:
    """The entries of a new library version from raw observations (merged records already expanded).

    Only new merges are parsed (`load` reads their members): a singleton, a conflict and a
    group whose members are exactly those of an earlier merge (`merged`: member hashes ->
    that merge) are listed as they are stored, so a consolidation costs what changed."""
    merged = merged or {}
    unique = list({f.hash: f for f in facts}.values())
    out = [Planned(f.hash, artefacts=f.artefacts) for f in sorted(unique, key=lambda f: f.hash)
           if f.kind == "proposal"]
    groups = _groups(unique)
    for key in sorted(groups):
        members = groups[key]
        if len(members) == 1:
            out.append(Planned(members[0].hash, artefacts=members[0].artefacts))
        elif contradicting([m.delta_point for m in members], noise_pp):
            out.extend(Planned(m.hash, conflicted=True, artefacts=m.artefacts) for m in members)
        elif (earlier := merged.get(frozenset(m.hash for m in members))) is not None:
            out.append(Planned(earlier.hash, artefacts=earlier.artefacts))
        else:
            record = merge(load([m.hash for m in members]), label)
            out.append(Planned(None, record, tuple(m.hash for m in members), artefacts=record.provenance.artefacts))
    return out


def conflicted_hashes(facts: list[Fact], noise_pp: float = NOISE_PP) -> set[str]:
    """Hashes of historical records whose card and context also carry contradicting evidence."""
    return {f.hash for g in _groups(facts).values() if contradicting([f.delta_point for f in g], noise_pp)
            for f in g}
