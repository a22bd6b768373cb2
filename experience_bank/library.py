"""Library versions in the database: facts read by index, version inserts, consolidation's reads.

Everything here runs inside the caller's write transaction (`Bank._write`). Nothing parses a
record body that it does not need: facts (card, context hash, metric, effect, artefacts) come
from indexed columns and one `json_extract` per row, so building a version over 1e6 records
costs a pass over them, not a parse of each (see bench/bank_scale.py).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Mapping

from pydantic import TypeAdapter
from sqlite_utils import Database

from experience_bank import chains, migrations, paths
from experience_bank.consolidate import Fact, Planned
from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json, canonical_json_and_part, sha256_text
from experience_bank.records import HistoricalRecord, Record

# One json_extract with three paths parses the body once.
FACT_COLUMNS = ("r.hash, r.kind, r.card_id, r.source_hash, "
                "json_extract(r.body, '$.evidence.target_metric', '$.evidence.delta_point', '$.provenance.artefacts'), "
                "CAST(r.body AS BLOB)")


_STORED = TypeAdapter(Record)
INSERT_RECORD = ("INSERT OR IGNORE INTO records (hash, kind, card_id, source_hash, body, written_at) "
                 "VALUES (:hash, :kind, :card_id, :source_hash, :body, :written_at)")


def refuse_replaced(db: Database, hashes: list[str], last_rowid: int) -> None:
    """The no-replace trigger's check, for an import that skipped some rows while it ran without
    it (migrations.bulk_insert): a record stored before the import (rowid <= last_rowid) under an
    imported hash must be that record. The imported body hashes to its key, so the stored one is
    the same exactly when it hashes to its key too."""
    for i in range(0, len(hashes), 500):
        chunk = hashes[i:i + 500]
        rows = db.execute(f"SELECT hash, CAST(body AS BLOB) FROM records WHERE rowid <= ? AND hash IN "
                          f"({', '.join('?' * len(chunk))})", [last_rowid, *chunk])
        for h, body in rows:
            if hashlib.sha256(body).hexdigest() != h:
                raise BadInput(f"record {h} is stored with another body, so importing it would replace it: "
                               "the bank is damaged; run `agent bank verify` and restore it from a copy")


def parse_stored(body: str | bytes) -> Record:
    """A body this bank wrote and has just hash-checked: strict pydantic validation without
    the duplicate-key pre-scan, which canonical JSON cannot need (`verify --deep` re-runs it)."""
    return _STORED.validate_json(body, strict=True)


def load_records(db: Database, hashes: list[str]) -> list[HistoricalRecord]:
    out = []
    for h in hashes:
        (body,) = db.execute("SELECT CAST(body AS BLOB) FROM records WHERE hash = ?", [h]).fetchone()
        if hashlib.sha256(body).hexdigest() != h:
            raise BadInput(f"record {h} fails its hash check: run `agent bank verify` before consolidating")
        out.append(parse_stored(body))
    return out


def now() -> str:
    """The bank's timestamp format (UTC, microseconds)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def record_row(record: Record, written_at: str | None = None) -> dict:
    """The stored row of a record: its canonical body, and the hash of its source context."""
    if isinstance(record, HistoricalRecord):
        body, source_text = canonical_json_and_part(record, "source")
        source = sha256_text(source_text)
    else:
        body, source = canonical_json(record), None
    return {"hash": sha256_text(body), "kind": record.kind, "card_id": record.card.id,
            "source_hash": source, "body": body, "written_at": written_at or now()}


def _fact(row: tuple, check: bool) -> Fact:
    record_hash, kind, card_id, source_hash, extracted, body = row
    if check and hashlib.sha256(body).hexdigest() != record_hash:
        raise BadInput(f"record {record_hash} fails its hash check: run `agent bank verify` before consolidating")
    metric, delta, artefacts = json.loads(extracted)
    return Fact(record_hash, kind, card_id, source_hash, metric, delta, tuple(artefacts))


def version_facts(db: Database, version: int, check: bool = False) -> list[Fact]:
    rows = db.execute(f"SELECT {FACT_COLUMNS} FROM library_entries e JOIN records r ON r.hash = e.record_hash "
                      f"WHERE {chains.VERSION_ROWS} ORDER BY e.rowid", chains.version_rows(db, version))
    return [_fact(row, check) for row in rows]


def stored_facts(db: Database, hashes: Iterable[str]) -> list[Fact]:
    """Facts of stored records in the given order (BadInput names the first one absent)."""
    out = []
    for h in hashes:
        row = db.execute(f"SELECT {FACT_COLUMNS} FROM records r WHERE r.hash = ?", [h]).fetchone()
        if row is None:
            raise BadInput(f"no record {h} in the bank: list hashes with `agent bank list`")
        out.append(_fact(row, False))
    return out


