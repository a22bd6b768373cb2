"""The bank API: records, library versions, episodes and the hash-chained history."""

import sqlite3

import pytest

from support.bank_factory import decision, event, proposal, record, sha
from experience_bank.bank import Bank
from experience_bank.history import SeqTaken
from experience_bank.errors import BadInput
from experience_bank.hashing import chain_hash, content_hash
from experience_bank.migrations import SCHEMA_VERSION


def test_init_sets_wal_full_and_migrations(tmp_path):
    path = tmp_path / "b.sqlite"
    with Bank.init(path) as bank:
        assert bank.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert bank.db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert bank.db.execute("PRAGMA page_size").fetchone()[0] == 8192
        assert bank.schema_version() == SCHEMA_VERSION == 6
        names = [r["name"] for r in bank.db["_migrations"].rows]
    assert names == ["m001_records", "m002_library", "m003_episodes", "m004_freeze", "m005_tamper_evidence",
                     "m006_library_artefacts"]
    with Bank.init(path) as again:  # idempotent
        assert again.schema_version() == 6


def test_open_refuses_missing_and_newer(tmp_path):
    with pytest.raises(BadInput, match="no bank at"):
        Bank.open(tmp_path / "none.sqlite")
    path = tmp_path / "b.sqlite"
    Bank.init(path).close()
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 9")
    raw.close()
    with pytest.raises(BadInput, match=r"bank schema 9 is newer than this agent \(6\): upgrade the agent"):
        Bank.open(path)


def test_import_stores_hash_and_timestamp(mem_bank):
    r, p = record(), proposal()
    hashes = mem_bank.import_records([r, p])
    assert hashes == [content_hash(r), content_hash(p)]
    assert mem_bank.get_record(hashes[0]) == r
    row = mem_bank.db.execute("SELECT written_at, kind FROM records WHERE hash = ?", [hashes[1]]).fetchone()
    assert row[0].endswith("+00:00") and row[1] == "proposal"
    assert mem_bank.import_records([r]) == [hashes[0]]  # idempotent
    assert mem_bank.db.execute("SELECT count(*) FROM records").fetchone()[0] == 2


@pytest.mark.parametrize("sql", ["UPDATE records SET body = 'x'", "DELETE FROM records",
                                 "UPDATE events SET body = 'x'", "DELETE FROM events",
                                 "DELETE FROM decisions", "UPDATE library_entries SET conflicted = 1",
                                 "DELETE FROM episodes", "UPDATE episodes SET manifest_hash = 'x'"])
def test_triggers_refuse_edits(mem_bank, sql):
    mem_bank.import_records([record()], library_note="seed")
    mem_bank.start_episode("E1", sha("m"), 0)
    mem_bank.append_event(event())
    with pytest.raises(sqlite3.IntegrityError, match="refused"):
        mem_bank.db.execute(sql)


def test_library_versions_stay_readable(mem_bank):
    assert mem_bank.current_library_version() == 0 and mem_bank.library_records() == []
    a, b = mem_bank.import_records([record("S01"), record("S02")])
    assert mem_bank.create_library_version([a], "L0") == 0
    assert mem_bank.create_library_version([a, b], "L1") == 1
    assert [e.hash for e in mem_bank.library_records(0)] == [a]
    assert [e.hash for e in mem_bank.library_records()] == [a, b]
    with pytest.raises(BadInput, match="no library version 7"):
        mem_bank.library_records(7)
    with pytest.raises(BadInput, match="no record"):
        mem_bank.create_library_version([sha("nothing")], "bad")


def _schema(bank):
    from experience_bank import integrity
    return integrity._schema_of(bank.db)


def test_bulk_import_lifts_the_no_replace_triggers_only_inside_its_transaction(mem_bank):
    # The import and its library version drop their tables' no-replace triggers for the insert:
    # afterwards the schema is the migrations' again, whether the import committed or rolled back.
    from experience_bank import integrity, migrations
    want = integrity.expected_schema()
    assert _schema(mem_bank) == want
    mem_bank.import_records([record(seed=i) for i in range(5)], library_note="L0")
    assert _schema(mem_bank) == want
    bad = [record(seed=10), record(seed=11), "not a record"]
    with pytest.raises(BadInput, match="item 2 is a str"):
        mem_bank.import_records(bad, library_note="L1")
    assert _schema(mem_bank) == want and mem_bank.current_library_version() == 0
    assert len(mem_bank.record_hashes()) == 5 and mem_bank.verify() == []
    with pytest.raises(RuntimeError, match="open write transaction"):
        with migrations.bulk_insert(mem_bank.db, "records"):
            pass
    assert _schema(mem_bank) == want


