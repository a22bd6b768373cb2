"""bench/retro_partial.py: a running retrospective's state, read through the retrospective's own seeded_cell."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

from bench.retro_partial import counts, machines, main, rows, table, table_cards

V5_W1 = Path(__file__).resolve().parents[1] / "docs" / "results" / "retrospective-v5-w1"


def test_a_finished_tables_own_spread_classes_are_those_the_retrospective_wrote():
    found = rows(V5_W1, 3)
    written = {c["id"]: c["outcome_class_per_cell"] for c in map(json.loads, (V5_W1 / "cells.jsonl").open())}
    assert len(found) == 24 and {r["id"]: r["class"] for r in found} == written
    assert counts(found) == {"beneficial": 4, "harmful": 1, "neutral": 2, "uncertain": 17}
    assert all(r["class"] is None for r in rows(V5_W1, 4))  # a class only once every seed is in


def test_a_partial_cell_is_listed_with_its_seeds_and_no_class(tmp_path, capsys):
    for s in ("s0", "s1"):
        shutil.copytree(V5_W1 / "cells" / "G01" / s, tmp_path / "cells" / "G01" / s)
    [row] = rows(tmp_path, 3)
    assert row["seeds"] == 2 and row["class"] is None and row["per_seed"] == ["neutral", "neutral"]
    assert "| G01 | finance | grpo | 2 |" in table([row]) and "not all seeds" in table([row])
    (tmp_path / "cells" / "G01" / "s1" / "machine.json").write_text(
        json.dumps({"cpu": "AVX2", "machine": "x86_64", "numerics": "1df3c16fb559fa14"}))
    assert machines(tmp_path) == {"AVX2 1df3c16fb559fa14": 1, "not recorded": 1}
    assert main([str(tmp_path)]) == 0 and "2 cell seeds finished" in capsys.readouterr().out
    assert main([str(tmp_path / "nothing")]) == 2



V6P_W1 = V5_W1.parent / "retrospective-v6p-w1"


def _card(cid: str, lr: float):
    return SimpleNamespace(id=cid, family="finance", method="grpo", adapter=SimpleNamespace(kind="full"),
                           hparams=SimpleNamespace(learning_rate=lr))


def test_the_pooled_preview_pools_a_card_only_with_its_own_rate(tmp_path):
    # v6p world 1: G01 (finance GRPO, full weights, rate 1e-5) spreads 0.08 pp on the target, G03 (same
    # family and method at 5e-4) 3.0 pp. Pooled by recipe, G01 keeps its neutral class; pooled with G03
    # as one group (the v4/v5 rule), G01's interval would straddle the band.
    for cid in ("G01", "G03"):
        shutil.copytree(V6P_W1 / "cells" / cid, tmp_path / "cells" / cid)
    found = {r["id"]: r for r in rows(tmp_path, 3, [_card("G01", 1e-5), _card("G03", 5e-4)])}
    assert found["G01"]["class"] == "neutral" and found["G01"]["pooled"] == "neutral"
    assert found["G03"]["pooled"] == found["G03"]["class"] == "uncertain"
    one = {r["id"]: r for r in rows(tmp_path, 3, [_card("G01", 1e-5), _card("G03", 1e-5)])}
    assert one["G01"]["pooled"] == "uncertain" and counts(list(one.values()), "pooled") == {"uncertain": 2}
    assert {r["pooled"] for r in rows(tmp_path, 3)} == {None}  # no cards, no preview


def test_no_preview_without_this_catalogue_or_the_world(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "empty-cache"))
    assert table_cards(V5_W1) is None  # v5's catalogue is not this code's
    assert table_cards(V6P_W1) is None  # this catalogue, but its world is not in the cache
    assert table_cards(tmp_path) is None  # no ledger
