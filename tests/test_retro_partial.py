"""bench/retro_partial.py: a running retrospective's state, read through the retrospective's own seeded_cell."""

import json
import shutil
from pathlib import Path

from bench.retro_partial import counts, machines, main, rows, table

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
