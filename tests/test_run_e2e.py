"""Slow end to end: `agent run` on the test-size world with every real part (TRL, evaluators,
BCIT, gate, promotion, ledger, report), then `agent bank verify` and `agent audit`."""

from __future__ import annotations

import json

import pytest

from agent.cli import main
from experience_bank.bank import Bank


@pytest.mark.slow
def test_episode_on_the_test_world(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bank = str(tmp_path / "bank.sqlite")
    run_dir = tmp_path / "runs" / "ep-e2e"
    from pathlib import Path
    config = str(Path(__file__).resolve().parents[1] / "runs" / "test.yaml")
    assert main(["run", "--config", config, "--bank", bank, "--out", str(run_dir), "--quiet"]) == 0
    with Bank.open(bank) as b:
        events = b.events("ep-e2e")
        assert b.verify() == []
    actions = {e.action for e in events}
    assert {"reject", "validate", "train"} <= actions, [(e.candidate_id, e.action, e.outcome) for e in events]
    assert any(e.outcome in ("promoted", "rolled_back") for e in events)
    assert (run_dir / "report.md").exists() and (run_dir / "report.html").exists()
    assert len((run_dir / "decisions.jsonl").read_text().splitlines()) == len(events)
    assert main(["bank", "verify", "--bank", bank]) == 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["budget_device_hours"] == 6.0
    # a finished episode resumes to a no-op
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 0
    with Bank.open(bank) as b:
        assert len(b.events("ep-e2e")) == len(events)
