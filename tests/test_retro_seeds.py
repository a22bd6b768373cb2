"""bench/retro_seeds.py: projected classes at K seeds on hand-made cells, worked out by hand."""

import pytest

from bench.retro_seeds import check, classes, heterogeneous, project
from experience_bank.errors import BadInput


def _cell(cid, family, target, ifeval=(0.1, 0.0, -0.1), cls="uncertain"):
    return {"id": cid, "family": family, "method": "sft", "outcome_class": cls, "full": {"sanity_failures": []},
            "by_seed": [{"full_target": t, "full_ifeval": {"prompt_strict": p, "inst_strict": p}}
                        for t, p in zip(target, ifeval)]}


# A: mean 2, s 0.2; B: mean 0, s 4 (var 16), both finance/sft; C: mean 0, s 0.5, alone in sql/sft.
CELLS = [_cell("A", "finance", (2.2, 2.0, 1.8)), _cell("B", "finance", (4.0, 0.0, -4.0)),
         _cell("C", "sql", (0.5, 0.0, -0.5))]


def test_own_spread_decides_the_steady_cell_that_its_group_hides():
    # own, K=3: A's half width t(2) 0.2 / sqrt 3 = 4.303 * 0.1155 = 0.497 -> [1.50, 2.50] > 1: beneficial
    # group: s^2 = (0.04 + 16) / 2 = 8.02, df 4, t 2.776 -> half 4.54: A uncertain
    assert classes(CELLS, 3, "own", 0.95)[0] == "beneficial"
    assert classes(CELLS, 3, "group", 0.95)[0] == "uncertain"


def test_equivalence_test_decides_neutral_where_the_95_interval_does_not():
    # C own, K=3: s / sqrt 3 = 0.2887; 95 %: 4.303 x = 1.242 (not inside +-1); 90 %: 2.920 x = 0.843 (inside)
    assert classes(CELLS, 3, "own", 0.95)[2] == "uncertain"
    assert classes(CELLS, 3, "own", 0.90)[2] == "neutral"
    # at K=8 the 95 % interval alone suffices: t(7) 2.365 * 0.5 / sqrt 8 = 0.418
    assert classes(CELLS, 8, "own", 0.95)[2] == "neutral"


def test_project_reads_the_mix_with_its_shortfalls():
    verdict = project(CELLS, 3, "own", 0.90)
    assert verdict["overall"] == {"beneficial": 1, "harmful": 0, "neutral": 1, "uncertain": 1}
    assert not verdict["met"] and "harmful 0 < 4 overall" in verdict["shortfalls"]


def test_the_projection_must_give_back_the_tables_classes_at_its_own_seeds():
    check([_cell("A", "finance", (2.2, 2.0, 1.8), cls="uncertain"), _cell("B", "finance", (4.0, 0.0, -4.0))])
    with pytest.raises(BadInput, match="A uncertain != beneficial"):
        check([_cell("A", "finance", (2.2, 2.0, 1.8), cls="uncertain")])  # alone, its group is its own spread
    with pytest.raises(BadInput, match="fewer than two seeds"):
        classes([_cell("D", "finance", (1.0,), (0.0,))], 3, "own", 0.95)
    with pytest.raises(BadInput, match="at least two seeds"):
        classes(CELLS, 1, "own", 0.95)


def test_unequal_spreads_are_named_by_group_and_metric():
    steady = [_cell(c, "finance", (2.1, 2.0, 1.9)) for c in "ABCDE"]
    wild = _cell("W", "finance", (9.0, 0.0, -9.0))
    assert heterogeneous(steady) == []
    # deviations from the median: steady (0.1, 0, 0.1), wild (9, 0, 9); Brown-Forsythe on 6 cells x 3 seeds:
    # F = 3.91, p = 0.025 on the target (IFEval is the same on every cell)
    assert heterogeneous([*steady, wild]) == ["finance/sft/target"]
    # on 4 cells x 3 seeds the same wild cell gives p = 0.055: at three seeds the test has little power
    assert heterogeneous([*steady[:3], wild]) == []
