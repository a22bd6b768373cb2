"""Atomic file writes (a file is either its old content or its new content, never half of one),
the one reader of JSONL text files, a line at a time, the one read-only SQLite opener, and the one
check of an SQLite file before it is opened."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from experience_bank.errors import BadInput, write_fault


def write_atomic(path: str | Path, text: str, before_replace: Callable[[], None] | None = None) -> None:
    """Write `text` to a temporary sibling, fsync it, rename it over `path`, fsync the folder.

    A crash at any point leaves the old file (or none) and at most an orphaned temporary
    file, which is removed when the failure is an exception. A refused write (full disk,
    read-only file system, no permission) is a WriteFault naming `path`."""
    path = Path(path)
    try:
        _write_atomic(path, text, before_replace)
    except OSError as exc:
        raise write_fault(exc, path) or exc from None


def _write_atomic(path: Path, text: str, before_replace: Callable[[], None] | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        if before_replace is not None:
            before_replace()  # a test hook (agent/run/killpoints.py): a kill between the write and the rename
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)  # make the rename itself durable
    finally:
        os.close(dfd)


MAX_LINE_BYTES = 16 << 20
"""Longest JSONL line read (16 MiB; a record is about 2 KB). A longer one is refused after
MAX_LINE_BYTES + 1 bytes of it were read, so a 1 GB line costs 16 MiB of memory, not 5 GB."""


def jsonl_text(path: str | Path, what: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line, read a line at a time (a 1e6-record file is
    2 GB: never held whole). Lines end at \n only, so a U+2028 inside a JSON string stays in
    its line; a line that is not UTF-8, or longer than MAX_LINE_BYTES, raises BadInput naming it."""
    offset = 0
    try:
        with open(path, "rb") as f:
            for n, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), start=1):
                if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                    raise BadInput(f"{what} {path} line {n} is longer than {MAX_LINE_BYTES} bytes: one record "
                                   "per line, each under that size")
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as exc:
                    raise BadInput(f"{what} {path} line {n} is not UTF-8 (byte {offset + exc.start}: {exc.reason}): "
                                   "save the file as UTF-8") from None
                offset += len(raw)
                if line.strip():
                    yield n, line
    except OSError as exc:
        raise BadInput(f"cannot read {what} {path} ({exc.strerror}): check that the file is readable") from None


def read_only(path: str | Path, *, immutable: bool = False, **kwargs) -> sqlite3.Connection:
    """A read-only connection to the SQLite file at `path` (kwargs go to sqlite3.connect).

    Through a percent-encoded file: URI, so a path holding '?', '#' or '%' opens that file and
    not another. `immutable`: no locks and no -wal/-shm files (only for a file nothing writes)."""
    uri = Path(path).resolve().as_uri() + "?mode=ro" + ("&immutable=1" if immutable else "")
    return sqlite3.connect(uri, uri=True, **kwargs)


SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file (sqlite.org/fileformat.html)."""


def _in_use(file: Path) -> bool:
    """A -wal or -journal beside the file: a writer is at work, or died mid-write. Only a writer's own
    open may read it then (and recover a hot journal); a read-only one may fail or read torn pages."""
    return Path(f"{file}-wal").exists() or Path(f"{file}-journal").exists()


def sqlite_fault(path: str | Path) -> str | None:
    """Why the file at `path` is no SQLite database to open ("missing", "not a file", "empty (0 bytes)",
    "not an SQLite database", "damaged (...)", "unreadable (...)"), or None. Checked before any open:
    sqlite3.connect makes a missing or 0-byte file a new empty database, and a writer's open would then
    migrate it, so the caller's refusal would come after the damage. A file in use gets the header check only."""
    file = Path(path)
    if not file.exists():
        return "missing"
    if not file.is_file():
        return "not a file"
    try:
        with open(file, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if head != SQLITE_HEADER:
        return "empty (0 bytes)" if not head else "not an SQLite database"
    if _in_use(file):
        return None
    try:  # SQLite's own structural check, immutable: no locks, no -wal/-shm left behind
        conn = read_only(file, immutable=True)
        try:
            result = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        result = str(exc)
    return None if result == "ok" else f"damaged ({result})"


def sqlite_tables(path: str | Path) -> set[str] | None:
    """The table names of a sound SQLite file (sqlite_fault None), read without writing; None for a
    file in use, which only its writer's open can read."""
    if _in_use(Path(path)):
        return None
    conn = read_only(path, immutable=True)
    try:
        return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


T = TypeVar("T")


def once(path: str | Path, compute: Callable[[], T], *, dump: Callable[[T], str], load: Callable[[str], T],
         single_flight: bool = False) -> T:
    """The value stored at `path`, or compute it and store it (atomically) first: the one
    "compute once" step of a resumable job (the loop's keyed results, the retrospective's cells).

    `single_flight`: hold `<path>.lock` (flock) from the check to the write, so that processes
    needing the same value at once compute it once and the others read it (across machines
    this needs a filesystem where flock works). The lock is released when its file closes or its
    process dies."""
    path = Path(path)
    if single_flight:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.parent / f"{path.name}.lock", "a", encoding="utf-8") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            return once(path, compute, dump=dump, load=load)
    if path.exists():
        return load(path.read_text(encoding="utf-8"))
    value = compute()
    write_atomic(path, dump(value))
    return value
