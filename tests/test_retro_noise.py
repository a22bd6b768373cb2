"""bench/retro_noise.py: the paired SE and the split of a group's between-seed spread, on
hand-made numbers worked out by hand in the comments."""

import math
from pathlib import Path

import numpy as np
import pytest

from bench.retro_noise import _check, decompose, item_values, paired_diffs, paired_se2, two_way
from experience_bank.errors import BadInput
from experience_bank.results import EvalIdentity, ItemResult, SuiteResult
from policies.stats import paired_stats


def test_paired_se_is_var_over_n_and_agrees_with_paired_stats():
    child, control = {"a": 100.0, "b": 0.0, "c": 100.0}, {"a": 0.0, "b": 0.0, "c": 100.0}
    d = paired_diffs(child, control)
    assert d.tolist() == [100.0, 0.0, 0.0]
    # mean 33.33; var (ddof 0) = 10000/3 - 33.33^2 = 2222.2; SE^2 = 2222.2 / 3 = 740.74
    assert paired_se2(d) == pytest.approx(2222.2222 / 3, rel=1e-6)
    owner = paired_stats({k: v > 0 for k, v in control.items()}, {k: v > 0 for k, v in child.items()}, "x")
    assert owner.se_pp ** 2 == pytest.approx(paired_se2(d))


def test_unknown_items_and_other_items_are_refused():
    with pytest.raises(BadInput, match="1 items are UNKNOWN"):
        paired_diffs({"a": 100.0, "b": math.nan}, {"a": 0.0, "b": 100.0})
    with pytest.raises(BadInput, match="different items"):
        paired_diffs({"a": 1.0}, {"b": 1.0})


CELLS = [np.array([[2.0, 0.0], [0.0, 0.0]]), np.array([[4.0, 2.0], [2.0, 0.0]])]
"""Two cells of one group, 2 seeds x 2 items each: seed effects (1, 0) and (3, 1)."""


def test_two_way_mean_squares_by_hand():
    # cell 1: seed means (1, 0), item means (1, 0), grand 0.5; residuals +-0.5 -> SS 1 on 1 df
    assert two_way(CELLS[0]) == {"ms_seed": 1.0, "df_seed": 1, "ms_item": 1.0, "df_item": 1, "ms_resid": 1.0,
                                 "df_resid": 1}
    # cell 2 is purely additive (seed + item): no residual
    assert two_way(CELLS[1])["ms_resid"] == 0.0 and two_way(CELLS[1])["ms_seed"] == 4.0


def test_decomposition_by_hand():
    r = decompose(CELLS, margin=1.0, n_items=200, more=1000)
    # between: var(1, 0) = 0.5 and var(3, 1) = 2, pooled (0.5 + 2) / 2 = 1.25 on 2 df
    assert (r["between"], r["df"]) == (pytest.approx(1.25), 2)
    # item: rows' var/n = 0.5, 0, 0.5, 0.5 -> mean 0.375; training 1.25 - 0.375
    assert (r["item"], r["train"]) == (pytest.approx(0.375), pytest.approx(0.875))
    assert r["item_share"] == pytest.approx(0.3)
    assert r["sd_more"] == pytest.approx(math.sqrt(0.375 * 0.2 + 0.875))
    # t(0.975, 2(K-1)) * sqrt(1.25) / sqrt(K): K = 6 gives 2.228 * 1.118 / 2.449 = 1.017, K = 7 gives 0.921
    assert r["k"] == 7
    # two-way: pooled residual (1 + 0) / 2 = 0.5 -> seed x item 0.5 / 2 items; common 1.25 - 0.25;
    # shared item offset (pooled ms_item 2.5 - 0.5) / 2 seeds / 2 items
    assert (r["seed_item"], r["common"], r["shared_item"]) == (pytest.approx(0.25), pytest.approx(1.0),
                                                               pytest.approx(0.5))
    assert r["sd_more_fixed"] == pytest.approx(math.sqrt(1.0 + 0.25 * 0.2))


def test_a_training_spread_below_the_item_noise_is_zero_not_negative():
    flat = [np.array([[100.0, 0.0], [0.0, 100.0]])]  # both seeds 50 pp: no spread, all item noise
    r = decompose(flat, margin=1.0, n_items=2)
    assert (r["between"], r["train"], r["item"]) == (0.0, 0.0, pytest.approx(1250.0))


def _ifeval(*strict: tuple[bool, ...]) -> SuiteResult:
    ident = EvalIdentity(suite="ifeval", split="adoption", data_sha256="0" * 64, scorer_version="v",
                         model_sha256="0" * 64, chat_template_sha256="0" * 64, backend="offline", batch_size=1,
                         max_new_tokens=1, seed=0)
    items = tuple(ItemResult(item_id=f"p{i}", correct=all(s), score=sum(s) / len(s),
                             detail={**{f"strict_{j}": v for j, v in enumerate(s)}, "prompt_loose": all(s),
                                     "n_instructions": float(len(s))})
                  for i, s in enumerate(strict))
    return SuiteResult(identity=ident, generations_sha256="0" * 64, metrics={}, items=items, n_unparseable=0,
                       n_unknown=0)


def test_ifeval_items_prompt_level_and_instruction_level():
    res = _ifeval((True, False), (True,))
    assert item_values(res, "prompt_strict", "finance") == {"p0": 0.0, "p1": 100.0}
    assert item_values(res, "inst_strict", "finance") == {"p0#0": 100.0, "p0#1": 0.0, "p1#0": 100.0}


def test_an_effect_the_items_do_not_reproduce_stops_the_script():
    cell = {"full": {"target": 5.0, "ifeval": {}}}
    _check(cell, "target", np.array([10.0, 0.0]), Path("s0"))
    with pytest.raises(BadInput, match="not the one the cell used"):
        _check(cell, "target", np.array([10.0, 2.0]), Path("s0"))
