"""What a stored path may be: the one rule for every path-like field of a record or event.

A record names its provenance artefacts by paths relative to the bank, and consolidation asks
the file system about each one. A name the file system refuses (a part over NAME_MAX, a NUL)
raises OSError or ValueError there, long after the import that let it in, and a frozen record
cannot be taken out again. So the import refuses such a path, and the one reader that touches
the file system (`library.missing`) counts a stored path it refuses as absent.

Out of scope: names a particular file system refuses below these bounds (a FAT volume's
reserved characters, an eCryptfs 143-byte name limit): they are counted absent, never raised.
"""

from __future__ import annotations

from experience_bank.errors import BadInput

NAME_MAX_BYTES = 255
"""Largest part of a path, in UTF-8 bytes (NAME_MAX of ext4, XFS, btrfs, APFS, tmpfs)."""
PATH_MAX_BYTES = 1024
"""Largest whole path, in UTF-8 bytes (a quarter of Linux's PATH_MAX, leaving room for the bank's folder)."""
MAX_PATHS = 256
"""Most paths one record or event may name (consolidation checks each one on disk)."""
_SHOWN = 60


def path_problem(path: str) -> str | None:
    """Why `path` cannot name a file below its base folder (None: it can)."""
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid Unicode text (a lone surrogate)"
    if not path:
        return "is empty"
    if size > PATH_MAX_BYTES:
        return f"is {size} bytes long, over {PATH_MAX_BYTES}"
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "holds a control character (NUL, newline, ...)"
    if path.startswith("/"):
        return "is absolute; give it relative to the bank's folder"
    for part in path.split("/"):
        if part == "..":
            return "climbs out of the bank's folder with '..'"
        if len(part.encode("utf-8")) > NAME_MAX_BYTES:
            return f"has a part of {len(part.encode('utf-8'))} bytes, over the file system's {NAME_MAX_BYTES}"
    return None


def check_paths(paths: tuple[str, ...], what: str) -> None:
    """BadInput naming the first path-like value that no file below the base could have."""
    if len(paths) > MAX_PATHS:
        raise BadInput(f"{what} names {len(paths)} artefacts, over {MAX_PATHS}: keep the ones the evidence rests on")
    for path in paths:
        problem = path_problem(path)
        if problem is not None:
            shown = path[:_SHOWN] + ("..." if len(path) > _SHOWN else "")
            raise BadInput(f"{what}: artefact path {shown!r} {problem}: give a relative path of at most "
                           f"{PATH_MAX_BYTES} bytes with parts of at most {NAME_MAX_BYTES}")
