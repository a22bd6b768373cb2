"""The seeded retrospective (issue 26 item 2): interval classes, seed means in every figure, K = 1 as before, resume."""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path

import pytest
from scipy import stats as sps

from support import bank_factory as bf
from agent.experiments import retrospective as R
from agent.experiments.retro_cells import pool_classes, pool_group
from experience_bank.errors import BadInput
from experience_bank.hashing import content_hash
from policies import PolicyConfig
from policies.audit import Cell, score_policies
from policies.decision_ledger import OutcomeCell
from policies.outcomes import outcome_class, outcome_class_interval
from policies.stats import mean_interval, pooled_mean_intervals
from test_retrospective import Card, FakePorts, _controls, _features

T975_DF2 = 0.95 * math.sqrt(2 / (1 - 0.95 ** 2))
"""Student t(0.975; 2) in closed form: df = 2 has CDF 1/2 + t / (2 sqrt(2 + t^2))."""


def _cls(t, p=(0.0, 0.0), i=(0.0, 0.0), hard=False):
    return outcome_class_interval(t, p, i, band=1.0, ifeval_drop_pp=2.0, hard_failure=hard)


def test_interval_class_boundaries():
    assert _cls((1.0, 5.0)) == "beneficial" and _cls((0.99, 5.0)) == "uncertain"
    assert _cls((-5.0, -1.0)) == "harmful" and _cls((-5.0, -0.99)) == "uncertain"
    assert _cls((-0.99, 0.99)) == "neutral" and _cls((-0.5, 1.0)) == "uncertain"
    assert _cls((2.0, 3.0), p=(-5.0, -2.01)) == "harmful"       # IFEval wholly below the guard
    assert _cls((2.0, 3.0), i=(-2.5, 0.0)) == "uncertain"       # straddles the guard
    assert _cls((-0.5, 0.5), p=(-2.0, 1.0)) == "neutral"        # -2.0 is within the bound
    assert _cls((2.0, 3.0), hard=True) == "harmful"
    # a point interval is today's rule, everywhere on a grid around the boundaries
    grid = [-3.0, -2.01, -2.0, -1.0, -0.99, 0.0, 0.99, 1.0, 3.0]
    for t in grid:
        for p in grid:
            assert _cls((t, t), p=(p, p)) == outcome_class(t, p, 0.0, band=1.0, ifeval_drop_pp=2.0)


def test_pooled_intervals_by_hand():
    # spreads: sd 1 (ss 2) and sd 0 (ss 0) pool to s_p = sqrt(2 / 4) on 4 degrees of freedom
    (m1, ci1), (m2, ci2) = pooled_mean_intervals([[7.0, 8.0, 9.0], [3.0, 3.0, 3.0]])
    half = sps.t.ppf(0.975, 4) * math.sqrt(0.5) / math.sqrt(3)
    assert (m1, m2) == (8.0, 3.0) and ci1 == pytest.approx((8 - half, 8 + half)) and ci2 == pytest.approx((3 - half, 3 + half))
    assert pooled_mean_intervals([[1.0], [2.0]]) == [(1.0, None), (2.0, None)]  # nothing to pool


def _seeded(cid: str, family: str, target: list[float], lr: float = 1e-4) -> dict:
    by_seed = [{"seed": i, "full_target": t, "full_ifeval": {"prompt_strict": 0.0, "inst_strict": 0.0}}
               for i, t in enumerate(target)]
    return {"id": cid, "family": family, "method": "sft", "outcome_class": "uncertain", "by_seed": by_seed,
            "full": {"sanity_failures": []}, "pool_group": pool_group(family, "sft", "full", lr)}