def observations(db: Database, version: int, episode_id: str) -> tuple[list[Fact], dict[frozenset[str], Fact]]:
    """Raw observations behind L(e) plus the episode's staged evidence, every body re-hashed,
    and L(e)'s merges by their member hashes.

    A merged entry is replaced by its members, so replicates are never double-counted."""
    entries = version_facts(db, version, check=True)
    staged = [_fact(row, True) for row in db.execute(
        f"SELECT {FACT_COLUMNS} FROM staged s JOIN records r ON r.hash = s.record_hash "
        "WHERE s.episode_id = ? ORDER BY s.rowid", [episode_id])]
    members: dict[str, list[Fact]] = {}
    for row in db.execute(f"SELECT p.merged_hash, {FACT_COLUMNS} FROM library_entries e "
                          "JOIN replicates p ON p.merged_hash = e.record_hash JOIN records r ON r.hash = p.member_hash "
                          "WHERE e.version = ?", [version]):
        members.setdefault(row[0], []).append(_fact(row[1:], True))
    out: list[Fact] = []
    for f in entries:
        out.extend(members.get(f.hash, [f]))
    merges = {frozenset(m.hash for m in members[f.hash]): f for f in entries if f.hash in members}
    return out + staged, merges


ArtefactTexts = Callable[[int], Mapping[str, str]]
"""The artefacts a new library version stores beside its records, made for its number: the
version -> {kind: text}. Called inside the write transaction: an exception rolls the version back."""


def insert_version(db: Database, entries: list[tuple[str, bool, tuple[str, ...]]], note: str,
                   base: int | None, episode_id: str | None,
                   artefacts: ArtefactTexts | None = None) -> tuple[int, str]:
    """Append a library version of (record hash, conflicted, missing) entries and the artefacts made
    for it; return (version, head)."""
    (latest,) = db.execute("SELECT max(version) FROM library_versions").fetchone()
    version = 0 if latest is None else latest + 1
    seen: set[str] = set()
    rows = []
    for h, conflicted, missing in entries:
        if h not in seen:
            seen.add(h)
            rows.append((version, h, int(conflicted), json.dumps(list(missing))))
    with migrations.bulk_insert(db, "library_entries"):  # every key is new: a new version, no repeats
        db.conn.executemany("INSERT INTO library_entries (version, record_hash, conflicted, missing) "
                            "VALUES (?, ?, ?, ?)", rows)
    for kind, text in sorted((artefacts(version) if artefacts is not None else {}).items()):
        _check_kind(kind)
        db.execute("INSERT INTO library_artefacts (version, kind, sha256, body, written_at) VALUES (?, ?, ?, ?, ?)",
                   [version, kind, sha256_text(text), text, now()])
    head = chains.insert_version(db, {"version": version, "base_version": base, "episode_id": episode_id,
                                      "note": note, "created_at": now()})
    return version, head


def _check_kind(kind: str) -> None:
    if not (isinstance(kind, str) and kind.isidentifier()):
        raise BadInput(f"artefact kind {kind!r} is not a name: use letters, digits and _")


def artefact(db: Database, kind: str, version: int) -> tuple[int, str] | None:
    """(the version that stores it, its text): the newest artefact of `kind` at or before `version`
    (a version that stored none, an import's or another policy's episode's, keeps the one before),
    its body checked against its sha256; None where no version up to `version` has one."""
    row = db.execute("SELECT version, sha256, body FROM library_artefacts WHERE kind = ? AND version <= ? "
                     "ORDER BY version DESC LIMIT 1", [kind, version]).fetchone()
    if row is None:
        return None
    found, sha, body = row
    if sha256_text(body) != sha:
        raise BadInput(f"the {kind} artefact of library version {found} fails its hash check: run `agent bank verify` "
                       "and restore the bank from a copy")
    return found, body


def store_merges(db: Database, planned: list[Planned]) -> list[Planned]:
    """Store each new merged record and its replicate members (idempotent); return the plan
    with every hash filled in."""
    out = []
    for p in planned:
        if p.record is not None:
            row = record_row(p.record)
            db.execute(INSERT_RECORD, row)
            db.conn.executemany("INSERT OR IGNORE INTO replicates (merged_hash, member_hash) VALUES (?, ?)",
                                [(row["hash"], m) for m in p.members])
            p = Planned(row["hash"], p.record, p.members, p.conflicted, p.artefacts)
        out.append(p)
    return out


def missing(base_dir: Path, artefacts: tuple[str, ...]) -> tuple[str, ...]:
    """Provenance artefacts absent on disk now."""
    return tuple(a for a in artefacts if not _present(base_dir, a))


def _present(base_dir: Path, artefact: str) -> bool:
    # A path no file below the bank can have (stored before the import refused such paths) is
    # absent; so is one this file system refuses to look up: neither may end a consolidation.
    if paths.path_problem(artefact) is not None:
        return False
    try:
        return (base_dir / artefact).exists()
    except (OSError, ValueError):
        return False
