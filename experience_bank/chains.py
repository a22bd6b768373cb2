"""The hash rules that bind every row the bank serves into a chain, and their two writers.

Two kinds of chain (BCIT §7 needs both to be auditable offline):
- the library chain: each library version commits to its entries (a streaming hash over the
  entry list in the order the bank serves it, each line carrying the record hash, its flags and
  its replicate members), to its artefacts where it has any (library_artefacts: kind -> sha256)
  and to the previous version's head;
- one journal per episode: every decision, event, staged observation and the finish, in write
  order, each entry a hash over every column of its row, linked from a genesis that commits to
  the episode header (manifest hash, library version, start time).
The head of each chain is what the head log anchors outside the database (`heads.py`).
`Bank`, the migration that back-fills old banks and `verify` all call these functions: there is
one definition of every digest.
"""

from __future__ import annotations

import hashlib
from sqlite_utils import Database

from experience_bank.hashing import chain_hash, content_hash

LIBRARY_GENESIS = "0" * 64
"""The head that library version 0 links to."""

# Entry lines in serving order; a merged entry's replicate members are part of what it means.
MEMBERS_SQL = ("SELECT merged_hash, group_concat(member_hash, ',') AS members FROM "
               "(SELECT merged_hash, member_hash FROM replicates ORDER BY merged_hash, member_hash) GROUP BY merged_hash")
# A version's entries are one transaction's inserts: a rowid range, read in serving order with
# no sort (`ORDER BY rowid` under `WHERE version = ?` makes SQLite sort the rows, bodies and
# all, through a temporary B-tree: a 1e6-entry export sorted 2 GB). The filter on version keeps
# every reader exact even if a version were not contiguous; its unary + keeps the planner off
# the version index, which would bring the sort back.
VERSION_ROWS = "e.rowid BETWEEN ? AND ? AND +e.version = ?"
_SPAN_SQL = "SELECT coalesce(min(rowid), 0), coalesce(max(rowid), -1) FROM library_entries WHERE version = ?"


def version_rows(db: Database, version: int) -> list[int]:
    """The arguments of VERSION_ROWS (`library_entries e`) for one version."""
    lo, hi = db.execute(_SPAN_SQL, [version]).fetchone()
    return [lo, hi, version]


# Each line is built by SQLite, not Python: at 1e6 entries a line costs 0.2 us instead of 1.5.
# Its text is what f"{hash}\x1f{conflicted}\x1f{missing}\x1f{members}\n" gives for the values
# the bank writes (text, integer, text), so digests stored by earlier banks still match.
ENTRY_LINES_SQL = ("SELECT e.record_hash || char(31) || e.conflicted || char(31) || e.missing || char(31) || "
                   f"coalesce(m.members, '') || char(10) FROM library_entries e LEFT JOIN ({MEMBERS_SQL}) m "
                   f"ON m.merged_hash = e.record_hash WHERE {VERSION_ROWS} ORDER BY e.rowid")
_FETCH = 65536

VERSION_COLUMNS = ("version", "base_version", "episode_id", "note", "created_at", "entries_hash")
JOURNAL_SOURCES = {
    # kind -> (table, key column, the columns the entry commits to)
    "decision": ("decisions", "decision_hash", ("episode_id", "decision_hash", "candidate_id", "body", "written_at")),
    "event": ("events", "seq", ("episode_id", "seq", "candidate_id", "body", "body_hash", "prev_hash", "hash",
                                "written_at")),
    "staged": ("staged", "record_hash", ("episode_id", "record_hash", "written_at")),
}


def stored_entries_digest(db: Database, version: int) -> str:
    """sha256 over a version's entry lines: record hash, conflicted, missing artefacts, replicate members."""
    h = hashlib.sha256()
    rows = db.execute(ENTRY_LINES_SQL, version_rows(db, version))
    while chunk := rows.fetchmany(_FETCH):
        # A NULL column (a damaged row) makes its line NULL: join raises TypeError, a problem for verify.
        h.update("".join([line for (line,) in chunk]).encode())
    return h.hexdigest()


