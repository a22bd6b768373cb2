"""How much of a retrospective cell's between-seed spread is evaluation noise, how much training seed?

    AGENT_CACHE=/work/cache/agent PYTHONPATH=. python bench/retro_noise.py \\
        $AGENT_CACHE/measure/retrospective-w0 $AGENT_CACHE/measure/retrospective-w1

A seeded retrospective (issue 26) runs every cell at K training seeds; a seed's full-run effect is
the intervention minus its trained matched control on the same 200 adoption items (target suite,
IFEval). pool_classes decides classes on the spread of those effects pooled per pool group
(retro_cells.pool_group; per (family, method) until 5 Dec 2026, which is how this decomposition
groups the v4 and v5 cells it was published for), and retro_mix.precision turns that spread into
the seeds a zero effect needs to be decided. Two
different things make the spread, and they have different cures:
- item-sampling noise of the evaluation: which items a model happens to get right; more items
  shrink it;
- training-seed variation: a seed's model really is better or worse; only more seeds shrink it.

Table "paired SE" (the decomposition asked for): per seed, the per-item differences intervention
minus control on the same items give the paired SE of that seed's effect, SE^2 = var(d) / n
(ddof 0, as policies.stats.paired_stats; IFEval inst_strict pools instructions over prompts, so
its items are the instructions). Per group: item var = mean SE^2, between = pooled between-seed
variance (policies.stats.pooled_sd), training var = max(0, between - item); at 1000 items the
spread would be sqrt(item * n / 1000 + training), and seeds_to_resolve says how many seeds a zero
effect then needs (margin MIN_EFFECT_PP on the target, IFEVAL_DROP_PP on IFEval).

Table "fixed items" (why the first can mislead): every seed of a cell is scored on the SAME items,
so an item's own difficulty for the pair (its mean difference over seeds) is shared by all seeds
and adds nothing to their spread, while the paired SE counts it. A two-way layout seeds x items,
d[s, i] = m + a[s] + b[i] + e[s, i], separates: seed x item noise var(e) / n (in the spread, shrinks
with items), common seed shift var(a) (in the spread, only seeds shrink it), and the shared item
offset var(b) / n, which is NOT in the spread at all yet moves every seed's effect alike: neither
pooled_sd nor more seeds see or shrink it, only more items do.

Controls are found by their one owner: agent.world.controls.control_key of the cell's card in the
table's world (read from the cache, never built), at the run dir's `controls/<key>/evals/
<family>-adoption/` (agent/experiments/retro_run.control_scores). Every seed's effect recomputed
from the items must equal its cell.json's, or the script stops.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experience_bank.errors import BadInput  # noqa: E402
from experience_bank.families import PRIMARY_METRIC  # noqa: E402
from experience_bank.results import ItemResult, SuiteResult  # noqa: E402
from policies.stats import pooled_sd, seeds_to_resolve  # noqa: E402

METRICS = ("target", "prompt_strict", "inst_strict")
MORE_ITEMS = 1000
CHECK_PP = 2e-3
"""cell.json rounds effects to 1e-4 pp (scores) and 1e-6 (effects): a recomputed effect must agree to this."""


# --- pure: per seed, per group ----------------------------------------------------------------


def paired_diffs(child: dict[str, float], control: dict[str, float]) -> np.ndarray:
    """Per-item differences child - control (pp), in item id order. An UNKNOWN item (nan) is
    refused, not dropped: the seeds x items split needs every seed of a cell on the same items."""
    if child.keys() != control.keys():
        raise BadInput("intervention and control were scored on different items: pair them on one split")
    d = np.array([child[k] - control[k] for k in sorted(child)])
    if np.isnan(d).any():
        raise BadInput(f"{int(np.isnan(d).sum())} items are UNKNOWN (scorer error): rescore them before splitting")
    return d


def paired_se2(diffs: np.ndarray) -> float:
    """Squared paired SE of the mean difference, var(d) / n with ddof 0 (policies.stats.paired_stats)."""
    return float(np.var(diffs) / len(diffs))


def two_way(d: np.ndarray) -> dict[str, float]:
    """Seeds x items differences of one cell -> its mean squares (two-way layout, one value per cell):
    seed, item and residual (seed x item), with their degrees of freedom."""
    k, n = d.shape
    row, col, grand = d.mean(axis=1), d.mean(axis=0), d.mean()
    resid = d - row[:, None] - col[None, :] + grand
    return {"ms_seed": n * float(np.sum((row - grand) ** 2)) / (k - 1), "df_seed": k - 1,
            "ms_item": k * float(np.sum((col - grand) ** 2)) / (n - 1), "df_item": n - 1,
            "ms_resid": float(np.sum(resid ** 2)) / ((k - 1) * (n - 1)), "df_resid": (k - 1) * (n - 1)}


def _pool_ms(parts: list[dict[str, float]], name: str) -> float:
    return sum(p[f"ms_{name}"] * p[f"df_{name}"] for p in parts) / sum(p[f"df_{name}"] for p in parts)


def decompose(cells: Sequence[np.ndarray], margin: float, n_items: int, more: int = MORE_ITEMS) -> dict[str, Any]:
    """One (family, method) group: each cell a seeds x items array of paired differences (pp) on the
    cell's items, read on `n_items` prompts (for inst_strict the items are its instructions). Variances
    in pp^2; `k_*`: seeds a zero effect needs inside +-margin (None: > 50)."""
    between_sd, df = pooled_sd([c.mean(axis=1) for c in cells])
    between = between_sd ** 2
    item = float(np.mean([paired_se2(row) for c in cells for row in c]))
    train = max(0.0, between - item)
    sd_more = math.sqrt(item * n_items / more + train)
    n = cells[0].shape[1]  # items of the metric (instructions for inst_strict)
    parts = [two_way(c) for c in cells]
    resid, ms_item = _pool_ms(parts, "resid"), _pool_ms(parts, "item")
    k = cells[0].shape[0]
    seed_item, common = resid / n, max(0.0, between - resid / n)
    sd_more_fixed = math.sqrt(common + seed_item * n_items / more)
    return {"cells": len(cells), "df": df, "between": between, "item": item, "train": train,
            "item_share": item / between if between else math.nan, "sd": between_sd, "sd_more": sd_more,
            "k": seeds_to_resolve(between_sd, len(cells), margin),
            "k_more": seeds_to_resolve(sd_more, len(cells), margin),
            "seed_item": seed_item, "common": common, "shared_item": max(0.0, (ms_item - resid) / k) / n,
            "sd_more_fixed": sd_more_fixed, "k_more_fixed": seeds_to_resolve(sd_more_fixed, len(cells), margin)}


# --- per-item values of one stored result -----------------------------------------------------


def item_values(result: SuiteResult, metric: str, family: str) -> dict[str, float]:
    """item id -> the item's own value (pp) of `metric` (nan: UNKNOWN). inst_strict pools
    instructions over prompts (evaluators/scoring/suites._ifeval_metrics), so its items are the
    instructions, `<item>#<k>`, read from the item's `strict_<k>`."""
    from evaluators.scoring.suites import item_metrics

    if metric == "inst_strict":
        return {f"{it.item_id}#{j}": _instruction(it, j) for it in result.items
                for j in range(int(it.detail.get("n_instructions") or 0))}
    key = PRIMARY_METRIC[family] if metric == "target" else metric
    values = {it.item_id: item_metrics(result.identity.suite, it)[key] for it in result.items}
    return {k: math.nan if v is None else float(v) for k, v in values.items()}


