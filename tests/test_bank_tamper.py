"""Tamper-evidence over the whole bank state: REPLACE refused, rewrites caught by the head log,
damaged and downgraded files refused in one line (issue 15 §1)."""

import shutil
import sqlite3

import pytest
from sqlite_utils import Database

from agent.cli.main import main
from support.bank_factory import decision, event, record, sha
from experience_bank import chains, heads
from experience_bank.bank import Bank
from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json, chain_hash, sha256_text


def build(path):
    """A bank with two library versions, a finished episode (3 events, a staged record) and a running one."""
    with Bank.init(path) as bank:
        bank.import_records([record("S01"), record("S02", delta=-3.0)], library_note="L0")
        bank.import_records([record("S03", delta=2.0)], library_note="L1")
        bank.start_episode("E1", sha("m"), 1)
        for seq in range(3):
            bank.append_event(event(seq=seq, metric=float(seq)))
        bank.stage_observation("E1", record("S01", seed=9, delta=6.0))
        bank.finish_episode("E1")
        bank.start_episode("E2", sha("m2"), 1)
        bank.record_decision("E2", decision("S02", action="reject"))
        assert bank.verify() == []
    return heads.log_path(path)


def raw_edit(path, edit):
    """Triggers dropped, `edit(db)` run, triggers put back: what anyone with the file can do."""
    conn = sqlite3.connect(path, isolation_level=None)
    db = Database(conn)
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    edit(db)
    for _, sql in triggers:
        conn.execute(sql)
    conn.close()


def rechain_journal(db, episode_id, start=0):
    """Recompute every journal entry of an episode from `start` on, as a careful forger would."""
    genesis, started = db.execute("SELECT genesis, started_at FROM episodes WHERE episode_id = ?",
                                  [episode_id]).fetchone()
    prev = chains.journal_genesis(genesis, started)
    for n, kind, ref, link in db.execute("SELECT n, kind, ref, hash FROM journal WHERE episode_id = ? ORDER BY n",
                                         [episode_id]).fetchall():
        if n >= start:
            digest = chains.row_digest(kind, chains.source_row(db, kind, episode_id, ref))
            link = chain_hash(prev, digest)
            db.execute("UPDATE journal SET row_hash = ?, prev_hash = ?, hash = ? WHERE episode_id = ? AND n = ?",
                       [digest, prev, link, episode_id, n])
        prev = link


def rechain_events(db, episode_id):
    (prev,) = db.execute("SELECT genesis FROM episodes WHERE episode_id = ?", [episode_id]).fetchone()
    for seq, body in db.execute("SELECT seq, body FROM events WHERE episode_id = ? ORDER BY seq",
                                [episode_id]).fetchall():
        link = chain_hash(prev, sha256_text(body))
        db.execute("UPDATE events SET body_hash = ?, prev_hash = ?, hash = ? WHERE episode_id = ? AND seq = ?",
                   [sha256_text(body), prev, link, episode_id, seq])
        prev = link


def rechain_library(db):
    prev = chains.LIBRARY_GENESIS
    for values in db.execute(f"SELECT {', '.join(chains.VERSION_COLUMNS[:-1])} FROM library_versions "
                             "ORDER BY version").fetchall():
        row = dict(zip(chains.VERSION_COLUMNS, values))
        row["entries_hash"] = chains.stored_entries_digest(db, row["version"])
        prev = chains.version_head(prev, row)
        db.execute("UPDATE library_versions SET entries_hash = ?, head = ? WHERE version = ?",
                   [row["entries_hash"], prev, row["version"]])


def drop_entry(db):
    db.execute("DELETE FROM library_entries WHERE rowid = (SELECT max(rowid) FROM library_entries)")


def drop_entry_rechained(db):
    drop_entry(db)
    rechain_library(db)


def drop_newest_version(db):
    db.execute("DELETE FROM library_entries WHERE version = 1")
    db.execute("DELETE FROM library_versions WHERE version = 1")


