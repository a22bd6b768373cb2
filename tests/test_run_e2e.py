"""Slow end to end: `agent run` on the test-size world with every real part (TRL runs, evaluators,
BCIT, the gate, promotion, ledger, audit ledger, report), then `agent bank verify`, `agent audit`,
and a resume of the finished run.

The bank is a small hand-made L(0) over three catalogue cards whose evidence is chosen so that
BCIT routes one to Train (grade A, replicated), one to Validate (grade B) and one to Reject
(grade C, tiny effect): the routing is then certain, and everything after it is real.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent.cli.main import main
from experience_bank.bank import Bank
from experience_bank.hashing import content_hash

CONFIG = str(Path(__file__).resolve().parents[1] / "runs" / "test.yaml")
PLAN = {"S05": ("A", 10.0), "S09": ("B", 6.0), "S01": ("C", 1.0)}


def crafted_bank(path: Path) -> None:
    from agent.world.catalogue import applicability, card_by_id, runtime_of
    from agent.world.embedded import ensure_world
    from experience_bank.records import HistoricalRecord, Provenance, SourceContext, SourceEvidence

    world = ensure_world("test")
    records = []
    for cid, (grade, delta) in PLAN.items():
        card = card_by_id(world, cid)
        data = {m.dataset.id: m.dataset.sha256 for m in card.data.mix}
        src = SourceContext(parent=world.model, stage=0, family=card.family, task=f"{card.family}/source",
                            datasets=data, runtime=runtime_of(card), eval_protocol=world.eval_protocol,
                            output_protocol=world.output_protocols[card.family])
        ev = SourceEvidence(target_metric=f"{card.family}/source.score", delta_src=delta, delta_point=delta,
                            kappa=10.0, grade=grade, chi=1 if grade == "A" else 0,
                            replicates=2 if grade == "A" else 1)
        prov = Provenance(model_sha256=world.model.sha256, data_sha256=data, config_sha256=card.content_hash(),
                          eval_sha256=content_hash(["crafted", cid]), produced_by="tests/test_run_e2e.py")
        records.append(HistoricalRecord(card=card, source=src, evidence=ev, applicability=applicability(card, world),
                                        provenance=prov))
    with Bank.init(path) as bank:
        bank.import_records(records, library_note="crafted L(0) for the end-to-end test")


@pytest.mark.slow
def test_episode_on_the_test_world(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bank = tmp_path / "bank.sqlite"
    crafted_bank(bank)
    run_dir = tmp_path / "runs" / "ep-e2e"
    argv = ["run", "--config", CONFIG, "--bank", str(bank), "--out", str(run_dir), "--episode-budget", "12gpuh",
            "--quiet"]
    assert main(argv) == 0
    with Bank.open(bank) as b:
        events = b.events("ep-e2e")
        assert b.verify() == []
        assert b.current_library_version() == json.loads((run_dir / "manifest.json").read_text())["library_version"] + 1
    table = [(e.candidate_id, e.action, e.outcome) for e in events]
    assert {"reject", "validate", "train"} <= {e.action for e in events}, table
    assert any(e.outcome in ("promoted", "rolled_back") for e in events), table
    assert (run_dir / "report.md").exists() and (run_dir / "report.html").exists()
    assert main(["bank", "verify", "--bank", str(bank)]) == 0
    assert main(["audit", str(run_dir)]) == 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["budget_device_hours"] == 12.0
    # the report again, from a copy of the run directory alone: no world (an empty cache), no bank
    copy = tmp_path / "copy" / run_dir.name
    shutil.copytree(run_dir, copy)
    (copy / "report.md").write_text("stale")
    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "empty-cache"))
    assert main(["runs", "report", str(copy)]) == 0
    assert (copy / "report.md").read_bytes() == (run_dir / "report.md").read_bytes()
    # a finished episode resumes to a no-op
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 0
    with Bank.open(bank) as b:
        assert len(b.events("ep-e2e")) == len(events)
