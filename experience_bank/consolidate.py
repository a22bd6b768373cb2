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
class Planned:
    """One entry of a new library version."""

    record: HistoricalRecord | Proposal
    """The record to list."""
    members: tuple[HistoricalRecord, ...] = ()
    """Raw observations merged into it (empty when it is not a merge)."""
    conflicted: bool = False
    """Contradicting evidence exists for its card and context."""


def evidence_key(record: HistoricalRecord) -> Key:
    return (record.card.id, content_hash(record.source), record.evidence.target_metric)


def contradicts(records: list[HistoricalRecord], noise_pp: float = NOISE_PP) -> bool:
    """True when some effect is clearly positive and another clearly negative."""
    effects = [r.evidence.delta_point for r in records]
    return any(e > noise_pp for e in effects) and any(e < -noise_pp for e in effects)


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
    """One record standing for several observations of the same card, context and metric."""
    members = sorted(members, key=content_hash)
    first = members[0]
    return HistoricalRecord(card=first.card, source=first.source, evidence=merged_evidence(members),
                            applicability=first.applicability, provenance=_merged_provenance(members, label))


def plan(observations: list[HistoricalRecord | Proposal], label: str,
         noise_pp: float = NOISE_PP) -> list[Planned]:
    """The entries of a new library version from raw observations (merged records already expanded)."""
    unique = {content_hash(r): r for r in observations}
    groups: dict[Key, list[HistoricalRecord]] = defaultdict(list)
    out: list[Planned] = []
    for h in sorted(unique):
        record = unique[h]
        if isinstance(record, Proposal):
            out.append(Planned(record))
        else:
            groups[evidence_key(record)].append(record)
    for key in sorted(groups):
        members = groups[key]
        if len(members) == 1:
            out.append(Planned(members[0]))
        elif contradicts(members, noise_pp):
            out.extend(Planned(m, conflicted=True) for m in members)
        else:
            out.append(Planned(merge(members, label), members=tuple(members)))
    return out


def conflicted_hashes(records: list[HistoricalRecord | Proposal], noise_pp: float = NOISE_PP) -> set[str]:
    """Hashes of historical records whose card and context also carry contradicting evidence."""
    groups: dict[Key, list[HistoricalRecord]] = defaultdict(list)
    for r in records:
        if isinstance(r, HistoricalRecord):
            groups[evidence_key(r)].append(r)
    return {content_hash(r) for g in groups.values() if contradicts(g, noise_pp) for r in g}