def drop_last_event(db):
    (n,) = db.execute("SELECT n FROM journal WHERE episode_id = 'E1' AND kind = 'event' AND ref = '2'").fetchone()
    db.execute("DELETE FROM events WHERE episode_id = 'E1' AND seq = 2")
    db.execute("DELETE FROM journal WHERE episode_id = 'E1' AND n = ?", [n])
    db.execute("UPDATE journal SET n = n - 1 WHERE episode_id = 'E1' AND n > ?", [n])
    rechain_journal(db, "E1")


def _rewrite_event(db, seq):
    (body,) = db.execute("SELECT body FROM events WHERE episode_id = 'E1' AND seq = ?", [seq]).fetchone()
    db.execute("UPDATE events SET body = ? WHERE episode_id = 'E1' AND seq = ?",
               [body.replace('"outcome":"promoted"', '"outcome":"rolled_back"'), seq])
    rechain_events(db, "E1")
    rechain_journal(db, "E1")


def rewrite_last_event(db):
    _rewrite_event(db, 2)


def rewrite_middle_event(db):
    _rewrite_event(db, 1)


def rewrite_record_and_references(db):
    old, body = db.execute("SELECT hash, body FROM records WHERE card_id = 'S03'").fetchone()
    body = body.replace('"delta_point":2.0', '"delta_point":9.0')
    new = sha256_text(body)
    db.execute("UPDATE records SET hash = ?, body = ? WHERE hash = ?", [new, body, old])
    db.execute("UPDATE library_entries SET record_hash = ? WHERE record_hash = ?", [new, old])
    rechain_library(db)


def rewrite_decision(db):
    from experience_bank.hashing import decision_hash
    forged = decision("S02", action="train")
    forged = forged.model_copy(update={"decision_hash": decision_hash(forged.model_dump(mode="json"))})
    db.execute("UPDATE decisions SET decision_hash = ?, body = ? WHERE episode_id = 'E2'",
               [forged.decision_hash, canonical_json(forged)])
    db.execute("UPDATE journal SET ref = ? WHERE episode_id = 'E2' AND kind = 'decision'", [forged.decision_hash])
    rechain_journal(db, "E2")


def change_card_id(db):
    db.execute("UPDATE records SET card_id = 'S09' WHERE card_id = 'S03'")


def backdate_event(db):
    db.execute("UPDATE events SET written_at = '2001-01-01T00:00:00.000000+00:00' WHERE seq = 1")


def backdate_event_rechained(db):
    backdate_event(db)
    rechain_journal(db, "E1")


# scenario -> does the bank's own chain already catch it (without the head log)?
SCENARIOS = {
    drop_entry: True, drop_entry_rechained: False, drop_newest_version: False, drop_last_event: False,
    rewrite_last_event: False, rewrite_middle_event: False, rewrite_record_and_references: False,
    rewrite_decision: False, change_card_id: True, backdate_event: True, backdate_event_rechained: False,
}


@pytest.mark.parametrize("scenario", list(SCENARIOS), ids=lambda f: f.__name__)
def test_every_rewrite_is_caught_with_the_head_log(tmp_path, scenario):
    path = tmp_path / "b.sqlite"
    log = build(path)
    with Bank.open(path) as bank:
        assert bank.verify(against=log) == []
    raw_edit(path, scenario)
    with Bank.open(path) as bank:
        internal = bank.verify()
        anchored = bank.verify(against=log)
    assert bool(internal) == SCENARIOS[scenario], internal
    assert anchored, "the head log must catch every rewrite"
    if not SCENARIOS[scenario]:
        assert any(line.startswith("head log:") and ("rewritten" in line or "deleted" in line) for line in anchored)


def test_without_a_head_log_verify_says_what_it_cannot_exclude(tmp_path, capsys):
    path = tmp_path / "b.sqlite"
    log = build(path)
    log.unlink()
    with Bank.open(path) as bank:
        report = bank.check()
    assert report.problems == [] and "cannot be excluded" in report.notes[0]
    assert main(["bank", "verify", "--bank", str(path)]) == 0
    assert "cannot be excluded" in capsys.readouterr().err


