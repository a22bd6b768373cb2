"""Tamper evidence, crash atomicity and concurrent writers, on real database files."""

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.bank_factory import event, record, sha
from experience_bank.bank import Bank
from experience_bank.hashing import canonical_json

TESTS = str(Path(__file__).parent)


def _bank_with_history(path):
    with Bank.init(path) as bank:
        bank.import_records([record("S01"), record("S02", delta=-3.0)], library_note="L0")
        bank.start_episode("E1", sha("m"), 0)
        for seq in range(3):
            bank.append_event(event(seq=seq, metric=float(seq)))
        assert bank.verify() == []


def _tamper(path, sql):
    # Raw sqlite with the triggers dropped, then put back: what someone with file access can do.
    raw = sqlite3.connect(path)
    triggers = raw.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in triggers:
        raw.execute(f"DROP TRIGGER {name}")
    raw.execute(sql)
    for _, trigger in triggers:
        raw.execute(trigger)
    raw.commit()
    raw.close()


def _flip_one_byte(text: str, at: int) -> str:
    ch = text[at]
    return text[:at] + ("1" if ch != "1" else "2") + text[at + 1:]


@pytest.mark.parametrize("at", [10, 200, -5])
def test_one_byte_in_a_record_is_named(tmp_path, at):
    path = tmp_path / "b.sqlite"
    _bank_with_history(path)
    raw = sqlite3.connect(path)
    h, body = raw.execute("SELECT hash, body FROM records WHERE rowid = 2").fetchone()
    raw.close()
    _tamper(path, f"UPDATE records SET body = {_sql(_flip_one_byte(body, at))} WHERE rowid = 2")
    with Bank.open(path) as bank:
        problems = bank.verify()
    assert problems == [f"records row 2: record {h} does not match its stored hash"]


@pytest.mark.parametrize("column", ["body", "prev_hash", "hash"])
def test_one_byte_in_an_event_is_named(tmp_path, column):
    path = tmp_path / "b.sqlite"
    _bank_with_history(path)
    raw = sqlite3.connect(path)
    value = raw.execute(f"SELECT {column} FROM events WHERE seq = 1").fetchone()[0]
    raw.close()
    _tamper(path, f"UPDATE events SET {column} = {_sql(_flip_one_byte(value, 3))} WHERE seq = 1")
    with Bank.open(path) as bank:
        problems = bank.verify()
    assert problems[0].startswith("events: episode E1 seq 1:")


def test_deleted_event_and_decision_edit_are_named(tmp_path):
    path = tmp_path / "b.sqlite"
    _bank_with_history(path)
    _tamper(path, "DELETE FROM events WHERE seq = 1")
    _tamper(path, "UPDATE decisions SET body = replace(body, 'bcit.train', 'bcit.trainx')")
    with Bank.open(path) as bank:
        problems = bank.verify()
    assert problems[0].startswith("decisions row 1: decision") and "does not match its fields" in problems[0]
    assert problems[1] == "events: episode E1 seq 2: expected seq 1 (gap)"


