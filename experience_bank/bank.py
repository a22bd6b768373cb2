"""The experience bank: frozen records, library versions and hash-chained episode histories.

Plain SQLite through sqlite-utils (schema in `migrations.py`). Guarantees and their limits:
- every write is one `BEGIN IMMEDIATE` transaction (all or nothing, even under kill -9), with
  WAL and `synchronous=FULL`; a busy timeout lets two processes append to one bank;
- rows are frozen by triggers (UPDATE, DELETE and an INSERT over an existing key, which is
  what REPLACE does); every row the bank serves is covered by a hash chain (`chains.py`);
- after each commit the new chain head is appended to the head log beside the bank
  (`heads.py`), so `verify --against` also catches a history rewritten with every hash
  recomputed. An in-memory bank has no head log.
Records and library versions are here; an episode's history H_t is in `history.py`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from sqlite_utils import Database

from experience_bank import chains, heads, integrity, library, migrations, paths
from experience_bank.consolidate import NOISE_PP, conflicted_hashes, fact_of, plan
from experience_bank.errors import BadInput, Busy, WriteFault, write_fault
from experience_bank.files import jsonl_text
from experience_bank.history import EpisodeHistory
from experience_bank.library import record_row
from experience_bank.records import HistoricalRecord, Proposal, parse_record

BUSY_TIMEOUT_S = 30.0
"""How long a writer waits for another process's write transaction before giving up."""
CACHE_KIB = 65536
"""SQLite page cache per connection: bulk imports touch the primary-key B-tree at random."""
PAGE_BYTES = 8192
"""Page size of a new bank: a 1.9 KB record body fills a 4 KiB page alone (4.2 KB a record on
disk), two to three share an 8 KiB one (2.8 KB). An existing bank keeps its page size."""
MMAP_BYTES = 1 << 34  # SQLite caps it at its build limit (2 GiB here)
"""Reads map the file instead of a read() call per page: lookups by hash over a 2 GB bank
(1e6 records) are random accesses, and the OS page cache already holds the file."""
Record = HistoricalRecord | Proposal


@dataclass(frozen=True)
class LibraryEntry:
    """One record as listed in one library version."""

    hash: str
    """Content hash of the record."""
    record: Record
    """The record or proposal."""
    conflicted: bool
    """Contradicting evidence for the same card and context is in this version: no direct Train."""
    missing: tuple[str, ...] = ()
    """Provenance artefacts that were absent when this version was consolidated."""


_BUSY = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED


def damaged(path: str, exc: Exception, wait_s: float = BUSY_TIMEOUT_S) -> BadInput:
    """The one line for an SQLite error on a bank file: held by another writer, a refused
    write (full disk, read-only), or a file SQLite cannot read."""
    if isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF in _BUSY:
        return Busy(f"bank {path} is held by another process's write (waited {wait_s:g} s): run the command again "
                    "when that process is done, or wait longer with --wait SECONDS (bank import, bank consolidate)")
    fault = write_fault(exc, f"bank {path}", then="run the command again (nothing was committed)",
                        file=None if path == ":memory:" else path)
    if fault is not None:
        return fault
    return BadInput(f"bank {path} is not a readable SQLite bank ({exc}): check it with "
                    f"`sqlite3 {path} \"PRAGMA integrity_check\"` and restore it from a copy")


def _jsonl_records(path: Path) -> Iterator[Record]:
    """The records of a JSONL file, parsed strictly a line at a time."""
    for n, line in jsonl_text(path, "records file"):
        try:
            record = parse_record(line)
            paths.check_paths(record.provenance.artefacts, "record")
            yield record
        except BadInput as exc:
            raise BadInput(f"{path} line {n}: {exc}") from None


