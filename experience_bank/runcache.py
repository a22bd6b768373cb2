"""The content-addressed run cache: finished training runs and evaluations, keyed by content.

A request (a training run, an evaluation) is described by a key: a JSON object of everything
its result depends on (weights hashes, card, data and items hashes, seed, fraction, code and
library versions). `RunCache.run(key, dest, compute, ...)` returns the stored result of that
key, copied into `dest` after its files are checked against their recorded hashes, or runs
`compute` (which writes `dest`) and stores what it wrote. The owners of the keys are the
producers: `trainers.run.run_cache_key` and `evaluators.evaluation.evaluation_key`.

Layout (root: `$AGENT_RUN_CACHE`, else `$AGENT_CACHE/runs`, else `~/.cache/posttrain-agent/runs`):

    ROOT/entries/<kind>/<sha[:2]>/<sha>/   one published entry (never changed after publication)
        entry.json                       {key, kind, value, wall_seconds, files: {relpath: sha256}, created}
        files/                           the files `compute` wrote into its destination
    ROOT/locks/<sha>.lock                flock'ed while a key is being computed (single flight)
    ROOT/staging/                        entries being written; a killed writer leaves one here

Guarantees:
- Atomic publication: an entry is written under staging/ and renamed into place whole, after
  its files are fsync'ed. A run killed before the rename leaves no entry, so the next request
  recomputes it; `gc` removes what staging/ holds.
- Single flight: the key's lock file is held (fcntl.flock, released by the kernel when a
  process dies) from the lookup to the publication, so a second job asking for the same key
  waits and then reads the entry. Across machines this needs a shared filesystem where flock
  works (NFSv4, Lustre mounted with flock); without it two workers may both compute a key,
  which wastes time but stays correct: the second rename finds the entry and is dropped.
- Checked hits: every file is hashed on a hit; an entry whose files changed is removed and
  the key recomputed.
- Accounting is not the cache's: a hit leaves `provenance.json` in `dest` with the original
  wall-clock, so the ledger charges it as if it had run, flagged `cached`.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from experience_bank.errors import BadInput
from experience_bank.files import write_atomic
from experience_bank.hashing import canonical_json, content_hash, file_sha256

T = TypeVar("T")

PROVENANCE = "provenance.json"
"""Written into every destination the cache served or filled: {cached, wall_seconds, key}."""


def source_version(parts: tuple[str, ...] | list[str]) -> str:
    """sha256 over the Python sources of `parts` (package dirs or files, relative to the
    repository): the code version in a key, so any change to a producer recomputes."""
    import hashlib  # noqa: PLC0415

    root = Path(__file__).resolve().parent.parent
    files = sorted(f for part in parts for f in ((root / part).rglob("*.py") if (root / part).is_dir() else [root / part]))
    lines = "".join(f"{f.relative_to(root).as_posix()} {file_sha256(str(f))}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()


def default_root() -> Path:
    env = os.environ.get("AGENT_RUN_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("AGENT_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "posttrain-agent") / "runs"


def from_env() -> RunCache | None:
    """The cache the commands use: off when AGENT_NO_CACHE is set (`--no-cache`)."""
    if os.environ.get("AGENT_NO_CACHE", "").strip() not in ("", "0"):
        return None
    return RunCache(default_root())


def provenance(dest: str | os.PathLike) -> dict | None:
    """What the cache recorded about a destination ({cached, wall_seconds, key}), or None when
    the cache never saw it (caching off)."""
    path = Path(dest) / PROVENANCE
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def was_cached(dest: str | os.PathLike) -> bool:
    p = provenance(dest)
    return bool(p and p.get("cached"))


def _files(root: Path) -> dict[str, str]:
    """relpath -> sha256 of every regular file under root (the provenance file excluded)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name != PROVENANCE:
            out[path.relative_to(root).as_posix()] = file_sha256(str(path))
    return out


def _fsync_tree(root: Path) -> None:
    for path in [*sorted(root.rglob("*")), root]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _copy_file(src: str, dst: str) -> None:
    # Published entries are never written again, so a hard link is a safe copy (and a hit is
    # checked by hash, so a consumer that wrote through the link only costs a recompute).
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


@dataclass(frozen=True)
class Entry:
    path: Path
    sha: str
    kind: str
    key: dict
    value: str
    wall_seconds: float
    files: dict[str, str]
    created: float

    @property
    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in (self.path / "files").rglob("*") if p.is_file())


@dataclass
class Stats:
    hits: int = 0
    misses: int = 0
    saved_s: float = 0.0


