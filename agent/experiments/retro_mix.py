"""Does a world's seeded retrospective have the outcome mix issue 26 asks for, and could it?

Pure over finished cells (retro_cells.pool_classes' output: each cell's pooled class and its
per-seed full-run effects), so the executed table, its tests and any other world read the same
verdict:

- `mix`: the classes per family, and whether the world meets item 3 ("beneficial, harmful and
  neutral cells in each family, at least MIN_PER_CLASS of each class overall"; uncertain cells
  count for nothing).
- `precision`: per pool group (retro_cells.pool_group: family, method, learning rate relative to
  the adapter kind's standard), the cells whose spread pool_classes pools, its pooled
  between-seed spread of each class metric and the seeds a cell would need before even a zero
  effect is decided: on the target, inside the neutral band (+-MIN_EFFECT_PP), and on IFEval,
  above the guard (-IFEVAL_DROP_PP). Where the seeds run now are fewer, no cell of the group can
  be classed neutral (or, for IFEval, retention-safe) however small its effect: the mix is then
  out of reach by measurement, not by what the updates do.
"""

from __future__ import annotations

from typing import Any

from policies import outcomes
from policies.stats import pooled_sd, seeds_to_resolve
from agent.experiments.retro_cells import CLASS_METRICS, IFEVAL, IFEVAL_DROP_PP, MIN_EFFECT_PP, full_values, pooled_groups

MIN_PER_CLASS = 4
"""Issue 26, item 3: at least four cells of each class overall."""
CLASSES = (*outcomes.OUTCOME_CLASSES, outcomes.UNCERTAIN)


def mix(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Classes per family and overall, and item 3's verdict with each shortfall named."""
    by_family: dict[str, dict[str, int]] = {}
    for c in cells:
        by_family.setdefault(c["family"], dict.fromkeys(CLASSES, 0))[c["outcome_class"]] += 1
    overall = {k: sum(f[k] for f in by_family.values()) for k in CLASSES}
    short = [f"{k} {overall[k]} < {MIN_PER_CLASS} overall" for k in outcomes.OUTCOME_CLASSES
             if overall[k] < MIN_PER_CLASS]
    short += [f"{fam} has no {k} cell" for fam, f in sorted(by_family.items()) for k in outcomes.OUTCOME_CLASSES
              if f[k] == 0]
    return {"by_family": dict(sorted(by_family.items())), "overall": overall, "met": not short, "shortfalls": short}


def precision(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per pool group of seeded cells (retro_cells.pooled_groups: family, method, learning rate
    relative to the standard): its pooled spread per class metric (pp) and the seeds per cell at
    which a zero effect is decided (None: more than 50)."""
    out = []
    for (family, method, rate), idx in sorted(pooled_groups(cells).items()):
        members = [cells[i] for i in idx]
        spread = {m: pooled_sd([full_values(c, m) for c in members]) for m in CLASS_METRICS}
        sd_target, df = spread["target"]
        sd_ifeval = max(spread[m][0] for m in IFEVAL)
        out.append({"family": family, "method": method, "relative_rate": rate,
                    "cells": len(members), "ids": [c["id"] for c in members],
                    "seeds": min(len(c["by_seed"]) for c in members), "df": df,
                    "sd_target_pp": sd_target, "sd_ifeval_pp": sd_ifeval,
                    "seeds_to_decide_neutral": seeds_to_resolve(sd_target, len(members), MIN_EFFECT_PP),
                    "seeds_to_decide_retention": seeds_to_resolve(sd_ifeval, len(members), IFEVAL_DROP_PP)})
    return out


def second_stage(cells: list[dict[str, Any]], most: int) -> dict[str, int]:
    """Stein's two-stage design on the first stage's cells (each at the table's K seeds): the seeds
    per cell of every pool group whose first-stage spread says that more of them, at most `most`,
    would decide a zero effect both inside the neutral band and above the IFEval guard
    (`precision`); cell id -> its seeds. A group already deciding at K, or needing more than `most`,
    keeps K (absent). It reads spreads only, never a cell's effect, so which cells get more seeds
    does not depend on what they did."""
    plan: dict[str, int] = {}
    for group in precision(cells):
        need = (group["seeds_to_decide_neutral"], group["seeds_to_decide_retention"])
        if None in need:
            continue
        if group["seeds"] < max(need) <= most:
            plan |= dict.fromkeys(group["ids"], max(need))
    return plan
