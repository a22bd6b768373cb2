"""Could more training seeds, or another interval rule, give a measured world issue 26's outcome mix?

    PYTHONPATH=. python bench/retro_seeds.py docs/results/retrospective-v5-w0 docs/results/retrospective-v5-w1 \\
        docs/results/retrospective-v5-w2 [--seeds 3 5 8 12]

A projection from committed seeded retrospectives (their `cells.jsonl`): every cell's seed mean and
between-seed spread of each class metric (target, IFEval prompt and instruction strict) is held as
measured, and the interval it would have at K seeds is mean +- t(df) s / sqrt(K), under two rules:

- `group`: the class rule of the v4 and v5 tables, whose cells.jsonl this reads: s pooled over the
  cells of one (family, method), df = cells (K - 1). From 5 Dec 2026 the table pools within
  retro_cells.pool_group (family, method, adapter kind, learning rate) instead; a v5 cell does not
  record its recipe, so this projection keeps the rule its published figures were made with;
- `own`: each cell's own spread, df = K - 1 (what pooling over variance-homogeneous cells only, e.g.
  after a Levene test, tends to where one unstable cell widens its group).

Each rule is read twice: with the table's 95 % intervals for every class, and with "neutral" decided
by two one-sided tests at 5 % instead (the 90 % interval of the target inside the band and IFEval's
above the guard: the equivalence-test convention), the other classes still on 95 %. Classes come
from their one owner (policies.outcomes.outcome_class_interval, with the table's band and guard) and
the verdict from retro_mix.mix, as the executed table reads them.

It assumes the means and spreads measured at three seeds hold at K: it says what measurement
could reach on a world whose updates do what they did, not what another K would find. A class a
projection cannot reach at any K is out of reach of the measurement; only another world can give it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experience_bank.errors import BadInput  # noqa: E402
from policies import outcomes  # noqa: E402
from agent.experiments import retro_mix  # noqa: E402
from agent.experiments.retro_cells import CLASS_METRICS, full_values, interval_class  # noqa: E402
from policies.stats import pooled_sd  # noqa: E402

RULES = ("group", "own")
NEUTRAL = {"95 %": 0.95, "TOST 5 %": 0.90}
"""How "neutral" is read: on the 95 % interval as every class, or on the 90 % one (two one-sided tests at 5 %)."""


def moments(cells: Sequence[dict[str, Any]], rule: str) -> list[dict[str, tuple[float, float, int]]]:
    """Per cell and class metric: (mean, spread s, cells sharing s) under `rule`; the group's s is
    policies.stats.pooled_sd's, as the v4/v5 tables' class rule pooled it."""
    if rule not in RULES:
        raise BadInput(f"unknown pooling rule {rule!r}: use one of {', '.join(RULES)}")
    groups: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(cells):
        if len(c.get("by_seed") or ()) < 2:
            raise BadInput(f"cell {c.get('id')} has fewer than two seeds: a projection needs a measured spread")
        groups.setdefault((c["family"], c["method"]), []).append(i)
    out: list[dict[str, tuple[float, float, int]]] = [{} for _ in cells]
    for members in groups.values():
        for m in CLASS_METRICS:
            values = {i: full_values(cells[i], m) for i in members}
            group = pooled_sd(list(values.values()))[0]
            for i, x in values.items():
                s, n = (group, len(members)) if rule == "group" else (statistics.stdev(x), 1)
                out[i][m] = (statistics.fmean(x), s, n)
    return out


def interval(mean: float, s: float, cells: int, seeds: int, confidence: float) -> list[float]:
    """Student-t interval of a cell's mean at `seeds` seeds, its spread on cells (seeds - 1) df."""
    half = float(stats.t.ppf(0.5 + confidence / 2, cells * (seeds - 1))) * s / math.sqrt(seeds)
    return [mean - half, mean + half]


