"""The content-addressed run cache: finished training runs and evaluations, keyed by content.

A request (a training run, an evaluation) is described by a key: a JSON object of everything
its result depends on (weights hashes, card, data and items hashes, seed, fraction, code and
library versions). `RunCache.run(key, dest, compute, ...)` returns the stored result of that
key, copied into `dest` after its files are checked against their recorded hashes, or runs
`compute` (which writes `dest`) and stores what it wrote. The owners of the keys are the
producers: `trainers.run.run_cache_key` and `evaluators.evaluation.evaluation_key`.

Layout (root: `$AGENT_RUN_CACHE`, else `$AGENT_CACHE/runs`, else `~/.cache/posttrain-agent/runs`):

    ROOT/entries/<kind>/<sha[:2]>/<sha>/   one published entry (never changed after publication)
        entry.json                       {key, kind, value, wall_seconds, files: {relpath: sha256}, created, seal}
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
- Checked hits: every byte a hit serves is checked against what its writer sealed. entry.json
  carries a seal over all of it (key, value, file hashes; an HMAC when $AGENT_RUN_CACHE_SECRET
  is set, else a sha256), files/ must hold exactly the regular files it lists (a symlink, a
  fifo or an extra file refuses the entry), the copies served are hashed, and the producer's
  `load` re-derives the value from the served files where it can (an evaluation rescored from
  its generations, a run's result read back from its result.json) and raises `sealing.Mismatch`
  when they disagree. Any failed check is a miss: one warning naming the entry, the entry removed,
  the key recomputed. Without a secret, someone who can rewrite a whole entry consistently
  (every hash recomputed) can still forge one whose value its files do not re-derive; set the
  secret where the cache folder is shared with writers you do not trust.
- A cache that cannot be written (read-only folder, `locks/` not a folder, a full disk) is
  off for the rest of the process, with one warning; the request computes as if uncached.
- Accounting is not the cache's: a hit leaves `provenance.json` in `dest` with the original
  wall-clock, so the ledger charges it as if it had run, flagged `cached`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from experience_bank.errors import BadInput, WriteFault
from experience_bank.files import write_atomic
from experience_bank.hashing import canonical_json, content_hash, file_sha256
from experience_bank.sealing import PROVENANCE, files_sha, seal, walk

T = TypeVar("T")



def source_version(parts: tuple[str, ...] | list[str], exclude: tuple[str, ...] = ()) -> str:
    """sha256 over the Python sources of `parts` (package dirs or files, relative to the
    repository), less the files of `exclude`: the code version in a key, so any change to a
    producer recomputes."""
    root = Path(__file__).resolve().parent.parent
    files = sorted(f for part in parts for f in ((root / part).rglob("*.py") if (root / part).is_dir() else [root / part])
                   if f.relative_to(root).as_posix() not in exclude)
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
    # Links are never followed: a symlink swapped in is linked as a symlink, and refused.
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copyfile(src, dst, follow_symlinks=False)


def _warn(text: str) -> None:
    print(text, file=sys.stderr)


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
    seal: str | None = None
    """The seal its entry.json carries."""
    sealed: str | None = None
    """The seal its entry.json's content has now (a hit needs both equal)."""

    @property
    def size_bytes(self) -> int:
        return sum(p.lstat().st_size for p in walk(self.path / "files")[0].values())


@dataclass
class Stats:
    hits: int = 0
    misses: int = 0
    saved_s: float = 0.0


