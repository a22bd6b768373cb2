"""Paired retention and the cross-task DriftScore against hand-computed small examples."""

from __future__ import annotations

import pytest
from test_gate_factory import suite

from evaluators.forgetting import cross_task_matrix, cross_task_row, paired_retention, retention_summary
from experience_bank.errors import BadInput

T, F, U = True, False, None


def test_paired_retention_hand_computed():
    # parent correct on 0..4; child keeps 0,1,2, loses 3,4, gains 5; item 7 is UNKNOWN in the child.
    parent = suite("sql/target", {"exec_acc": 50.0}, [T, T, T, T, T, F, F, F], model="p")
    child = suite("sql/target", {"exec_acc": 50.0}, [T, T, T, F, F, T, F, U], model="c")
    r = paired_retention(parent, child)
    assert (r.n_pairs, r.n_unknown, r.parent_correct, r.kept, r.lost, r.gained) == (7, 1, 5, 3, 2, 1)
    assert r.retention_pct == pytest.approx(60.0)
    assert r.forgetting_pct == pytest.approx(40.0)
    assert r.net_pp == pytest.approx(-100 / 7)


def test_flat_average_does_not_hide_lost_answers():
    # same accuracy (2/4) on both sides, yet half of what the parent knew is gone.
    r = paired_retention(suite("ifeval", {}, [T, T, F, F], model="p"), suite("ifeval", {}, [T, F, T, F], model="c"))
    assert r.net_pp == 0.0 and r.forgetting_pct == pytest.approx(50.0) and (r.lost, r.gained) == (1, 1)


def test_summary_equal_weight_mean_and_worst_task():
    parent = {"a": suite("a", {}, [T, T, T, T], model="p"), "b": suite("b", {}, [T] * 10, model="p"),
              "c": suite("c", {}, [F, F], model="p")}
    child = {"a": suite("a", {}, [T, T, T, F], model="c"), "b": suite("b", {}, [T] * 5 + [F] * 5, model="c"),
             "c": suite("c", {}, [T, F], model="c")}
    s = retention_summary(parent, child)
    assert [t.forgetting_pct for t in s.tasks] == [pytest.approx(25.0), pytest.approx(50.0), None]
    assert s.mean_forgetting_pct == pytest.approx(37.5)      # (25 + 50) / 2, not 6 / 14 pooled
    assert s.mean_retention_pct == pytest.approx(62.5)
    assert (s.worst_task, s.worst_forgetting_pct) == ("b", pytest.approx(50.0))


def test_retention_refuses_unpaired_results():
    with pytest.raises(BadInput, match="item ids"):
        paired_retention(suite("a", {}, [T, T], model="p"), suite("a", {}, [T], model="c"))
    with pytest.raises(BadInput, match="same suite and data"):
        paired_retention(suite("a", {}, [T], model="p"), suite("a", {}, [T], model="c", data="other"))


def _results(model, sql, fin, ifeval):
    return {"sql/target": suite("sql/target", {"exec_acc": sql}, model=model),
            "finance/target": suite("finance/target", {"em": fin}, model=model),
            "ifeval": suite("ifeval", {"prompt_strict": ifeval}, model=model)}


def test_drift_score_flags_an_effect_off_the_label():
    # labelled for sql: sql +1, finance +8, ifeval -3  ->  DriftScore = 8 - 1 = 7, flagged.
    row = cross_task_row("S01", _results("p", 40.0, 30.0, 60.0), _results("c", 41.0, 38.0, 57.0), "sql/target.exec_acc")
    assert row.effects == {"finance/target.em": 8.0, "ifeval.prompt_strict": -3.0, "sql/target.exec_acc": 1.0}
    assert (row.target_gain, row.off_target_gain, row.off_target_metric) == (1.0, 8.0, "finance/target.em")
    assert row.drift_score == pytest.approx(7.0) and row.flagged is True


def test_drift_score_on_label_is_not_flagged_and_unknown_is_not_a_verdict():
    on = cross_task_row("S02", _results("p", 40.0, 30.0, 60.0), _results("c", 50.0, 31.0, 60.0), "sql/target.exec_acc")
    assert on.drift_score == pytest.approx(-9.0) and on.flagged is False
    unk = cross_task_row("S03", _results("p", 40.0, 30.0, 60.0), _results("c", 50.0, 31.0, 60.0) | {
        "ifeval": suite("ifeval", {"prompt_strict": None}, model="c")}, "sql/target.exec_acc")
    assert unk.effects["ifeval.prompt_strict"] is None and unk.drift_score is None and unk.flagged is None
    m = cross_task_matrix([on, unk])
    assert m["metrics"] == ["finance/target.em", "ifeval.prompt_strict", "sql/target.exec_acc"]
    assert m["rows"][0]["effects"] == [pytest.approx(1.0), 0.0, 10.0] and m["rows"][1]["flagged"] is None