def version_digest(row: dict) -> str:
    """Hash over a library version's header, its entry digest included, and its artefacts' digest
    where it has artefacts (a version without any hashes as before the column existed)."""
    header = {k: row[k] for k in VERSION_COLUMNS}
    if row.get("artefacts_hash") is not None:
        header["artefacts_hash"] = row["artefacts_hash"]
    return content_hash(header)


def stored_artefacts_digest(db: Database, version: int) -> str | None:
    """Hash over a version's artefacts (kind -> the sha256 of its body, as stored); None without any."""
    rows = db.execute("SELECT kind, sha256 FROM library_artefacts WHERE version = ? ORDER BY kind", [version]).fetchall()
    return content_hash({kind: sha for kind, sha in rows}) if rows else None


def version_head(prev_head: str, row: dict) -> str:
    return chain_hash(prev_head, version_digest(row))


def library_head(db: Database) -> str:
    row = db.execute("SELECT head FROM library_versions ORDER BY version DESC LIMIT 1").fetchone()
    return LIBRARY_GENESIS if row is None else row[0]


def insert_version(db: Database, row: dict) -> str:
    """Append a library version header (its entries are already inserted); return its head."""
    row = {**row, "entries_hash": stored_entries_digest(db, row["version"]),
           "artefacts_hash": stored_artefacts_digest(db, row["version"])}
    head = version_head(library_head(db), row)
    db.execute("INSERT INTO library_versions (version, base_version, episode_id, note, created_at, entries_hash, head, "
               "artefacts_hash) VALUES (:version, :base_version, :episode_id, :note, :created_at, :entries_hash, :head, "
               ":artefacts_hash)", {**row, "head": head})
    return head


def journal_genesis(genesis: str, started_at: str) -> str:
    """What an episode's first journal entry links to: the header's genesis and its start time."""
    return content_hash({"genesis": genesis, "started_at": started_at})


def row_digest(kind: str, row: dict) -> str:
    """Hash over every column of a journalled row (a finish entry: its finished_at)."""
    return content_hash({"kind": kind, **row})


def source_row(db: Database, kind: str, episode_id: str, ref: str) -> dict | None:
    """The row a journal entry of this kind refers to, as the columns it commits to."""
    if kind == "finish":
        row = db.execute("SELECT finished_at FROM episodes WHERE episode_id = ?", [episode_id]).fetchone()
        return None if row is None or row[0] is None else {"episode_id": episode_id, "finished_at": row[0]}
    table, key, columns = JOURNAL_SOURCES[kind]
    if key == "seq" and not (isinstance(ref, str) and ref.isdigit()):
        return None
    value = int(ref) if key == "seq" else ref
    row = db.execute(f"SELECT {', '.join(columns)} FROM {table} WHERE episode_id = ? AND {key} = ?",
                     [episode_id, value]).fetchone()
    return None if row is None else dict(zip(columns, row))


def episode_head(db: Database, episode_id: str) -> tuple[int, str]:
    """(journal length, head hash) of an episode as stored."""
    row = db.execute("SELECT n, hash FROM journal WHERE episode_id = ? ORDER BY n DESC LIMIT 1",
                     [episode_id]).fetchone()
    if row is not None:
        return row[0] + 1, row[1]
    genesis, started = db.execute("SELECT genesis, started_at FROM episodes WHERE episode_id = ?",
                                  [episode_id]).fetchone()
    return 0, journal_genesis(genesis, started)


def journal(db: Database, episode_id: str, kind: str, ref: str) -> tuple[int, str]:
    """Append the journal entry of a row just written; return the new (length, head)."""
    n, prev = episode_head(db, episode_id)
    digest = row_digest(kind, source_row(db, kind, episode_id, ref))
    link = chain_hash(prev, digest)
    db.execute("INSERT INTO journal (episode_id, n, kind, ref, row_hash, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?)",
               [episode_id, n, kind, ref, digest, prev, link])
    return n + 1, link
