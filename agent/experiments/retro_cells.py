"""The executed retrospective's pure rules: a cell's direction and class, and the table's figures.

Pure over finished cells (no runs, no files): `agent/experiments/retrospective.py` runs the cells
and calls these, and tests check them on hand-made cells. Classes come from policies/outcomes.py,
the one definition, with this table's band and IFEval bound.
"""

from __future__ import annotations

import statistics
from typing import Any

from experience_bank.results import SHORT_FRACTIONS
from policies import outcomes
from policies.stats import clopper_pearson, pooled_mean_intervals, spearman
from agent.config import RunConfig
from agent.world import catalogue

FRACTIONS = SHORT_FRACTIONS
DEFAULTS = RunConfig()
"""The table's thresholds are the run config's defaults, read from their one owner."""
MIN_EFFECT_PP = DEFAULTS.gate_min_gain_pp
"""Smallest target change that counts as a direction."""
IFEVAL_DROP_PP = DEFAULTS.gate_ifeval_drop_pp
"""IFEval strict accuracies may not fall more than this (docs/AUTHORIZER.md §6)."""
IFEVAL = ("prompt_strict", "inst_strict")


# --- pure: classify and summarise ----------------------------------------------------------


def direction(delta: float) -> str:
    return {1: "up", 0: "flat", -1: "down"}[outcomes.direction(delta, MIN_EFFECT_PP)]


def outcome_class(target: float, ifeval: dict[str, float], hard_failure: bool = False) -> str:
    """policies.outcomes.outcome_class with this table's band and IFEval bound."""
    return outcomes.outcome_class(target, ifeval["prompt_strict"], ifeval["inst_strict"], band=MIN_EFFECT_PP,
                                  ifeval_drop_pp=IFEVAL_DROP_PP, hard_failure=hard_failure)


def interval_class(ci: dict[str, list[float]], hard_failure: bool = False) -> str:
    """policies.outcomes.outcome_class_interval with this table's band and IFEval bound;
    `ci`: the full run's (low, high) per metric (target, prompt_strict, inst_strict)."""
    return outcomes.outcome_class_interval(tuple(ci["target"]), tuple(ci["prompt_strict"]), tuple(ci["inst_strict"]),
                                           band=MIN_EFFECT_PP, ifeval_drop_pp=IFEVAL_DROP_PP,
                                           hard_failure=hard_failure)


CLASS_METRICS = ("target", *IFEVAL)


def full_values(cell: dict[str, Any], metric: str) -> list[float]:
    return [b["full_target"] if metric == "target" else b["full_ifeval"][metric] for b in cell["by_seed"]]


def standard_rate(method: str, adapter: str) -> float:
    """The catalogue's learning rate for a method and adapter kind (its constants, the owner; a LoRA
    rate is ten times the full-weight one, the usual ratio, so the two are the same step)."""
    return {("sft", "full"): catalogue.SFT_LR, ("sft", "lora"): catalogue.LORA_SFT_LR,
            ("grpo", "full"): catalogue.GRPO_LR, ("grpo", "lora"): catalogue.LORA_GRPO_LR}[(method, adapter)]


def pool_group(family: str, method: str, adapter: str, learning_rate: float) -> list[Any]:
    """The key of the cells whose between-seed spreads are pooled: one family and method, at one
    learning rate relative to its adapter kind's standard rate (standard_rate). Such cells share their
    matched controls and their step size's training noise; a card at another relative rate does not:
    on every v5 world the aggressive-rate cards G03 and S12 spread 2 to 19 times as much on the target
    as their family's cards at the standard rate, so pooling them with those widened the neighbours'
    intervals and narrowed their own, while the LoRA cards at their standard rate spread as the full-
    weight ones (docs/results/worlds-v6.md, "The pooling group")."""
    return [family, method, round(learning_rate / standard_rate(method, adapter), 6)]


def card_pool_group(card: Any) -> list[Any]:
    """pool_group of a candidate card (experience_bank.records.CandidateCard)."""
    return pool_group(card.family, card.method, card.adapter.kind, card.hparams.learning_rate)


def pooled_groups(cells: list[dict[str, Any]]) -> dict[tuple[Any, ...], list[int]]:
    """Each cell's `pool_group` (set where the table is written) -> the indices of its cells with
    more than one seed, in order."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, c in enumerate(cells):
        if len(c.get("by_seed") or ()) > 1:
            groups.setdefault(tuple(c["pool_group"]), []).append(i)
    return groups


def pool_classes(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The seeded cells with their classes decided on pooled intervals (policies.stats.pooled_mean_intervals):
    per metric, the between-seed spread is pooled over the cells of one pool_group, which share
    their controls and their noise, so that three seeds give intervals on the group's degrees of
    freedom rather than two. Each cell keeps its own-spread class as `outcome_class_per_cell` and its
    pooled intervals as `ci95_pooled`; a cell of one seed, or a group with no spread to pool, is as it was."""
    groups = pooled_groups(cells)
    out = list(cells)
    for members in groups.values():
        ci = {m: pooled_mean_intervals([full_values(cells[i], m) for i in members]) for m in CLASS_METRICS}
        for j, i in enumerate(members):
            pooled = {m: list(ci[m][j][1]) for m in CLASS_METRICS}
            c = cells[i]
            out[i] = c | {"ci95_pooled": pooled, "outcome_class_per_cell": c["outcome_class"],
                          "outcome_class": interval_class(pooled, bool(c["full"]["sanity_failures"]))}
    return out