def test_pooling_decides_a_cell_its_own_two_degrees_of_freedom_leave_uncertain():
    # A: target 2.0, 3.5, 5.0 (sd 1.5): its own interval 3.5 +- 4.30 * 1.5 / sqrt 3 = [-0.23, 7.23] straddles +1;
    # pooled with five quiet cells of its group (sd 0) on 12 df: 3.5 +- 2.18 * sqrt(4.5 / 12) / sqrt 3 = [2.73, 4.27]
    cells = [_seeded("A", "sql", [2.0, 3.5, 5.0])] + [_seeded(f"Q{i}", "sql", [0.0, 0.0, 0.0]) for i in range(5)]
    cells.append(_seeded("F", "finance", [2.0, 3.5, 5.0]))  # alone in its group: its own spread decides
    out = {c["id"]: c for c in pool_classes(cells)}
    half = sps.t.ppf(0.975, 12) * math.sqrt(4.5 / 12) / math.sqrt(3)
    assert out["A"]["ci95_pooled"]["target"] == pytest.approx([3.5 - half, 3.5 + half])
    assert out["A"]["outcome_class"] == "beneficial" and out["A"]["outcome_class_per_cell"] == "uncertain"
    assert out["Q0"]["outcome_class"] == "neutral" and out["F"]["outcome_class"] == "uncertain"


def test_the_pool_group_is_the_rate_relative_to_the_adapters_standard():
    from agent.world.catalogue import GRPO_LR, LORA_GRPO_LR, LORA_SFT_LR, SFT_LR
    assert pool_group("sql", "sft", "lora", LORA_SFT_LR) == pool_group("sql", "sft", "full", SFT_LR) == ["sql", "sft", 1.0]
    assert pool_group("sql", "grpo", "lora", LORA_GRPO_LR) == pool_group("sql", "grpo", "full", GRPO_LR)
    assert pool_group("function", "sft", "full", 3e-3) == ["function", "sft", 30.0]  # S12, the aggressive card
    assert pool_group("finance", "grpo", "full", 5e-4) != pool_group("finance", "grpo", "full", GRPO_LR)
    assert pool_group("finance", "sft", "full", SFT_LR) != pool_group("sql", "sft", "full", SFT_LR)


def test_a_card_at_another_learning_rate_pools_apart_from_its_family_and_method():
    # Q: target -0.2, 0.0, +0.2 (sd 0.2), own interval 0 +- 4.30 * 0.2 / sqrt 3 = +-0.50: neutral.
    # X, same family and method at an aggressive rate, spreads -6, 0, +6 (sd 6): pooled with it, Q's
    # interval would be 0 +- 2.78 * sqrt((0.04 + 36) / 2) / sqrt 3 = +-6.8, uncertain.
    quiet, wild = [-0.2, 0.0, 0.2], [-6.0, 0.0, 6.0]
    apart = {c["id"]: c for c in pool_classes([_seeded("Q", "sql", quiet), _seeded("X", "sql", wild, lr=5e-4)])}
    own = sps.t.ppf(0.975, 2) * 0.2 / math.sqrt(3)  # a group of one: its own spread on 2 df
    assert apart["Q"]["ci95_pooled"]["target"] == pytest.approx([-own, own]) and apart["Q"]["outcome_class"] == "neutral"
    assert apart["X"]["outcome_class"] == "uncertain"
    together = {c["id"]: c for c in pool_classes([_seeded("Q", "sql", quiet), _seeded("X", "sql", wild)])}
    half = sps.t.ppf(0.975, 4) * math.sqrt((0.08 + 72) / 4) / math.sqrt(3)
    assert together["Q"]["ci95_pooled"]["target"] == pytest.approx([-half, half])
    assert together["Q"]["outcome_class"] == "uncertain"


def test_mean_interval_by_hand():
    mean, (lo, hi) = mean_interval([7.0, 8.0, 9.0])  # sd 1
    assert mean == 8.0 and lo == pytest.approx(8 - T975_DF2 / math.sqrt(3)) and hi == pytest.approx(8 + T975_DF2 / math.sqrt(3))
    assert mean_interval([2.5]) == (2.5, None)
    assert mean_interval([0.5, 0.5, 0.5]) == (0.5, (0.5, 0.5))