class RunCache:
    """A directory of published entries (see the module docstring)."""

    def __init__(self, root: str | os.PathLike, warn: Callable[[str], None] = _warn):
        self.root = Path(root)
        self.stats = Stats()
        self.warn = warn
        self.off: str | None = None
        """Why this cache stopped (it could not be written): every later request computes."""

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
    def _lock(self, sha: str) -> Iterator[bool]:
        """Held (True) while this process owns the key; False when the lock cannot be taken
        because the cache cannot be written (the cache is then off)."""
        f = None
        try:
            locks = self.root / "locks"
            locks.mkdir(parents=True, exist_ok=True)
            f = open(locks / f"{sha}.lock", "a+")  # noqa: SIM115 (closed below, or on the failure path)
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # a second job with this key waits here
        except OSError as exc:
            if f is not None:
                f.close()
            self._turn_off(exc)
            yield False
            return
        with f:
            try:
                yield True
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _turn_off(self, exc: OSError) -> None:
        """A cache that cannot be written is off for the rest of this process: one warning."""
        if self.off is None:
            self.off = f"{exc.strerror or exc}{f' at {exc.filename}' if exc.filename else ''}"
            self.warn(f"agent: warning: run cache {self.root} cannot be written ({self.off}): caching is off for "
                      "this command; free space or fix the folder's permissions, point AGENT_RUN_CACHE elsewhere, "
                      "or pass --no-cache")

    def _refuse(self, path: Path, why: str) -> None:
        """An entry that fails a check: warned about by name, removed, and recomputed."""
        self.warn(f"agent: warning: run cache entry {path} {why}: ignored and recomputed")
        self._discard(path)

    # --- reading ----------------------------------------------------------------------------
    def _read(self, path: Path) -> Entry | None:
        try:
            meta = json.loads((path / "entry.json").read_text(encoding="utf-8"))
            return Entry(path=path, sha=path.name, kind=meta["kind"], key=meta["key"], value=meta["value"],
                         wall_seconds=float(meta["wall_seconds"]), files=dict(meta["files"]),
                         created=float(meta["created"]), seal=meta.get("seal"), sealed=seal(meta))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def _problem(self, entry: Entry | None, key: dict) -> str | None:
        """Why an entry must not be served (None: its entry.json is the one its writer sealed,
        for this key, and its files/ folder holds exactly the regular files it lists)."""
        if entry is None:
            return "has an unreadable entry.json"
        if entry.seal != entry.sealed:
            return "does not match its seal (entry.json was edited)"
        if entry.key != json.loads(canonical_json(key)) or not isinstance(entry.value, str):
            return "is not an entry of its key"
        found, extras = walk(entry.path / "files")
        if extras:
            return f"holds {extras[0]!r}, which is not a regular file"
        if sorted(found) != sorted(entry.files):
            return "holds other files than it lists"
        return None

    def lookup(self, key: dict) -> Entry | None:
        """The checked entry of `key`, or None; a damaged entry is removed (and recomputed).
        The files' bytes are checked as they are served (`_materialize`)."""
        path = self.entry_dir(key)
        if not path.is_dir():
            return None
        entry = self._read(path)
        problem = self._problem(entry, key)
        if problem is not None:
            self._refuse(path, problem)
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
        try:
            graveyard.parent.mkdir(parents=True, exist_ok=True)
            os.rename(path, graveyard)  # out of the way at once; deleted below or by gc
        except OSError:
            return
        shutil.rmtree(graveyard, ignore_errors=True)

    def _publish(self, key: dict, src: Path, value: str, wall_seconds: float) -> None:
        """Stage the regular files compute wrote (never a link) with a sealed entry.json; rename
        it into place whole. An OSError (full disk, read-only folder) leaves no stage behind."""
        sha = self.key_sha(key)
        stage = self.root / "staging" / f"{sha}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        try:
            for rel, path in walk(src)[0].items():
                if rel != PROVENANCE:
                    (stage / "files" / rel).parent.mkdir(parents=True, exist_ok=True)
                    _copy_file(str(path), str(stage / "files" / rel))
            (stage / "files").mkdir(parents=True, exist_ok=True)
            meta = {"kind": key["kind"], "key": json.loads(canonical_json(key)), "value": value,
                    "wall_seconds": round(wall_seconds, 6), "files": files_sha(stage / "files"), "created": time.time()}
            (stage / "entry.json").write_text(canonical_json(meta | {"seal": seal(meta)}), encoding="utf-8")
            _fsync_tree(stage)
            final = self.entry_dir(key)
            final.parent.mkdir(parents=True, exist_ok=True)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        try:
            os.rename(stage, final)
        except OSError:  # another writer published it first (no shared lock): keep theirs
            shutil.rmtree(stage, ignore_errors=True)

    def _materialize(self, entry: Entry, dest: Path) -> list[Path] | None:
        """Copy the entry's listed files into a stage beside dest, check the copies' bytes
        against the sealed hashes, then move them into dest (a missing dest appears whole).
        Returns what it placed in dest, or None (nothing placed) when a copy does not match."""
        src = entry.path / "files"
        stage = dest.with_name(f".{dest.name}.cache-{uuid.uuid4().hex[:8]}")
        try:
            for rel in entry.files:
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                _copy_file(str(src / rel), str(stage / rel))
            stage.mkdir(parents=True, exist_ok=True)
            if walk(stage)[1] or files_sha(stage) != entry.files:  # the bytes served are the bytes sealed
                return None
            if not dest.exists():
                os.rename(stage, dest)
                return [dest]
            for rel in entry.files:
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(stage / rel, dest / rel)
            return [dest / rel for rel in entry.files]
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def _serve(self, entry: Entry, dest: Path, load: Callable[[str, Path], T]) -> tuple[T] | None:
        """(the loaded value,) served into dest, or None with dest as it was when a file or the
        value fails its check (the producer's `load` re-derives what it can from the files)."""
        placed = self._materialize(entry, dest)
        if placed is None:
            self._refuse(entry.path, "has a file whose bytes do not match its seal")
            return None
        write_atomic(dest / PROVENANCE, canonical_json(
            {"cached": True, "wall_seconds": entry.wall_seconds, "key": entry.sha}))
        try:
            return (load(entry.value, dest),)
        except WriteFault:
            raise  # the destination's disk, not the entry
        except (ValueError, KeyError, TypeError, FileNotFoundError) as exc:  # Mismatch, a value that does not parse
            for path in [*placed, dest / PROVENANCE]:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
            self._refuse(entry.path, f"holds a value its files do not confirm ({' '.join(str(exc).split())[:200]})")
            return None

    def run(self, key: dict, dest: str | os.PathLike, compute: Callable[[], T], *, dump: Callable[[T], str],
            load: Callable[[str, Path], T]) -> T:
        """The stored result of `key` served into `dest`, or `compute()` (which writes `dest`)
        published under `key`. `dump(value)` / `load(text, dest)` turn the value into text and
        back (load re-anchors paths in it to `dest`, and raises a ValueError such as `Mismatch`
        when the value disagrees with the served files)."""
        dest = Path(dest)
        sha = self.key_sha(key)
        if self.off is not None:
            return compute()
        with self._lock(sha) as held:
            if not held:
                return compute()
            entry = self.lookup(key)
            served = None if entry is None else self._serve(entry, dest, load)
            if served is not None:
                self._touch(entry)
                self.stats.hits += 1
                self.stats.saved_s += entry.wall_seconds
                return served[0]
            start = time.perf_counter()
            value = compute()
            wall = time.perf_counter() - start
            if not dest.is_dir():
                raise BadInput(f"run cache: computing {key['kind']} wrote nothing to {dest}")
            try:
                self._publish(key, dest, dump(value), wall)
            except OSError as exc:
                self._turn_off(exc)
                return value
            write_atomic(dest / PROVENANCE, canonical_json({"cached": False, "wall_seconds": round(wall, 6), "key": sha}))
            self.stats.misses += 1
            return value

    def value(self, key: dict, compute: Callable[[], T]) -> T:
        """A JSON value with no files (rows built by sampling a model, say), computed once under
        `key` and served from the entry's sealed entry.json after."""
        with tempfile.TemporaryDirectory(dir=self.root / "staging" if (self.root / "staging").is_dir() else None) as tmp:
            dest = Path(tmp) / "value"

            def make() -> T:
                out = compute()
                dest.mkdir()
                return out
            return self.run(key, dest, make, dump=lambda v: json.dumps(v, sort_keys=True),
                            load=lambda text, _dest: json.loads(text))

    @staticmethod
    def _touch(entry: Entry) -> None:
        try:
            os.utime(entry.path / "entry.json")  # last use, for gc
        except OSError:
            pass  # a read-only entry still serves; gc then sees its publication time

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
