"""Integrity checks of a bank: SQLite's own check, the schema, every stored hash and chain link.

What `verify` covers: every page and index (`PRAGMA integrity_check`); the schema, triggers
included, against what the migrations create; every record body against its hash, and the
columns that duplicate body fields (kind, card id, context hash) against the body; every
decision against its fields; every event chain; every episode journal (each decision, event,
staged observation and finish, every column, `written_at` included); every library version's
entries and header (flags, missing artefacts, replicate members), its stored artefacts (each body
against its sha256, the set against the header's artefacts hash) and the chain of versions. With a head log it also catches a history rewritten with every
hash recomputed (`heads.py`). Every SQLite error becomes a problem line naming the file,
the table and the last row read, never a traceback.

On a bank on disk the checks that are SQL alone (SQLite's integrity check, the references)
run in a thread on a second, read-only connection: SQLite releases the GIL while it steps,
so they run beside the Python passes (a 1e6-record bank: see bench/bank_scale.py). Problem
lines come out in the same order as from one thread.

Out of scope: `records.written_at` and `_migrations.applied_at`, which nothing reads. `deep=True` also
re-parses every body through the typed records and requires it to re-serialise byte for byte.
"""

from __future__ import annotations

import hashlib
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sqlite_utils import Database

from experience_bank import chains, files, heads, migrations
from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json, chain_hash, content_hash, loads_strict, sha256_text
from experience_bank.frozen import parse_model
from experience_bank.records import parse_record
from experience_bank.decisions import Decision, Event


@dataclass
class Report:
    """What `verify` found."""

    problems: list[str] = field(default_factory=list)
    """One line per problem, the first broken row first; empty means clean."""
    notes: list[str] = field(default_factory=list)
    """What could not be judged (for example no head log)."""


@dataclass
class _At:
    table: str = "sqlite_master"
    row: object = None


def episode_genesis(episode_id: str, manifest_hash: str, library_version: int) -> str:
    """The hash the first event of an episode links to: it binds the chain to its episode header."""
    return content_hash({"episode_id": episode_id, "manifest_hash": manifest_hash, "library_version": library_version})


def _reader(path: str, like: Database) -> Database:
    """A read-only connection to the bank, with the mmap size of the bank's own (`bank.MMAP_BYTES`)."""
    conn = files.read_only(path, isolation_level=None, check_same_thread=False)
    (mmap,) = like.execute("PRAGMA mmap_size").fetchone()
    conn.execute(f"PRAGMA mmap_size={int(mmap)}")
    return Database(conn)


def _run(checks: list, db: Database, path: str) -> list[list[str]]:
    """Each check's problems, in order. On a bank on disk the checks that are SQL alone (SQLite's
    own check, the references) run on a second, read-only connection in a thread: each is one
    long step with the GIL released, so they cost no wall-clock beside the Python passes
    (a third of the work at 1e6 records)."""
    try:
        reader = None if path == ":memory:" else _reader(path, db)
    except sqlite3.DatabaseError:  # no second connection (say a read-only folder without -shm): in turn
        reader = None
    if reader is None:
        return [_guarded(check, db, path) for check in checks]
    try:
        with ThreadPoolExecutor(1) as pool:
            aside = {check: pool.submit(_guarded, check, reader, path) for check in checks if check in _SQL_ONLY}
            found = {check: _guarded(check, db, path) for check in checks if check not in _SQL_ONLY}
            return [aside[check].result() if check in aside else found[check] for check in checks]
    finally:
        reader.close()


def verify(db: Database, path: str, head_lines: list[dict] | None = None, deep: bool = False) -> Report:
    """Run every check; a check that meets an SQLite error reports it and the others still run.

    Every check on `db` reads one snapshot: another process that appends meanwhile (WAL lets it)
    is not seen halfway, so an event written between two reads is never a false problem. The
    head log was read before the snapshot begins, so every logged head is in it."""
    db.execute("BEGIN")  # deferred: the snapshot is taken by the first read and kept until the end
    try:
        return _verify(db, path, head_lines, deep)
    finally:
        if db.conn.in_transaction:  # SQLite may have ended it on an I/O error already
            db.execute("ROLLBACK")