class RunCache:
    """A directory of published entries (see the module docstring)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.stats = Stats()

    # --- layout ---------------------------------------------------------------------------
    @staticmethod
    def key_sha(key: dict) -> str:
        if not isinstance(key.get("kind"), str):
            raise BadInput(f"run cache key {key!r} has no 'kind'")
        return content_hash(key)

    def entry_dir(self, key: dict) -> Path:
        sha = self.key_sha(key)
        return self.root / "entries" / key["kind"] / sha[:2] / sha

    @contextmanager
    def _lock(self, sha: str) -> Iterator[None]:
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / f"{sha}.lock", "a+") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # a second job with this key waits here
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    # --- reading ----------------------------------------------------------------------------
    def _read(self, path: Path) -> Entry | None:
        try:
            meta = json.loads((path / "entry.json").read_text(encoding="utf-8"))
            return Entry(path=path, sha=path.name, kind=meta["kind"], key=meta["key"], value=meta["value"],
                         wall_seconds=float(meta["wall_seconds"]), files=dict(meta["files"]),
                         created=float(meta["created"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def lookup(self, key: dict) -> Entry | None:
        """The checked entry of `key`, or None; a damaged entry is removed (and recomputed)."""
        path = self.entry_dir(key)
        if not path.is_dir():
            return None
        entry = self._read(path)
        if entry is None or entry.key != json.loads(canonical_json(key)) or _files(path / "files") != entry.files:
            self._discard(path)
            return None
        return entry

    def entries(self) -> list[Entry]:
        found = []
        for meta in sorted((self.root / "entries").glob("*/*/*/entry.json")):
            entry = self._read(meta.parent)
            if entry is not None:
                found.append(entry)
        return found

    # --- writing ----------------------------------------------------------------------------
    def _discard(self, path: Path) -> None:
        graveyard = self.root / "staging" / f"discard-{uuid.uuid4().hex}"
        graveyard.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(path, graveyard)  # out of the way at once; deleted below or by gc
        except OSError:
            return
        shutil.rmtree(graveyard, ignore_errors=True)

    def _publish(self, key: dict, src: Path, value: str, wall_seconds: float) -> None:
        sha = self.key_sha(key)
        stage = self.root / "staging" / f"{sha}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        stage.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, stage / "files", copy_function=_copy_file,
                        ignore=lambda d, names: [n for n in names if n == PROVENANCE])
        meta = {"kind": key["kind"], "key": json.loads(canonical_json(key)), "value": value,
                "wall_seconds": round(wall_seconds, 6), "files": _files(stage / "files"), "created": time.time()}
        (stage / "entry.json").write_text(canonical_json(meta), encoding="utf-8")
        _fsync_tree(stage)
        final = self.entry_dir(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(stage, final)
        except OSError:  # another writer published it first (no shared lock): keep theirs
            shutil.rmtree(stage, ignore_errors=True)

    def _materialize(self, entry: Entry, dest: Path) -> None:
        """Copy the entry's files into dest; a missing dest appears whole (staged, renamed)."""
        src = entry.path / "files"
        if dest.exists():
            for rel in entry.files:
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.unlink(missing_ok=True)
                _copy_file(str(src / rel), str(target))
            return
        stage = dest.with_name(f".{dest.name}.cache-{uuid.uuid4().hex[:8]}")
        shutil.copytree(src, stage, copy_function=_copy_file)
        os.rename(stage, dest)

    def run(self, key: dict, dest: str | os.PathLike, compute: Callable[[], T], *, dump: Callable[[T], str],
            load: Callable[[str, Path], T]) -> T:
        """The stored result of `key` served into `dest`, or `compute()` (which writes `dest`)
        published under `key`. `dump(value)` / `load(text, dest)` turn the value into text and
        back (load re-anchors paths in it to `dest`)."""
        dest = Path(dest)
        sha = self.key_sha(key)
        with self._lock(sha):
            entry = self.lookup(key)
            if entry is not None:
                self._materialize(entry, dest)
                write_atomic(dest / PROVENANCE, canonical_json(
                    {"cached": True, "wall_seconds": entry.wall_seconds, "key": sha}))
                os.utime(entry.path / "entry.json")  # last use, for gc
                self.stats.hits += 1
                self.stats.saved_s += entry.wall_seconds
                return load(entry.value, dest)
            start = time.perf_counter()
            value = compute()
            wall = time.perf_counter() - start
            if not dest.is_dir():
                raise BadInput(f"run cache: computing {key['kind']} wrote nothing to {dest}")
            self._publish(key, dest, dump(value), wall)
            write_atomic(dest / PROVENANCE, canonical_json({"cached": False, "wall_seconds": round(wall, 6), "key": sha}))
            self.stats.misses += 1
            return value

    # --- garbage collection -----------------------------------------------------------------
    def gc(self, *, older_than_s: float | None = None, max_bytes: int | None = None,
           everything: bool = False) -> dict[str, int]:
        """Remove staging leftovers, then entries unused for `older_than_s`, then the least
        recently used until the cache holds at most `max_bytes` (`everything`: all entries).
        An entry being served is safe: a reader holds its key's lock, and so does gc."""
        removed, freed = 0, 0
        staging = self.root / "staging"
        for path in staging.glob("*") if staging.is_dir() else []:
            if time.time() - path.stat().st_mtime > 3600 or everything:  # an hour: no live writer is that slow to rename
                shutil.rmtree(path, ignore_errors=True)
        entries = sorted(self.entries(), key=lambda e: (e.path / "entry.json").stat().st_mtime)
        total = sum(e.size_bytes for e in entries)
        for e in entries:
            last_used = (e.path / "entry.json").stat().st_mtime
            old = older_than_s is not None and time.time() - last_used > older_than_s
            over = max_bytes is not None and total > max_bytes
            if everything or old or over:
                size = e.size_bytes
                with self._lock(e.sha):
                    self._discard(e.path)
                removed, freed, total = removed + 1, freed + size, total - size
        return {"removed": removed, "freed_bytes": freed, "kept": len(entries) - removed, "kept_bytes": total}
