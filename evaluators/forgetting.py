"""Forgetting diagnostics: paired retention per task and the cross-task effect matrix.

Average accuracy hides lost answers: new corrections can cancel forgotten ones (docs/GATE.md
§3), so retention is computed on item pairs (parent vs child, same split, same item ids).
An update's label does not predict what it changes (§4), so every candidate's effect is read
on every suite and `DriftScore = OffTargetGain - TargetGain` flags effects off the label.

The CapTrack relative-drift profile is computed by `policies.gate.captrack_profile`: the gate
must compute it and policies/ may not import evaluators/, so it lives there, once.
UNKNOWN items (correct=None) are excluded from the pair counts and always reported beside them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated

from pydantic import Field

from experience_bank.errors import BadInput
from experience_bank.frozen import Frozen, Ident
from experience_bank.results import SuiteResult

Results = Mapping[str, SuiteResult]
Count = Annotated[int, Field(ge=0)]


class TaskRetention(Frozen):
    """Paired outcome counts of one task (suite), parent -> child."""

    task: Ident
    """Suite name."""
    n_pairs: Count
    """Items both models were scored on (UNKNOWN excluded)."""
    n_unknown: Count
    """Items where either model's outcome is UNKNOWN."""
    parent_correct: Count
    """Items the parent answered correctly."""
    kept: Count
    """correct -> correct."""
    lost: Count
    """correct -> wrong (forgotten)."""
    gained: Count
    """wrong -> correct (new corrections)."""
    retention_pct: float | None
    """kept / parent_correct * 100; None when the parent answered nothing correctly."""
    forgetting_pct: float | None
    """F_j = lost / parent_correct * 100; None when the parent answered nothing correctly."""
    net_pp: float | None
    """(gained - lost) / n_pairs * 100: what an average-accuracy view would show."""


class RetentionSummary(Frozen):
    tasks: tuple[TaskRetention, ...]
    """Per task."""
    mean_retention_pct: float | None
    """Equal-weight mean over tasks (each task counts once, whatever its size)."""
    mean_forgetting_pct: float | None
    """Equal-weight mean of F_j."""
    worst_task: Ident | None
    """Task with the largest F_j."""
    worst_forgetting_pct: float | None
    """Its F_j."""


def _outcomes(result: SuiteResult) -> dict[str, bool | None]:
    return {i.item_id: i.correct for i in result.items}


def paired_retention(parent: SuiteResult, child: SuiteResult) -> TaskRetention:
    """Retention, forgetting and both flip counts of one task."""
    task = parent.identity.suite
    if child.identity.suite != task or child.identity.data_sha256 != parent.identity.data_sha256:
        raise BadInput(f"retention of {task}: the two results are not the same suite and data; evaluate both on one split")
    a, z = _outcomes(parent), _outcomes(child)
    if a.keys() != z.keys():
        raise BadInput(f"retention of {task}: item ids differ between parent and child; evaluate both on one split")
    known = [(a[k], z[k]) for k in a if a[k] is not None and z[k] is not None]
    kept = sum(1 for p, c in known if p and c)
    lost = sum(1 for p, c in known if p and not c)
    gained = sum(1 for p, c in known if not p and c)
    base = kept + lost
    return TaskRetention(
        task=task, n_pairs=len(known), n_unknown=len(a) - len(known), parent_correct=base, kept=kept, lost=lost,
        gained=gained, retention_pct=kept / base * 100 if base else None,
        forgetting_pct=lost / base * 100 if base else None,
        net_pp=(gained - lost) / len(known) * 100 if known else None)


def _mean(xs: list[float | None]) -> float | None:
    known = [x for x in xs if x is not None]
    return sum(known) / len(known) if known else None


