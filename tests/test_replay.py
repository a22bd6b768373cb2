"""The Retrospective-24 replay recomputes the published aggregates (docs/AUTHORIZER.md §9) from cells."""

import json

import pytest

from agent.cli.main import main
from policies.replay import replay_retrospective


@pytest.fixture(scope="module")
def rep():
    return replay_retrospective()


def test_retrospective_directions(rep):
    r = rep["retrospective"]
    assert r["direction_counts"] == {"positive": 11, "neutral": 3, "negative": 10}
    assert r["by_family"] == {"finance": {"up": 5, "flat": 0, "down": 3}, "sql": {"up": 3, "flat": 2, "down": 3},
                              "function": {"up": 3, "flat": 1, "down": 4}}
    assert r["retention_safe_among_improving"] == 3


def test_audit_rates(rep):
    a = rep["audit"]
    assert a["cells"] == {"beneficial": 10, "harmful": 8, "neutral": 6}
    p = a["policies"]
    got = {k: (p[k]["her"], p[k]["bcov"], round(p[k]["harmful_share"], 3)) for k in ("bcit", "flat_additive")}
    assert got == {"bcit": (0.25, 0.9, 0.143), "flat_additive": (0.625, 0.8, 0.312)}
    assert p["flat_additive"]["harmful_share"] == 5 / 16
    assert (p["no_applicability"]["her"], p["additive_veto"]["her"], p["no_hard_veto"]["her"]) == (0.75, 0.375, 0.5)
    assert p["applicability_only"]["bcov"] == 0.8
    assert [round(100 * x, 1) for x in p["bcit"]["her_ci"]] == [3.2, 65.1]
    assert a["mcnemar_p"]["bcit_vs_flat_additive_harmful"] == 0.25


def test_shortfull(rep):
    s = rep["shortfull"]
    assert (s["agreement_count"], s["n"]) == (20, 24)
    assert [round(100 * x, 1) for x in s["agreement_ci"]] == [62.6, 95.3]
    assert (round(s["spearman"], 2), round(s["spearman_sft"], 3), round(s["spearman_grpo"], 3)) == (0.72, 0.755, 0.671)
    assert s["confusion"] == {"tp": 8, "fp": 2, "fn": 2, "tn": 12}
    assert (s["pass_precision"], s["pass_recall"], s["median_trial_cost_ratio"]) == (0.8, 0.8, 0.17)
    assert s["budget_sensitivity"] == {"0.05": 0.625, "0.10": 0.75, "0.20": 20 / 24}
    assert s["sign_reversals"] == ["S04", "S07", "G04", "G10"]


def test_aggregates_under_fallback_lease_0_1_and_unlimited(rep):
    a = rep["audit"]
    lease = {k: {p: (m["her"], m["bcov"]) for p, m in v.items()} for k, v in a["by_lease"].items()}
    assert a["fallback_lease"] == 1 and set(lease) == {"0", "1", "unlimited"}
    assert lease["1"] == {p: (m["her"], m["bcov"]) for p, m in a["policies"].items()}  # the frozen lease is 1
    # The published BCIT 25.0 / 90.0 and Flat-Additive 62.5 / 80.0 need exactly one lease:
    assert (lease["0"]["bcit"], lease["0"]["flat_additive"]) == ((0.25, 0.8), (0.5, 0.8))
    assert (lease["unlimited"]["bcit"], lease["unlimited"]["flat_additive"]) == ((0.25, 0.9), (0.625, 0.9))
    assert lease["0"]["reuse_all"] == lease["unlimited"]["reuse_all"] == (0.875, 1.0)  # it never validates


def test_cli_prints_the_lease_columns_beside_the_audit_table(capsys):
    assert main(["replay", "retrospective-24"]) == 0
    out = capsys.readouterr().out
    assert "HER / BCov, lease 0 | HER / BCov, lease 1 | HER / BCov, lease unlimited |" in out
    assert "| bcit | 25.0% | 90.0% | 14.3% | [3.2, 65.1] |" in out and "25.0% / 80.0% | 25.0% / 90.0% | 25.0% / 90.0% |" in out


def test_cli_json_and_out(tmp_path, capsys):
    assert main(["replay", "retrospective-24", "--json", "--out", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["audit"]["policies"]["bcit"]["bcov"] == 0.9
    assert out["audit"]["by_lease"]["0"]["bcit"]["bcov"] == 0.8
    assert "lease unlimited" in (tmp_path / "report.md").read_text()
    assert "RECONSTRUCTION" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "target_directions.png").stat().st_size > 1000
    assert (tmp_path / "target_vs_ifeval.png").stat().st_size > 1000


def test_replay_of_a_missing_run_is_bad_input(tmp_path):
    assert main(["replay", str(tmp_path / "nope")]) == 2


def test_shortfull_without_recorded_costs_leaves_the_cost_ratio_undefined():
    # cells whose outcome records carry no device-hours (the executed retrospective's) still summarise
    from policies.replay import shortfull

    short = [{"0.05": 1.0, "0.10": 2.0, "0.20": d} for d in (2.0, -3.0, 0.0)]
    out = shortfull(["A", "B", "C"], ["sft", "sft", "grpo"], short, [3.0, -2.0, 0.5], ["pass", "fail", "inconclusive"],
                    [True, False, False], [], 1.0)
    assert out["median_trial_cost_ratio"] is None and out["agreement_count"] == 3 and out["confusion"]["tp"] == 1
