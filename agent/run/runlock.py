"""Whether a live process is running an episode: an advisory lock on `runs/ID/run.lock`.

The process that runs (or resumes) an episode holds an exclusive `flock` on the file for its
whole life; the kernel drops the lock when the process ends in any way, `kill -9` included,
so a stale lock cannot outlive its process and no pid can be mistaken for a reused one. The
file also names the pid and start time of its last holder, for a person to read.

Out of scope: run directories on network file systems whose locks are not shared between
machines (a run started on another host reads as not running).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from experience_bank.errors import BadInput

from agent.run.rundir import RunDir


@contextmanager
def hold(run_dir: Path) -> Iterator[None]:
    """Hold the run's lock while the body runs; BadInput when another live process holds it."""
    lock = RunDir(run_dir).lock_file
    try:  # O_NOFOLLOW: a run.lock planted as a link would have its target truncated and written
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise BadInput(f"cannot open {lock} ({exc.strerror}): it must be a plain file; "
                       "remove it if it is a link") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BadInput(f"{run_dir} is being run by another live process: wait for it, or stop it first") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "started": time.time()}).encode())
        yield
    finally:
        os.close(fd)  # closing releases the lock


def running(run_dir: Path) -> bool:
    """True while a live process holds the run's lock (never blocks, never creates the file)."""
    path = RunDir(run_dir).lock_file
    if not path.is_file() or path.is_symlink():  # a link is no lock `hold` ever took
        return False
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
