"""The bank's schema as an ordered list of named migrations.

A migration is a function over a sqlite-utils Database, applied once, in order, inside the
caller's write transaction. `PRAGMA user_version` holds how many have been applied, so a bank
written by a newer agent (more migrations than this code knows) is refused instead of being
misread. Never edit or reorder an applied migration: append a new one.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

from sqlite_utils import Database

from experience_bank import chains, files
from experience_bank.errors import BadInput

# Tables whose rows are frozen once written: the triggers below refuse UPDATE and DELETE.
FROZEN_TABLES = ("records", "replicates", "library_versions", "library_entries",
                 "decisions", "events", "staged")


def _freeze_verb(db: Database, table: str, verb: str) -> None:
    db.execute(
        f"CREATE TRIGGER {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
        f"BEGIN SELECT RAISE(ABORT, '{table} rows are frozen: {verb} refused'); END"
    )


def _freeze(db: Database, table: str) -> None:
    for verb in ("UPDATE", "DELETE"):
        _freeze_verb(db, table, verb)


def m001_records(db: Database) -> None:
    # body is the canonical JSON the hash is taken over, so verify needs no re-serialisation.
    db["records"].create(
        {"hash": str, "kind": str, "card_id": str, "source_hash": str, "body": str, "written_at": str},
        pk="hash", not_null={"kind", "card_id", "body", "written_at"},
    )
    db["records"].create_index(["card_id", "source_hash"])
    # A consolidated record that merged several replicate observations lists them here.
    db["replicates"].create({"merged_hash": str, "member_hash": str}, pk=("merged_hash", "member_hash"))


def m002_library(db: Database) -> None:
    db["library_versions"].create(
        {"version": int, "base_version": int, "episode_id": str, "note": str, "created_at": str},
        pk="version", not_null={"note", "created_at"},
    )
    # One version per consolidated episode: consolidation is idempotent.
    db["library_versions"].create_index(["episode_id"], unique=True)
    db["library_entries"].create(
        {"version": int, "record_hash": str, "conflicted": int, "missing": str},
        pk=("version", "record_hash"), not_null={"conflicted", "missing"},
    )


def m003_episodes(db: Database) -> None:
    db["episodes"].create(
        {"episode_id": str, "manifest_hash": str, "library_version": int, "genesis": str,
         "started_at": str, "finished_at": str},
        pk="episode_id", not_null={"manifest_hash", "library_version", "genesis", "started_at"},
    )
    # An episode row may change exactly once: finished_at from NULL to a time.
    db.execute(
        "CREATE TRIGGER episodes_finish_only BEFORE UPDATE ON episodes WHEN "
        "OLD.finished_at IS NOT NULL OR NEW.episode_id IS NOT OLD.episode_id OR "
        "NEW.manifest_hash IS NOT OLD.manifest_hash OR NEW.library_version IS NOT OLD.library_version OR "
        "NEW.genesis IS NOT OLD.genesis OR NEW.started_at IS NOT OLD.started_at "
        "BEGIN SELECT RAISE(ABORT, 'episodes may only be finished once: UPDATE refused'); END"
    )
    db.execute("CREATE TRIGGER episodes_no_delete BEFORE DELETE ON episodes "
               "BEGIN SELECT RAISE(ABORT, 'episodes rows are frozen: DELETE refused'); END")
    db["decisions"].create(
        {"episode_id": str, "decision_hash": str, "candidate_id": str, "body": str, "written_at": str},
        pk=("episode_id", "decision_hash"), not_null={"candidate_id", "body", "written_at"},
    )
    db["events"].create(
        {"episode_id": str, "seq": int, "candidate_id": str, "body": str, "body_hash": str,
         "prev_hash": str, "hash": str, "written_at": str},
        pk=("episode_id", "seq"),
        not_null={"candidate_id", "body", "body_hash", "prev_hash", "hash", "written_at"},
    )
    db["staged"].create({"episode_id": str, "record_hash": str, "written_at": str},
                        pk=("episode_id", "record_hash"), not_null={"written_at"})


def m004_freeze(db: Database) -> None:
    for table in FROZEN_TABLES:
        _freeze(db, table)


# INSERT OR REPLACE is a delete plus an insert, and the delete trigger does not fire without
# recursive triggers: so every insert that meets an existing key is refused before it happens.
# Where the bank re-inserts on purpose (a record, a decision or a replicate under its content
# hash), the identical row is skipped and only a different one is refused.
_KEYS = {
    "records": ("hash = NEW.hash", "body IS NEW.body"),
    "replicates": ("merged_hash = NEW.merged_hash AND member_hash = NEW.member_hash", "1"),
    "decisions": ("episode_id = NEW.episode_id AND decision_hash = NEW.decision_hash", "body IS NEW.body"),
    "library_versions": ("version = NEW.version OR episode_id = NEW.episode_id", None),
    "library_entries": ("version = NEW.version AND record_hash = NEW.record_hash", None),
    "episodes": ("episode_id = NEW.episode_id", None),
    "events": ("episode_id = NEW.episode_id AND seq = NEW.seq", None),
    "staged": ("episode_id = NEW.episode_id AND record_hash = NEW.record_hash", None),
    "journal": ("episode_id = NEW.episode_id AND n = NEW.n", None),
}


def _no_replace(table: str) -> str:
    return f"{table}_no_replace"


def _refuse_conflicts(db: Database, table: str, keys: dict | None = None) -> None:
    key, same = (keys or _KEYS)[table]
    refuse = f"SELECT RAISE(ABORT, '{table} rows are frozen: an INSERT over an existing key (REPLACE) refused')"
    body = (f"{refuse}; " if same is None else
            f"{refuse} WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE ({key}) AND {same}); SELECT RAISE(IGNORE); ")
    db.execute(f"CREATE TRIGGER {_no_replace(table)} BEFORE INSERT ON {table} "
               f"WHEN EXISTS (SELECT 1 FROM {table} WHERE {key}) BEGIN {body}END")


# The tables whose bulk inserts may lift their no-replace trigger (see bulk_insert).
BULK_TABLES = ("records", "library_entries")


@contextmanager
def bulk_insert(db: Database, table: str) -> Iterator[None]:
    """Inside the caller's write transaction, insert into `table` without its no-replace
    trigger: dropped for the block, re-created from `_refuse_conflicts` at its end.

    The trigger looks every new key up again, about 8 us an insert: 17 s of a 1e6-record import
    with its library version. The bank's own bulk inserts cannot need it: a record's key is its
    body's hash (and the import checks the rows it skipped, `library.refuse_replaced`), and a
    library version's entries come under a new version number. Nobody sees the table unguarded:
    DDL is part of the transaction, other writers wait for the write lock, and an error or kill -9
    rolls the drop back with the rows (the caller's transaction rolls back on any exception, so
    the trigger is re-created only on the way out of a block that succeeded)."""
    if table not in BULK_TABLES or not db.conn.in_transaction:
        raise RuntimeError(f"bulk_insert({table!r}) needs a table of {BULK_TABLES} and an open write transaction")
    db.execute(f"DROP TRIGGER {_no_replace(table)}")
    yield
    _refuse_conflicts(db, table)


def _backfill_library(db: Database) -> None:
    prev = chains.LIBRARY_GENESIS
    rows = db.execute("SELECT version, base_version, episode_id, note, created_at FROM library_versions "
                      "ORDER BY version").fetchall()
    for values in rows:
        row = dict(zip(chains.VERSION_COLUMNS, values))
        row["entries_hash"] = chains.stored_entries_digest(db, row["version"])
        prev = chains.version_head(prev, row)
        db.execute("UPDATE library_versions SET entries_hash = ?, head = ? WHERE version = ?",
                   [row["entries_hash"], prev, row["version"]])


_JOURNAL_ORDER = (("decision", "decisions", "decision_hash"), ("staged", "staged", "record_hash"),
                  ("event", "events", "seq"))


def _backfill_journal(db: Database) -> None:
    """Journal every stored row of every episode in write order (a decision before its event)."""
    for ep, finished in db.execute("SELECT episode_id, finished_at FROM episodes ORDER BY rowid").fetchall():
        rows = []
        for rank, (kind, table, key) in enumerate(_JOURNAL_ORDER):
            rows += [(at, rank, rowid, kind, str(ref)) for rowid, at, ref in db.execute(
                f"SELECT rowid, written_at, {key} FROM {table} WHERE episode_id = ?", [ep]).fetchall()]
        for *_, kind, ref in sorted(rows):
            chains.journal(db, ep, kind, ref)
        if finished is not None:
            chains.journal(db, ep, "finish", "finish")


def m005_tamper_evidence(db: Database) -> None:
    # Library versions commit to their entries and to each other; episodes get a journal.
    db.execute("DROP TRIGGER library_versions_no_update")
    db["library_versions"].add_column("entries_hash", str)
    db["library_versions"].add_column("head", str)
    db["journal"].create(
        {"episode_id": str, "n": int, "kind": str, "ref": str, "row_hash": str, "prev_hash": str, "hash": str},
        pk=("episode_id", "n"), not_null={"kind", "ref", "row_hash", "prev_hash", "hash"})
    _backfill_library(db)
    _backfill_journal(db)
    _freeze_verb(db, "library_versions", "UPDATE")
    _freeze(db, "journal")
    for table in _KEYS:
        _refuse_conflicts(db, table)


_ARTEFACT_KEYS = {"library_artefacts": ("version = NEW.version AND kind = NEW.kind", None)}
"""Not in _KEYS: m005 creates the triggers of every table there, and this one is younger."""


def m006_library_artefacts(db: Database) -> None:
    # A library version's artefacts besides its records (the go/no-go refit at consolidation):
    # one text body per kind, its sha256, frozen like every row; the version header commits to
    # them through artefacts_hash (NULL in versions without any, whose heads stay as they were).
    db["library_artefacts"].create(
        {"version": int, "kind": str, "sha256": str, "body": str, "written_at": str},
        pk=("version", "kind"), not_null={"sha256", "body", "written_at"})
    db["library_versions"].add_column("artefacts_hash", str)  # ALTER TABLE: no row is updated
    _freeze(db, "library_artefacts")
    _refuse_conflicts(db, "library_artefacts", _ARTEFACT_KEYS)


MIGRATIONS: tuple[tuple[str, Callable[[Database], None]], ...] = (
    ("m001_records", m001_records),
    ("m002_library", m002_library),
    ("m003_episodes", m003_episodes),
    ("m004_freeze", m004_freeze),
    ("m005_tamper_evidence", m005_tamper_evidence),
    ("m006_library_artefacts", m006_library_artefacts),
)
SCHEMA_VERSION = len(MIGRATIONS)


def schema_version(db: Database) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def check_not_newer(db: Database) -> None:
    """BadInput when the bank was written by an agent that knows more migrations."""
    found = schema_version(db)
    if found > SCHEMA_VERSION:
        raise BadInput(f"bank schema {found} is newer than this agent ({SCHEMA_VERSION}): upgrade the agent")


def check_recorded(db: Database) -> None:
    """BadInput when `user_version` disagrees with the migrations the bank records (a downgrade)."""
    found = schema_version(db)
    names = [n for (n,) in db.execute("SELECT name FROM _migrations ORDER BY rowid")] if db["_migrations"].exists() else []
    if names != [n for n, _ in MIGRATIONS[:found]]:
        raise BadInput(f"bank schema {found} (PRAGMA user_version) disagrees with the {len(names)} migrations it records: "
                       f"the header was edited; set `PRAGMA user_version = {len(names)}` again or restore the bank")


def pending(db: Database) -> list[tuple[str, Callable[[Database], None]]]:
    check_not_newer(db)
    check_recorded(db)
    return list(MIGRATIONS[schema_version(db):])


def would_migrate(path: str | Path) -> bool:
    """Whether opening the bank file at `path` would run migrations, found read-only: False for a
    missing file (opening refuses it), BadInput for a newer or downgraded bank (as opening gives)."""
    if not Path(path).is_file():
        return False
    # With no -wal beside it no writer has it open, so the read can be immutable: a read-only
    # connection to a WAL bank would otherwise leave -wal/-shm files behind a refusal.
    conn = files.read_only(path, immutable=not Path(f"{path}-wal").exists())
    try:
        return bool(pending(Database(conn)))
    finally:
        conn.close()


def apply(db: Database, todo: list[tuple[str, Callable[[Database], None]]]) -> list[str]:
    """Run the given migrations (call inside a write transaction); return their names."""
    if not db["_migrations"].exists():
        db["_migrations"].create({"name": str, "applied_at": str}, pk="name")
    done = []
    for name, migration in todo:
        migration(db)
        db.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)",
                   [name, datetime.now(timezone.utc).isoformat()])
        done.append(name)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION if todo else schema_version(db)}")
    return done
