"""The one error type for bad user input, and the one translation of a refused write.

The CLI turns a BadInput into a single line on stderr and exit code 2. The message names the
problem and the fix; raising it must happen before anything is written.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import sqlite3
from pathlib import Path


class BadInput(ValueError):
    """Input the user can fix: malformed record, missing file, impossible budget, ..."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class WriteFault(BadInput):
    """A write the file system refused (full disk, read-only file system, no permission).

    `exit_code`: 2 when nothing was decided (the command can simply run again), 1 when work
    was done before it and the command's own resume picks it up (`then` says how)."""

    def __init__(self, where: str, reason: str, fix: str, then: str = "run the command again", exit_code: int = 2):
        super().__init__(f"cannot write {where} ({reason}): {fix}, then {then}")
        self.where, self.reason, self.fix, self.exit_code = where, reason, fix, exit_code

    def retold(self, then: str, exit_code: int) -> WriteFault:
        """The same fault with the caller's next step (a resume command) and exit code."""
        return WriteFault(self.where, self.reason, self.fix, then, exit_code)


class Busy(BadInput):
    """Another process holds the bank's write lock for longer than this command waits."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


_REASONS = {
    errno.ENOSPC: ("no space left on device", "free space on that file system (or move it elsewhere)"),
    errno.EDQUOT: ("disk quota exceeded", "free space within your quota (or move it elsewhere)"),
    errno.EROFS: ("read-only file system", "give a path on a writable file system"),
    errno.EACCES: ("permission denied", "give this user write permission there, or give another path"),
    errno.EPERM: ("operation not permitted", "give this user write permission there, or give another path"),
}
_SQLITE = {13: errno.ENOSPC, 8: errno.EROFS}  # SQLITE_FULL, SQLITE_READONLY (and their extended codes)


_SQLITE_IO = (10, 14)  # SQLITE_IOERR, SQLITE_CANTOPEN: their cause is the file system's to tell
_FULL_BYTES = 1 << 20
"""Less free space than this where SQLite reports an I/O error: the disk is full."""


def fault_errno(exc: BaseException, file: str | Path | None = None) -> int | None:
    """The errno of a refused write (ENOSPC, EDQUOT, EROFS, EACCES, EPERM) behind `exc`, or None.

    Reads an OSError's errno, a shutil.Error's first failure ('[Errno 28] ...') and SQLite's
    result code (SQLITE_FULL is a full disk, SQLITE_READONLY a read-only file). SQLite reports
    a full disk while writing its WAL as a bare 'disk I/O error': with the database `file`
    given, that is read off its file system (read-only, or under 1 MiB free)."""
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        found = re.search(r"\[Errno (\d+)\]", str(exc.args[0][0][-1]))
        code = int(found.group(1)) if found else None
    elif isinstance(exc, OSError):
        code = exc.errno
    elif isinstance(exc, sqlite3.Error):
        primary = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
        code = _file_system_fault(file) if primary in _SQLITE_IO and file is not None else _SQLITE.get(primary)
    else:
        code = None
    return code if code in _REASONS else None


def _file_system_fault(file: str | Path) -> int | None:
    """EROFS or ENOSPC when the file system holding `file` is read-only or full, else None."""
    try:
        fs = os.statvfs(Path(file).resolve().parent)
    except OSError:
        return None
    if fs.f_flag & os.ST_RDONLY:
        return errno.EROFS
    return errno.ENOSPC if fs.f_bavail * fs.f_frsize < _FULL_BYTES else None


def fault_path(exc: BaseException) -> str | None:
    """The file an OSError (or a shutil.Error's first failure) names, if any."""
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        return str(exc.args[0][0][1])
    return getattr(exc, "filename", None)


def write_fault(exc: BaseException, path: str | Path | None = None, *, then: str = "run the command again",
                exit_code: int = 2, file: str | Path | None = None) -> WriteFault | None:
    """The one line for a refused write at `path` (default: the file the error names), or None
    when `exc` is no refused write (then the caller re-raises it). `file`: the SQLite database
    an sqlite3 error came from (see fault_errno)."""
    code = fault_errno(exc, file)
    if code is None:
        return None
    reason, fix = _REASONS[code]
    where = path if path is not None else fault_path(exc) or "a file of this command"
    return WriteFault(str(where), reason, fix, then, exit_code)


_PATH_SHAPES = {
    errno.EEXIST: ("a file stands where a folder is needed", "remove that file or give another path"),
    errno.ENOTDIR: ("a folder on its path is a file", "give a path whose parents are folders"),
    errno.EISDIR: ("it is a folder, not a file", "give the path of a file"),
}


def path_fault(exc: BaseException) -> BadInput | None:
    """The one line for a path of the wrong shape (a file where a folder is needed, or a folder where
    a file is), or None for any other error. The user's path refused, not the file system, so it is
    BadInput (exit 2), not a WriteFault; the CLI asks it of an OSError nothing else translated."""
    if not isinstance(exc, OSError) or exc.errno not in _PATH_SHAPES:
        return None
    reason, fix = _PATH_SHAPES[exc.errno]
    # os.replace(tmp, dest) onto a folder names the temporary file first and dest second
    where = exc.filename2 if exc.errno == errno.EISDIR and exc.filename2 else exc.filename
    return BadInput(f"cannot write {where or 'a path of this command'} ({reason}): {fix}, then run the command again")


def full_file_system(file: str | Path, where: str) -> WriteFault | None:
    """A WriteFault for `where` when the file system holding `file` is full or read-only now:
    the cause of a failure that carries no errno (torch's C++ writer says 'iostream error')."""
    code = _file_system_fault(file)
    if code is None:
        return None
    reason, fix = _REASONS[code]
    return WriteFault(where, reason, fix)