def _sql(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _run(code: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": TESTS})


IMPORTER = """
    import sys
    from experience_bank.bank import Bank
    from experience_bank.records import parse_record
    bank = Bank.open(sys.argv[1])
    records = [parse_record(line) for line in open(sys.argv[2])]
    print("writing", flush=True)
    bank.import_records(records, library_note="bulk")
    print("done", flush=True)
"""


def test_kill_9_during_bulk_import_leaves_all_or_none(tmp_path):
    n = 2000
    jsonl = tmp_path / "bulk.jsonl"
    jsonl.write_text("".join(canonical_json(record(f"C{i}", seed=i)) + "\n" for i in range(n)))
    rng = random.Random(7)
    seen = set()
    for trial in range(3):
        path = tmp_path / f"b{trial}.sqlite"
        Bank.init(path).close()
        child = _run(IMPORTER, path, jsonl)
        assert child.stdout.readline().strip() == "writing"
        # The write takes tens of milliseconds; kill somewhere inside or just after it.
        subprocess.run(["sleep", str(rng.uniform(0.0, 0.08))])
        child.send_signal(signal.SIGKILL)
        child.wait()
        with Bank.open(path) as bank:
            count = len(bank.record_hashes())
            assert count in (0, n)
            assert len(bank.library_records()) == count  # the version commits with its records
            assert bank.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert bank.verify() == []
        seen.add(count)
    assert seen  # at least one trial ran; which outcome each had depends on timing


APPENDER = """
    import sys
    from support.bank_factory import event
    from experience_bank.bank import Bank
    from experience_bank.history import SeqTaken
    bank = Bank.open(sys.argv[1])
    tag, n, done = sys.argv[2], int(sys.argv[3]), 0
    while done < n:
        seq = len(bank.events("E1"))
        try:
            bank.append_event(event(seq=seq, card_id=tag, metric=float(done)))
            done += 1
        except SeqTaken:
            pass  # the other writer took this seq: re-read and try the next one
    print("ok", flush=True)
"""


def test_two_processes_append_one_consistent_chain(tmp_path):
    path = tmp_path / "b.sqlite"
    with Bank.init(path) as bank:
        bank.start_episode("E1", sha("m"), 0)
    n = 40
    kids = [_run(APPENDER, path, tag, n) for tag in ("A1", "B1")]
    for kid in kids:
        out, err = kid.communicate(timeout=120)
        assert out.strip() == "ok", err
    with Bank.open(path) as bank:
        events = bank.events("E1")
        assert [e.seq for e in events] == list(range(2 * n))
        assert sorted(e.candidate_id for e in events) == ["A1"] * n + ["B1"] * n
        assert bank.verify() == []


def test_entry_digest_is_the_documented_line_hash_and_sees_every_flag(tmp_path):
    # SQLite builds the lines now; they must hash to f"{hash}\x1f{conflicted}\x1f{missing}\x1f{members}\n"
    # (what earlier banks stored), over merges, conflicts and missing artefacts.
    import hashlib
    import json

    from experience_bank import chains
    path = tmp_path / "b.sqlite"
    with Bank.init(path) as bank:
        bank.import_records([record("S01", seed=1, delta=4.0), record("S01", seed=2, delta=5.0),
                             record("S02", seed=3, delta=4.0), record("S02", seed=4, delta=-4.0),
                             record("S03", artefacts=("runs/gone.json",))], library_note="L0")
        bank.start_episode("E1", sha("m"), 0)
        bank.finish_episode("E1")
        version = bank.consolidate("E1")
        db = bank.db
        members = dict(db.execute("SELECT merged_hash, group_concat(member_hash, ',') FROM (SELECT * FROM replicates "
                                  "ORDER BY merged_hash, member_hash) GROUP BY merged_hash").fetchall())
        for v in (0, version):
            rows = db.execute("SELECT record_hash, conflicted, missing FROM library_entries WHERE version = ? "
                              "ORDER BY rowid", [v]).fetchall()
            expected = hashlib.sha256("".join(f"{h}\x1f{c}\x1f{m}\x1f{members.get(h, '')}\n"
                                              for h, c, m in rows).encode()).hexdigest()
            assert chains.stored_entries_digest(db, v) == expected
        flags = db.execute("SELECT sum(conflicted), sum(missing != '[]') FROM library_entries WHERE version = ?",
                           [version]).fetchone()
        assert len(members) == 1 and flags == (2, 1) and json.loads(
            db.execute("SELECT missing FROM library_entries WHERE missing != '[]'").fetchone()[0]) == ["runs/gone.json"]
        assert bank.verify() == []


def test_verify_on_two_connections_finds_what_one_finds(tmp_path, monkeypatch):
    # The SQL-only checks run on a second connection in a thread; a dangling reference (their
    # kind of problem) and a damaged body (the main pass's) are both named, in the same order.
    from experience_bank import integrity
    path = tmp_path / "b.sqlite"
    _bank_with_history(path)
    with Bank.open(path) as bank:
        victim = bank.record_hashes()[0]
    _tamper(path, f"DELETE FROM records WHERE hash = '{victim}'")
    _tamper(path, "UPDATE records SET body = replace(body, '\"S02\"', '\"S09\"')")
    threads = []
    real = integrity._reader

    def reader(p, like):
        threads.append(p)
        return real(p, like)
    monkeypatch.setattr(integrity, "_reader", reader)
    with Bank.open(path) as bank:
        two = bank.verify()
        assert threads == [str(path)]
        monkeypatch.setattr(integrity, "_reader", lambda p, like: (_ for _ in ()).throw(sqlite3.OperationalError("no")))
        one = bank.verify()
    assert two == one
    assert any(f"refers to missing record {victim}" in line for line in two)
    assert any("does not match its stored hash" in line for line in two)