def test_head_prints_what_the_log_anchors_and_cli_uses_the_log(tmp_path, capsys):
    path = tmp_path / "b.sqlite"
    log = build(path)
    assert main(["bank", "head", "--bank", str(path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    logged = log.read_text().splitlines()
    assert len(printed) == 3 and all(line in logged for line in printed)
    assert printed[0].startswith('{"head": ') and '"library": 1' in printed[0]
    raw_edit(path, rewrite_middle_event)
    assert main(["bank", "verify", "--bank", str(path)]) == 1  # <bank>.heads is used by default
    out = capsys.readouterr()
    assert "head log: episode E1 journal entry" in out.out and "against" not in out.out


def test_appends_after_the_log_are_notes_not_problems(tmp_path):
    path = tmp_path / "b.sqlite"
    log = build(path)
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:-1]) + "\n")  # as if killed between the commit and the append
    with Bank.open(path) as bank:
        report = bank.check(against=log)
    assert report.problems == [] and any("E2: 1 journal entries after" in n for n in report.notes)


@pytest.mark.parametrize("sql", [
    "INSERT OR REPLACE INTO library_entries (version, record_hash, conflicted, missing) "
    "SELECT version, record_hash, 1 - conflicted, missing FROM library_entries LIMIT 1",
    "INSERT OR REPLACE INTO episodes (episode_id, manifest_hash, library_version, genesis, started_at) "
    "SELECT episode_id, manifest_hash, library_version, genesis, started_at FROM episodes WHERE episode_id = 'E1'",
    "INSERT OR REPLACE INTO library_versions (version, base_version, episode_id, note, created_at, entries_hash, head) "
    "SELECT version, base_version, episode_id, 'edited', created_at, entries_hash, head FROM library_versions LIMIT 1",
    "INSERT OR REPLACE INTO records (hash, kind, card_id, source_hash, body, written_at) "
    "SELECT hash, kind, card_id, source_hash, body || ' ', written_at FROM records LIMIT 1",
    "REPLACE INTO events SELECT * FROM events LIMIT 1",
    "INSERT OR REPLACE INTO journal SELECT * FROM journal LIMIT 1",
    "INSERT INTO staged SELECT * FROM staged",
])
def test_replace_is_refused(tmp_path, sql):
    path = tmp_path / "b.sqlite"
    build(path)
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="REPLACE"):
        conn.execute(sql)
    conn.close()
    with Bank.open(path) as bank:
        assert bank.verify(against=heads.log_path(path)) == []


def test_reinserting_an_identical_record_is_skipped(mem_bank):
    h = mem_bank.import_records([record()])[0]
    mem_bank.db.execute("INSERT OR REPLACE INTO records SELECT * FROM records")
    assert mem_bank.record_hashes() == [h]


def test_dropped_trigger_is_named(tmp_path):
    path = tmp_path / "b.sqlite"
    build(path)
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER events_no_update")
    conn.close()
    with Bank.open(path) as bank:
        assert bank.verify() == ["schema: trigger events_no_update is missing (dropped)"]


def _one_line_exit(argv, capsys, code):
    assert main(argv) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert not any("Traceback" in line for line in err)
    return err


def test_truncated_and_corrupt_banks_get_one_line(tmp_path, capsys):
    path = tmp_path / "b.sqlite"
    build(path)
    truncated = tmp_path / "t.sqlite"
    data = path.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    corrupt = tmp_path / "c.sqlite"
    corrupt.write_bytes(data[:4096] + bytes(b ^ 0x5A for b in data[4096:8192]) + data[8192:])
    for bad in (truncated, corrupt):
        capsys.readouterr()
        code = main(["bank", "verify", "--bank", str(bad)])
        captured = capsys.readouterr()
        lines = (captured.out + captured.err).splitlines()
        assert code in (1, 2) and "Traceback" not in captured.err
        named = [line for line in lines if str(bad) in line and f'sqlite3 {bad} "PRAGMA integrity_check"' in line]
        assert named, lines
        err = _one_line_exit(["bank", "list", "--bank", str(bad)], capsys, 2) if bad is corrupt else None
        if err is not None:
            assert len(err) == 1 and "integrity_check" in err[0]


