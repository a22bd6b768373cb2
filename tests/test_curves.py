"""Paired runs (policies/curves.py) from executed retrospective cells."""

import json
from pathlib import Path

import pytest

from agent.experiments.retro_cells import IFEVAL_DROP_PP, MIN_EFFECT_PP
from experience_bank.errors import BadInput
from policies.curves import CONTROL_FOOTING_WARNING, curve_on, footing_of, paired_run, paired_runs, paired_runs_json
from support.footing_cells import cell as hand_cell

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


@pytest.mark.parametrize("text, why", [
    ("{", "cell.json is not an executed retrospective cell .not valid JSON"),
    ("[]", "cell.json is not an executed retrospective cell .a JSON list, not an object"),
    ("{}", "cell.json: cell '\\?' is not an executed retrospective cell .KeyError"),
    (json.dumps(CELLS[0] | {"short": [1, 2]}), "cell.json: cell 'S01' is not an executed retrospective cell"),
    (json.dumps(CELLS[0] | {"full": "x"}), "cell.json: cell 'S01' is not an executed retrospective cell"),
])
def test_a_damaged_seed_cell_is_refused_in_one_line_naming_its_file(tmp_path, text, why):
    d = tmp_path / "cells" / "S01" / "s0"
    d.mkdir(parents=True)
    (d / "cell.json").write_text(text)
    with pytest.raises(BadInput, match=why) as exc:
        paired_runs(tmp_path)
    assert str(d / "cell.json") in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("text, why", [("{", "ledger.json is not a retrospective ledger"),
                                       ('{"world_seed": "x"}', "names world seed 'x', not an integer"),
                                       ('{"world_seed": true}', "names world seed True, not an integer")])
def test_a_damaged_ledger_is_refused_in_one_line_naming_its_file(tmp_path, text, why):
    (tmp_path / "ledger.json").write_text(text)
    (tmp_path / "cells").mkdir()
    with pytest.raises(BadInput, match=why) as exc:
        paired_runs(tmp_path)
    assert str(tmp_path / "ledger.json") in str(exc.value)


def test_a_ledger_that_is_a_folder_is_refused_not_read_as_world_0(tmp_path):
    (tmp_path / "ledger.json").mkdir()
    (tmp_path / "cells").mkdir()
    with pytest.raises(BadInput, match="ledger.json is not a retrospective ledger"):
        paired_runs(tmp_path)


def test_a_retrospective_json_whose_cells_are_not_objects_is_refused_in_one_line(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"cells": [1, "x"]}))
    with pytest.raises(BadInput, match="cell '\\?' is not an executed retrospective cell"):
        paired_runs_json(path)


HAND = {"0.05": (1.0, -1.0, 0.5), "0.10": (2.0, 0.0, 1.0), "0.20": (3.0, 1.0, -0.5)}
"""Effects against the matched control (support/footing_cells.py: CONTROL, PARENT)."""


def _values(curve):
    return [(p.fraction, p.target_pp, p.retention_pp["ifeval.prompt_strict"], p.retention_pp["ifeval.inst_strict"])
            for p in curve]


def test_a_cell_with_parent_scores_reads_its_short_runs_on_the_loops_footing_too():
    run = paired_run(hand_cell("S01", HAND, (-1.0, -4.0, -3.0)), world_seed=0)
    # effect + control[f] - parent: at 5 % target 1 + 40 - 48, prompt -1 + 70 - 70, inst 0.5 + 80 - 80; ...
    assert _values(run.parent_curve) == [(0.05, -7.0, -1.0, 0.5), (0.10, -2.0, 2.0, 2.0), (0.20, 5.0, 6.0, -0.5)]
    assert _values(run.curve) == [(0.05, 1.0, -1.0, 0.5), (0.10, 2.0, 0.0, 1.0), (0.20, 3.0, 1.0, -0.5)]
    # The label stays against the matched control: the outcome definition.
    assert (run.full.target_pp, run.full.retention_pp) == (-1.0, {"ifeval.inst_strict": -3.0,
                                                                  "ifeval.prompt_strict": -4.0})
    assert curve_on(run, "parent") == run.parent_curve and curve_on(run, "control") == run.curve


def test_a_fit_reads_one_footing_for_every_run_and_says_when_it_is_not_the_loops():
    new = paired_run(hand_cell("S01", HAND, (0.0, 0.0, 0.0)), world_seed=0)
    old = paired_run(hand_cell("S02", HAND, (0.0, 0.0, 0.0), parent=False), world_seed=0)
    assert old.parent_curve is None
    assert footing_of([new, new]) == ("parent", None)
    footing, note = footing_of([new, old])
    assert footing == "control" and note.startswith(CONTROL_FOOTING_WARNING) and "1 of 2 paired runs" in note
    with pytest.raises(BadInput, match="1 of 2 paired runs have no parent scores"):
        footing_of([new, old], "parent")
    with pytest.raises(BadInput, match="S02 .* has no parent scores"):
        curve_on(old, "parent")
    # World v3's published cells predate the parent's scores: they are read on the control footing.
    assert footing_of([paired_run(c, world_seed=0) for c in CELLS])[0] == "control"


def test_a_cell_whose_parent_scores_are_broken_is_refused_in_one_line():
    broken = hand_cell("S01", HAND, (0.0, 0.0, 0.0))
    del broken["control"]["0.10"]
    with pytest.raises(BadInput, match="S01.* not an executed retrospective cell"):
        paired_run(broken, world_seed=0)