class SeededPorts(FakePorts):
    """FakePorts whose intervention's (target gain, IFEval prompt change) at the full length depends on
    the training seed; the control is the same at every seed (+1 pp target, -0.5 pp IFEval prompt), so a
    cell's full-run effect at seed s is (gain_s - 1, ife_s + 0.5) and a short run's is that x fraction.
    H2's full run at seed 1 fails a training sanity check. `fail`: (card, seed, fraction) that raises."""

    SEEDED = {"B1": [(8.0, 0.0), (9.0, 0.0), (10.0, 0.0)],      # effects 7, 8, 9: beneficial
              "H1": [(9.0, -6.0), (9.0, -7.0), (9.0, -8.0)],    # IFEval -5.5, -6.5, -7.5: harmful
              "N1": [(1.0, 0.0), (1.1, 0.0), (0.9, 0.0)],       # 0, 0.1, -0.1: neutral
              "U1": [(0.0, 0.0), (2.0, 0.0), (4.0, 0.0)],       # -1, 1, 3: uncertain
              "G1": [(-2.0, 0.0), (-3.0, 0.0), (-4.0, 0.0)],    # -3, -4, -5: harmful
              "H2": [(8.0, 0.0), (9.0, 0.0), (10.0, 0.0)]}      # as B1, but a hard failure on seed 1

    def __init__(self, fail=None):
        super().__init__()
        self.fail = fail

    def train(self, card, parent_dir, fraction, seed, out_dir, snapshots=()):
        if (card.id, seed, fraction) == self.fail:
            raise RuntimeError("killed")
        self.trained.append((card.id, seed, fraction))
        plan = self.PLAN[card.id] if card.id in self.PLAN else self.SEEDED[card.id][seed]
        sanity = ["loss_finite"] if (card.id, seed, fraction) == ("H2", 1, 1.0) else []
        return self.write(card, parent_dir, fraction, out_dir, plan, snapshots, sanity)


CARDS = [Card("B1", "finance", "sft"), Card("H1", "finance", "sft"), Card("N1", "sql", "sft"),
         Card("U1", "sql", "grpo"), Card("G1", "sql", "grpo"), Card("H2", "function", "sft")]


def _table(tmp_path: Path, ports, cards=CARDS, seeds=(0, 1, 2), plan=None) -> tuple[Path, dict]:
    base, out = tmp_path / "base", tmp_path / "retro"
    base.mkdir(exist_ok=True)
    (base / "scores.json").write_text(json.dumps({"target": 30.0, "prompt_strict": 70.0, "inst_strict": 80.0}))
    feats = {c.id: _features(c.id) for c in cards}
    sha = R.freeze_features(out, [(c.id, feats[c.id]) for c in cards])
    res = R.run_table(out, cards, lambda: ports, str(base), list(seeds), feats, {c.id: content_hash(c.id) for c in cards},
                      controls=_controls(cards), parent=bf.record().source.parent)
    (out / "ledger.json").write_text(json.dumps({"world": "fake-0", "seed": seeds[0], "seeds": list(seeds),
                                                 "features_sha256": sha, "control": "fake control"}))
    return out, res


