"""Where a seeded retrospective stands while it runs: each cell's finished seeds, their mean effects
and the class its own spread decides once every seed is in.

A retrospective keeps each finished (cell, seed) in its --results directory
(`cells/<id>/s<seed>/cell.json`) as it goes, but writes its table only at the end, with the
intervals pooled within each pool group. This reads the per-seed files through the
retrospective's own `seeded_cell` (the owner of a cell's means, intervals and class), so a partial
measurement can be committed with its state. Beside each cell's own-spread class it prints the class
the retrospective's `pool_classes` gives on the cells finished so far (all seeds in), pooled within
their pool group (family, method, relative learning rate: retro_cells.pool_group): a preview,
since the table's pool holds every cell of the group and its spread moves as cells finish. The
preview needs the cards: the measurement's world in $AGENT_CACHE (AGENT_WORLD_NUMERICS as it was
built) and its catalogue this code's (the ledger's catalogue_sha256).

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

from experience_bank.errors import BadInput  # noqa: E402


def per_seed(results: Path) -> dict[str, list[dict[str, Any]]]:
    """Cell id -> its finished seeds' cells, in seed order, in the catalogue's card order."""
    from agent.world.catalogue import card_ids

    found: dict[str, list[dict[str, Any]]] = {}
    for cid in card_ids():
        files = sorted((results / "cells" / cid).glob("s*/cell.json"), key=lambda p: int(p.parent.name[1:]))
        if files:
            found[cid] = [json.loads(f.read_text(encoding="utf-8")) for f in files]
    return found


def table_cards(results: Path) -> list[Any] | None:
    """The catalogue's cards bound to the measurement's world, when that world is cached here
    ($AGENT_CACHE, built with the numerics it was measured with) and the ledger names this code's
    catalogue; None otherwise (then no pooled preview: a cell's pool group is its card's recipe)."""
    from bench.retro_noise import table_world
    from agent.world.catalogue import catalogue, catalogue_sha256

    ledger = results / "ledger.json"
    if not ledger.is_file() or json.loads(ledger.read_text(encoding="utf-8")).get("catalogue_sha256") != catalogue_sha256():
        return None
    try:
        return list(catalogue(table_world(results)))
    except BadInput:
        return None


def rows(results: Path, seeds: int, cards: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """One row per cell with at least one finished seed; `class` only where all `seeds` are in;
    `pooled`: the class pool_classes gives on the complete cells when the table's `cards` are known."""
    from agent.experiments.retro_cells import card_pool_group, pool_classes
    from agent.experiments.retrospective import seeded_cell

    out = []
    found = per_seed(results)
    seeded = {cid: seeded_cell(cells) for cid, cells in found.items()}
    pooled: dict[str, str] = {}
    if cards is not None:
        groups = {c.id: card_pool_group(c) for c in cards}
        complete = [seeded[cid] | {"pool_group": groups[cid]} for cid, cells in found.items() if len(cells) >= seeds]
        pooled = {c["id"]: c["outcome_class"] for c in pool_classes(complete)}
    for cid, cells in found.items():
        cell = seeded[cid]
        ci = (cell["ci95"] or {}).get("full") or {}
        out.append({"id": cid, "family": cell["family"], "method": cell["method"], "seeds": len(cells),
                    "target": cell["full"]["target"], "target_ci": ci.get("target"),
                    "ifeval_p": cell["full"]["ifeval"]["prompt_strict"], "ifeval_ci": ci.get("prompt_strict"),
                    "per_seed": [c["outcome_class"] for c in cells],
                    "class": cell["outcome_class"] if len(cells) >= seeds else None,
                    "pooled": pooled.get(cid)})
    return out


def _ci(ci: Sequence[float] | None) -> str:
    return "" if not ci else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]"


def table(found: list[dict[str, Any]]) -> str:
    head = ("| cell | family | method | seeds | full target pp vs control (95 % CI) | IFEval prompt pp (95 % CI) "
            "| per-seed classes | class, own spread | class, pooled so far |\n|---|---|---|---|---|---|---|---|---|\n")
    return head + "".join(
        f"| {r['id']} | {r['family']} | {r['method']} | {r['seeds']} | {r['target']:+.2f}{_ci(r['target_ci'])} "
        f"| {r['ifeval_p']:+.2f}{_ci(r['ifeval_ci'])} | {' '.join(c[:3] for c in r['per_seed'])} "
        f"| {r['class'] or 'not all seeds'} | {r['pooled'] or '-'} |\n" for r in found)


def machines(results: Path) -> dict[str, int]:
    """`cpu numerics` of the machine that trained each finished seed (its machine.json) -> seeds;
    seeds published before machine.json was kept count as "not recorded"."""
    kinds = Counter()
    for cell in results.glob("cells/*/s*/cell.json"):
        path = cell.parent / "machine.json"
        m = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        kinds[f"{m['cpu']} {m['numerics']}" if m else "not recorded"] += 1
    return dict(sorted(kinds.items()))


def counts(found: list[dict[str, Any]], key: str = "class") -> dict[str, int]:
    return dict(Counter(r[key] for r in found if r[key]))


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
        cards = table_cards(results)
        found = rows(results, args.seeds, cards)
        if cards is None:
            print(f"(no pooled preview for {results}: its world is not in $AGENT_CACHE, with the numerics it was "
                  "built with, or its catalogue is not this code's)\n")
        print(f"## {results}: {sum(r['seeds'] for r in found)} cell seeds finished; classes {counts(found)} "
              f"(own spread), {counts(found, 'pooled')} (pooled so far)\n")
        print(table(found))
        print(f"seeds by the machine that trained them (kernel level, numerics fingerprint): {machines(results)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
