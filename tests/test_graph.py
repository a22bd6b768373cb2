"""The whole loop on small fakes at the boundary: routing, events, ledger, audit, report, stop rules."""

from __future__ import annotations

import json

import pytest

from agent.run.rundir import RunDir
from experience_bank.bank import Bank
from support.graph_fakes import ledger_rows, run_fake


def _events(run_dir):
    with Bank.open(run_dir / "bank.sqlite") as bank:
        return bank.events("E-fake"), bank.verify(), bank.current_library_version()


def test_episode_routes_every_action_and_outcome(tmp_path):
    final = run_fake(tmp_path)
    events, problems, version = _events(tmp_path)
    assert problems == []
    assert final["stop_reason"] == "candidates_exhausted"
    assert [(e.candidate_id, e.action, e.outcome) for e in events] == [
        ("S01", "reject", "rejected"), ("S02", "validate", "promoted"), ("S03", "train", "rolled_back"),
        ("S04", "validate", "trial_failed"), ("S05", "validate", "promoted"), ("S06", "train", "promoted")]
    assert final["stage"] == 3 and final["library_version"] == version
    assert json.loads((tmp_path / "filtered.json").read_text()) == {"X07": "dataset missing: fake"}
    # every decision was frozen before its outcome; one outcome cell per decision that ran
    assert len((tmp_path / "decisions.jsonl").read_text().splitlines()) == 6
    cells = [json.loads(x) for x in (tmp_path / "outcomes.jsonl").read_text().splitlines()]
    assert [c["candidate_id"] for c in cells] == ["S02", "S03", "S04", "S05", "S06"]
    assert [c["trial_verdict"] for c in cells] == ["pass", None, "fail", "inconclusive", None]
    report = (tmp_path / "report.md").read_text()
    assert "| S05 |" in report and "Trial fidelity" in report and (tmp_path / "report.html").exists()
    assert (tmp_path / "captrack_heatmap.png").exists()


def test_each_promotion_extends_the_current_parents_lineage(tmp_path):
    final = run_fake(tmp_path)
    ctxs = [json.loads(x)["inputs"]["context"] for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    chain = [(c["stage"], c["parent"]["sha256"], tuple(c["parent"].get("lineage", ()))) for c in ctxs]
    parents = list(dict.fromkeys(sha for _, sha, _ in chain))  # in promotion order
    assert [stage for stage, _, _ in chain] == [0, 0, 1, 1, 1, 2]
    for stage, sha, lineage in chain:  # the authorizer saw every ancestor, oldest first
        assert lineage == tuple(parents[:stage]) and sha == parents[stage]
    assert final["lineage"] == parents  # after the third promotion: the three parents before it


def test_ledger_matches_events_plus_shared_evaluations(tmp_path):
    final = run_fake(tmp_path)
    events, _, _ = _events(tmp_path)
    rows = ledger_rows(tmp_path)
    assert len({r["key"] for r in rows}) == len(rows)
    # An event is charged its trial, its full run and the evaluations of the children they made;
    # every other charge is shared between decisions: an evaluation of the initial model or of a
    # parent, and the endpoint's.
    rd, owned = RunDir(tmp_path), set()
    for e in events:
        dh = e.decision.decision_hash
        trial, run, verdict = rd.trial(dh), rd.train(dh), rd.verdict(dh)
        owned |= {f"{dh}:trial", f"{dh}:train"}
        owned |= {f"eval:{trial.train.checkpoint_sha256}:validation"} if trial else set()
        owned |= {f"eval:{run.checkpoint_sha256}:adoption"} if verdict else set()
    shared = [r for r in rows if r["key"] not in owned]
    parents = {rd.manifest().initial.sha256, *final["lineage"], final["parent_sha"]}
    assert {r["key"].split(":")[1] for r in shared if r["key"].startswith("eval:")} <= parents
    assert [r["key"] for r in shared if not r["key"].startswith("eval:")] == ["endpoint:test"]
    assert sum(r["h"] for r in shared) > 0
    assert sum(r["h"] for r in rows) == pytest.approx(sum(e.cost_device_hours for e in events)
                                                      + sum(r["h"] for r in shared))


def test_trainer_runs_once_per_key(tmp_path):
    run_fake(tmp_path)
    done = [json.loads(x)["key"] for x in (tmp_path / "calls.jsonl").read_text().splitlines()
            if json.loads(x)["phase"] == "done"]
    assert len(done) == len(set(done)) == 3 + 4  # 3 trials, 4 full runs


def test_small_budget_stops_and_does_not_start_what_cannot_fit(tmp_path):
    final = run_fake(tmp_path, budget_h=1.0)
    events, problems, _ = _events(tmp_path)
    rows = ledger_rows(tmp_path)
    assert problems == []
    assert sum(r["h"] for r in rows) <= 1.0 + 1e-9
    assert any(e.outcome == "not_started" for e in events)
    assert final["stop_reason"] in ("budget_exhausted", "candidates_exhausted")


def test_consecutive_rejections_stop(tmp_path):
    final = run_fake(tmp_path, max_rejections=1)
    events, _, _ = _events(tmp_path)
    assert final["stop_reason"] == "consecutive_rejections"
    assert [e.candidate_id for e in events] == ["S01"]


def test_rerun_of_finished_episode_is_a_no_op(tmp_path):
    run_fake(tmp_path)
    before = ledger_rows(tmp_path)
    final = run_fake(tmp_path)
    assert final["stop_reason"] == "candidates_exhausted"
    assert ledger_rows(tmp_path) == before


def test_checkpoint_state_is_plain_json(tmp_path):
    import sqlite3

    from agent.run.checkpoints import strict_serde
    run_fake(tmp_path)
    conn = sqlite3.connect(tmp_path / "checkpoints.sqlite")
    serde = strict_serde()
    for type_, blob in conn.execute("SELECT type, checkpoint FROM checkpoints"):
        cp = serde.loads_typed((type_, blob))
        json.dumps(cp["channel_values"])  # ids and scalars only
    assert not conn.execute("SELECT 1 FROM writes WHERE type = 'pickle'").fetchall()


def test_the_final_parent_is_scored_once_on_the_test_split_and_charged(tmp_path):
    final = run_fake(tmp_path)
    rows = {r["key"]: r for r in ledger_rows(tmp_path)}
    from agent.run.rundir import RunDir

    assert RunDir(tmp_path).has_evaluation(final["parent_sha"], "test")
    test_evals = [k for k in rows if k.endswith(":test")]
    assert test_evals == ["endpoint:test"] and rows["endpoint:test"]["h"] == 0.25  # the config's eval_device_hours
    # no other model was scored on the test split
    assert sorted(p.name for p in (tmp_path / "evals").iterdir() if p.name.endswith("-test")) == [
        f"{final['parent_sha'][:16]}-test"]


def test_the_endpoint_evaluation_is_kept_back_from_the_budget(tmp_path):
    """At every budget the endpoint still fits: runs stop where they would eat its share."""
    for budget in (0.6, 0.9, 2.0, 3.0, 3.5, 5.0):  # without the reserve 2.0 would end at 2.2
        run_dir = tmp_path / f"b{budget}"
        run_fake(run_dir, budget_h=budget)
        rows = ledger_rows(run_dir)
        assert any(r["key"] == "endpoint:test" for r in rows)
        assert sum(r["h"] for r in rows) <= budget + 1e-9, budget