def _verify(db: Database, path: str, head_lines: list[dict] | None, deep: bool) -> Report:
    report = Report()
    checks = [_sqlite, _records, _references, _decisions, _events, _journals, _library, _schema]
    checks += [_deep] if deep else []
    for problems in _run(checks, db, path):
        report.problems += problems
    if head_lines is None:
        report.notes.append("no head log given: a history rewritten with every hash recomputed cannot be excluded "
                            "(verify --against <bank>.heads)")
        return report
    at = _At("head log")
    try:
        problems, notes = heads.compare(db, head_lines)
    except sqlite3.DatabaseError as exc:
        problems, notes = [_sqlite_problem(path, at, exc)], []
    report.problems += problems
    report.notes += notes
    return report


def _sqlite_problem(path: str, at: _At, exc: Exception) -> str:
    row = "" if at.row is None else f" after row {at.row}"
    return (f"{path}: table {at.table}{row}: SQLite error ({exc}): run `sqlite3 {path} \"PRAGMA integrity_check\"` "
            "and restore the bank from a copy")


def _guarded(check, db: Database, path: str) -> list[str]:
    at = _At()
    try:
        return check(db, at)
    except sqlite3.DatabaseError as exc:
        return [_sqlite_problem(path, at, exc)]
    except (TypeError, ValueError, AttributeError, LookupError) as exc:
        # SQLite stores any type in any column: a damaged row can hold a number where text was.
        row = "" if at.row is None else f" after row {at.row}"
        return [f"{path}: table {at.table}{row}: a value has the wrong type ({type(exc).__name__}: {exc})"]


def _sqlite(db: Database, at: _At) -> list[str]:
    at.table = "(every page and index)"
    lines = [str(line) for (line,) in db.execute("PRAGMA integrity_check")]
    if lines == ["ok"]:
        return []
    return [f"{db_path(db)}: SQLite integrity_check found {len(lines)} problem(s), the first: {lines[0]}: "
            f"run `sqlite3 {db_path(db)} \"PRAGMA integrity_check\"` and restore the bank from a copy"]


def db_path(db: Database) -> str:
    row = db.execute("PRAGMA database_list").fetchone()
    return row[2] or ":memory:"


def _schema_of(db: Database) -> dict[tuple[str, str], str | None]:
    return {(t, n): sql for t, n, sql in db.execute("SELECT type, name, sql FROM sqlite_master")}


def expected_schema() -> dict[tuple[str, str], str | None]:
    """sqlite_master of a bank built by the migrations (tables, indexes, triggers)."""
    fresh = Database(memory=True)
    migrations.apply(fresh, list(migrations.MIGRATIONS))
    return _schema_of(fresh)


def _schema(db: Database, at: _At) -> list[str]:
    want, have = expected_schema(), _schema_of(db)
    bad = [f"schema: {t} {n} is missing (dropped)" for (t, n) in want if (t, n) not in have]
    bad += [f"schema: {t} {n} differs from the migrations' definition" for (t, n), sql in want.items()
            if (t, n) in have and have[(t, n)] != sql]
    return bad + [f"schema: unexpected {t} {n}" for (t, n) in have if (t, n) not in want]


_RECORD_SCAN = ("SELECT rowid, hash, CAST(body AS BLOB), {extract}, json_array(kind, card_id), source_hash "
                "FROM records ORDER BY rowid")
_EXTRACT = "json_extract(body, '$.kind', '$.card.id', '$.source')"


def _records(db: Database, at: _At) -> list[str]:
    """One streaming pass: the stored bytes' hash, and the duplicated columns from one JSON parse."""
    at.table = "records"
    try:
        return _record_pass(db, at, _EXTRACT)
    except sqlite3.OperationalError as exc:
        if "malformed JSON" not in str(exc):
            raise
    # Some body is not JSON: scan again, guarding each parse (slower, only on a damaged bank).
    return _record_pass(db, at, f"CASE WHEN json_valid(body) THEN {_EXTRACT} END")


def _record_pass(db: Database, at: _At, extract: str) -> list[str]:
    bad = []
    for n, h, body, fields, columns, source_hash in db.execute(_RECORD_SCAN.format(extract=extract)):
        at.row = n
        if hashlib.sha256(body).hexdigest() != h:
            bad.append(f"records row {n}: record {h} does not match its stored hash")
        elif fields is None or not fields.startswith(columns[:-1] + ","):
            bad.append(f"records row {n}: record {h} kind or card_id column does not match its body")
        else:
            # `fields` is [kind, card id, source]: the source is the canonical text between them.
            source = fields[len(columns):-1]
            expected = None if source == "null" else sha256_text(source)
            if expected != source_hash:
                bad.append(f"records row {n}: record {h} source_hash column does not match its body")
    return bad


