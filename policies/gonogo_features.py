"""The go/no-go's features (policies/gonogo.py): the one owner of their list and order.

A paired run's short curve (target and retention at each of FRACTIONS, slopes, a hard-failure flag),
its card's facts (method, family, adapter, learning rate, steps, replay share) and its record's S, A
and grade. An unknown number is 0 with a `_missing` flag set, never a guess. `probe_features` is what a
trial knows before its full run, `prior_features` what is known before any trial; `matrix` stacks
runs in FEATURE_NAMES' order for a fit."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, get_args

import numpy as np

from experience_bank.families import FAMILIES
from experience_bank.frozen import Grade
from experience_bank.results import SHORT_FRACTIONS
from policies.curves import RETENTION, CardFacts, CurvePoint, Footing, PairedRun, curve_on

FRACTIONS = SHORT_FRACTIONS
"""The short-run shares whose points are features (the trial is the last)."""
GRADES: tuple[str, ...] = get_args(Grade)

Record = Mapping[str, Any]
"""A record's numbers the go/no-go reads: S, A and grade (a compiled Features dump, or a subset)."""


def _point(curve: Sequence[CurvePoint], fraction: float):
    return next((p for p in curve if math.isclose(p.fraction, fraction)), None)


def _curve_features(curve: Sequence[CurvePoint]) -> dict[str, float]:
    out: dict[str, float] = {}
    for f in FRACTIONS:
        p = _point(curve, f)
        out[f"target@{f:.2f}"] = p.target_pp if p else 0.0
        for m in RETENTION:
            out[f"{m}@{f:.2f}"] = p.retention_pp.get(m, 0.0) if p else 0.0
        out[f"missing@{f:.2f}"] = 0.0 if p else 1.0
    first, last = _point(curve, FRACTIONS[0]), _point(curve, FRACTIONS[-1])
    span = FRACTIONS[-1] - FRACTIONS[0]
    both = first is not None and last is not None
    out["target_slope"] = (last.target_pp - first.target_pp) / span if both else 0.0
    # Retention's worst metric: the outcome rule fails a run on either IFEval metric.
    out["retention_min_slope"] = ((min(last.retention_pp.values()) - min(first.retention_pp.values())) / span
                                  if both else 0.0)
    out["trial_hard_failure"] = float(any(p.hard_failure for p in curve))
    return out


def _known(name: str, value: float | None) -> dict[str, float]:
    """A numeric feature and its missing flag: unknown is 0 with the flag set, never a guess."""
    return {name: 0.0 if value is None else float(value), f"{name}_missing": float(value is None)}


def _card_features(card: CardFacts) -> dict[str, float]:
    out = {"method_grpo": float(card.method == "grpo")}
    out |= {f"family_{f}": float(card.family == f) for f in FAMILIES}
    out |= {"adapter_lora": float(card.adapter == "lora"), "adapter_missing": float(card.adapter is None)}
    out |= _known("log10_lr", None if card.learning_rate is None else math.log10(card.learning_rate))
    out |= _known("log2_steps", None if card.nominal_steps is None else math.log2(card.nominal_steps))
    out |= _known("replay_share", card.replay_share)
    return out


def record_features(record: Record | None) -> dict[str, float]:
    record = record or {}
    grade = record.get("grade")
    out = _known("S", record.get("S")) | _known("A", record.get("A"))
    return out | {f"grade_{g}": float(grade == g) for g in GRADES} | {"grade_missing": float(grade is None)}


def features(run: PairedRun, record: Record | None = None, footing: Footing = "control") -> dict[str, float]:
    """The go/no-go's named features of one run (the same names, in the same order, for every run),
    its short curve read on `footing`."""
    return probe_features(curve_on(run, footing), run, record)


def probe_features(curve: Sequence[CurvePoint], card: CardFacts, record: Record | None = None) -> dict[str, float]:
    """The same features from a short run's curve, its card's facts and its record alone: what a
    trial knows before its full run (bcit_predictive's verdict, policies.trial_rules)."""
    return _curve_features(curve) | _card_features(card) | record_features(record)


FEATURE_NAMES: tuple[str, ...] = tuple(features(PairedRun(
    card_id="X", family="sql", method="sft", seed=0, world_seed=0, curve=(),
    full={"fraction": 1.0, "target_pp": 0.0, "retention_pp": {}})))


def prior_features(card: CardFacts, record: Record | None = None) -> dict[str, float]:
    """The features known before any trial runs: the card's facts and the record's S, A and grade
    (the prior-only go/no-go's, GoNoGo.prior: whether the evidence suffices to skip the trial)."""
    return _card_features(card) | record_features(record)


PRIOR_FEATURE_NAMES: tuple[str, ...] = tuple(n for n in FEATURE_NAMES if n not in _curve_features(()))
"""FEATURE_NAMES without the curve's: the same names, in the same order, as prior_features gives."""


def record_key(world_seed: int, card_id: str) -> str:
    """Where a paired run's record is among `records`: a card's record (its S, A and grade, compiled
    against that world's base model) is one per world, so the runs of one card on two worlds each
    read their own."""
    return f"{card_id}@w{world_seed}"


def matrix(runs: Sequence[PairedRun], records: Mapping[str, Record] | None = None,
           footing: Footing = "control") -> np.ndarray:
    """Runs x FEATURE_NAMES, curves on `footing`; a run's record is looked up by record_key."""
    records = records or {}
    return np.array([[features(r, records.get(record_key(r.world_seed, r.card_id)), footing)[n] for n in FEATURE_NAMES]
                     for r in runs], dtype=float)
