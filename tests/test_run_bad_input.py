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
    (["--gonogo-model", "m.json"], "read by bcit_predictive only, not --policy bcit"),
    (["--policy", "validate_all", "--gonogo-model", "m.json"], "not --policy validate_all: drop --gonogo-model"),
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


def test_a_budget_below_the_final_evaluation_is_refused_untouched(tmp_path, monkeypatch, capsys):
    """Every episode ends by evaluating its final parent on the test split (eval_device_hours): a
    budget below it was accepted and overspent ("spent 0.100 of 0.000")."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("world: test\neval_device_hours: 0.1\n")
    assert main(["run", "--config", "c.yaml", "--out", "runs/ep-x", "--bank", "b.sqlite",
                 "--episode-budget", "0.05gpuh", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["agent: error: --episode-budget 0.05 device-hours does not pay for the final test evaluation "
                   "(0.1 device-hours, eval_device_hours): give at least 0.1gpuh"]
    assert _listing(tmp_path) == ["c.yaml"]


def _sqlite_with(path, *tables):
    import sqlite3

    conn = sqlite3.connect(path)
    for t in tables:
        conn.execute(f"CREATE TABLE {t} (x)")
    conn.commit()
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("tables", [("foo",), ("charges",), ("checkpoints", "writes")])
def test_another_sqlite_database_is_no_bank_and_stays_as_it_was(tmp_path, monkeypatch, capsys, tables):
    """A run's ledger, its LangGraph checkpoints or any other database given as --bank was migrated
    into a bank (the bank's tables added beside its own)."""
    monkeypatch.chdir(tmp_path)
    content = _sqlite_with(tmp_path / "b.sqlite", *tables)
    assert main(["run", "--bank", "b.sqlite", "--out", "runs/ep-x", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bank b.sqlite is an SQLite database but not an experience bank" in err[0]
    assert tables[0] in err[0]
    for argv in (["bank", "head", "--bank", "b.sqlite"], ["bank", "list", "--bank", "b.sqlite"]):
        assert main(argv) == 2 and "not an experience bank" in capsys.readouterr().err
    assert (tmp_path / "b.sqlite").read_bytes() == content and _listing(tmp_path) == ["b.sqlite"]


def _started_run(tmp_path, name="ep-1"):
    from test_runs_cli import _episode  # tests/ is on sys.path

    return _episode(tmp_path / "runs", name, policy="bcit", charges=[0.5], promote=False, report=False)


def test_a_copied_or_renamed_run_is_not_resumed_as_a_new_episode(tmp_path, monkeypatch, capsys):
    """The directory's name is its episode id: resumed under another name, a copy of a run ran the
    whole episode again as a new episode (charged twice, a new bank episode and library version)."""
    import shutil

    monkeypatch.chdir(tmp_path)
    run = _started_run(tmp_path)
    copy = shutil.copytree(run, tmp_path / "runs" / "ep-copy")
    before = _listing(tmp_path)
    assert main(["run", "--resume", str(copy), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"agent: error: {copy} holds episode 'ep-1' (its manifest), and a run directory's name is its "
                   f"episode id: resume it as {copy.with_name('ep-1')}, or start a new run with another --out"]
    assert _listing(tmp_path) == before


@pytest.mark.parametrize("damage, said", [
    ("checkpoints missing", "checkpoints.sqlite (the run's graph checkpoints) is missing"),
    ("checkpoints empty", "checkpoints.sqlite (the run's graph checkpoints) is empty (0 bytes)"),
    ("checkpoints junk", "checkpoints.sqlite (the run's graph checkpoints) is not an SQLite database"),
    ("checkpoints truncated", "checkpoints.sqlite (the run's graph checkpoints) is damaged"),
    ("ledger missing", "ledger.sqlite is missing: restore it from a copy"),
    ("ledger junk", "ledger.sqlite is not an SQLite database"),
    ("ledger foreign", "ledger.sqlite is an SQLite database without a charges table"),
])
def test_a_run_that_lost_its_history_is_not_resumed(tmp_path, monkeypatch, capsys, damage, said):
    """After the graph's first node (proposals.json), a resume without sound checkpoints started the
    graph again from its first node (and wrote a new checkpoints file before refusing); without its
    ledger it forgot every charge and went on; a damaged one was a traceback."""
    monkeypatch.chdir(tmp_path)
    run = _started_run(tmp_path)
    (run / "proposals.json").write_text("[]")
    _sqlite_with(run / "checkpoints.sqlite", "checkpoints", "writes")
    what, how = damage.split()
    file = run / f"{what}.sqlite"
    if how == "missing":
        file.unlink()
    elif how == "empty":
        file.write_bytes(b"")
    elif how == "junk":
        file.write_text("junk\n")
    elif how == "truncated":
        file.write_bytes(_sqlite_with(tmp_path / "big.sqlite", *(f"t{i}" for i in range(40)))[:2500])
    else:  # another database in its place
        file.unlink()
        _sqlite_with(file, "foo")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["run", "--resume", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_a_run_killed_before_its_graph_started_is_still_resumable(tmp_path):
    """Before the graph's first node there are no checkpoints and maybe no ledger: nothing is lost."""
    from agent.run.rundir import RunDir

    run = RunDir(_started_run(tmp_path))
    run.ledger_file.unlink()
    run.check_resumable(run.manifest())  # no error
    assert run.read_ledger().spent("ep-1") == 0.0 and not run.ledger_file.exists()
    (run.path / "proposals.json").write_text("[]")  # the graph ran its first node: now both are its history
    with pytest.raises(Exception, match="graph checkpoints"):
        run.check_resumable(run.manifest())