def _agree(a: float, b: float) -> bool:
    return direction(a) == direction(b)


def summarise_cells(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Retrospective and ShortFull diagnostics over finished cells (fractions in [0, 1]), on their
    seed means and classes; the uncertain cells are counted apart and left out of every figure."""
    uncertain = [c["id"] for c in cells if c["outcome_class"] == outcomes.UNCERTAIN]
    out = _figures([c for c in cells if c["outcome_class"] != outcomes.UNCERTAIN])
    out["n_cells"] = len(cells)
    out["outcome_classes"][outcomes.UNCERTAIN] = len(uncertain)
    out["shortfull"]["left_out_uncertain"] = len(uncertain)
    per_cell = [c["outcome_class_per_cell"] for c in cells if "outcome_class_per_cell" in c]
    if per_cell:  # the classes the cells' own spreads would decide, beside the pooled ones
        out["outcome_classes_per_cell"] = {k: per_cell.count(k) for k in sorted(set(per_cell))}
    return out | {"n_seeds": max((len(c.get("seeds", [c.get("seed")])) for c in cells), default=0),
                  "n_decided": len(cells) - len(uncertain), "uncertain": uncertain,
                  "left_out_uncertain": len(uncertain)}


def _figures(cells: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(cells)
    full = [c["full"]["target"] for c in cells]
    by_family: dict[str, dict[str, int]] = {}
    for c in cells:
        by_family.setdefault(c["family"], {"up": 0, "flat": 0, "down": 0})[direction(c["full"]["target"])] += 1
    improving = [c for c in cells if direction(c["full"]["target"]) == "up"]
    safe = [c for c in improving if all(d >= -IFEVAL_DROP_PP for d in c["full"]["ifeval"].values())]
    out: dict[str, Any] = {
        "n_cells": n,
        "direction_counts": {k: sum(direction(x) == d for x in full) for k, d in
                             (("positive", "up"), ("neutral", "flat"), ("negative", "down"))},
        "by_family": by_family, "retention_safe_among_improving": f"{len(safe)}/{len(improving)}",
        "outcome_classes": {k: sum(c["outcome_class"] == k for c in cells) for k in ("beneficial", "harmful", "neutral")},
    }
    sens = {}
    for f in FRACTIONS:
        k = sum(_agree(c["short"][f"{f:.2f}"]["target"], c["full"]["target"]) for c in cells)
        sens[f"{f:.2f}"] = {"agree": k, "n": n, "agreement": k / n if n else None, "ci95": list(clopper_pearson(k, n))}
    trial = [c["short"]["0.20"]["target"] for c in cells]
    out["shortfull"] = {
        "budget_sensitivity": sens, "agreement": sens["0.20"]["agreement"], "agreement_ci": sens["0.20"]["ci95"],
        "spearman": _rho(trial, full),
        "spearman_sft": _rho(*_cols(cells, "sft")), "spearman_grpo": _rho(*_cols(cells, "grpo")),
        "sign_reversals": [c["id"] for c in cells if direction(c["short"]["0.20"]["target"]) != "flat"
                           and direction(c["full"]["target"]) != "flat"
                           and direction(c["short"]["0.20"]["target"]) != direction(c["full"]["target"])],
        "confusion": _confusion(cells),
    }
    cm = out["shortfull"]["confusion"]
    out["shortfull"]["pass_precision"] = cm["tp"] / (cm["tp"] + cm["fp"]) if cm["tp"] + cm["fp"] else None
    out["shortfull"]["pass_recall"] = cm["tp"] / (cm["tp"] + cm["fn"]) if cm["tp"] + cm["fn"] else None
    ratios = [c["short"]["0.20"]["wall_s"] / c["full"]["wall_s"] for c in cells if c["full"]["wall_s"] > 0]
    out["shortfull"]["median_trial_cost_ratio"] = statistics.median(ratios) if ratios else None
    return out


def _cols(cells: list[dict], method: str) -> tuple[list[float], list[float]]:
    sub = [c for c in cells if c["method"] == method]
    return [c["short"]["0.20"]["target"] for c in sub], [c["full"]["target"] for c in sub]


def _rho(x: list[float], y: list[float]) -> float | None:
    """Spearman, or None where it is undefined (fewer than 3 cells, or a constant column)."""
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    return spearman(x, y)


def _confusion(cells: list[dict]) -> dict[str, int]:
    """The 20% trial's Pass as a detector of a beneficial full run."""
    cm = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for c in cells:
        passed, good = c["trial_verdict"] == "pass", c["outcome_class"] == "beneficial"
        cm[("t" if passed == good else "f") + ("p" if passed else "n")] += 1
    return cm


# --- one cell ----------------------------------------------------------------------------------
