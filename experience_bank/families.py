"""The capability families and their primary metrics: the one list every package reads.

A card's family decides which target suite it is judged on and which metric of that suite
counts (the gate's U_prom, the trial's delta, the seed bank's delta_src, compare's endpoint).
"""

from __future__ import annotations

from typing import get_args

from experience_bank.frozen import Family

FAMILIES: tuple[str, ...] = get_args(Family)
"""finance, sql, function (the order of every per-family table)."""

PRIMARY_METRIC: dict[str, str] = {"finance": "f1", "sql": "exec_acc", "function": "ast_acc"}
"""The metric of a family's suites that decides (TAT-QA F1, execution accuracy, AST match)."""


def target_metric(family: str) -> str:
    """`<family>/target.<metric>`, the key a card's gain is read under."""
    return f"{family}/target.{PRIMARY_METRIC[family]}"


def source_metric(family: str) -> str:
    """`<family>/source.<metric>`, the key source evidence is measured under."""
    return f"{family}/source.{PRIMARY_METRIC[family]}"


def family_targets() -> dict[str, str]:
    """Every family's target metric: what U_prom averages over (docs/GATE.md)."""
    return {f: target_metric(f) for f in FAMILIES}
