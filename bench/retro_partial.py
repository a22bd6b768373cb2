"""Where a seeded retrospective stands while it runs: each cell's finished seeds, their mean effects
and the class its own spread decides once every seed is in.

A retrospective keeps each finished (cell, seed) in its --results directory
(`cells/<id>/s<seed>/cell.json`) as it goes, but writes its table only at the end, with the
intervals pooled within family and method. This reads the per-seed files through the
retrospective's own `seeded_cell` (the owner of a cell's means, intervals and class), so a partial
measurement can be committed with its state. The pooled class needs every cell of a family and
method; it is the retrospective's to write.

    PYTHONPATH=. python bench/retro_partial.py docs/results/retrospective-v6-w0 [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def per_seed(results: Path) -> dict[str, list[dict[str, Any]]]:
    """Cell id -> its finished seeds' cells, in seed order, in the catalogue's card order."""
    from agent.world.catalogue import card_ids

    found: dict[str, list[dict[str, Any]]] = {}
    for cid in card_ids():
        files = sorted((results / "cells" / cid).glob("s*/cell.json"), key=lambda p: int(p.parent.name[1:]))
        if files:
            found[cid] = [json.loads(f.read_text(encoding="utf-8")) for f in files]
    return found


def rows(results: Path, seeds: int) -> list[dict[str, Any]]:
    """One row per cell with at least one finished seed; `class` only where all `seeds` are in."""
    from agent.experiments.retrospective import seeded_cell

    out = []
    for cid, cells in per_seed(results).items():
        cell = seeded_cell(cells)
        ci = (cell["ci95"] or {}).get("full") or {}
        out.append({"id": cid, "family": cell["family"], "method": cell["method"], "seeds": len(cells),
                    "target": cell["full"]["target"], "target_ci": ci.get("target"),
                    "ifeval_p": cell["full"]["ifeval"]["prompt_strict"], "ifeval_ci": ci.get("prompt_strict"),
                    "per_seed": [c["outcome_class"] for c in cells],
                    "class": cell["outcome_class"] if len(cells) >= seeds else None})
    return out


def _ci(ci: Sequence[float] | None) -> str:
    return "" if not ci else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]"


def table(found: list[dict[str, Any]]) -> str:
    head = ("| cell | family | method | seeds | full target pp vs control (95 % CI) | IFEval prompt pp (95 % CI) "
            "| per-seed classes | class, own spread |\n|---|---|---|---|---|---|---|---|\n")
    return head + "".join(
        f"| {r['id']} | {r['family']} | {r['method']} | {r['seeds']} | {r['target']:+.2f}{_ci(r['target_ci'])} "
        f"| {r['ifeval_p']:+.2f}{_ci(r['ifeval_ci'])} | {' '.join(c[:3] for c in r['per_seed'])} "
        f"| {r['class'] or 'not all seeds'} |\n" for r in found)


def machines(results: Path) -> dict[str, int]:
    """`cpu numerics` of the machine that trained each finished seed (its machine.json) -> seeds;
    seeds published before machine.json was kept count as "not recorded"."""
    kinds = Counter()
    for cell in results.glob("cells/*/s*/cell.json"):
        path = cell.parent / "machine.json"
        m = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        kinds[f"{m['cpu']} {m['numerics']}" if m else "not recorded"] += 1
    return dict(sorted(kinds.items()))


def counts(found: list[dict[str, Any]]) -> dict[str, int]:
    return dict(Counter(r["class"] for r in found if r["class"]))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", type=Path, help="a retrospective's --results directory")
    p.add_argument("--seeds", type=int, default=3, help="seeds a cell needs before its class is read (default 3)")
    args = p.parse_args(argv)
    for results in args.results:
        if not (results / "cells").is_dir():
            print(f"{results} holds no finished cell seeds (cells/): give a retrospective's --results directory",
                  file=sys.stderr)
            return 2
        found = rows(results, args.seeds)
        print(f"## {results}: {sum(r['seeds'] for r in found)} cell seeds finished; classes {counts(found)}\n")
        print(table(found))
        print(f"seeds by the machine that trained them (kernel level, numerics fingerprint): {machines(results)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