def test_three_seeds_every_class_and_the_summary_by_hand(tmp_path):
    ports = SeededPorts()
    out, res = _table(tmp_path, ports)
    assert res["cells_done"] == 6 and res["failed"] == {}
    cells = {c["id"]: c for c in map(json.loads, (out / "cells.jsonl").read_text().splitlines())}
    assert {k: c["outcome_class"] for k, c in cells.items()} == {
        "B1": "beneficial", "H1": "harmful", "N1": "neutral", "U1": "uncertain", "G1": "harmful", "H2": "harmful"}
    half = T975_DF2 / math.sqrt(3)  # sd 1 over 3 seeds
    b1 = cells["B1"]
    assert b1["seeds"] == [0, 1, 2] and b1["full"]["target"] == 8.0 and b1["short"]["0.20"]["target"] == pytest.approx(1.6)
    assert b1["ci95"]["full"]["target"] == pytest.approx([8 - half, 8 + half])
    assert b1["ci95"]["full"]["prompt_strict"] == [0.5, 0.5]  # no spread: the point
    assert cells["H1"]["ci95"]["full"]["prompt_strict"] == pytest.approx([-6.5 - half, -6.5 + half])
    assert cells["U1"]["ci95"]["full"]["target"] == pytest.approx([1 - 2 * half, 1 + 2 * half])  # sd 2
    assert [s["outcome_class"] for s in cells["H2"]["by_seed"]] == ["beneficial", "harmful", "beneficial"]
    # the deciding intervals pool the spread of (finance, sft): B1's target ss 2 and H1's 0 on 4 df
    pooled = sps.t.ppf(0.975, 4) * math.sqrt(2 / 4) / math.sqrt(3)
    assert b1["ci95_pooled"]["target"] == pytest.approx([8 - pooled, 8 + pooled])
    assert cells["H1"]["ci95_pooled"]["prompt_strict"] == pytest.approx([-6.5 - pooled, -6.5 + pooled])
    assert {k: c["outcome_class_per_cell"] for k, c in cells.items()} == {k: c["outcome_class"] for k, c in cells.items()}
    assert json.loads((out / "cells" / "B1" / "cell.json").read_text())["ci95_pooled"] == b1["ci95_pooled"]
    assert (out / "cells" / "B1" / "s2" / "f0.20.json").is_file() and (out / "cells" / "B1" / "s0" / "cell.json").is_file()
    # one control run per (method, length, seed): 2 x 2 x 3 (trial-length with its curve, and full)
    assert len(list((out / "controls").iterdir())) == 12
    assert sum(c.startswith("CTRL") for c, _, _ in ports.trained) == 12 and len(ports.trained) == 6 * 3 * 2 + 12

    s = json.loads((out / "summary.json").read_text())["summary"]
    # by hand, over the five decided cells (U1 left out): full means B1 8, H1 8, N1 0, G1 -4, H2 8;
    # 20 % means 1.6, 1.6, 0, -0.8, 1.6; trial on the means: B1, H1, H2 pass (IFEval at 20 %: -1.3 pp)
    assert s["n_cells"] == 6 and s["n_decided"] == 5 and s["uncertain"] == ["U1"] and s["left_out_uncertain"] == 1
    assert s["n_seeds"] == 3
    assert s["outcome_classes"] == {"beneficial": 1, "harmful": 3, "neutral": 1, "uncertain": 1}
    assert s["outcome_classes_per_cell"] == {"beneficial": 1, "harmful": 3, "neutral": 1, "uncertain": 1}
    assert s["direction_counts"] == {"positive": 3, "neutral": 1, "negative": 1}
    assert s["by_family"] == {"finance": {"up": 2, "flat": 0, "down": 0}, "sql": {"up": 0, "flat": 1, "down": 1},
                              "function": {"up": 1, "flat": 0, "down": 0}}
    assert s["retention_safe_among_improving"] == "2/3"  # H1 loses 6.5 pp of IFEval
    sf = s["shortfull"]
    assert sf["left_out_uncertain"] == 1
    assert sf["confusion"] == {"tp": 1, "fp": 2, "fn": 0, "tn": 2}
    assert sf["pass_precision"] == pytest.approx(1 / 3) and sf["pass_recall"] == 1.0
    assert {f: (b["agree"], b["n"]) for f, b in sf["budget_sensitivity"].items()} == {
        "0.05": (1, 5), "0.10": (1, 5), "0.20": (4, 5)}  # G1 -0.8 pp at 20 % is flat; at 10 % only N1 agrees
    lo, hi = sf["agreement_ci"]  # Clopper-Pearson 4 of 5: Beta(k, n-k+1) and Beta(k+1, n-k) quantiles
    assert lo == pytest.approx(sps.beta.ppf(0.025, 4, 2)) and hi == pytest.approx(sps.beta.ppf(0.975, 5, 1))
    assert sf["spearman"] == pytest.approx(1.0) and sf["spearman_sft"] == pytest.approx(1.0)
    assert sf["spearman_grpo"] is None  # G1 alone once U1 is left out
    assert sf["sign_reversals"] == [] and sf["median_trial_cost_ratio"] == pytest.approx(0.2)

    lines = {c.candidate_id: c for c in map(OutcomeCell.model_validate_json, (out / "outcomes.jsonl").read_text().splitlines())}
    assert lines["U1"].outcome == "uncertain" and lines["U1"].seeds == 3
    assert lines["B1"].full_ci["target"] == pytest.approx((8 - pooled, 8 + pooled))  # the deciding interval and lines["B1"].trial_delta == pytest.approx(1.6)
    # the audit counts the uncertain cell apart: in no class, so in no HER / BCov
    audit_cells = [Cell(k, "retro", _features(k), None, "continue", c) for k, c in lines.items()]
    scored = score_policies(audit_cells, PolicyConfig())
    assert scored["policies"]["bcit"]["cells"] == {"beneficial": 1, "harmful": 3, "neutral": 1}
    assert scored["coverage"]["uncertain"] == 1 and "1 of 6 candidates are uncertain" in scored["coverage"]["notes"][-1]
    from agent.experiments.retro_summary import write_summary

    write_summary(out)
    md = (out / "retrospective.md").read_text()
    assert "Uncertain (intervals straddle a class boundary): 1 (U1)" in md and "training seeds 0, 1, 2" in md


