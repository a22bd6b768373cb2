"""The run's audit writer: policies/audit.py's chained ledger, written once per decision, passes `agent audit`."""

from __future__ import annotations

import bank_factory as bf
from agent.episode import RunAudit
from agent.cli.main import main
from experience_bank.records import CurrentContext
from policies import EpisodeState, PolicyConfig, decide


def _context() -> CurrentContext:
    src = bf.source()
    return CurrentContext(parent=src.parent, stage=0, families=("sql",), tasks={"sql": "sql/target"},
                          datasets=dict(src.datasets), runtimes=("trl-sft",), eval_protocol=src.eval_protocol,
                          output_protocols={"sql": "sql"})


def test_decisions_written_once_and_audit_passes(tmp_path, capsys):
    cfg = PolicyConfig()
    audit = RunAudit(tmp_path, cfg, min_gain_pp=1.0, ifeval_drop_pp=2.0)
    ctx = _context()
    for cid in ("S01", "S02"):
        rec = bf.record(cid, seed=cid)
        d = decide(rec, ctx, "bcit", EpisodeState(), cfg)
        episode = {"proposals_authorized": 0, "leases_used": 0}
        audit.decision(d, rec, ctx, episode)
        audit.decision(d, rec, ctx, episode)  # a re-run node writes nothing
        event = bf.event("E1", 0, cid).model_copy(update={"decision": d, "action": d.action, "outcome": "rolled_back",
                                                          "metrics": {"gain.sql/target.exec_acc": -3.0}})
        audit.outcome(event, None)
        audit.outcome(event, None)
    assert len((tmp_path / "decisions.jsonl").read_text().splitlines()) == 2
    assert len((tmp_path / "outcomes.jsonl").read_text().splitlines()) == 2
    assert main(["audit", str(tmp_path)]) == 0
