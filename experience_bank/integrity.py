"""Integrity checks of a bank: recompute every stored hash and every chain link.

A row whose stored hash no longer matches its body was edited behind the triggers' back (for
example with the triggers dropped). What this cannot catch: a rewrite of a whole chain with
every hash recomputed; that needs the head hash anchored outside the database.
"""

from __future__ import annotations

from sqlite_utils import Database

from experience_bank.errors import BadInput
from experience_bank.hashing import chain_hash, content_hash, loads_strict, sha256_text


def episode_genesis(episode_id: str, manifest_hash: str, library_version: int) -> str:
    """The hash the first event of an episode links to: it binds the chain to its episode header."""
    return content_hash({"episode_id": episode_id, "manifest_hash": manifest_hash, "library_version": library_version})


def verify(db: Database) -> list[str]:
    """One line per problem, the first broken row first; empty means clean."""
    return _records(db) + _decisions(db) + _chains(db)


def _records(db: Database) -> list[str]:
    bad = [f"records row {n}: record {h} does not match its stored hash"
           for n, h, body in db.execute("SELECT rowid, hash, body FROM records ORDER BY rowid")
           if sha256_text(body) != h]
    for table, column in (("library_entries", "record_hash"), ("staged", "record_hash"),
                          ("replicates", "member_hash"), ("replicates", "merged_hash")):
        bad += [f"{table} row {n}: refers to missing record {h}" for n, h in db.execute(
            f"SELECT t.rowid, t.{column} FROM {table} t LEFT JOIN records r ON r.hash = t.{column} "
            "WHERE r.hash IS NULL ORDER BY t.rowid")]
    return bad


def _decisions(db: Database) -> list[str]:
    bad = []
    for n, key, body in db.execute("SELECT rowid, decision_hash, body FROM decisions ORDER BY rowid"):
        try:
            fields = loads_strict(body)
            claimed = fields.pop("decision_hash")
        except (BadInput, KeyError, AttributeError):
            bad.append(f"decisions row {n}: decision {key} body is not a decision")
            continue
        if not content_hash(fields) == claimed == key:
            bad.append(f"decisions row {n}: decision {key} does not match its fields")
    return bad


def _chains(db: Database) -> list[str]:
    bad = []
    for ep, manifest, version, genesis in db.execute(
            "SELECT episode_id, manifest_hash, library_version, genesis FROM episodes ORDER BY rowid"):
        if episode_genesis(ep, manifest, version) != genesis:
            bad.append(f"episodes: episode {ep} header does not match its genesis hash")
        prev = genesis
        rows = db.execute("SELECT seq, body, body_hash, prev_hash, hash FROM events "
                          "WHERE episode_id = ? ORDER BY seq", [ep])
        for expected_seq, (seq, body, body_hash, prev_hash, link) in enumerate(rows):
            if seq != expected_seq:
                bad.append(f"events: episode {ep} seq {seq}: expected seq {expected_seq} (gap)")
            elif sha256_text(body) != body_hash:
                bad.append(f"events: episode {ep} seq {seq}: body does not match its hash")
            elif prev_hash != prev or chain_hash(prev_hash, body_hash) != link:
                bad.append(f"events: episode {ep} seq {seq}: chain link broken")
            prev = link
    return bad