def _subset(new, old, path="") -> None:
    """Every key of `old` is in `new` with the same value (new keys are allowed)."""
    if isinstance(old, dict):
        for k, v in old.items():
            assert k in new, f"{path}/{k} missing"
            _subset(new[k], v, f"{path}/{k}")
    else:
        assert new == old, f"{path}: {new} != {old}"


def test_one_seed_is_todays_table(tmp_path):
    """The fixture is main's output (before seeds) for this fake: a one-seed table gives the same numbers."""

    class Ports(FakePorts):
        PLAN = FakePorts.PLAN | {"S02": (2.0, 0.0), "S03": (6.0, -8.0), "G02": (1.5, 0.0)}

    cards = [Card("S01", "finance", "sft"), Card("G01", "sql", "grpo"), Card("S02", "finance", "sft"),
             Card("S03", "function", "sft"), Card("G02", "sql", "grpo")]
    out, _ = _table(tmp_path, Ports(), cards, seeds=(0,))
    golden = json.loads((Path(__file__).parent / "fixtures" / "retro_k1_main.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    _subset(summary, golden["summary"])
    assert summary["summary"]["uncertain"] == [] and summary["summary"]["outcome_classes"]["uncertain"] == 0
    for new, old in zip(map(json.loads, (out / "outcomes.jsonl").read_text().splitlines()), golden["outcomes"], strict=True):
        _subset(new, old)
        assert new["seeds"] == 1 and new["full_ci"] == {}
    for new, old in zip(map(json.loads, (out / "cells.jsonl").read_text().splitlines()), golden["cells"], strict=True):
        _subset(new, old)
        assert new["ci95"] is None and new["seeds"] == [0]


def test_a_killed_seed_resumes_without_training_again(tmp_path):
    cards = [Card("B1", "finance", "sft"), Card("G1", "sql", "grpo")]
    first = SeededPorts(fail=("B1", 1, 1.0))
    out, res = _table(tmp_path, first, cards)
    assert res["failed"] == {"B1": "seed 1: RuntimeError: killed"} and res["cells_done"] == 1
    assert not (out / "cells" / "B1" / "cell.json").exists() and (out / "cells" / "B1" / "s1" / "f0.20.json").is_file()
    again = SeededPorts()
    out, res = _table(tmp_path, again, cards)
    assert res["failed"] == {} and res["cells_done"] == 2
    # only what the kill left undone: seed 1's full run and its control's
    assert again.trained == [("B1", 1, 1.0), ("CTRL-sft", 1, 1.0)]
    b1 = json.loads((out / "cells" / "B1" / "cell.json").read_text())
    assert b1["seeds"] == [0, 1, 2] and b1["full"]["target"] == 8.0 and b1["outcome_class"] == "beneficial"


def test_seeds_must_be_positive_and_distinct(tmp_path, capsys):
    with pytest.raises(BadInput, match="distinct"):
        R.run_table(tmp_path / "x", [], lambda: None, str(tmp_path), [0, 0], {}, controls={}, parent=None)
    from agent.cli.main import main

    assert main(["retrospective", "--execute", "--seeds", "0", "--out", str(tmp_path / "r")]) == 2
    assert "--seeds" in capsys.readouterr().err and not (tmp_path / "r").exists()


@pytest.mark.parametrize("argv, named", [(["--cells", "0"], "--cells 0"), (["--cells", "-2"], "--cells -2"),
                                          (["--seed", "-1"], "seed -1"),
                                          (["--seed", str(2**32 - 2), "--seeds", "3"], f"seed {2**32}")])
def test_cells_and_seed_range_are_refused_before_the_world_is_built(tmp_path, capsys, monkeypatch, argv, named):
    """--cells -2 sliced the catalogue to all but its last two cells; a seed out of range was refused
    by a cell's first run, after the world was built."""
    from agent.cli.main import main

    cache = tmp_path / "cache"
    monkeypatch.setenv("AGENT_CACHE", str(cache))
    assert main(["retrospective", "--execute", "--size", "test", *argv, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists() and not cache.exists()


def test_first_runs_the_named_cells_seeds_first_and_leaves_the_table_as_it_was(tmp_path):
    base, feats = tmp_path / "base", {c.id: _features(c.id) for c in CARDS}
    base.mkdir()
    (base / "scores.json").write_text(json.dumps({"target": 30.0, "prompt_strict": 70.0, "inst_strict": 80.0}))
    tables = {}
    for name, first in (("plain", ()), ("grpo-first", ("G1", "U1"))):
        ports, out = SeededPorts(), tmp_path / name
        R.freeze_features(out, [(c.id, feats[c.id]) for c in CARDS])
        R.run_table(out, CARDS, lambda: ports, str(base), [0, 1], feats, controls=_controls(CARDS),
                    parent=bf.record().source.parent, first=first)
        tables[name] = (out / "cells.jsonl").read_text()
        order = list(dict.fromkeys(c for c, _, _ in ports.trained if not c.startswith("CTRL")))
        assert order == (["G1", "U1", "B1", "H1", "N1", "H2"] if first else [c.id for c in CARDS])
    assert tables["plain"] == tables["grpo-first"]  # the same cells, in the catalogue's order
    assert [c.id for c in R.run_order(CARDS, ("H2",))][:2] == ["H2", "B1"]
    with pytest.raises(BadInput, match="X9 is not one of"):
        R.run_order(CARDS, ("G1", "X9"))
    with pytest.raises(BadInput, match="a repeat"):
        R.run_order(CARDS, ("G1", "G1"))


class FourSeeds(SeededPorts):
    """Four seeds per card; a full-run effect is the gain less the control's 1 pp."""

    SEEDED = {"A1": [(1.0, 0.0), (1.8, 0.0), (2.6, 0.0), (1.4, 0.0)],     # effects 0, 0.8, 1.6 (sd 0.8), 0.4
              "A2": [(2.0, 0.0), (2.8, 0.0), (3.6, 0.0), (2.4, 0.0)],     # 1, 1.8, 2.6 (sd 0.8), 1.4
              "B1": [(8.0, 0.0), (9.0, 0.0), (10.0, 0.0), (9.0, 0.0)],    # sd 1 alone: 7 seeds, more than 6
              "N1": [(1.0, 0.0), (1.1, 0.0), (0.9, 0.0), (1.0, 0.0)]}     # decided at 3


def test_a_second_stage_runs_more_seeds_for_the_groups_that_need_them_and_resumes(tmp_path):
    cards = [Card("A1", "sql", "grpo"), Card("A2", "sql", "grpo"), Card("B1", "finance", "sft"),
             Card("N1", "sql", "sft")]
    ports, base, out = FourSeeds(), tmp_path / "base", tmp_path / "retro"
    base.mkdir()
    (base / "scores.json").write_text(json.dumps({"target": 30.0, "prompt_strict": 70.0, "inst_strict": 80.0}))
    feats = {c.id: _features(c.id) for c in cards}
    R.freeze_features(out, [(c.id, feats[c.id]) for c in cards])
    run = partial(R.run_table, out, cards, lambda: ports, str(base), features=feats,
                  decision_hashes={c.id: content_hash(c.id) for c in cards}, controls=_controls(cards),
                  parent=bf.record().source.parent)
    first = run([0, 1, 2])
    assert {c["id"]: c["outcome_class"] for c in first["cells"]}["A1"] == "uncertain"
    res = R._second_stage(out, run, first, cards, 0, 3, 6)
    assert sorted({(c, s) for c, s, f in ports.trained if s == 3}) == [("A1", 3), ("A2", 3), ("CTRL-grpo", 3)]
    cells = {c["id"]: c for c in map(json.loads, (out / "cells.jsonl").read_text().splitlines())}
    assert cells["A1"]["seeds"] == [0, 1, 2, 3] and cells["B1"]["seeds"] == [0, 1, 2]
    assert cells["A1"]["full"]["target"] == pytest.approx(0.7) and res["cells_done"] == 4
    stage = json.loads((out / "summary.json").read_text())["summary"]["second_stage"]
    assert stage["seeds"] == {"A1": 4, "A2": 4} and stage["most_seeds"] == 6 and stage["first_seeds"] == 3
    assert stage["first_stage_mix"]["overall"]["uncertain"] == first["summary"]["mix"]["overall"]["uncertain"]
    from agent.experiments.retro_summary import write_summary

    sha = R.freeze_features(out, [(c.id, feats[c.id]) for c in cards])
    (out / "ledger.json").write_text(json.dumps({"world": "fake-0", "seed": 0, "seeds": [0, 1, 2], "extend_to": 6,
                                                 "features_sha256": sha, "control": "fake control"}))
    write_summary(out)
    assert ("after 3 seeds, the pool groups whose first-stage spread needed more seeds, at most 6, to decide a zero "
            "effect ran them: A1, A2 at 4.") in (out / "retrospective.md").read_text()
    # resumed over a directory that already holds the fourth seeds: the plan is read from the first
    # three again, and nothing trains
    again = FourSeeds()
    run2 = partial(R.run_table, out, cards, lambda: again, str(base), features=feats,
                   decision_hashes={c.id: content_hash(c.id) for c in cards},
                   controls=_controls(cards), parent=bf.record().source.parent)
    R._second_stage(out, run2, run2([0, 1, 2]), cards, 0, 3, 6)
    assert again.trained == []
    assert json.loads((out / "summary.json").read_text())["summary"]["second_stage"]["seeds"] == {"A1": 4, "A2": 4}


def test_a_second_stage_needs_a_first_stage_spread_and_more_seeds(tmp_path, capsys):
    from agent.cli.main import main

    for flags in (["--seeds", "1", "--extend-to", "4"], ["--seeds", "3", "--extend-to", "3"]):
        assert main(["retrospective", "--execute", *flags, "--out", str(tmp_path / "r")]) == 2
        assert "--extend-to" in capsys.readouterr().err and not (tmp_path / "r").exists()
