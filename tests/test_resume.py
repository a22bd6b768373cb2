"""kill -9 at several points of a (fake-boundary) episode, then resume: it finishes with the same
history and ledger as an uninterrupted run; nothing trained, charged or recorded twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from experience_bank.bank import Bank
from support.graph_fakes import ledger_rows, run_fake

SCRIPT = Path(__file__).with_name("support") / "graph_fakes.py"
POINTS = ["decided:S02", "trial:S02:mid", "trial:S02:done", "train:S02:mid", "train:S06:done", "promote",
          "appended:S03", "appended:S06"]


def _run(run_dir: Path, kill: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "FAKE_KILL"}
    if kill:
        env["FAKE_KILL"] = kill
    return subprocess.run([sys.executable, str(SCRIPT), str(run_dir)], env=env, capture_output=True, text=True,
                          timeout=120)


def _summary(run_dir: Path):
    with Bank.open(run_dir / "bank.sqlite") as bank:
        events = [(e.seq, e.candidate_id, e.outcome, e.cost_device_hours, e.reason) for e in bank.events("E-fake")]
        problems = bank.verify()
    ledger = sorted((r["key"][:80], r["h"]) for r in ledger_rows(run_dir))
    calls = [json.loads(x) for x in (run_dir / "calls.jsonl").read_text().splitlines()]
    done = [c["key"] for c in calls if c["phase"] == "done"]
    audit = [len((run_dir / f).read_text().splitlines()) for f in ("decisions.jsonl", "outcomes.jsonl")]
    return events, problems, ledger, done, audit


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ref")
    run_fake(run_dir)
    events, problems, ledger, done, audit = _summary(run_dir)
    return events, ledger, audit


@pytest.mark.parametrize("point", POINTS)
def test_kill_then_resume_finishes_without_duplicates(tmp_path, point, reference):
    killed = _run(tmp_path, point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = _run(tmp_path, None)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout.splitlines()[-1])["stop_reason"] == "candidates_exhausted"
    events, problems, ledger, done, audit = _summary(tmp_path)
    ref_events, ref_ledger, ref_audit = reference
    assert problems == []
    assert [e[:3] for e in events] == [e[:3] for e in ref_events]
    assert [e[3] for e in events] == [e[3] for e in ref_events]
    assert len(done) == len(set(done)) == 7          # trained once per run key
    assert [h for _, h in ledger] == [h for _, h in ref_ledger] and len({k for k, _ in ledger}) == len(ledger)
    assert audit == ref_audit
    assert (tmp_path / "report.md").exists()


ABSENT = ("decision_hash", "action", "rule", "trial_verdict", "train_status", "verdict", "decided_by", "refused",
          "stop_reason")
"""State keys that may be absent: None now, '' in a checkpoint written before the state was typed."""


def test_a_checkpoint_holding_the_old_empty_string_sentinels_resumes_alike(tmp_path, reference):
    """A run stopped after S02's trial, its absent keys rewritten to '' as the old writer left
    them, resumes to the uninterrupted run's history, ledger and audit files."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    from agent.loop.episode import RECURSION_LIMIT, drive
    from agent.loop.graph import build_graph
    from agent.run.checkpoints import strict_serde
    from support.graph_fakes import make_ctx

    ctx, initial, bank = make_ctx(tmp_path)
    config = {"configurable": {"thread_id": ctx.episode_id}, "recursion_limit": RECURSION_LIMIT}
    conn = sqlite3.connect(str(tmp_path / "checkpoints.sqlite"), check_same_thread=False)
    try:
        graph = build_graph(SqliteSaver(conn, serde=strict_serde()))
        for chunk in graph.stream(initial, config, context=ctx, durability="sync", stream_mode="updates"):
            if "validate" in chunk:
                break  # S02's trial passed; its full run, gate and commit are still to come
        values = graph.get_state(config).values
        old = {k: "" for k in ABSENT if values.get(k) is None}
        assert {"train_status", "verdict", "refused", "stop_reason"} <= set(old)
        graph.update_state(config, old, as_node="validate")
    finally:
        conn.close()
    try:
        final = drive(ctx, initial, tmp_path / "checkpoints.sqlite")
    finally:
        bank.close()
    events, problems, ledger, done, audit = _summary(tmp_path)
    ref_events, ref_ledger, ref_audit = reference
    assert problems == [] and final["stop_reason"] == "candidates_exhausted"
    assert events == ref_events
    assert ledger == ref_ledger and audit == ref_audit
    assert final["trial_verdict"] is None and final["refused"] is None  # S06 trained directly: no trial, none refused


def test_select_leaves_what_the_next_decision_has_not_decided_as_none(tmp_path):
    from types import SimpleNamespace

    from agent.loop import nodes
    from support.graph_fakes import make_ctx

    ctx, initial, bank = make_ctx(tmp_path)
    try:
        picked = nodes.select(initial | {"candidates": list(ctx.entries)}, SimpleNamespace(context=ctx))
    finally:
        bank.close()
    assert picked["candidate_id"] == "S01"
    assert {k: picked[k] for k in ABSENT if k in picked} == {k: None for k in ABSENT if k != "stop_reason"}
