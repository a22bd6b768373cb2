"""Issue 26 item 3's verdict on a retrospective's classes, and the seeds its precision would need."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sps

from agent.experiments.retro_cells import pool_group
from agent.experiments.retro_mix import MIN_PER_CLASS, mix, precision, second_stage
from policies.stats import pooled_sd, seeds_to_resolve


def _cell(cid: str, family: str, cls: str, target=(0.0, 0.0, 0.0), ifeval=(0.0, 0.0, 0.0), method="sft",
          lr=1e-4) -> dict:
    by_seed = [{"seed": i, "full_target": t, "full_ifeval": {"prompt_strict": p, "inst_strict": 0.0}}
               for i, (t, p) in enumerate(zip(target, ifeval))]
    return {"id": cid, "family": family, "method": method, "outcome_class": cls, "by_seed": by_seed,
            "pool_group": pool_group(family, method, "full", lr)}


def test_mix_counts_classes_per_family_and_names_each_shortfall():
    cells = ([_cell(f"F{i}", "finance", c) for i, c in enumerate(["beneficial"] * 4 + ["harmful"] * 4 + ["neutral"] * 4)]
             + [_cell("Q1", "sql", "beneficial"), _cell("Q2", "sql", "uncertain"), _cell("Q3", "sql", "harmful")])
    m = mix(cells)
    assert m["by_family"]["sql"] == {"beneficial": 1, "harmful": 1, "neutral": 0, "uncertain": 1}
    assert m["overall"] == {"beneficial": 5, "harmful": 5, "neutral": 4, "uncertain": 1}
    assert (m["met"], m["shortfalls"]) == (False, ["sql has no neutral cell"])
    m = mix(cells[:12] + [_cell("Q4", "sql", "neutral"), *cells[12:]])
    assert m["met"] and m["shortfalls"] == []
    few = mix([_cell("F0", "finance", "beneficial"), _cell("F1", "finance", "harmful"), _cell("F2", "finance", "neutral")])
    assert few["shortfalls"] == [f"{k} 1 < {MIN_PER_CLASS} overall" for k in ("beneficial", "harmful", "neutral")]


def test_pooled_sd_by_hand():
    sp, df = pooled_sd([[7.0, 8.0, 9.0], [3.0, 3.0, 3.0]])  # sum of squares 2 and 0 over 2 + 2 df
    assert (sp, df) == (pytest.approx(math.sqrt(0.5)), 4)
    sp, df = pooled_sd([[1.0], [2.0]])
    assert math.isnan(sp) and df == 0


def test_seeds_to_resolve_is_the_first_k_whose_zero_interval_fits_the_margin():
    for sp, cells, margin in [(1.1, 4, 1.0), (2.83, 4, 1.0), (0.62, 4, 1.0), (1.8, 4, 2.0)]:
        k = seeds_to_resolve(sp, cells, margin)
        half = lambda n: sps.t.ppf(0.975, cells * (n - 1)) * sp / math.sqrt(n)  # noqa: E731
        assert k is not None and half(k) < margin and (k == 2 or half(k - 1) >= margin)
    assert seeds_to_resolve(0.62, 4, 1.0) == 3 and seeds_to_resolve(1.1, 4, 1.0) == 6
    assert seeds_to_resolve(20.0, 4, 1.0) is None  # more than 50 seeds
    assert seeds_to_resolve(0.0, 4, 1.0) == 2 and seeds_to_resolve(math.nan, 4, 1.0) is None


def test_precision_groups_by_pool_group_and_reads_the_worse_ifeval():
    cells = [_cell("S1", "finance", "neutral", target=(0.0, 1.0, 2.0), ifeval=(0.0, 0.0, 0.0)),
             _cell("S2", "finance", "neutral", target=(5.0, 5.0, 5.0), ifeval=(-1.0, 0.0, 1.0)),
             _cell("S3", "finance", "uncertain", target=(0.0, 9.0, 18.0), lr=3e-3),  # its own rate: its own group
             _cell("G1", "finance", "uncertain", target=(0.0, 4.0, 8.0), method="grpo"),
             _cell("X1", "sql", "beneficial", target=(3.0,))]  # one seed: no spread, no group
    p = precision(cells)
    assert [(r["family"], r["method"], r["relative_rate"], r["ids"], r["seeds"], r["df"]) for r in p] == [
        ("finance", "grpo", 10.0, ["G1"], 3, 2), ("finance", "sft", 1.0, ["S1", "S2"], 3, 4),
        ("finance", "sft", 30.0, ["S3"], 3, 2)]
    assert p[2]["sd_target_pp"] == pytest.approx(9.0)
    sft = p[1]
    assert sft["sd_target_pp"] == pytest.approx(math.sqrt(0.5)) and sft["sd_ifeval_pp"] == pytest.approx(math.sqrt(0.5))
    assert sft["seeds_to_decide_neutral"] == seeds_to_resolve(math.sqrt(0.5), 2, 1.0)
    assert sft["seeds_to_decide_retention"] == seeds_to_resolve(math.sqrt(0.5), 2, 2.0)
    assert p[0]["sd_target_pp"] == pytest.approx(4.0) and p[0]["seeds_to_decide_neutral"] is None


def test_the_second_stage_gives_more_seeds_to_the_groups_whose_spread_needs_them_and_reads_no_effect():
    cells = [_cell("A1", "sql", "uncertain", target=(0.0, 0.8, 1.6), method="grpo"),   # pooled sd 0.8: 4 seeds
             _cell("A2", "sql", "uncertain", target=(1.0, 1.8, 2.6), method="grpo"),
             _cell("B1", "finance", "beneficial", target=(7.0, 8.0, 9.0)),              # sd 1 alone: 7 seeds
             _cell("N1", "sql", "neutral", target=(0.0, 0.1, -0.1)),                    # decided at 3 already
             _cell("R1", "function", "uncertain", target=(0.0, 0.0, 0.0), ifeval=(0.0, -1.2, -2.4))]  # IFEval: 4
    assert seeds_to_resolve(0.8, 2, 1.0) == 4 and seeds_to_resolve(1.0, 1, 1.0) == 7
    assert seeds_to_resolve(1.2, 1, 2.0) == 4
    assert second_stage(cells, most=6) == {"A1": 4, "A2": 4, "R1": 4}
    assert second_stage(cells, most=7) == {"A1": 4, "A2": 4, "B1": 7, "R1": 4}
    assert second_stage(cells, most=3) == {}
    shifted = [c | {"by_seed": [b | {"full_target": b["full_target"] + 5.0} for b in c["by_seed"]],
                    "outcome_class": "beneficial"} for c in cells]
    assert second_stage(shifted, most=6) == second_stage(cells, most=6)  # the same spreads: the same plan
