"""The run cache saves wall-clock, not accounting: on the test-size world an episode's decisions,
events, ledger charges and report are the same with the cache off, cold and warm."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent.cli.main import main
from experience_bank.bank import Bank
from test_run_e2e import CONFIG, crafted_bank
from trainers.ledger import Ledger

TIMING = ("wall_seconds", "created_at", "cached")  # the only columns allowed to differ


def _episode(root: Path, bank0: Path, monkeypatch) -> dict:
    root.mkdir()
    shutil.copy(bank0, root / "bank.sqlite")  # every variant starts from the same library
    monkeypatch.chdir(root)  # relative paths: the manifests (which name the bank) are then equal too
    run_dir = root / "runs" / "ep"  # the same episode id in every variant
    assert main(["run", "--config", CONFIG, "--bank", "bank.sqlite", "--out", "runs/ep",
                 "--episode-budget", "12gpuh", "--quiet", "--no-tracking"]) == 0
    with Bank.open(root / "bank.sqlite") as bank:
        events = [{k: v for k, v in e.model_dump(mode="json").items() if k != "wall_seconds"} for e in bank.events("ep")]
    rows = Ledger(str(run_dir / "ledger.sqlite")).charges("ep")
    return {"events": events, "ledger": [{k: v for k, v in r.items() if k not in TIMING} for r in rows],
            "served": [r["key"] for r in rows if r["cached"]], "rows": rows,
            "decisions": (run_dir / "decisions.jsonl").read_text(), "report": _decisions_part(run_dir / "report.md"),
            "time": (run_dir / "report.md").read_text().split("## Where the wall-clock went")[1]}


def _decisions_part(report: Path) -> str:
    """The report without its last section, the one that measures this process's wall-clock."""
    from agent.views.report import TIME_SECTION

    text = report.read_text()
    assert f"## {TIME_SECTION}" in text
    return text.split(f"## {TIME_SECTION}")[0]


@pytest.mark.slow
def test_an_episode_is_the_same_with_the_cache_off_cold_and_warm(tmp_path, monkeypatch):
    bank0 = tmp_path / "bank0.sqlite"
    crafted_bank(bank0)
    monkeypatch.setenv("AGENT_RUN_CACHE", str(tmp_path / "cache"))
    off = _episode(tmp_path / "off", bank0, monkeypatch)  # AGENT_NO_CACHE=1 (tests/conftest.py)
    monkeypatch.delenv("AGENT_NO_CACHE")
    cold = _episode(tmp_path / "cold", bank0, monkeypatch)
    warm = _episode(tmp_path / "warm", bank0, monkeypatch)
    for part in ("events", "ledger", "decisions", "report"):
        assert off[part] == cold[part] == warm[part], part
    assert off["served"] == cold["served"] == []
    # warm: every trial, full run and evaluation came from the cache, at the cost it had when it ran
    assert warm["served"] == [r["key"] for r in warm["rows"]] and len(warm["served"]) >= 5
    kinds = {r["kind"] for r in warm["rows"]}
    assert {"trial", "train", "eval"} <= kinds
    assert [r["wall_seconds"] for r in warm["rows"] if r["kind"] != "eval"] == [
        r["wall_seconds"] for r in cold["rows"] if r["kind"] != "eval"]
    # the report's time section: the cold episode spent its charges, the warm one was served them
    n = len(warm["rows"])
    assert f"Run cache: 0 of {n} charges served" in cold["time"]
    assert f"Run cache: {n} of {n} charges served" in warm["time"]
    cold_rows = {r.split("|")[1].strip(): r.split("|")[2:4] for r in cold["time"].splitlines()
                 if r.startswith("| ") and not r.startswith("| part")}
    assert int(cold_rows["trials"][0]) == sum(r["kind"] == "trial" for r in cold["rows"])
    assert float(cold_rows["full_runs"][1]) == pytest.approx(
        sum(r["wall_seconds"] for r in cold["rows"] if r["kind"] == "train"), abs=0.01)