def _references(db: Database, at: _At) -> list[str]:
    bad = []
    for table, column in (("library_entries", "record_hash"), ("staged", "record_hash"),
                          ("replicates", "member_hash"), ("replicates", "merged_hash")):
        at.table = table
        bad += [f"{table} row {n}: refers to missing record {h}" for n, h in db.execute(
            f"SELECT t.rowid, t.{column} FROM {table} t LEFT JOIN records r ON r.hash = t.{column} "
            "WHERE r.hash IS NULL ORDER BY t.rowid")]
    for table in ("decisions", "events", "staged", "journal"):
        at.table = table
        bad += [f"{table} row {n}: belongs to no episode ({ep})" for n, ep in db.execute(
            f"SELECT t.rowid, t.episode_id FROM {table} t LEFT JOIN episodes e ON e.episode_id = t.episode_id "
            "WHERE e.episode_id IS NULL ORDER BY t.rowid")]
    return bad


_SQL_ONLY = frozenset({_sqlite, _references})
"""Checks that are SQL alone: `_run` gives them the second connection."""


def _decisions(db: Database, at: _At) -> list[str]:
    at.table = "decisions"
    bad = []
    for n, key, candidate, body in db.execute(
            "SELECT rowid, decision_hash, candidate_id, body FROM decisions ORDER BY rowid"):
        at.row = n
        try:
            fields = loads_strict(body)
            claimed = fields.pop("decision_hash")
        except (BadInput, KeyError, AttributeError, TypeError):
            bad.append(f"decisions row {n}: decision {key} body is not a decision")
            continue
        if not content_hash(fields) == claimed == key:
            bad.append(f"decisions row {n}: decision {key} does not match its fields")
        elif fields.get("candidate_id") != candidate:
            bad.append(f"decisions row {n}: decision {key} candidate_id column does not match its body")
    return bad


def _event_columns(episode_id: str, seq: int, candidate: str, body: str, decided: set[str]) -> str | None:
    """Why an event row disagrees with its own body or names an unrecorded decision (None: it does not)."""
    try:
        fields = loads_strict(body)
        named = (fields["episode_id"], fields["seq"], fields["candidate_id"])
        decision = fields["decision"]["decision_hash"]
    except (BadInput, KeyError, TypeError):
        return "body is not an event"
    if named != (episode_id, seq, candidate):
        return "columns do not match its body"
    return None if decision in decided else f"its decision {decision} is not recorded in the episode"


def _events(db: Database, at: _At) -> list[str]:
    bad = []
    for ep, manifest, version, genesis in db.execute(
            "SELECT episode_id, manifest_hash, library_version, genesis FROM episodes ORDER BY rowid").fetchall():
        at.table, at.row = "episodes", ep
        if episode_genesis(ep, manifest, version) != genesis:
            bad.append(f"episodes: episode {ep} header does not match its genesis hash")
        decided = {h for (h,) in db.execute("SELECT decision_hash FROM decisions WHERE episode_id = ?", [ep])}
        prev = genesis
        at.table = "events"
        rows = db.execute("SELECT seq, candidate_id, body, body_hash, prev_hash, hash FROM events "
                          "WHERE episode_id = ? ORDER BY seq", [ep]).fetchall()
        for expected_seq, (seq, candidate, body, body_hash, prev_hash, link) in enumerate(rows):
            at.row = f"{ep}/{seq}"
            why = None
            if seq != expected_seq:
                why = f"expected seq {expected_seq} (gap)"
            elif sha256_text(body) != body_hash:
                why = "body does not match its hash"
            elif prev_hash != prev or chain_hash(prev_hash, body_hash) != link:
                why = "chain link broken"
            else:
                why = _event_columns(ep, seq, candidate, body, decided)
            if why:
                bad.append(f"events: episode {ep} seq {seq}: {why}")
            prev = link
    return bad