def _instruction(item: ItemResult, j: int) -> float:
    if item.correct is None:
        return math.nan
    return 100.0 * float(item.detail[f"strict_{j}"])


def _result(folder: Path) -> SuiteResult:
    found = sorted(folder.glob("*.adoption.result.json"))
    if len(found) != 1:
        raise BadInput(f"{folder}: expected one *.adoption.result.json, found {len(found)}; is the run finished?")
    return SuiteResult.model_validate_json(found[0].read_text(encoding="utf-8"))


def eval_values(evals: Path, family: str) -> dict[str, dict[str, float]]:
    """metric -> item values of one model's adoption evaluation folder (target/ and ifeval/)."""
    target, ife = _result(evals / "target"), _result(evals / "ifeval")
    return {m: item_values(target if m == "target" else ife, m, family) for m in METRICS}


# --- a run directory --------------------------------------------------------------------------


def table_world(run_dir: Path) -> Any:
    """The world a table ran on, from the cache ($AGENT_CACHE) and checked against its ledger."""
    from agent.world.embedded import cached_world

    if not (run_dir / "ledger.json").is_file():
        raise BadInput(f"{run_dir} has no ledger.json: pass a retrospective run directory (measure/retrospective-w0)")
    ledger = json.loads((run_dir / "ledger.json").read_text(encoding="utf-8"))
    size = ledger["world"].rsplit("-", 1)[0]
    world = cached_world(size, ledger["world_seed"])
    if world is None or f"{world.size}-{world.recipe_sha256[:12]}" != ledger["world"]:
        raise BadInput(f"{run_dir}: world {ledger['world']} is not in $AGENT_CACHE's worlds; set AGENT_CACHE "
                       "to the cache the table ran with")
    return world


def control_evals(run_dir: Path, world: Any, card_id: str, seed: int) -> Path:
    """Where the matched control of one cell seed keeps its full-run adoption evaluation."""
    from agent.world.catalogue import card_by_id
    from agent.world.controls import control_card, control_key

    card = card_by_id(world, card_id)
    key = control_key(control_card(card, world), world.model, seed, 1.0)
    return run_dir / "controls" / key / "evals" / f"{card.family}-adoption"


def _check(cell: dict[str, Any], metric: str, diffs: np.ndarray, where: Path) -> None:
    full = cell["full"]["target"] if metric == "target" else cell["full"]["ifeval"][metric]
    if abs(float(diffs.mean()) - full) > CHECK_PP:
        raise BadInput(f"{where}: {metric} effect from the items is {diffs.mean():.4f} pp, cell.json says "
                       f"{full:.4f}: the control matched is not the one the cell used")


