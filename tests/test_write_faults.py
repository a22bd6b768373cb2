"""Refused writes (ENOSPC, EROFS, EACCES) on every write path end in one line naming the path
and the fix, never a traceback; the bank stays verifiable and its head log is written in the
same all-or-nothing step as the commit it anchors; a cache that cannot be written is off.

The faults are simulated at the boundary where the OS or SQLite reports them (tests run as root
and a tmpfs is not mountable in every CI): an OSError with the errno raised from `open`/`write`
of the module under test, SQLite's own SQLITE_FULL through `PRAGMA max_page_count`, and a
`locks/` that is a regular file. docs/operations-faults.md lists the same on a real tmpfs."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
from pathlib import Path

import pytest

from agent.cli.main import main
from experience_bank import files, heads
from experience_bank.bank import Bank
from experience_bank.errors import WriteFault, path_fault
from experience_bank.runcache import RunCache

FAULTS = {errno.ENOSPC: "no space left on device", errno.EROFS: "read-only file system",
          errno.EACCES: "permission denied"}
KEY = {"kind": "eval", "model": "m"}


def _refuse(code: int, name: str = "x"):
    def raiser(*args, **kwargs):
        raise OSError(code, os.strerror(code), str(args[0]) if args else name)
    return raiser


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("agent: error: ") and "Traceback" not in err, err
    return lines[0]


def _records_file(tmp_path: Path, n: int, tag: str = "r") -> Path:
    from support.bank_factory import record

    path = tmp_path / f"{tag}.jsonl"
    path.write_text("".join(record(f"S{i:02d}", seed=f"{tag}{i}").model_dump_json() + "\n" for i in range(n)))
    return path


# --- the run cache: off with one warning --------------------------------------------------

def _compute(dest: Path):
    def run():
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "a.txt").write_text("a")
        return 1
    return run


def _ask(cache: RunCache, dest: Path, key=KEY):
    return cache.run(key, dest, _compute(dest), dump=json.dumps, load=lambda t, d: json.loads(t))


def test_a_cache_whose_locks_folder_is_a_file_is_off_with_one_warning(tmp_path):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "locks").write_text("not a folder")
    warnings: list[str] = []
    cache = RunCache(tmp_path / "cache", warn=warnings.append)
    assert _ask(cache, tmp_path / "d1") == 1 and _ask(cache, tmp_path / "d2", KEY | {"model": "n"}) == 1
    assert len(warnings) == 1 and str(tmp_path / "cache") in warnings[0] and "caching is off" in warnings[0]
    assert (tmp_path / "d2" / "a.txt").read_text() == "a"


@pytest.mark.parametrize("code", list(FAULTS))
def test_a_cache_that_cannot_be_written_is_off_and_the_request_goes_on(tmp_path, monkeypatch, code):
    from experience_bank import runcache

    warnings: list[str] = []
    cache = RunCache(tmp_path / "cache", warn=warnings.append)
    monkeypatch.setattr(runcache, "_copy_file", _refuse(code))  # the entry's files: full / read-only / denied
    assert _ask(cache, tmp_path / "d1") == 1 and (tmp_path / "d1" / "a.txt").read_text() == "a"
    assert cache.entries() == [] and list((tmp_path / "cache" / "staging").iterdir()) == []
    monkeypatch.setattr(runcache, "open", _refuse(code), raising=False)  # the lock file too: still one warning
    assert _ask(cache, tmp_path / "d2", KEY | {"model": "n"}) == 1
    assert len(warnings) == 1 and os.strerror(code) in warnings[0] and "--no-cache" in warnings[0]


def test_a_read_only_cache_folder_is_off_with_one_warning(tmp_path, monkeypatch):
    from experience_bank import runcache

    warnings: list[str] = []
    monkeypatch.setattr(runcache, "open", _refuse(errno.EROFS), raising=False)
    cache = RunCache(tmp_path / "cache", warn=warnings.append)
    assert _ask(cache, tmp_path / "d1") == 1 and len(warnings) == 1 and "Read-only file system" in warnings[0]


# --- atomic files ---------------------------------------------------------------------------

@pytest.mark.parametrize("code", list(FAULTS))
def test_an_atomic_write_refused_names_its_path_and_leaves_the_old_file(tmp_path, monkeypatch, code):
    target = tmp_path / "report.md"
    target.write_text("old")
    monkeypatch.setattr(files.tempfile, "mkstemp", _refuse(code))
    with pytest.raises(WriteFault) as caught:
        files.write_atomic(target, "new")
    assert str(caught.value).startswith(f"cannot write {target} ({FAULTS[code]})") and caught.value.exit_code == 2
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


# --- the bank and its head log --------------------------------------------------------------

class _FullLog:
    """A head log whose file system fills up half-way through the append."""

    def __init__(self, path, mode, **kw):
        self.f = open(path, mode, **kw)  # noqa: SIM115

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def write(self, text):
        self.f.write(text[: len(text) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _imported(tmp_path: Path, n: int = 3) -> Path:
    bank_path = tmp_path / "bank.sqlite"
    assert main(["bank", "init", "--bank", str(bank_path)]) == 0
    assert main(["bank", "import", "--bank", str(bank_path), str(_records_file(tmp_path, n, "a"))]) == 0
    return bank_path


def _state(bank_path: Path) -> tuple:
    with Bank.open(bank_path) as bank:
        return bank.current_library_version(), len(bank.record_hashes()), bank.verify(against=heads.log_path(bank_path))


def test_an_import_whose_head_log_cannot_be_written_commits_nothing(tmp_path, monkeypatch, capsys):
    bank_path = _imported(tmp_path)
    log_before = heads.log_path(bank_path).read_bytes()
    before = _state(bank_path)
    capsys.readouterr()
    monkeypatch.setattr(heads, "open", _FullLog, raising=False)
    assert main(["bank", "import", "--bank", str(bank_path), str(_records_file(tmp_path, 4, "b"))]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"head log {bank_path}.heads (no space left on device)" in line and "nothing was committed" in line
    monkeypatch.undo()
    assert heads.log_path(bank_path).read_bytes() == log_before  # the half-written line was taken back
    assert _state(bank_path) == before and before[2] == []
    assert main(["bank", "verify", "--bank", str(bank_path)]) == 0


def test_the_head_log_is_written_before_its_commit_and_taken_back_when_the_commit_fails(tmp_path, monkeypatch):
    bank_path = tmp_path / "bank.sqlite"
    with Bank.init(bank_path) as bank:
        bank.create_library_version([], "v1")
    log = heads.log_path(bank_path)

    def at_commit(bank, fail: bool):
        real, seen = bank.db.execute, []

        def execute(sql, *args):
            if sql == "COMMIT":
                seen.append(log.read_bytes().count(b"\n"))  # lines in the log when the commit starts
                if fail:
                    raise sqlite3.OperationalError("disk I/O error")
            return real(sql, *args)

        monkeypatch.setattr(bank.db, "execute", execute)
        return seen

    with Bank.open(bank_path) as bank:
        seen = at_commit(bank, fail=False)
        bank.create_library_version([], "v2")
    assert seen == [2] and log.read_bytes().count(b"\n") == 2  # the anchor was durable before the commit
    log_before, before = log.read_bytes(), _state(bank_path)
    with Bank.open(bank_path) as bank:
        seen = at_commit(bank, fail=True)
        with pytest.raises(sqlite3.OperationalError):
            bank.create_library_version([], "v3")
    assert seen == [3] and log.read_bytes() == log_before  # taken back with the commit
    assert _state(bank_path) == before and before[2] == []


@pytest.mark.parametrize("flag, free, said", [(0, 0, "no space left on device"), (os.ST_RDONLY, 1 << 30,
                                                                                   "read-only file system")])
def test_a_bare_sqlite_io_error_on_a_full_or_read_only_file_system_is_named_so(tmp_path, monkeypatch, flag, free, said):
    """SQLite reports a full disk under its WAL as 'disk I/O error' (SQLITE_IOERR_WRITE, seen on a
    full tmpfs): the bank's line reads the cause off its file system."""
    from experience_bank.bank import damaged

    exc = sqlite3.OperationalError("disk I/O error")
    exc.sqlite_errorcode = 778  # SQLITE_IOERR_WRITE
    real = os.statvfs(tmp_path)
    fake = os.statvfs_result((real.f_bsize, real.f_frsize, real.f_blocks, 0, free // real.f_frsize, real.f_files,
                              real.f_ffree, real.f_favail, flag, real.f_namemax))
    monkeypatch.setattr(os, "statvfs", lambda path: fake)
    line = str(damaged(str(tmp_path / "bank.sqlite"), exc))
    assert line.startswith(f"cannot write bank {tmp_path / 'bank.sqlite'} ({said})") and "integrity_check" not in line
    monkeypatch.setattr(os, "statvfs", lambda path: real)  # room and writable: an I/O error is an I/O error
    assert "not a readable SQLite bank" in str(damaged(str(tmp_path / "bank.sqlite"), exc))


