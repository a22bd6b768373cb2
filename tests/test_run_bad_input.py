"""`agent run` on bad input: one line naming the problem and the fix, exit 2, nothing written."""

from __future__ import annotations

import pytest

from agent.cli.main import main
from experience_bank.bank import Bank


def _listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("argv, needle", [
    (["--episode-budget=-3h"], "budget"),
    (["--episode-budget", "abc"], "budget 'abc'"),
    (["--config", "missing.yaml"], "config file missing.yaml not found"),
    (["--policy", "nope"], "unknown policy"),
    (["--proposer", "openai"], "needs --base-url"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    before = _listing(tmp_path)
    assert main(["run", "--out", "runs/ep-x", "--bank", "b.sqlite", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
    assert _listing(tmp_path) == before


def test_unparseable_config(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("episode_budget: [\n")
    assert main(["run", "--config", "c.yaml", "--out", "runs/ep-x"]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_missing_model(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("base_model: /nonexistent/model\n")
    assert main(["run", "--config", "c.yaml", "--out", "runs/ep-x"]) == 2
    assert "base model /nonexistent/model not found" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_bank_from_a_newer_schema(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Bank.init(tmp_path / "b.sqlite").close()
    import sqlite3
    conn = sqlite3.connect(tmp_path / "b.sqlite")
    conn.execute("PRAGMA user_version = 999")
    conn.commit()
    conn.close()
    assert main(["run", "--bank", "b.sqlite", "--out", "runs/ep-x"]) == 2
    assert "newer" in capsys.readouterr().err.lower()
    assert not (tmp_path / "runs").exists()


def test_resume_of_unknown_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--resume", "ep-none"]) == 2
    assert "no run to resume" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"", b"not a bank", b"SQLite format 3\x00" + b"\x01" * 4000])
def test_a_bank_that_is_not_a_bank_is_refused_untouched(tmp_path, monkeypatch, capsys, content):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "b.sqlite").write_bytes(content)
    before = _listing(tmp_path)
    assert main(["run", "--bank", "b.sqlite", "--out", "runs/ep-x", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bank b.sqlite is" in err[0]
    assert (tmp_path / "b.sqlite").read_bytes() == content and _listing(tmp_path) == before


def test_out_that_is_an_existing_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken").write_text("x")
    assert main(["run", "--out", "taken", "--bank", "b.sqlite", "--quiet"]) == 2
    assert "--out taken is an existing file" in capsys.readouterr().err
    assert _listing(tmp_path) == ["taken"]
