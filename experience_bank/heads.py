"""The head log: every chain head the bank commits, appended to a small file beside it.

Hashes inside the database show that nothing was edited behind the triggers' back, but not
that a whole history was rewritten with every hash recomputed. The head log closes that gap:
each write appends the new head of the library chain or of the episode's journal (fsync'd) to
`<bank>.heads`, one JSON object per line, inside its transaction just before the COMMIT: a log
that cannot be written refuses the commit, and a commit that fails takes its lines back. `verify --against LOG`
then requires every logged head to still be the bank's head at that point of its history.

What it covers and what not: a rewrite anywhere in a logged history (including a middle one
with every later hash recomputed), a deleted version, entry or journal row. Heads written
after the log's last line (rows appended by something other than the agent) cannot be judged;
they are reported as notes. A kill -9 between the log's fsync and the COMMIT leaves a last
logged head that the bank never got: verify reports it as missing, naming that possibility. The log itself
is only as safe as the place it is kept: copy `agent bank head`'s output elsewhere to anchor it
against someone who can rewrite both files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sqlite_utils import Database

from experience_bank import chains
from experience_bank.errors import BadInput, write_fault


def log_path(bank_path: str | Path) -> Path:
    """Where a bank's head log lives: beside it, named after it."""
    return Path(f"{bank_path}.heads")


def library_line(version: int, head: str) -> dict:
    return {"library": version, "head": head}


def episode_line(episode_id: str, n: int, head: str) -> dict:
    return {"episode": episode_id, "n": n, "head": head}


def append(path: Path, lines: list[dict]) -> tuple[int, bool]:
    """Append lines and fsync them (and the folder, when the log is new); return what `undo`
    needs. Called inside the write transaction, before its COMMIT: a log that cannot be
    written (full disk, read-only, no permission) is restored and refuses the commit."""
    new = not path.exists()
    size = 0 if new else path.stat().st_size
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        if new:
            fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        undo(path, (size, new))
        raise write_fault(exc, f"head log {path}", then="run the command again (nothing was committed)") or exc
    return size, new


def undo(path: Path, mark: tuple[int, bool]) -> None:
    """Take back an append whose commit did not happen (best effort: the commit's own error is
    what the caller reports)."""
    size, new = mark
    try:
        if new:
            path.unlink(missing_ok=True)
        else:
            os.truncate(path, size)
    except OSError:
        pass


def read(path: str | Path) -> list[dict]:
    """The log's lines; BadInput names the first one that is not a head line."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"no head log at {path}: give the `<bank>.heads` file written beside the bank")
    out = []
    for n, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        try:
            line = json.loads(text)
            ok = isinstance(line, dict) and isinstance(line.get("head"), str) and (
                isinstance(line.get("library"), int) or
                (isinstance(line.get("episode"), str) and isinstance(line.get("n"), int)))
        except ValueError:
            ok = False
        if not ok:
            raise BadInput(f"head log {path} line {n} is not a head line: restore the log from a copy")
        out.append(line)
    return out


def current(db: Database) -> list[dict]:
    """The bank's heads now: the newest library version's, then each episode's."""
    out = []
    row = db.execute("SELECT version, head FROM library_versions ORDER BY version DESC LIMIT 1").fetchone()
    if row is not None:
        out.append(library_line(row[0], row[1]))
    for (ep,) in db.execute("SELECT episode_id FROM episodes ORDER BY rowid").fetchall():
        out.append(episode_line(ep, *chains.episode_head(db, ep)))
    return out


def _stored_episode_head(db: Database, episode_id: str, n: int) -> str | None:
    if n == 0:
        row = db.execute("SELECT genesis, started_at FROM episodes WHERE episode_id = ?", [episode_id]).fetchone()
        return None if row is None else chains.journal_genesis(*row)
    row = db.execute("SELECT hash FROM journal WHERE episode_id = ? AND n = ?", [episode_id, n - 1]).fetchone()
    return None if row is None else row[0]


def compare(db: Database, lines: list[dict]) -> tuple[list[str], list[str]]:
    """(problems, notes): every logged head must be the stored head at that point.

    Stored heads are what `integrity.verify` recomputes from the rows, so a match here means
    the rows are the ones that were logged."""
    problems: list[str] = []
    logged_versions: set[int] = set()
    logged_n: dict[str, int] = {}
    for line in lines:
        if "library" in line:
            v = line["library"]
            logged_versions.add(v)
            row = db.execute("SELECT head FROM library_versions WHERE version = ?", [v]).fetchone()
            if row is None:
                problems.append(f"head log: library version {v} is missing from the bank (deleted{_killed(db, line)})")
            elif row[0] != line["head"]:
                problems.append(f"head log: library version {v} differs from its logged head (history rewritten)")
            continue
        ep, n = line["episode"], line["n"]
        logged_n[ep] = max(n, logged_n.get(ep, 0))
        stored = _stored_episode_head(db, ep, n)
        if stored is None:
            where = "header" if n == 0 else f"journal entry {n - 1}"
            problems.append(f"head log: episode {ep} {where} is missing from the bank (deleted{_killed(db, line)})")
        elif stored != line["head"]:
            problems.append(f"head log: episode {ep} journal entry {n - 1} differs from its logged head "
                            "(history rewritten)")
    return _dedupe(problems), _unanchored(db, logged_versions, logged_n)


def _killed(db: Database, line: dict) -> str:
    """A missing head past the bank's newest may be a write killed between its log line and
    its COMMIT rather than a deletion: say so (it stays a problem; only the user can tell)."""
    if "library" in line:
        (newest,) = db.execute("SELECT coalesce(max(version), 0) FROM library_versions").fetchone()
        beyond = line["library"] > newest
    else:
        known = db.execute("SELECT 1 FROM episodes WHERE episode_id = ?", [line["episode"]]).fetchone()
        beyond = known is None or line["n"] > chains.episode_head(db, line["episode"])[0]
    return ("; or, if this is the log's last line for it, a write killed between the head log and its commit: "
            "then remove that line") if beyond else ""


def _dedupe(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def _unanchored(db: Database, versions: set[int], logged_n: dict[str, int]) -> list[str]:
    notes = []
    # A logged head anchors its version and, through the chain, every earlier one.
    newest = max(versions, default=-1)
    newer = [v for (v,) in db.execute("SELECT version FROM library_versions WHERE version > ? ORDER BY version",
                                      [newest])]
    if newer:
        notes.append(f"library versions {newer} are not in the head log (written after its last line): not anchored")
    for (ep,) in db.execute("SELECT episode_id FROM episodes ORDER BY rowid").fetchall():
        n, _ = chains.episode_head(db, ep)
        if ep not in logged_n:
            notes.append(f"episode {ep} is not in the head log: not anchored")
        elif n > logged_n[ep]:
            notes.append(f"episode {ep}: {n - logged_n[ep]} journal entries after the head log's last line: "
                         "not anchored")
    return notes
