"""Budgets, the cost model and the append-only, idempotent ledger."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, strategies as st

from experience_bank.errors import BadInput
from experience_bank.results import TrainResult
from test_train_world import card
from trainers.ledger import CostModel, Ledger, parse_budget, run_hours
from trainers.steps import TrialRefused


@pytest.mark.parametrize("text, hours", [("36gpuh", 36.0), ("2.5h", 2.5), ("90m", 1.5), ("1.5gpuh", 1.5), (" 10H ", 10.0)])
def test_parse_budget(text, hours):
    assert parse_budget(text) == pytest.approx(hours)


@pytest.mark.parametrize("text", ["-3h", "abc", "0", "0h", "1e9h", "99999999gpuh", "", "3 hours", "nanh"])
def test_parse_budget_refuses_nonsense(text):
    with pytest.raises(BadInput):
        parse_budget(text)


def test_a_budget_just_past_the_cap_says_so():
    """%g once printed 1000001 h as "1e+06 device-hours: ... at most 1e+06", which hid the reason."""
    with pytest.raises(BadInput, match=r"^budget '1000001h' is 1,000,001 device-hours: give more than 0 and at most 1,000,000$"):
        parse_budget("1000001h")


@given(st.integers(min_value=1, max_value=10**6))
def test_minutes_are_sixtieths_of_hours(n):
    assert parse_budget(f"{n}m") == pytest.approx(n / 60)


def _result(steps=10, wall=7200.0, continued=0, trial=False, nominal=None):
    return TrainResult(card_id="T-sft", run_key="k", parent_sha256="a" * 64, checkpoint="/x", checkpoint_sha256="b" * 64,
                       steps=steps, fraction=0.2 if trial else 1.0, wall_seconds=wall, nominal_steps=nominal,
                       log={"continued_from_step": float(continued)}, never_promotable=trial)


def test_run_hours_is_the_share_of_steps_that_ran():
    assert run_hours(5.0, 6, 32) == pytest.approx(0.9375)  # a GRPO trial of 6 of 32 steps: 18.75%, not 20%
    assert run_hours(5.0, 32, 32) == 5.0 and run_hours(5.0, 0, 32) == 0.0
    for bad in ((5.0, 33, 32), (5.0, -1, 32), (5.0, 1, 0), (float("nan"), 1, 2)):
        with pytest.raises(BadInput):
            run_hours(*bad)


@pytest.mark.parametrize("steps, ran", [(32, 6), (8, 1), (20, 4), (120, 24), (5, 1)])
def test_trial_estimates_charge_the_floor_of_the_share(steps, ran):
    c = card("grpo", steps=steps)  # 2.0 nominal device-hours
    assert CostModel("nominal").estimate_trial(c, 0.2) == pytest.approx(2.0 * ran / steps)
    assert CostModel("nominal").estimate_trial(c, 0.2) <= 0.2 * 2.0 + 1e-12
    assert CostModel("nominal").estimate_full(c, continued_steps=ran) == pytest.approx(2.0 * (steps - ran) / steps)


def test_a_trial_under_one_step_has_no_estimate():
    with pytest.raises(TrialRefused, match="under one"):
        CostModel("nominal").estimate_trial(card("grpo", steps=4), 0.2)


def test_a_charge_refuses_a_result_of_another_card_version():
    with pytest.raises(BadInput, match="share of 30 steps"):
        CostModel("nominal").run_charge(card("sft", steps=20), _result(steps=4, trial=True, nominal=30))


def test_cost_models():
    c = card("sft", steps=20)  # 2.0 nominal device-hours
    nominal, measured = CostModel("nominal", eval_device_hours=0.25), CostModel("measured", devices=4)
    assert nominal.estimate_trial(c, 0.2) == pytest.approx(0.4)
    assert nominal.estimate_full(c, continued_steps=4) == pytest.approx(1.6)
    assert nominal.estimate_full(c) == pytest.approx(2.0)
    assert nominal.run_charge(c, _result(steps=4, trial=True)) == pytest.approx(0.4)
    assert nominal.run_charge(c, _result(steps=20, continued=4)) == pytest.approx(1.6)  # the trial paid for 4
    assert measured.run_charge(c, _result(wall=1800.0)) == pytest.approx(2.0)  # 0.5 h x 4 devices
    assert nominal.eval_charge(3, 10.0) == pytest.approx(0.75) and measured.eval_charge(3, 900.0) == pytest.approx(1.0)
    with pytest.raises(BadInput):
        CostModel("guess")


def test_ledger_is_idempotent_append_only_and_refuses_overspending(tmp_path):
    path = str(tmp_path / "ledger.db")
    ledger = Ledger(path)
    first = ledger.charge("E1", "trial:S01", kind="trial", device_hours=0.4, wall_seconds=12.0)
    again = ledger.charge("E1", "trial:S01", kind="trial", device_hours=9.9, wall_seconds=99.0)
    assert again == first and ledger.spent("E1") == pytest.approx(0.4)
    assert Ledger(path).remaining("E1", 1.0) == pytest.approx(0.6)  # persisted, schema re-opened
    assert ledger.can_afford("E1", 1.0, 0.6) and not ledger.can_afford("E1", 1.0, 0.61)
    for sql in ("UPDATE charges SET device_hours = 0", "DELETE FROM charges"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            ledger.db.execute(sql)
    assert ledger.spent("E2") == 0.0 and len(ledger.charges("E1")) == 1


def test_charge_run_uses_the_cost_model():
    ledger, c = Ledger(":memory:"), card("sft", steps=20)
    row = ledger.charge_run("E1", "trial:T", c, _result(steps=4, wall=3.0, trial=True), CostModel("nominal"))
    assert row["kind"] == "trial" and row["device_hours"] == pytest.approx(0.4) and row["wall_seconds"] == 3.0


def test_a_ledger_killed_mid_write_is_read_as_committed_not_refused(tmp_path):
    """kill -9 inside a charge's transaction leaves a hot journal beside the ledger, with uncommitted
    pages in the file. Ledger.existing (what a resume and `agent runs ls` read it through) must not
    refuse it: with a journal beside it, it checks the header only (a read-only open may fail on a
    hot journal or read the torn pages), and the writer's open rolls it back to the committed charges."""
    import os
    import sqlite3

    from trainers.ledger import Ledger

    path = tmp_path / "ledger.sqlite"
    first = Ledger(str(path))
    first.charge("e", "k", kind="eval", device_hours=0.1, wall_seconds=1.0)
    first.db.conn.close()
    pid = os.fork()
    if pid == 0:  # a writer whose uncommitted pages spill into the file, then dies
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA cache_size = 1")
        conn.execute("BEGIN IMMEDIATE")
        for i in range(3000):
            conn.execute("INSERT INTO charges VALUES ('e', ?, 'eval', 0.1, 1, 1, ?, 0, 0)", [f"k{i}", "x" * 200])
        os._exit(9)
    os.waitpid(pid, 0)
    assert (tmp_path / "ledger.sqlite-journal").exists()
    assert Ledger.existing(path).spent("e") == pytest.approx(0.1)
    assert not (tmp_path / "ledger.sqlite-journal").exists()
