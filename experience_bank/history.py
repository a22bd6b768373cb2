"""An episode's history H_t in the bank: its opening over a library version, the decisions
frozen before any outcome, the hash-chained events, the observations staged for consolidation,
and its close. Every write is one of the bank's transactions and journals a new chain head.

`EpisodeHistory` is mixed into `experience_bank.bank.Bank`, which owns the connection, the write
transaction (`_write`), the heads it collects (`_heads`) and the library versions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, ContextManager

from pydantic import TypeAdapter, ValidationError

from experience_bank import chains, hashing, heads, integrity, library, paths
from experience_bank.decisions import Decision, Event
from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json, chain_hash, sha256_text
from experience_bank.library import record_row
from experience_bank.frozen import Ident, Sha256, parse_model
from experience_bank.records import HistoricalRecord, parse_record

if TYPE_CHECKING:
    from sqlite_utils import Database

_IDENT = TypeAdapter(Ident)
_SHA = TypeAdapter(Sha256)


class SeqTaken(BadInput):
    """A different event already holds this (episode, seq): re-read the history and append after it."""


def _check(adapter: TypeAdapter, value: object, what: str) -> None:
    try:
        adapter.validate_python(value, strict=True)
    except ValidationError:
        raise BadInput(f"{what} {value!r} is malformed: see experience_bank/frozen.py for its pattern") from None


class EpisodeHistory:
    """The episode methods of a bank: H_t is append-only, and a closed history stays closed."""

    db: Database
    _heads: list[dict]
    _write: Callable[[], ContextManager[Database]]
    _version: Callable[[int | None], int]

    def _episode(self, episode_id: str) -> dict:
        row = self.db.execute("SELECT manifest_hash, library_version, genesis, finished_at FROM episodes "
                              "WHERE episode_id = ?", [episode_id]).fetchone()
        if row is None:
            raise BadInput(f"no episode {episode_id!r} in the bank: start it first")
        return dict(zip(("manifest_hash", "library_version", "genesis", "finished_at"), row))

    def _running(self, episode_id: str) -> dict:
        episode = self._episode(episode_id)
        if episode["finished_at"] is not None:
            raise BadInput(f"episode {episode_id!r} is finished: its history is closed")
        return episode

    def _journal(self, episode_id: str, kind: str, ref: str) -> None:
        self._heads.append(heads.episode_line(episode_id, *chains.journal(self.db, episode_id, kind, ref)))

    def start_episode(self, episode_id: str, manifest_hash: str, library_version: int) -> None:
        """Open an episode over a library version (idempotent for the same arguments)."""
        _check(_IDENT, episode_id, "episode id")
        _check(_SHA, manifest_hash, "manifest hash")
        with self._write() as db:
            self._version(library_version)  # BadInput naming the latest when it does not exist
            old = db.execute("SELECT manifest_hash, library_version FROM episodes WHERE episode_id = ?",
                             [episode_id]).fetchone()
            if old is not None and tuple(old) != (manifest_hash, library_version):
                raise BadInput(f"episode {episode_id!r} already exists in this bank with another manifest or library "
                               "version: a run directory's name is its episode id, so give --out a new name (or "
                               f"`agent run --resume` the run named {episode_id})")
            if old is None:
                genesis = integrity.episode_genesis(episode_id, manifest_hash, library_version)
                db.execute("INSERT INTO episodes (episode_id, manifest_hash, library_version, genesis, started_at) "
                           "VALUES (?, ?, ?, ?, ?)", [episode_id, manifest_hash, library_version, genesis, library.now()])
                self._heads.append(heads.episode_line(episode_id, *chains.episode_head(db, episode_id)))

    def _insert_decision(self, episode_id: str, decision: Decision) -> str:
        if hashing.decision_hash(decision.model_dump(mode="json")) != decision.decision_hash:
            raise BadInput(f"decision for {decision.candidate_id} has a decision_hash that does not match its "
                           "fields: compute it with experience_bank.hashing.decision_hash")
        seen = self.db.execute("SELECT 1 FROM decisions WHERE episode_id = ? AND decision_hash = ?",
                               [episode_id, decision.decision_hash]).fetchone()
        if seen is None:
            self.db.execute("INSERT INTO decisions (episode_id, decision_hash, candidate_id, body, written_at) "
                            "VALUES (?, ?, ?, ?, ?)", [episode_id, decision.decision_hash, decision.candidate_id,
                                                        canonical_json(decision), library.now()])
            self._journal(episode_id, "decision", decision.decision_hash)
        return decision.decision_hash

    def record_decision(self, episode_id: str, decision: Decision) -> str:
        """Freeze a decision before any outcome exists (idempotent on its hash)."""
        with self._write():
            self._running(episode_id)
            return self._insert_decision(episode_id, decision)

    def append_event(self, event: Event) -> str:
        """Append an executed event at the next seq; return its chain hash.

        Idempotent: the identical event at an existing seq returns the stored hash; a different
        one raises SeqTaken. Its decision is frozen too, in the same transaction, if it was not."""
        if event.candidate_id != event.decision.candidate_id:
            raise BadInput(f"event {event.seq} is for {event.candidate_id} but its decision is for "
                           f"{event.decision.candidate_id}: use one candidate id")
        paths.check_paths(event.artefacts, f"event {event.seq}")
        body = canonical_json(event)
        body_hash = sha256_text(body)
        with self._write() as db:
            row = db.execute("SELECT body_hash, hash FROM events WHERE episode_id = ? AND seq = ?",
                             [event.episode_id, event.seq]).fetchone()
            if row is not None:
                if row[0] != body_hash:
                    raise SeqTaken(f"episode {event.episode_id!r} seq {event.seq} already holds a different event: "
                                   "re-read the history and append after it")
                return row[1]
            episode = self._running(event.episode_id)
            last = db.execute("SELECT seq, hash FROM events WHERE episode_id = ? ORDER BY seq DESC LIMIT 1",
                              [event.episode_id]).fetchone()
            next_seq, prev = (0, episode["genesis"]) if last is None else (last[0] + 1, last[1])
            if event.seq != next_seq:
                raise BadInput(f"episode {event.episode_id!r} expects seq {next_seq}, got {event.seq}: no gaps")
            self._insert_decision(event.episode_id, event.decision)
            link = chain_hash(prev, body_hash)
            db.execute("INSERT INTO events (episode_id, seq, candidate_id, body, body_hash, prev_hash, hash, written_at) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [event.episode_id, event.seq, event.candidate_id,
                                                           body, body_hash, prev, link, library.now()])
            self._journal(event.episode_id, "event", str(event.seq))
            return link

    def events(self, episode_id: str) -> list[Event]:
        """The episode's history H_t in order."""
        self._episode(episode_id)
        rows = self.db.execute("SELECT body FROM events WHERE episode_id = ? ORDER BY seq", [episode_id])
        return [parse_model(Event, b) for (b,) in rows]

    def stage_observation(self, episode_id: str, record: HistoricalRecord) -> str:
        """Keep new evidence produced by a running episode for its consolidation (idempotent)."""
        if not isinstance(record, HistoricalRecord):
            raise BadInput("only a HistoricalRecord (with evidence) can be staged as an observation")
        paths.check_paths(record.provenance.artefacts, f"observation of {record.card.id}")
        row = record_row(record)
        with self._write() as db:
            seen = db.execute("SELECT 1 FROM staged WHERE episode_id = ? AND record_hash = ?",
                              [episode_id, row["hash"]]).fetchone()
            if seen is None:
                self._running(episode_id)
                db.execute(library.INSERT_RECORD, row)
                db.execute("INSERT INTO staged (episode_id, record_hash, written_at) VALUES (?, ?, ?)",
                           [episode_id, row["hash"], library.now()])
                self._journal(episode_id, "staged", row["hash"])
        return row["hash"]

    def staged(self, episode_id: str) -> list[HistoricalRecord]:
        rows = self.db.execute("SELECT r.body FROM staged s JOIN records r ON r.hash = s.record_hash "
                               "WHERE s.episode_id = ? ORDER BY s.rowid", [episode_id])
        return [parse_record(b) for (b,) in rows]

    def finish_episode(self, episode_id: str) -> None:
        """Close the episode's history (idempotent)."""
        with self._write() as db:
            if self._episode(episode_id)["finished_at"] is None:
                db.execute("UPDATE episodes SET finished_at = ? WHERE episode_id = ?", [library.now(), episode_id])
                self._journal(episode_id, "finish", "finish")
