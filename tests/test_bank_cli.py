"""`agent bank ...` in-process: every bad-input class exits 2 and leaves the bank file byte-identical."""

import hashlib
import sqlite3

import pytest

from agent.cli.main import main
from support.bank_factory import event, proposal, record, sha
from experience_bank.bank import Bank
from experience_bank.hashing import canonical_json

GOOD = canonical_json(record())


@pytest.fixture
def bank_file(tmp_path):
    path = tmp_path / "bank.sqlite"
    assert main(["bank", "init", "--bank", str(path)]) == 0
    return path


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


BAD_LINES = {
    "duplicate key": GOOD[:-1] + ',"kind":"historical"}',
    "nan": GOOD.replace('"delta_point":5.0', '"delta_point":NaN'),
    "extra field": GOOD[:-1] + ',"trust_remote_code":true}',
    "coercion": GOOD.replace('"steps":100', '"steps":"100"'),
    "range": GOOD.replace('"kappa":10.0', '"kappa":-1.0'),
    "fake proposal evidence": canonical_json(proposal())[:-1] + ',"evidence":{}}',
    "not json": "{nope",
}


@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_bad_import_line_exits_2_and_writes_nothing(bank_file, tmp_path, capsys, name):
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(GOOD + "\n" + BAD_LINES[name] + "\n")
    before = _digest(bank_file)
    assert main(["bank", "import", str(jsonl), "--bank", str(bank_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agent: error: ") and "line 2" in err and "\n" not in err
    assert _digest(bank_file) == before


def test_a_bad_line_on_a_current_bank_is_refused_by_the_import_itself(bank_file, tmp_path, capsys):
    # No pre-pass over the file for a current bank: the import's own transaction refuses a late
    # bad line (here bytes that are not UTF-8) and the bank file is as it was.
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_bytes((GOOD + "\n").encode() * 3 + b'{"kind": "\xff"}\n')
    before = _digest(bank_file)
    from experience_bank import migrations
    assert not migrations.would_migrate(bank_file)
    assert main(["bank", "import", str(jsonl), "--bank", str(bank_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agent: error: ") and "line 4" in err and "\n" not in err
    assert _digest(bank_file) == before


def test_an_older_bank_is_not_migrated_for_a_bad_file(tmp_path, capsys):
    # Opening a schema-4 bank migrates it, so the file is checked whole before the bank is opened.
    from sqlite_utils import Database

    from experience_bank import migrations
    path = tmp_path / "old.sqlite"
    db = Database(sqlite3.connect(path, isolation_level=None))
    migrations.apply(db, list(migrations.MIGRATIONS[:4]))
    db.execute("PRAGMA user_version = 4")
    db.conn.close()
    before = _digest(path)
    assert migrations.would_migrate(path) and not migrations.would_migrate(tmp_path / "none.sqlite")
    bad, good = tmp_path / "bad.jsonl", tmp_path / "good.jsonl"
    bad.write_text(GOOD + "\n{nope\n")
    assert main(["bank", "import", str(bad), "--bank", str(path)]) == 2
    assert "line 2" in capsys.readouterr().err and _digest(path) == before
    good.write_text(GOOD + "\n")
    assert main(["bank", "import", str(good), "--bank", str(path)]) == 0
    with Bank.open(path) as bank:
        assert bank.schema_version() == migrations.SCHEMA_VERSION and len(bank.record_hashes()) == 1


@pytest.mark.parametrize("argv", [
    ["bank", "import", "missing.jsonl"],
    ["bank", "list", "--version", "5"],
    ["bank", "export", "--version", "5"],
    ["bank", "consolidate", "--episode", "E404"],
    ["bank", "show", "0123abc"],
])
def test_other_bad_inputs_exit_nonzero_and_write_nothing(bank_file, argv, capsys):
    before = _digest(bank_file)
    code = main(argv + ["--bank", str(bank_file)])
    assert code == 2
    assert _digest(bank_file) == before
    if argv[1] == "show":  # one line that names what matched nothing and how to see what is there
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "'0123abc'" in err[0] and "agent bank list --bank" in err[0]


@pytest.mark.parametrize("command", ["list", "export"])
@pytest.mark.parametrize("version", ["9" * 24, str(2**63), str(-(2**63) - 1), "1" * 4000])
def test_a_version_past_64_bits_exits_2_naming_the_flag(bank_file, tmp_path, capsys, command, version):
    # sqlite3 raises OverflowError for such a parameter: refused before the bank is read.
    out = tmp_path / "out.jsonl"
    before = _digest(bank_file)
    assert main(["bank", command, "--version", version, "--bank", str(bank_file)]
                + (["--out", str(out)] if command == "export" else [])) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"agent: error: --version {version[:20]}"), err
    assert "does not fit in 64 bits" in err[0] and "e.g. --version 0" in err[0] and len(err[0]) < 200
    assert _digest(bank_file) == before and not out.exists()


@pytest.mark.parametrize("command", ["list", "export"])
def test_a_version_in_range_but_absent_keeps_the_banks_message(bank_file, capsys, command):
    assert main(["bank", command, "--version", str(2**63 - 1), "--bank", str(bank_file)]) == 2
    assert f"no library version {2**63 - 1} (latest is 0)" in capsys.readouterr().err


def test_missing_and_newer_bank_exit_2(tmp_path, bank_file, capsys):
    assert main(["bank", "verify", "--bank", str(tmp_path / "nope.sqlite")]) == 2
    assert not (tmp_path / "nope.sqlite").exists()
    raw = sqlite3.connect(bank_file)
    raw.execute("PRAGMA user_version = 99")
    raw.close()
    before = _digest(bank_file)
    assert main(["bank", "list", "--bank", str(bank_file)]) == 2
    assert "bank schema 99 is newer than this agent (6): upgrade the agent" in capsys.readouterr().err
    assert _digest(bank_file) == before


def test_import_export_list_show_round_trip(bank_file, tmp_path, capsys):
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(GOOD + "\n" + canonical_json(proposal()) + "\n")
    assert main(["bank", "import", str(jsonl), "--bank", str(bank_file)]) == 0
    out = tmp_path / "out.jsonl"
    assert main(["bank", "export", "--out", str(out), "--bank", str(bank_file)]) == 0
    assert out.read_text() == jsonl.read_text()
    capsys.readouterr()
    assert main(["bank", "list", "--bank", str(bank_file)]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert len(listing) == 2 and "S01" in listing[0] and "grade B" in listing[0]
    assert main(["bank", "show", "P01", "--bank", str(bank_file)]) == 0
    assert '"kind": "proposal"' in capsys.readouterr().out


def test_verify_exits_1_on_tampering_and_consolidate_works(bank_file, capsys):
    with Bank.open(bank_file) as bank:
        bank.import_records([record()], library_note="L0")
        bank.start_episode("E1", sha("m"), 0)
        bank.append_event(event())
        bank.stage_observation("E1", record(seed=1, delta=6.0))
        bank.finish_episode("E1")
    assert main(["bank", "verify", "--bank", str(bank_file)]) == 0
    assert main(["bank", "consolidate", "--episode", "E1", "--bank", str(bank_file)]) == 0
    assert "library version 1 (1 records)" in capsys.readouterr().out
    raw = sqlite3.connect(bank_file)
    raw.execute("DROP TRIGGER events_no_update")
    raw.execute("UPDATE events SET body = replace(body, 'gate.pass', 'gate.pasS')")
    raw.commit()
    raw.close()
    assert main(["bank", "verify", "--bank", str(bank_file)]) == 1
    assert capsys.readouterr().out.startswith("events: episode E1 seq 0: body does not match its hash")