def retention_summary(parent: Results, child: Results, tasks: Sequence[str] | None = None) -> RetentionSummary:
    """Per-task retention plus the equal-weight task mean and the worst task."""
    names = sorted(set(parent) & set(child)) if tasks is None else list(tasks)
    missing = [t for t in names if t not in parent or t not in child]
    if missing:
        raise BadInput(f"retention needs both models' results for {', '.join(missing)}; evaluate them")
    rows = tuple(paired_retention(parent[t], child[t]) for t in names)
    scored = [r for r in rows if r.forgetting_pct is not None]
    worst = max(scored, key=lambda r: r.forgetting_pct, default=None)
    return RetentionSummary(
        tasks=rows, mean_retention_pct=_mean([r.retention_pct for r in rows]),
        mean_forgetting_pct=_mean([r.forgetting_pct for r in rows]),
        worst_task=worst.task if worst else None, worst_forgetting_pct=worst.forgetting_pct if worst else None)


# --- cross-task matrix and DriftScore ----------------------------------------------------


class CrossTaskRow(Frozen):
    """One candidate's effect on every suite metric, child - parent, in pp."""

    candidate_id: Ident
    """Card id (or episode step)."""
    target: Ident
    """The metric its label targets, `suite.metric`."""
    effects: dict[str, float | None]
    """`suite.metric` -> child - parent (None = UNKNOWN on either side)."""
    target_gain: float | None
    """Effect on the target."""
    off_target_gain: float | None
    """Largest effect on any other metric (one big off-label move is what the label hides)."""
    off_target_metric: Ident | None
    """Where that largest off-target effect is."""
    drift_score: float | None
    """OffTargetGain - TargetGain; None when any effect is UNKNOWN."""
    flagged: bool | None
    """drift_score > margin: the realised effect is off the label; None when UNKNOWN."""


def metric_keys(parent: Results, child: Results) -> list[str]:
    """Every `suite.metric` both models report, sorted."""
    return sorted(f"{s}.{m}" for s in set(parent) & set(child) for m in set(parent[s].metrics) & set(child[s].metrics))


def _value(results: Results, key: str) -> float | None:
    suite, _, metric = key.partition(".")
    if suite not in results or metric not in results[suite].metrics:
        raise BadInput(f"no metric {key} in the results; evaluate that suite or fix the metric name")
    return results[suite].metrics[metric]


def cross_task_row(candidate_id: str, parent: Results, child: Results, target: str,
                   metrics: Sequence[str] | None = None, margin: float = 0.0) -> CrossTaskRow:
    """A candidate's realised effect across suites and its DriftScore.

    `metrics` should name metrics on one 0-100 scale (primary suite metrics); style metrics
    such as response length belong in the CapTrack profile, not in a gain comparison.
    """
    keys = list(metrics) if metrics is not None else metric_keys(parent, child)
    if target not in keys:
        keys.append(target)
    effects: dict[str, float | None] = {}
    for k in keys:
        p, c = _value(parent, k), _value(child, k)
        effects[k] = None if p is None or c is None else c - p
    off = {k: v for k, v in effects.items() if k != target}
    if None in effects.values() or not off:
        best_key, best = None, None
    else:
        best_key = max(off, key=lambda k: off[k])
        best = off[best_key]
    drift = None if best is None or effects[target] is None else best - effects[target]
    return CrossTaskRow(candidate_id=candidate_id, target=target, effects=effects, target_gain=effects[target],
                        off_target_gain=best, off_target_metric=best_key, drift_score=drift,
                        flagged=None if drift is None else drift > margin)


def cross_task_matrix(rows: Sequence[CrossTaskRow]) -> dict:
    """Candidates x metrics as plain JSON: {"metrics": [...], "rows": [{candidate, effects, drift...}]}."""
    metrics = sorted({k for r in rows for k in r.effects})
    return {"metrics": metrics,
            "rows": [{"candidate_id": r.candidate_id, "target": r.target,
                      "effects": [r.effects.get(k) for k in metrics], "drift_score": r.drift_score,
                      "flagged": r.flagged} for r in rows]}