def _journal_entries(db: Database, ep: str, start: str) -> tuple[list[str], set[tuple[str, str]]]:
    bad, refs, prev = [], set(), start
    rows = db.execute("SELECT n, kind, ref, row_hash, prev_hash, hash FROM journal WHERE episode_id = ? ORDER BY n",
                      [ep]).fetchall()
    for expected, (n, kind, ref, row_hash, prev_hash, link) in enumerate(rows):
        where = f"journal: episode {ep} entry {n}"
        row = chains.source_row(db, kind, ep, ref) if kind in (*chains.JOURNAL_SOURCES, "finish") else None
        if n != expected:
            bad.append(f"{where}: expected entry {expected} (gap)")
        elif row is None:
            bad.append(f"{where}: its {kind} {ref} is missing (deleted)")
        elif chains.row_digest(kind, row) != row_hash:
            bad.append(f"{where}: its {kind} {ref} no longer matches the journal (a column was edited)")
        elif prev_hash != prev or chain_hash(prev_hash, row_hash) != link:
            bad.append(f"{where}: chain link broken")
        refs.add((kind, ref))
        prev = link
    return bad, refs


def _journals(db: Database, at: _At) -> list[str]:
    at.table = "journal"
    bad = []
    for ep, genesis, started, finished in db.execute(
            "SELECT episode_id, genesis, started_at, finished_at FROM episodes ORDER BY rowid").fetchall():
        at.row = ep
        found, refs = _journal_entries(db, ep, chains.journal_genesis(genesis, started))
        bad += found
        for kind, (table, key, _) in chains.JOURNAL_SOURCES.items():
            bad += [f"{table} row {n}: {kind} {ref} of episode {ep} is not in its journal (inserted behind it)"
                    for n, ref in db.execute(f"SELECT rowid, {key} FROM {table} WHERE episode_id = ? ORDER BY rowid",
                                             [ep]) if (kind, str(ref)) not in refs]
        if finished is not None and ("finish", "finish") not in refs:
            bad.append(f"episodes: episode {ep} is finished but its finish is not in its journal")
    return bad


def _library(db: Database, at: _At) -> list[str]:
    at.table = "library_versions"
    bad, prev = [], chains.LIBRARY_GENESIS
    rows = db.execute(f"SELECT {', '.join(chains.VERSION_COLUMNS)}, artefacts_hash, head FROM library_versions "
                      "ORDER BY version")
    for expected, values in enumerate(rows.fetchall()):
        row = dict(zip((*chains.VERSION_COLUMNS, "artefacts_hash"), values))
        v, head = row["version"], values[-1]
        at.table, at.row = "library_entries", f"version {v}"
        if v != expected:
            bad.append(f"library_versions: version {expected} is missing (deleted)")
        if chains.stored_entries_digest(db, v) != row["entries_hash"]:
            bad.append(f"library version {v}: its entries do not match its entries hash (added, removed or edited)")
        elif chains.stored_artefacts_digest(db, v) != row["artefacts_hash"]:
            bad.append(f"library version {v}: its artefacts do not match its artefacts hash (added, removed or edited)")
        elif chains.version_head(prev, row) != head:
            bad.append(f"library version {v}: its header or its link to version {v - 1} does not match its head")
        prev = head
    at.table, at.row = "library_entries", None
    bad += [f"library_entries: {count} entries of version {v}, which does not exist" for v, count in db.execute(
        "SELECT e.version, count(*) FROM library_entries e LEFT JOIN library_versions l ON l.version = e.version "
        "WHERE l.version IS NULL GROUP BY e.version")]
    at.table = "library_artefacts"
    for v, kind, sha, body in db.execute("SELECT version, kind, sha256, body FROM library_artefacts ORDER BY rowid"):
        at.row = f"version {v} {kind}"
        if sha256_text(body) != sha:
            bad.append(f"library_artefacts: the {kind} artefact of version {v} does not match its sha256 (edited)")
    bad += [f"library_artefacts: {count} artefacts of version {v}, which does not exist" for v, count in db.execute(
        "SELECT a.version, count(*) FROM library_artefacts a LEFT JOIN library_versions l ON l.version = a.version "
        "WHERE l.version IS NULL GROUP BY a.version")]
    return bad


def _deep(db: Database, at: _At) -> list[str]:
    """Every body through its typed record, and back to the same bytes."""
    bad = []
    for table, parse in (("records", parse_record), ("decisions", lambda b: parse_model(Decision, b)),
                         ("events", lambda b: parse_model(Event, b))):
        at.table = table
        for n, body in db.execute(f"SELECT rowid, body FROM {table} ORDER BY rowid"):
            at.row = n
            try:
                same = canonical_json(parse(body)) == body
            except BadInput as exc:
                bad.append(f"{table} row {n}: body is not a valid record ({exc})")
                continue
            if not same:
                bad.append(f"{table} row {n}: body does not re-serialise to its stored bytes")
    return bad