def seed_diffs(run_dir: Path, world: Any, seed_dir: Path) -> tuple[dict[str, Any], dict[str, np.ndarray], list]:
    """One cell seed: its cell.json, per metric the paired per-item differences of its full run,
    and the item ids they are in the order of."""
    cell = json.loads((seed_dir / "cell.json").read_text(encoding="utf-8"))
    child = eval_values(seed_dir / "evals" / "f1.00-adoption", cell["family"])
    control = eval_values(control_evals(run_dir, world, cell["id"], cell["seed"]), cell["family"])
    out = {m: paired_diffs(child[m], control[m]) for m in METRICS}
    for m, d in out.items():
        _check(cell, m, d, seed_dir)
    return cell, out, [sorted(child[m]) for m in METRICS]


def group_arrays(run_dir: Path) -> dict[tuple[str, str], dict[str, list[np.ndarray]]]:
    """(family, method) -> metric -> one seeds x items array per cell of the table."""
    world = table_world(run_dir)
    groups: dict[tuple[str, str], dict[str, list[np.ndarray]]] = {}
    for cell_dir in sorted(p for p in (run_dir / "cells").iterdir() if p.is_dir()):
        seeds = [seed_diffs(run_dir, world, s) for s in sorted(cell_dir.glob("s*")) if (s / "cell.json").is_file()]
        if len(seeds) < 2:
            continue  # one seed has no between-seed spread
        if any(ids != seeds[0][2] for _, _, ids in seeds):
            raise BadInput(f"{cell_dir}: its seeds were scored on different items; evaluate every seed on one split")
        cell = seeds[0][0]
        g = groups.setdefault((cell["family"], cell["method"]), {m: [] for m in METRICS})
        for m in METRICS:
            g[m].append(np.stack([d[m] for _, d, _ in seeds]))
    return groups


# --- report -----------------------------------------------------------------------------------


def _margin(metric: str) -> float:
    from agent.experiments.retro_cells import IFEVAL_DROP_PP, MIN_EFFECT_PP

    return MIN_EFFECT_PP if metric == "target" else IFEVAL_DROP_PP


def _prompts(group: dict[str, list[np.ndarray]], metric: str) -> int:
    """Prompts the group was read on (the stored evaluations': 200 in v4, 1,000 at the outcome sizes)."""
    return group["target" if metric == "target" else "prompt_strict"][0].shape[1]


def _k(k: int | None) -> str:
    return "> 50" if k is None else str(k)


def markdown(title: str, groups: dict[tuple[str, str], dict[str, list[np.ndarray]]]) -> str:
    rows = [(f, me, m, decompose(groups[(f, me)][m], _margin(m), _prompts(groups[(f, me)], m)))
            for f, me in sorted(groups) for m in METRICS]
    a = [f"### {title}: paired SE (variances in pp^2, SDs in pp; K = seeds a zero effect needs)", "",
         "| family | method | metric | cells | df | between var | item var | training var | item share | SD now "
         f"| SD @{MORE_ITEMS} | K now | K @{MORE_ITEMS} |", "|" + "---|" * 13]
    a += [f"| {f} | {me} | {m} | {r['cells']} | {r['df']} | {r['between']:.2f} | {r['item']:.2f} | {r['train']:.2f} "
          f"| {100 * r['item_share']:.0f} % | {r['sd']:.2f} | {r['sd_more']:.2f} | {_k(r['k'])} | {_k(r['k_more'])} |"
          for f, me, m, r in rows]
    b = ["", f"### {title}: fixed items (two-way seeds x items; pp^2)", "",
         "| family | method | metric | seed x item var | common-seed var | shared item offset var "
         f"| SD @{MORE_ITEMS} | K @{MORE_ITEMS} |", "|" + "---|" * 8]
    b += [f"| {f} | {me} | {m} | {r['seed_item']:.2f} | {r['common']:.2f} | {r['shared_item']:.2f} "
          f"| {r['sd_more_fixed']:.2f} | {_k(r['k_more_fixed'])} |" for f, me, m, r in rows]
    return "\n".join(a + b) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dirs", nargs="+", type=Path, help="retrospective run directories (one per world)")
    args = ap.parse_args(argv)
    try:
        tables = [(d, group_arrays(d)) for d in args.run_dirs]
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    pooled: dict[tuple[str, str], dict[str, list[np.ndarray]]] = {}
    for d, groups in tables:
        print(markdown(d.name, groups))
        for g, by_metric in groups.items():
            for m, arrays in by_metric.items():
                pooled.setdefault(g, {x: [] for x in METRICS})[m].extend(arrays)
    if len(tables) > 1:
        print(markdown("pooled over " + ", ".join(d.name for d, _ in tables), pooled))
    return 0


if __name__ == "__main__":
    sys.exit(main())
