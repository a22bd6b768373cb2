"""What a run-cache hit checks an entry against (experience_bank/runcache.py): the seal its
writer put on entry.json, the exact set of regular files it lists, and `Mismatch`, which a
producer's `load` raises when the stored value is not what the served files re-derive."""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from pathlib import Path

from experience_bank.hashing import canonical_json, file_sha256

PROVENANCE = "provenance.json"
"""Written into every destination the cache served or filled: {cached, wall_seconds, key}."""
SECRET_ENV = "AGENT_RUN_CACHE_SECRET"
"""A secret shared by the machines of one cache: entries are then sealed with an HMAC."""


def walk(root: Path) -> tuple[dict[str, Path], list[str]]:
    """(relpath -> path of every regular file, relpaths of everything else) under root, links
    never followed: a symlink, fifo or device is an extra, whatever it points at."""
    files: dict[str, Path] = {}
    extras: list[str] = []
    for here, dirs, names in os.walk(root, followlinks=False):
        base = Path(here)
        for name in list(dirs):
            if (base / name).is_symlink():
                dirs.remove(name)
                extras.append((base / name).relative_to(root).as_posix())
        for name in names:
            rel = (base / name).relative_to(root).as_posix()
            if stat.S_ISREG((base / name).lstat().st_mode):
                files[rel] = base / name
            else:
                extras.append(rel)
    return files, sorted(extras)


def files_sha(root: Path) -> dict[str, str]:
    """relpath -> sha256 of every regular file under root (the provenance file excluded)."""
    return {rel: file_sha256(str(path)) for rel, path in sorted(walk(root)[0].items()) if rel != PROVENANCE}


def seal(meta: dict) -> str:
    """What a hit checks an entry.json against: sha256 over everything in it but the seal (the
    key, the value, the files' hashes), or an HMAC with $AGENT_RUN_CACHE_SECRET when set, so a
    shared cache folder's writers cannot forge an entry without the secret."""
    body = canonical_json({k: v for k, v in meta.items() if k != "seal"}).encode()
    secret = os.environ.get(SECRET_ENV, "")
    if secret:
        return "hmac-sha256:" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return "sha256:" + hashlib.sha256(body).hexdigest()


class Mismatch(ValueError):
    """A stored value that does not agree with the files it was computed with (raised by a
    producer's `load`): the entry is a miss and is recomputed."""
