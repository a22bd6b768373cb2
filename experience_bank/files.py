"""Atomic file writes: a file is either its old content or its new content, never half of one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: str | Path, text: str, before_replace: Callable[[], None] | None = None) -> None:
    """Write `text` to a temporary sibling, fsync it, rename it over `path`, fsync the folder.

    A crash at any point leaves the old file (or none) and at most an orphaned temporary
    file, which is removed when the failure is an exception."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        if before_replace is not None:
            before_replace()  # a test hook (agent/killpoints.py): a kill between the write and the rename
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)  # make the rename itself durable
    finally:
        os.close(dfd)
