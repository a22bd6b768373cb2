"""Approval before spending (agent/run/approvals.py and agent/loop/approval.py): the real loop pauses with LangGraph's
interrupt() before a full run or a promotion, resumes with a person's answer, refuses an answer
for another decision, and records every answer in a hash-chained ledger and the report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import graph_fakes as fakes  # noqa: E402
from agent.run.approvals import entries, kinds, pending, verify
from agent.run.rundir import RunDir  # noqa: E402
from experience_bank.errors import BadInput  # noqa: E402


def _step(run_dir: Path, approve: str, answer: dict | None = None) -> dict:
    from agent.loop.episode import drive

    ctx, initial, bank = fakes.make_ctx(run_dir, approve=approve)
    ctx.progress = lambda node, update: update.get("node")  # as the live display reads every update
    try:
        return drive(ctx, initial, run_dir / "checkpoints.sqlite", answer)
    finally:
        bank.close()


def _full_runs(run_dir: Path) -> list[str]:
    rows = [json.loads(x) for x in (run_dir / "calls.jsonl").read_text().splitlines()] if (
        run_dir / "calls.jsonl").exists() else []
    return [r["key"] for r in rows if r["phase"] == "done" and r["key"].endswith(":train")]


def _answer(wait, approved: bool, by: str = "alice", reason: str = "") -> dict:
    return {"decision_hash": wait.decision_hash, "approved": approved, "by": by, "reason": reason}


def test_train_approval_pauses_resumes_and_a_rejection_carries_its_reason(tmp_path):
    run_dir = tmp_path / "E-fake"
    _step(run_dir, "train")
    wait = pending(run_dir)
    assert (wait.kind, wait.candidate_id) == ("train", "S02") and wait.device_hours > 0
    assert wait.decision["decision_hash"] == wait.decision_hash and wait.decision["candidate_id"] == "S02"
    assert _full_runs(run_dir) == []  # nothing spent before the answer
    # a resume without an answer (the process was killed while waiting) waits at the same point
    _step(run_dir, "train")
    assert pending(run_dir) == wait and entries(run_dir) == []
    _step(run_dir, "train", _answer(wait, True))
    assert len(_full_runs(run_dir)) == 1
    answers = {"S03": (False, "too costly this week"), "S05": (True, ""), "S06": (True, "")}
    while (wait := pending(run_dir)) is not None:
        approved, reason = answers[wait.candidate_id]
        final = _step(run_dir, "train", _answer(wait, approved, "bob", reason))
    assert final["stop_reason"] and len(_full_runs(run_dir)) == 3  # S02, S05, S06; S03 was refused
    rows = entries(run_dir)
    assert [(r["candidate_id"], r["approved"], r["by"]) for r in rows] == [
        ("S02", True, "alice"), ("S03", False, "bob"), ("S05", True, "bob"), ("S06", True, "bob")]
    assert verify(run_dir) == []
    from experience_bank.bank import Bank

    with Bank.open(run_dir / "bank.sqlite") as bank:
        s03 = next(e for e in bank.events("E-fake") if e.candidate_id == "S03")
    assert s03.outcome == "not_started" and "approval: train rejected by bob: too costly this week" in s03.reason
    report = (run_dir / "report.md").read_text()
    assert "## Approvals" in report and "too costly this week" in report
    # the chain is checked: an edited answer breaks it
    text = RunDir(run_dir).approvals_file.read_text().replace('"approved":false', '"approved":true')
    RunDir(run_dir).approvals_file.write_text(text)
    assert verify(run_dir) == ["approvals.jsonl line 2: broken chain"]  # S03's answer, the file's second line


def test_promotion_approval_rejected_is_a_rollback(tmp_path):
    run_dir = tmp_path / "E-fake"
    _step(run_dir, "promote")
    wait = pending(run_dir)
    assert (wait.kind, wait.candidate_id) == ("promote", "S02")
    final = _step(run_dir, "promote", _answer(wait, False, "carol", "not before the release"))
    while (wait := pending(run_dir)) is not None:
        final = _step(run_dir, "promote", _answer(wait, True))
    assert final["stage"] == 2  # S05 and S06; S02 rolled back by the approver
    from experience_bank.bank import Bank

    with Bank.open(run_dir / "bank.sqlite") as bank:
        s02 = next(e for e in bank.events("E-fake") if e.candidate_id == "S02")
    assert s02.outcome == "rolled_back" and "not before the release" in s02.reason


def test_approve_cli_refuses_another_hash_and_writes_nothing(tmp_path, capsys):
    from agent.cli.main import main

    run_dir = tmp_path / "E-fake"
    _step(run_dir, "train")
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert main(["approve", str(run_dir), "--decision", "f" * 64, "--yes"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "approval refused" in err[0] and pending(run_dir).decision_hash in err[0]
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_no_approval_by_default():
    from agent.config import RunConfig

    assert RunConfig().approve is None


@pytest.mark.parametrize("text, said", [(b'{"kind":', "Invalid JSON"), (b"[1]", "Input should be an object"),
                                        (b'{"kind": "train"}', "Field required"), (b"\x9e\x01", "Invalid JSON")])
def test_a_damaged_pending_approval_is_one_line_naming_the_file_and_the_resume(tmp_path, capsys, text, said):
    from agent.cli.main import main  # noqa: PLC0415

    run_dir = tmp_path / "E-x"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text("{}")
    RunDir(run_dir).approval_pending_file.write_bytes(text)
    assert main(["approve", str(run_dir), "--decision", "a" * 64, "--yes"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and said in err and f"agent run --resume {run_dir}" in err
    assert RunDir(run_dir).approval_pending_file.read_bytes() == text


@pytest.mark.parametrize("text", [",,,", " ", "", " , "])
def test_an_approve_value_naming_no_kind_is_refused(text):
    """`--approve ",,,"` asked for approvals but was read as none: the run went unattended."""
    with pytest.raises(BadInput) as info:
        kinds(text)
    assert str(info.value) == (f"--approve {text!r} names no kind: pass one or both of train, promote "
                               "(e.g. --approve train,promote), or leave --approve out to run unattended")
    assert kinds(None) == () and kinds("promote, train") == ("promote", "train")


def test_agent_run_with_an_empty_approve_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from agent.cli.main import main  # noqa: PLC0415

    def tripwire(*a, **k):
        raise AssertionError("agent run went past its input checks")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("agent.loop.episode._world_and_bank", tripwire)
    assert main(["run", "--approve", ",,,", "--out", "runs/ep-x", "--bank", "b.sqlite", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("agent: error: --approve ',,,' names no kind") and "train, promote" in err[0]
    assert list(tmp_path.iterdir()) == []