def test_bulk_import_still_refuses_a_different_body_under_a_stored_hash(mem_bank):
    # A damaged row (another body under r's hash, written by raw SQL: a new key passes the
    # triggers) is not replaced by importing r, nor silently kept: the import is refused whole.
    # An identical stored record, and a record twice in one import, are skipped as before.
    from experience_bank import library
    r, r3 = record(), record(seed=3)
    row = library.record_row(r, "t")
    mem_bank.db.execute("INSERT INTO records (hash, kind, card_id, source_hash, body, written_at) "
                        "VALUES (?, ?, ?, ?, '{}', 't')", [row["hash"], row["kind"], row["card_id"], row["source_hash"]])
    before = _schema(mem_bank)
    with pytest.raises(BadInput, match=f"record {row['hash']} is stored with another body"):
        mem_bank.import_records([r3, r3, r], library_note="L0")
    assert mem_bank.db.execute("SELECT body FROM records").fetchall() == [("{}",)]
    assert _schema(mem_bank) == before and mem_bank.current_library_version() == 0
    mem_bank.db.execute("DROP TRIGGER records_no_delete")
    mem_bank.db.execute("DELETE FROM records")
    h = mem_bank.import_records([r3])
    assert mem_bank.import_records([r3, r, r3]) == h + [row["hash"], h[0]]
    assert len(mem_bank.record_hashes()) == 2


def test_import_with_note_extends_current_version(mem_bank):
    a = mem_bank.import_records([record("S01")], library_note="first")[0]
    b = mem_bank.import_records([record("S02")], library_note="second")[0]
    assert mem_bank.current_library_version() == 1
    assert [e.hash for e in mem_bank.library_records()] == [a, b]


def test_create_version_flags_contradicting_evidence(mem_bank):
    hs = mem_bank.import_records([record(delta=6.0, seed=1), record(delta=-4.0, seed=2), record("S02", delta=-9.0)])
    mem_bank.create_library_version(hs, "L0")
    flags = {e.hash: e.conflicted for e in mem_bank.library_records()}
    assert flags == {hs[0]: True, hs[1]: True, hs[2]: False}


def test_event_chain_links_and_idempotence(mem_bank):
    mem_bank.start_episode("E1", sha("m"), 0)
    mem_bank.start_episode("E1", sha("m"), 0)  # idempotent
    h0 = mem_bank.append_event(event(seq=0))
    assert mem_bank.append_event(event(seq=0)) == h0
    h1 = mem_bank.append_event(event(seq=1, metric=2.0))
    rows = mem_bank.db.execute("SELECT seq, prev_hash, hash, body_hash FROM events ORDER BY seq").fetchall()
    assert rows[1][1] == h0 and rows[1][2] == h1 == chain_hash(h0, rows[1][3])
    assert [e.seq for e in mem_bank.events("E1")] == [0, 1]
    with pytest.raises(SeqTaken, match="seq 1 already holds a different event"):
        mem_bank.append_event(event(seq=1, metric=3.0))
    with pytest.raises(BadInput, match="expects seq 2, got 5"):
        mem_bank.append_event(event(seq=5))
    assert mem_bank.verify() == []


def test_episode_argument_errors(mem_bank):
    with pytest.raises(BadInput, match="no episode"):
        mem_bank.append_event(event(episode_id="E9"))
    with pytest.raises(BadInput, match="episode id"):
        mem_bank.start_episode("bad id", sha("m"), 0)
    with pytest.raises(BadInput, match="no library version 3"):
        mem_bank.start_episode("E1", sha("m"), 3)
    mem_bank.start_episode("E1", sha("m"), 0)
    with pytest.raises(BadInput, match="already exists .* give --out a new name .*`agent run --resume` the run named E1"):
        mem_bank.start_episode("E1", sha("other"), 0)


def test_decisions_are_frozen_before_outcomes(mem_bank):
    mem_bank.start_episode("E1", sha("m"), 0)
    d = decision("S01")
    assert mem_bank.record_decision("E1", d) == d.decision_hash
    assert mem_bank.record_decision("E1", d) == d.decision_hash
    forged = d.model_copy(update={"rule": "bcit.other"})
    with pytest.raises(BadInput, match="does not match its fields"):
        mem_bank.record_decision("E1", forged)
    mem_bank.append_event(event())
    decided, happened = mem_bank.db.execute(
        "SELECT d.written_at, e.written_at FROM decisions d JOIN events e ON e.episode_id = d.episode_id").fetchone()
    assert decided <= happened
    assert mem_bank.db.execute("SELECT count(*) FROM decisions").fetchone()[0] == 1


