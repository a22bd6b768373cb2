"""Paired runs (policies/curves.py) from executed retrospective cells."""

import json
from pathlib import Path

import pytest

from agent.experiments.retro_cells import IFEVAL_DROP_PP, MIN_EFFECT_PP
from experience_bank.errors import BadInput
from policies.curves import paired_run, paired_runs

CELLS = json.loads((Path(__file__).parents[1] / "docs/results/retrospective-default.json").read_text())["cells"]


def test_a_cells_paired_run_keeps_its_curve_and_class():
    runs = [paired_run(c, world_seed=0) for c in CELLS]
    assert len(runs) == 24
    for run, cell in zip(runs, CELLS):
        assert [p.fraction for p in run.curve] == [0.05, 0.10, 0.20]
        assert run.curve[-1].target_pp == cell["short"]["0.20"]["target"]
        assert run.full.retention_pp["ifeval.prompt_strict"] == cell["full"]["ifeval"]["prompt_strict"]
        assert run.outcome(band=MIN_EFFECT_PP, ifeval_drop_pp=IFEVAL_DROP_PP) == cell["outcome_class"]
    counts = {k: sum(r.outcome(band=MIN_EFFECT_PP, ifeval_drop_pp=IFEVAL_DROP_PP) == k for r in runs)
              for k in ("beneficial", "harmful", "neutral")}
    assert counts == {"beneficial": 1, "harmful": 20, "neutral": 3}  # docs/results/retrospective-default.md


def test_a_retrospective_directory_reads_its_seed_cells_and_world_seed(tmp_path):
    (tmp_path / "ledger.json").write_text(json.dumps({"world_seed": 2}))
    for seed in (0, 1):
        d = tmp_path / "cells" / "S01" / f"s{seed}"
        d.mkdir(parents=True)
        (d / "cell.json").write_text(json.dumps(CELLS[0] | {"seed": seed}))
    runs = paired_runs(tmp_path)
    assert [(r.card_id, r.seed, r.world_seed) for r in runs] == [("S01", 0, 2), ("S01", 1, 2)]


def test_a_cell_without_runs_is_refused_in_one_line(tmp_path):
    with pytest.raises(BadInput, match="not an executed retrospective cell"):
        paired_run({"id": "S01", "family": "finance", "method": "sft"}, world_seed=0)
    with pytest.raises(BadInput, match="no cells/ folder"):
        paired_runs(tmp_path)