class Bank(EpisodeHistory):
    """An experience bank in one SQLite file (or `":memory:"` for tests)."""

    def __init__(self, path: str | Path = ":memory:", wait_s: float = BUSY_TIMEOUT_S):
        """Connect and bring the schema up to date (BadInput if the bank is newer, downgraded or unreadable).
        `wait_s`: how long a write waits for another process's write transaction."""
        self.path = str(path)
        self.wait_s = float(wait_s)
        self.base_dir = Path.cwd() if self.path == ":memory:" else Path(self.path).resolve().parent
        self.head_log = None if self.path == ":memory:" else heads.log_path(self.path)
        self._heads: list[dict] = []
        new = self.path != ":memory:" and not Path(self.path).exists()
        conn = sqlite3.connect(self.path, timeout=self.wait_s, isolation_level=None)
        self.db = Database(conn)
        try:
            migrations.check_not_newer(self.db)  # before any PRAGMA that could write: a refusal writes nothing
            if new:
                self.db.execute(f"PRAGMA page_size={PAGE_BYTES}")  # only before the first table exists
            if self.path != ":memory:":
                self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute(f"PRAGMA busy_timeout={int(self.wait_s * 1000)}")
            self.db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            self.db.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
            self._migrate()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # not SQLite, or damaged text in its header
            conn.close()
            raise damaged(self.path, exc, self.wait_s) from None
        except BaseException:
            conn.close()
            raise

    @classmethod
    def init(cls, path: str | Path, wait_s: float = BUSY_TIMEOUT_S) -> "Bank":
        """Create a bank (or open an existing one) and run any pending migrations."""
        if str(path) != ":memory:":
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise write_fault(exc, f"the folder of bank {path}") or exc from None
        return cls(path, wait_s)

    @classmethod
    def open(cls, path: str | Path, wait_s: float = BUSY_TIMEOUT_S) -> "Bank":
        """Open an existing bank; BadInput if it is missing, empty, unreadable or newer than this code."""
        if str(path) != ":memory:":
            if not Path(path).is_file():
                raise BadInput(f"no bank at {path}: create one with `agent bank init --bank {path}`")
            if Path(path).stat().st_size == 0:
                raise BadInput(f"bank {path} is an empty file, not a bank: remove it, or create one with "
                               f"`agent bank init --bank {path}`")
        return cls(path, wait_s)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Bank":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[Database]:
        """One write transaction: BEGIN IMMEDIATE takes the write lock up front, so a
        read-then-write (next seq, next version) cannot interleave with another process.
        The heads it made are appended to the head log inside it, just before the COMMIT, so
        the log and the commit are one all-or-nothing step: a log that cannot be written rolls
        the transaction back, and a COMMIT that fails takes the log's new lines back. SQLite
        errors a user can act on (another writer, a full disk) come out as one line."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise damaged(self.path, exc, self.wait_s) from None
        self._heads = []
        logged = None
        try:
            yield self.db
            if self._heads and self.head_log is not None:
                logged = heads.append(self.head_log, self._heads)
            self.db.execute("COMMIT")
        except BaseException as exc:
            self._rollback()
            if logged is not None:
                heads.undo(self.head_log, logged)
            line = damaged(self.path, exc, self.wait_s) if isinstance(exc, sqlite3.OperationalError) else None
            if isinstance(line, (Busy, WriteFault)):
                raise line from None
            raise

    def _rollback(self) -> None:
        if self.db.conn.in_transaction:
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite already rolled it back (a failed COMMIT on a full disk)

    def _migrate(self) -> None:
        if not migrations.pending(self.db):
            return  # read-only when up to date: opening a bank never rewrites it
        with self._write() as db:
            migrations.apply(db, migrations.pending(db))
            self._heads = heads.current(db)  # an upgraded bank's first anchors

    def schema_version(self) -> int:
        return migrations.schema_version(self.db)

    # --- records ------------------------------------------------------------------------

    def import_records(self, records: Iterable[Record], *, library_note: str | None = None) -> list[str]:
        """Store records (frozen, content-hashed) in one transaction; return their hashes.

        With `library_note`, the same transaction also creates a new library version holding
        the current version's records plus these."""
        facts: list = []
        written_at = library.now()  # one transaction, one write time

        def rows() -> Iterator[dict]:
            # Streamed into one transaction: a bad item rolls it all back, and 1e6 bodies are
            # never held in memory at once.
            for n, r in enumerate(records):
                if not isinstance(r, (HistoricalRecord, Proposal)):
                    raise BadInput(f"item {n} is a {type(r).__name__}, not a HistoricalRecord or Proposal")
                paths.check_paths(r.provenance.artefacts, f"item {n} ({r.card.id})")
                row = record_row(r, written_at)
                facts.append(fact_of(r, row["hash"], row["source_hash"]))
                yield row

        with self._write() as db:
            (last_rowid,) = db.execute("SELECT coalesce(max(rowid), 0) FROM records").fetchone()
            with migrations.bulk_insert(db, "records"):
                inserted = db.conn.executemany(library.INSERT_RECORD, rows()).rowcount
            if inserted < len(facts):  # some were stored already: the lifted trigger's check, on them
                library.refuse_replaced(db, [f.hash for f in facts], last_rowid)
            if library_note is not None:
                self._insert_version(library.version_facts(db, self.current_library_version()) + facts, library_note)
        return [f.hash for f in facts]

    def import_jsonl(self, path: str | Path, *, library_note: str | None = None) -> list[str]:
        """Import a JSONL file of records all or nothing, a line at a time (a 1e6-record file is
        never held whole): a bad line raises BadInput naming it and rolls the import back."""
        if not Path(path).is_file():
            raise BadInput(f"no file {path}: give the path of a JSONL file of records")
        records = _jsonl_records(Path(path))
        first = next(records, None)  # before the write lock: an empty file writes nothing
        if first is None:
            raise BadInput(f"{path} holds no records: one JSON record per line")
        return self.import_records(itertools.chain([first], records), library_note=library_note)

    def get_record(self, record_hash: str) -> Record:
        """The record with this content hash (BadInput if absent)."""
        row = self.db.execute("SELECT body FROM records WHERE hash = ?", [record_hash]).fetchone()
        if row is None:
            raise BadInput(f"no record {record_hash} in the bank: list hashes with `agent bank list`")
        return parse_record(row[0])

    def records_for(self, card_id: str, source_hash: str | None = None) -> list[tuple[str, Record]]:
        """(hash, record) of every stored record of a card, optionally for one source context."""
        sql, args = "SELECT hash, body FROM records WHERE card_id = ?", [card_id]
        if source_hash is not None:
            sql, args = sql + " AND source_hash = ?", args + [source_hash]
        return [(h, parse_record(b)) for h, b in self.db.execute(sql + " ORDER BY rowid", args)]

    def record_hashes(self) -> list[str]:
        return [h for (h,) in self.db.execute("SELECT hash FROM records ORDER BY rowid")]

    # --- library versions ---------------------------------------------------------------

    def current_library_version(self) -> int:
        """The newest library version; 0 (the empty L(0)) when none has been created."""
        (latest,) = self.db.execute("SELECT max(version) FROM library_versions").fetchone()
        return 0 if latest is None else latest

    def _has_version(self, version: int) -> bool:
        row = self.db.execute("SELECT 1 FROM library_versions WHERE version = ?", [version]).fetchone()
        return row is not None or (version == 0 and self.current_library_version() == 0)

    def _version(self, version: int | None) -> int:
        version = self.current_library_version() if version is None else version
        if not self._has_version(version):
            raise BadInput(f"no library version {version} (latest is {self.current_library_version()})")
        return version

    def _entry_rows(self, version: int | None, card_id: str | None = None) -> list[LibraryEntry]:
        if card_id is None:
            sql = ("SELECT e.record_hash, r.body, e.conflicted, e.missing FROM library_entries e "
                   f"JOIN records r ON r.hash = e.record_hash WHERE {chains.VERSION_ROWS} ORDER BY e.rowid")
            args: list = chains.version_rows(self.db, self._version(version))
        else:  # CROSS JOIN fixes the order: the card's few records first, then each one's entry by key
            sql = ("SELECT e.record_hash, r.body, e.conflicted, e.missing FROM records r CROSS JOIN library_entries e "
                   "ON e.version = ? AND e.record_hash = r.hash WHERE r.card_id = ? ORDER BY e.rowid")
            args = [self._version(version), card_id]
        rows = self.db.execute(sql, args)
        return [LibraryEntry(h, parse_record(b), bool(c), tuple(json.loads(m))) for h, b, c, m in rows]

    def library_records(self, version: int | None = None) -> list[LibraryEntry]:
        """The entries of a library version (default: the current one); old versions stay readable."""
        return self._entry_rows(version)

    def library_entries_for(self, card_id: str, version: int | None = None) -> list[LibraryEntry]:
        """The entries of one card in a library version, by index (what authorizing a candidate reads)."""
        return self._entry_rows(version, card_id)

    def export_lines(self, version: int | None = None) -> Iterator[str]:
        """A version's records as stored canonical JSON, hash-checked, without re-serialising."""
        rows = self.db.execute("SELECT e.record_hash, r.body FROM library_entries e JOIN records r ON r.hash = "
                               f"e.record_hash WHERE {chains.VERSION_ROWS} ORDER BY e.rowid",
                               chains.version_rows(self.db, self._version(version)))
        for h, body in rows:
            if hashlib.sha256(body.encode()).hexdigest() != h:
                raise BadInput(f"record {h} fails its hash check: run `agent bank verify` before exporting")
            yield body

    def artefact(self, kind: str, version: int | None = None) -> tuple[int, str] | None:
        """(the version storing it, its text): the newest artefact of `kind` stored at or before a
        library version (default: the current one); None where none is."""
        return library.artefact(self.db, kind, self._version(version))

    def create_library_version(self, record_hashes: Iterable[str], note: str) -> int:
        """A new library version holding exactly these stored records; conflicts are flagged."""
        with self._write() as db:
            return self._insert_version(library.stored_facts(db, record_hashes), note)

    def _insert_version(self, facts: list, note: str) -> int:
        conflicted = conflicted_hashes(facts)
        version, head = library.insert_version(self.db, [(f.hash, f.hash in conflicted, ()) for f in facts],
                                               note, None, None)
        self._heads.append(heads.library_line(version, head))
        return version

    # --- consolidation and verification -------------------------------------------------

    def consolidate(self, episode_id: str, noise_pp: float = NOISE_PP,
                    artefacts: library.ArtefactTexts | None = None) -> int:
        """L(e+1) = Consolidate(L(e), H_T): provenance check, de-duplication, conflict review.

        L(e) is the newest version when the write lock is taken, not the one the episode started
        on: records imported and other episodes consolidated while it ran are in L(e), so none
        of them is dropped from the current library. Idempotent: a consolidated episode returns
        its version. `artefacts`: texts the new version stores beside its records, made for its
        number in the same transaction (the loop's go/no-go refit, agent/run/gonogo_refit.py);
        the bank stores text and never reads it."""
        with self._write() as db:
            done = db.execute("SELECT version FROM library_versions WHERE episode_id = ?", [episode_id]).fetchone()
            if done is not None:
                return done[0]
            episode = self._episode(episode_id)
            if episode["finished_at"] is None:
                raise BadInput(f"episode {episode_id!r} is still running: finish it before consolidating")
            note = f"consolidate episode {episode_id}"
            base = self.current_library_version()  # read under the write lock: nothing moves it now
            observed, merged = library.observations(db, base, episode_id)
            planned = plan(observed, lambda hashes: library.load_records(db, hashes), note, noise_pp, merged)
            planned = library.store_merges(db, planned)
            entries = [(p.hash, p.conflicted, library.missing(self.base_dir, p.artefacts)) for p in planned]
            version, head = library.insert_version(db, entries, note, base, episode_id, artefacts)
            self._heads.append(heads.library_line(version, head))
            return version

    def verify(self, against: str | Path | None = None, deep: bool = False) -> list[str]:
        """Every problem found (one line each, the first broken row first); empty means clean.

        Recomputes every hash and chain link, runs SQLite's integrity check and, with
        `against`, compares every head in that head log with the bank's."""
        return self.check(against, deep).problems

    def check(self, against: str | Path | None = None, deep: bool = False) -> integrity.Report:
        """`verify` with its notes (what could not be judged)."""
        lines = None if against is None else heads.read(against)
        return integrity.verify(self.db, self.path, lines, deep)

    def head_lines(self) -> list[dict]:
        """The current head of the library chain and of every episode's journal."""
        return heads.current(self.db)