class _FullBank(Bank):
    """A bank whose file system is full: SQLite itself answers SQLITE_FULL past the pages it has."""

    @classmethod
    def open(cls, path, wait_s=30.0):
        bank = super().open(path, wait_s)
        (pages,) = bank.db.execute("PRAGMA page_count").fetchone()
        bank.db.execute(f"PRAGMA max_page_count={pages}")
        return bank


def test_an_import_into_a_bank_on_a_full_disk_is_one_line_and_the_bank_stays_verifiable(tmp_path, monkeypatch, capsys):
    import agent.cli.bank as cli_bank

    bank_path = _imported(tmp_path, 2)
    before = _state(bank_path)
    capsys.readouterr()
    monkeypatch.setattr(cli_bank, "Bank", _FullBank)
    assert main(["bank", "import", "--bank", str(bank_path), str(_records_file(tmp_path, 200, "b"))]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"cannot write bank {bank_path} (no space left on device)" in line
    assert "integrity_check" not in line and "not a readable" not in line
    assert _state(bank_path) == before and before[2] == []


def test_a_bank_held_by_another_writer_is_reported_as_held_with_the_option_that_waits(tmp_path, capsys):
    bank_path = _imported(tmp_path, 2)
    other = sqlite3.connect(bank_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's write transaction
    try:
        capsys.readouterr()
        assert main(["bank", "import", "--wait", "0.2", "--bank", str(bank_path),
                     str(_records_file(tmp_path, 2, "b"))]) == 2
        line = _one_line(capsys.readouterr().err)
        assert "held by another process's write (waited 0.2 s)" in line and "--wait SECONDS" in line
        assert "integrity_check" not in line
        assert main(["bank", "consolidate", "--wait", "0", "--bank", str(bank_path), "--episode", "e1"]) == 2
        assert "held by another process" in _one_line(capsys.readouterr().err)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert main(["bank", "import", "--wait", "5", "--bank", str(bank_path), str(_records_file(tmp_path, 2, "b"))]) == 0


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_refusing_a_bank_from_a_newer_schema_writes_nothing(tmp_path, capsys, journal):
    bank_path = tmp_path / "bank.sqlite"
    with Bank.init(bank_path) as bank:
        bank.db.execute("PRAGMA user_version=99")
        bank.db.execute(f"PRAGMA journal_mode={journal}")
    before = bank_path.read_bytes()
    records = _records_file(tmp_path, 1)
    listing = sorted(p.name for p in tmp_path.iterdir())
    for argv in (["bank", "import", "--bank", str(bank_path), str(records)], ["bank", "verify", "--bank", str(bank_path)],
                 ["bank", "consolidate", "--bank", str(bank_path), "--episode", "e1"]):
        assert main(argv) == 2
        assert "newer than this agent" in _one_line(capsys.readouterr().err)
        assert sorted(p.name for p in tmp_path.iterdir()) == listing, argv  # no -wal / -shm left beside it
        assert bank_path.read_bytes() == before


# --- agent run: exit 2 before the manifest, exit 1 and resumable after ---------------------

def _run_argv(tmp_path: Path) -> list[str]:
    from test_run_e2e import CONFIG, crafted_bank

    crafted_bank(tmp_path / "bank.sqlite")
    # Build (or load) the test world first: a first build prints its progress on stderr, which
    # the tests below read as the command's one line.
    from agent.world.embedded import ensure_world

    ensure_world("test")
    return ["run", "--config", CONFIG, "--bank", str(tmp_path / "bank.sqlite"), "--out", str(tmp_path / "ep"),
            "--episode-budget", "12gpuh", "--quiet", "--no-tracking"]


def test_a_run_whose_folder_cannot_be_written_before_deciding_exits_2(tmp_path, monkeypatch, capsys):
    from agent.run.rundir import RunDir

    argv = _run_argv(tmp_path)
    capsys.readouterr()
    monkeypatch.setattr(RunDir, "freeze", lambda self, m: _refuse(errno.ENOSPC)(self.manifest_file))
    assert main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"cannot write {tmp_path / 'ep' / 'manifest.json'} (no space left on device)" in line
    assert line.endswith("then run the command again")


def test_a_run_whose_bank_fills_up_mid_episode_exits_1_resumable_and_the_bank_verifies(tmp_path, monkeypatch, capsys):
    argv = _run_argv(tmp_path)
    capsys.readouterr()
    calls = {"n": 0}
    real = heads.append

    def fills_up(path, lines):  # the episode header is logged, its first decision finds the disk full
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, lines)

    monkeypatch.setattr(heads, "append", lambda path, lines: _translated(fills_up, path, lines))
    assert main(argv) == 1
    line = _one_line(capsys.readouterr().err)
    assert "(no space left on device)" in line and f"agent run --resume {tmp_path / 'ep'}" in line
    monkeypatch.undo()
    assert _state(tmp_path / "bank.sqlite")[2] == []
    assert main(["bank", "verify", "--bank", str(tmp_path / "bank.sqlite")]) == 0


def _translated(fn, path, lines):
    from experience_bank.errors import write_fault

    try:
        return fn(path, lines)
    except OSError as exc:
        raise write_fault(exc, f"head log {path}") from None


def test_a_run_failing_without_an_errno_on_a_full_run_directory_says_the_disk_is_full(tmp_path, monkeypatch, capsys):
    """torch's checkpoint writer reports a full disk as RuntimeError('... iostream error') (seen on
    a full tmpfs): the run directory's file system names the cause."""
    from agent.loop import episode

    argv = _run_argv(tmp_path)
    capsys.readouterr()
    real = os.statvfs(tmp_path)

    def drive(ctx, initial, checkpoints, answer=None):
        full = os.statvfs_result((real.f_bsize, real.f_frsize, real.f_blocks, 0, 0, real.f_files, real.f_ffree,
                                  real.f_favail, 0, real.f_namemax))
        monkeypatch.setattr(os, "statvfs", lambda path: full)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 5952 vs 5844")

    monkeypatch.setattr(episode, "drive", drive)
    assert main(argv) == 1
    line = _one_line(capsys.readouterr().err)
    assert f"cannot write the run directory {tmp_path / 'ep'} (no space left on device)" in line
    assert f"agent run --resume {tmp_path / 'ep'}" in line



# --- a path of the wrong shape: one line, exit 2 -------------------------------------------

@pytest.mark.parametrize("out, said", [("f/r", "a folder on its path is a file"),
                                       ("f", "a file stands where a folder is needed")])
def test_an_output_folder_at_or_under_a_file_is_one_line(tmp_path, capsys, out, said):
    (tmp_path / "f").write_text("keep")
    assert main(["replay", "retrospective-24", "--out", str(tmp_path / out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert said in line and "give" in line and (tmp_path / "f").read_text() == "keep"


def test_an_output_file_that_is_a_folder_is_one_line_naming_it(tmp_path, capsys):
    v3 = Path(__file__).resolve().parents[1] / "docs" / "results" / "retrospective-default.json"
    (tmp_path / "x.md").mkdir()
    assert main(["extrapolate", "--retrospective", str(v3), "--out", str(tmp_path / "x.md")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"--out {tmp_path / 'x.md'} is a directory" in line  # refused before the fit
    # where a write meets a folder all the same, the atomic write names the file it was to replace,
    # not its temporary sibling
    with pytest.raises(IsADirectoryError) as exc:
        files.write_atomic(tmp_path / "x.md", "text")
    assert str(path_fault(exc.value)).startswith(f"cannot write {tmp_path / 'x.md'} (it is a folder")
    assert path_fault(OSError(errno.ENOSPC, "full")) is None  # a refused write is write_fault's
