"""Slow end to end on the test-size world: two imported TRL recipes and one LlamaFactory recipe
decided beside a crafted library, `--approve train` (approved once, refused once), then the
approvals in the ledger and the report, lm-eval-shaped files that lm-eval's code reads, and a
model card that huggingface_hub loads for every promotion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli.main import main

RECIPES = Path(__file__).resolve().parent / "fixtures" / "recipes"
CONFIG = str(Path(__file__).resolve().parents[1] / "runs" / "test.yaml")


@pytest.mark.slow
def test_cards_approvals_lmeval_files_and_model_cards_on_the_test_world(tmp_path, monkeypatch, capsys):
    from huggingface_hub import ModelCard

    from agent.run.approvals import entries, pending, verify
    from experience_bank.bank import Bank
    import test_run_e2e
    from test_run_e2e import crafted_bank

    monkeypatch.chdir(tmp_path)
    # two grade-A records: two full runs to answer (yes, then no); one grade C: a rejection
    monkeypatch.setattr(test_run_e2e, "PLAN", {"S05": ("A", 10.0), "S09": ("A", 10.0), "S01": ("C", 1.0)})
    for name in ("trl_sft_sql.yaml", "trl_grpo_sql.yaml", "llamafactory_lora_sft.yaml"):
        assert main(["cards", "import", str(RECIPES / name), "--config", CONFIG, "--device-hours", "1",
                     "--out", "cards"]) == 0
    crafted_bank(tmp_path / "bank.sqlite")
    run_dir = tmp_path / "runs" / "ep-users"
    assert main(["run", "--config", CONFIG, "--bank", "bank.sqlite", "--out", str(run_dir), "--cards", "cards",
                 "--approve", "train", "--episode-budget", "12gpuh", "--quiet", "--no-tracking"]) == 0
    answers = iter([("--yes", ""), ("--no", "not this week")])
    while (wait := pending(run_dir)) is not None:
        flag, reason = next(answers, ("--yes", ""))
        assert main(["approve", str(run_dir), "--decision", "0" * 64, "--yes"]) == 2  # another hash: refused
        assert pending(run_dir) == wait
        argv = ["approve", str(run_dir), "--decision", wait.decision_hash, flag, "--by", "tester"]
        assert main(argv + (["--reason", reason] if reason else [])) == 0
    rows = entries(run_dir)
    assert [r["approved"] for r in rows[:2]] == [True, False] and verify(run_dir) == []
    with Bank.open(tmp_path / "bank.sqlite") as bank:
        events = bank.events("ep-users")
    assert {e.candidate_id for e in events} >= {"U-trl_sft_sql", "U-trl_grpo_sql", "U-llamafactory_lora_sft"}
    refused = next(e for e in events if e.decision.decision_hash == rows[1]["decision_hash"])
    assert refused.outcome == "not_started" and "not this week" in refused.reason
    report = (run_dir / "report.md").read_text()
    assert "## Approvals" in report and "not this week" in report
    # lm-eval's own readers find every evaluation's files
    import lm_eval.utils as lm

    folders = {p.parent for p in run_dir.rglob("*.identity.json")}
    assert folders
    for folder in folders:
        files = [p.as_posix() for p in folder.iterdir()]
        doc = json.loads(Path(lm.get_latest_filename(lm.get_results_filenames(files))).read_text())
        for stem in folder.glob("*.result.json"):
            result = json.loads(stem.read_text())
            task = result["identity"]["suite"].replace("/", "_")
            assert {k.removesuffix(",none"): v for k, v in doc["results"][task].items()
                    if k.endswith(",none") and "_stderr" not in k} == result["metrics"]
    # every promotion left a card in the promoted folder
    from agent.run.rundir import RunDir

    for e in events:
        if e.outcome == "promoted":
            train = RunDir(run_dir).train(e.decision.decision_hash)
            card = ModelCard.load(Path(train.checkpoint) / "README.md")
            assert card.data.posttrain_agent["decision_hash"] == e.decision.decision_hash


@pytest.mark.slow
def test_a_second_run_decides_the_imported_card_on_what_the_first_consolidated(tmp_path, monkeypatch, capsys):
    """`agent run --cards` twice on one bank: the first run measures the new card and its
    consolidation keeps the observation; the second accepts the same card and decides it on
    that record. The card changed under the same id is refused, nothing written."""
    from experience_bank.bank import Bank
    from test_run_e2e import crafted_bank

    monkeypatch.chdir(tmp_path)
    assert main(["cards", "import", str(RECIPES / "trl_sft_sql.yaml"), "--config", CONFIG, "--device-hours", "1",
                 "--out", "cards"]) == 0
    crafted_bank(tmp_path / "bank.sqlite")
    argv = ["run", "--config", CONFIG, "--bank", "bank.sqlite", "--cards", "cards", "--cards-only",
            "--episode-budget", "6gpuh", "--quiet", "--no-tracking"]
    assert main(argv + ["--out", "runs/ep-1"]) == 0
    with Bank.open(tmp_path / "bank.sqlite") as bank:
        (first,) = [e for e in bank.events("ep-1") if e.candidate_id == "U-trl_sft_sql"]
        held = bank.library_entries_for("U-trl_sft_sql")
    assert first.decision.features.is_new and first.action != "reject"  # new: measured by a trial or a run
    assert len(held) == 1 and held[0].record.kind == "historical"
    assert main(argv + ["--out", "runs/ep-2"]) == 0
    with Bank.open(tmp_path / "bank.sqlite") as bank:
        (second,) = [e for e in bank.events("ep-2") if e.candidate_id == "U-trl_sft_sql"]
    f = second.decision.features
    assert not f.is_new and f.record_hash == held[0].hash
    assert (f.grade, f.delta_src) == (held[0].record.evidence.grade, held[0].record.evidence.delta_src)
    decided = [json.loads(line) for line in (tmp_path / "runs/ep-2/decisions.jsonl").read_text().splitlines()]
    assert decided[0]["decision"]["features"]["grade"] == "B"
    # the recipe changed under the same id: refused in one line, nothing written
    changed = tmp_path / "trl_sft_sql.yaml"
    changed.write_text((RECIPES / "trl_sft_sql.yaml").read_text().replace("2.0e-4", "1.0e-4"))
    assert main(["cards", "import", str(changed), "--config", CONFIG, "--device-hours", "1", "--out", "cards"]) == 2
    assert "cards/U-trl_sft_sql.json already holds card U-trl_sft_sql: pass --replace" in capsys.readouterr().err
    assert main(["cards", "import", str(changed), "--config", CONFIG, "--device-hours", "1", "--out", "cards",
                 "--replace"]) == 0
    capsys.readouterr()
    before = (tmp_path / "bank.sqlite").read_bytes()
    assert main(argv + ["--out", "runs/ep-3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "card id U-trl_sft_sql" in err[0] and "rename it" in err[0], err
    assert not (tmp_path / "runs/ep-3").exists() and (tmp_path / "bank.sqlite").read_bytes() == before