def test_downgraded_bank_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "b.sqlite"
    build(path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 2")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(BadInput, match="disagrees with the 6 migrations it records"):
        Bank.open(path)
    err = _one_line_exit(["bank", "verify", "--bank", str(path)], capsys, 2)
    assert len(err) == 1 and "PRAGMA user_version = 6" in err[0]
    assert path.read_bytes() == before


def test_a_schema_4_bank_is_upgraded_and_anchored(tmp_path):
    """A bank written before m005 (no journal, no version heads) migrates, verifies and logs its heads."""
    from experience_bank import migrations
    from experience_bank.bank import record_row
    from experience_bank.integrity import episode_genesis
    path = tmp_path / "old.sqlite"
    db = Database(sqlite3.connect(path, isolation_level=None))
    migrations.apply(db, list(migrations.MIGRATIONS[:4]))
    db.execute("PRAGMA user_version = 4")
    row = record_row(record())
    db["records"].insert(row)
    db.execute("INSERT INTO library_versions VALUES (0, NULL, NULL, 'L0', '2026-01-01T00:00:00+00:00')")
    db.execute("INSERT INTO library_entries VALUES (0, ?, 0, '[]')", [row["hash"]])
    genesis = episode_genesis("E1", sha("m"), 0)
    db.execute("INSERT INTO episodes VALUES ('E1', ?, 0, ?, '2026-01-01T00:00:01+00:00', NULL)", [sha("m"), genesis])
    ev = event()
    body = canonical_json(ev)
    db.execute("INSERT INTO decisions VALUES ('E1', ?, 'S01', ?, '2026-01-01T00:00:02+00:00')",
               [ev.decision.decision_hash, canonical_json(ev.decision)])
    db.execute("INSERT INTO events VALUES ('E1', 0, 'S01', ?, ?, ?, ?, '2026-01-01T00:00:02+00:00')",
               [body, sha256_text(body), genesis, chain_hash(genesis, sha256_text(body))])
    db.conn.close()
    with Bank.open(path) as bank:
        assert bank.schema_version() == 6
        assert bank.verify(against=heads.log_path(path)) == []
        assert [e.hash for e in bank.library_records()] == [row["hash"]]
        assert bank.db.execute("SELECT kind FROM journal ORDER BY n").fetchall() == [("decision",), ("event",)]
        bank.append_event(event(seq=1, metric=2.0))
        report = bank.check(against=heads.log_path(path))
        assert report.problems == [] and report.notes == []  # the upgrade anchored what was there
    copy = tmp_path / "copy.sqlite"
    shutil.copy(path, copy)
    with Bank.open(copy) as bank:  # a copied bank without its log: internal checks only, said so
        assert bank.check().problems == []


def test_deep_finds_a_body_that_does_not_reserialise(tmp_path, capsys):
    path = tmp_path / "b.sqlite"
    with Bank.init(path) as bank:
        bank.import_records([record()])

    def respace(db):  # still valid JSON with a matching hash, but not canonical bytes
        old, body = db.execute("SELECT hash, body FROM records").fetchone()
        spaced = body.replace('{"applicability":', '{ "applicability":', 1)
        db.execute("UPDATE records SET hash = ?, body = ? WHERE hash = ?", [sha256_text(spaced), spaced, old])

    raw_edit(path, respace)
    with Bank.open(path) as bank:
        assert bank.verify() == []
        assert bank.verify(deep=True) == ["records row 1: body does not re-serialise to its stored bytes"]
    assert main(["bank", "verify", "--deep", "--bank", str(path)]) == 1
    assert "does not re-serialise" in capsys.readouterr().out