def test_finished_episode_is_closed(mem_bank):
    mem_bank.start_episode("E1", sha("m"), 0)
    h0 = mem_bank.append_event(event())
    mem_bank.finish_episode("E1")
    mem_bank.finish_episode("E1")
    assert mem_bank.append_event(event()) == h0  # a replay of a stored event still answers
    with pytest.raises(BadInput, match="finished"):
        mem_bank.append_event(event(seq=1))
    with pytest.raises(BadInput, match="finished"):
        mem_bank.stage_observation("E1", record(seed=5))


def test_stage_observation_is_idempotent_and_typed(mem_bank):
    mem_bank.start_episode("E1", sha("m"), 0)
    h = mem_bank.stage_observation("E1", record(seed=3))
    assert mem_bank.stage_observation("E1", record(seed=3)) == h
    assert mem_bank.staged("E1") == [record(seed=3)]
    with pytest.raises(BadInput, match="only a HistoricalRecord"):
        mem_bank.stage_observation("E1", proposal())


def test_import_jsonl_names_line_and_writes_nothing(mem_bank, tmp_path):
    from experience_bank.hashing import canonical_json
    f = tmp_path / "r.jsonl"
    f.write_text(canonical_json(record()) + "\n" + canonical_json(proposal()).replace('"nu":"restart"', '"nu":"x"') + "\n")
    with pytest.raises(BadInput, match=r"line 2: invalid record: field proposal.card.nu"):
        mem_bank.import_jsonl(f)
    assert mem_bank.record_hashes() == []


def test_import_jsonl_streams_lines_and_rolls_back_a_late_bad_one(mem_bank, tmp_path):
    # A line at a time, in one transaction: 50 good records then a bad line leave nothing, a
    # U+2028 inside a string stays in its line, CRLF endings and blank lines are fine, and the
    # first line's error comes before any write.
    from experience_bank.hashing import canonical_json
    good = [canonical_json(record(seed=i)) for i in range(50)]
    odd = canonical_json(record(card_id="S02").model_copy(update={"card": record().card.model_copy(
        update={"id": "S02", "title": "two\u2028lines"})}))
    f = tmp_path / "r.jsonl"
    f.write_bytes(("\r\n".join(good + [odd, ""]) + "\r\n").encode())
    hashes = mem_bank.import_jsonl(f, library_note="L0")
    assert len(hashes) == 51 and mem_bank.get_record(hashes[-1]).card.title == "two\u2028lines"
    assert mem_bank.verify() == []
    f2 = tmp_path / "bad.jsonl"
    f2.write_text("\n".join([canonical_json(record(seed=100 + i)) for i in range(50)] + ["{not json"]) + "\n")
    before = (mem_bank.record_hashes(), mem_bank.current_library_version())
    with pytest.raises(BadInput, match=r"bad.jsonl line 51: not valid JSON"):
        mem_bank.import_jsonl(f2, library_note="L1")
    assert (mem_bank.record_hashes(), mem_bank.current_library_version()) == before
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(BadInput, match="holds no records"):
        mem_bank.import_jsonl(tmp_path / "empty.jsonl", library_note="L1")
    assert mem_bank.current_library_version() == before[1]


def test_version_readers_stay_exact_when_a_version_is_not_one_rowid_range(mem_bank):
    # Readers take a version's rowid span with no sort; were another version's rows inside that
    # span (only raw SQL can do it), the version filter must still keep them out, in order.
    from experience_bank import chains

    a, b, c = record("S01", seed=1), record("S02", seed=2), record("S03", seed=3)
    hashes = mem_bank.import_records([a, b, c])
    mem_bank.create_library_version(hashes[:2], "v0")
    mem_bank.create_library_version(hashes[2:], "v1")
    db = mem_bank.db
    db.execute("DROP TRIGGER library_entries_no_replace")
    db.execute("INSERT INTO library_entries (version, record_hash, conflicted, missing) VALUES (0, ?, 0, '[]')",
               [hashes[2]])
    assert chains.version_rows(db, 0)[:2] == [1, 4]  # version 1's row 3 lies inside version 0's span
    assert [e.hash for e in mem_bank.library_records(0)] == [hashes[0], hashes[1], hashes[2]]
    assert [e.hash for e in mem_bank.library_records(1)] == [hashes[2]]
    assert list(mem_bank.export_lines(1)) == [db.execute("SELECT body FROM records WHERE hash = ?", [hashes[2]]).fetchone()[0]]