def projected_class(m: dict[str, tuple[float, float, int]], seeds: int, neutral_confidence: float,
                    hard_failure: bool = False) -> str:
    """The cell's class at `seeds` seeds: the table's rule on 95 % intervals; a cell that is then
    uncertain is neutral when its `neutral_confidence` intervals say neutral (equivalence test)."""
    at = {conf: {k: interval(mean, s, n, seeds, conf) for k, (mean, s, n) in m.items()}
          for conf in {0.95, neutral_confidence}}
    cls = interval_class(at[0.95], hard_failure)
    if cls == outcomes.UNCERTAIN and interval_class(at[neutral_confidence], hard_failure) == "neutral":
        return "neutral"
    return cls


def classes(cells: Sequence[dict[str, Any]], seeds: int, rule: str, neutral_confidence: float) -> list[str]:
    """Every cell's projected class at `seeds` seeds."""
    if seeds < 2:
        raise BadInput(f"a projection needs at least two seeds per cell, got {seeds}")
    return [projected_class(m, seeds, neutral_confidence, bool(c["full"]["sanity_failures"]))
            for c, m in zip(cells, moments(cells, rule))]


def project(cells: Sequence[dict[str, Any]], seeds: int, rule: str, neutral_confidence: float) -> dict[str, Any]:
    """retro_mix.mix of the projected classes (every cell keeps its family)."""
    return retro_mix.mix([{"family": c["family"], "outcome_class": k}
                          for c, k in zip(cells, classes(cells, seeds, rule, neutral_confidence))])


def check(cells: Sequence[dict[str, Any]]) -> None:
    """At the seeds measured, the table's own rule (group spread, 95 %) must give back every committed
    class: otherwise the projection is not of the rule the table ran, and the script stops."""
    seeds = {len(c["by_seed"]) for c in cells}
    if len(seeds) != 1:
        raise BadInput(f"cells measured at {sorted(seeds)} seeds: project a table of one seed count")
    mine = classes(cells, seeds.pop(), "group", 0.95)
    wrong = [f"{c['id']} {c['outcome_class']} != {k}" for c, k in zip(cells, mine) if c["outcome_class"] != k]
    if wrong:
        raise BadInput(f"the projection at the measured seeds disagrees with the table: {', '.join(wrong)}")


def heterogeneous(cells: Sequence[dict[str, Any]], alpha: float = 0.05) -> list[str]:
    """The (family, method, metric) groups whose spreads differ by a Brown-Forsythe test (scipy's
    Levene, median-centred) at `alpha`: where pooling only homogeneous cells would split a group."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["family"], c["method"]), []).append(c)
    return [f"{fam}/{method}/{m}" for (fam, method), members in sorted(groups.items()) if len(members) > 1
            for m in CLASS_METRICS
            if float(stats.levene(*[full_values(c, m) for c in members], center="median").pvalue) < alpha]


def load(results: Path) -> list[dict[str, Any]]:
    path = results / "cells.jsonl"
    if not path.is_file():
        raise BadInput(f"{path} not found: pass a committed seeded retrospective (agent retrospective --results)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _row(name: str, seeds: int, rule: str, neutral: str, verdict: dict[str, Any]) -> str:
    o = verdict["overall"]
    fams = "; ".join(f"{fam} {f['beneficial']}/{f['harmful']}/{f['neutral']}" for fam, f in verdict["by_family"].items())
    return (f"| {name} | {seeds} | {rule} | {neutral} | {o['beneficial']} / {o['harmful']} / {o['neutral']} / "
            f"{o[outcomes.UNCERTAIN]} | {fams} | {'met' if verdict['met'] else 'not met'} |")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", type=Path, help="committed retrospective results directories")
    p.add_argument("--seeds", nargs="+", type=int, default=[3, 5, 8, 12])
    args = p.parse_args(argv)
    try:
        tables = [(r.name, load(r)) for r in args.results]
        for name, cells in tables:
            split = heterogeneous(cells)
            print(f"{name}: groups of unequal spread (Brown-Forsythe, 5 %): {', '.join(split) or 'none'}")
        print()
        print("| world | seeds | spread | neutral by | b / h / n / uncertain | per family b/h/n | item 3 |")
        print("|---|---|---|---|---|---|---|")
        for name, cells in tables:
            check(cells)
            for k in args.seeds:
                for rule in RULES:
                    for label, conf in NEUTRAL.items():
                        print(_row(name, k, rule, label, project(cells, k, rule, conf)))
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
