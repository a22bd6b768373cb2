"""The run cache's store: checked hits, atomic publication, single flight, garbage collection."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experience_bank.runcache import PROVENANCE, RunCache, provenance, was_cached

KEY = {"kind": "eval", "model": "m1", "items": "i1"}


def _compute(dest: Path, text: str, calls: list):
    def run():
        calls.append(1)
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "sub").mkdir(exist_ok=True)
        (dest / "a.txt").write_text(text)
        (dest / "sub" / "b.bin").write_bytes(text.encode() * 3)
        return {"score": len(text)}
    return run


def _run(cache, dest, text="hello", calls=None):
    calls = [] if calls is None else calls
    return cache.run(KEY, dest, _compute(dest, text, calls), dump=json.dumps, load=lambda t, d: json.loads(t)), calls


def test_a_miss_computes_and_publishes_a_hit_serves_the_same_files_without_computing(tmp_path):
    cache = RunCache(tmp_path / "cache")
    value, calls = _run(cache, tmp_path / "first")
    assert value == {"score": 5} and len(calls) == 1 and not was_cached(tmp_path / "first")
    served, calls2 = _run(cache, tmp_path / "second", text="other")  # same key: compute is not called
    assert served == {"score": 5} and calls2 == []
    assert (tmp_path / "second" / "a.txt").read_text() == "hello"
    assert (tmp_path / "second" / "sub" / "b.bin").read_bytes() == b"hellohellohello"
    p = provenance(tmp_path / "second")
    assert p["cached"] is True and p["wall_seconds"] == provenance(tmp_path / "first")["wall_seconds"]
    assert (cache.stats.hits, cache.stats.misses) == (1, 1)
    # the provenance file is not part of the entry
    (entry,) = cache.entries()
    assert sorted(entry.files) == ["a.txt", "sub/b.bin"] and PROVENANCE not in entry.files


def test_a_hit_into_an_existing_folder_overwrites_what_the_entry_holds(tmp_path):
    cache = RunCache(tmp_path / "cache")
    _run(cache, tmp_path / "first")
    dest = tmp_path / "partial"
    dest.mkdir()
    (dest / "a.txt").write_text("half-written by a crashed attempt")
    _run(cache, dest)
    assert (dest / "a.txt").read_text() == "hello"


def test_an_entry_whose_files_changed_is_dropped_and_recomputed(tmp_path):
    cache = RunCache(tmp_path / "cache")
    _run(cache, tmp_path / "first")
    (entry,) = cache.entries()
    (entry.path / "files" / "a.txt").write_text("tampered")
    value, calls = _run(cache, tmp_path / "second", text="fresh")
    assert calls == [1] and value == {"score": 5} and (tmp_path / "second" / "a.txt").read_text() == "fresh"
    (entry,) = cache.entries()
    assert (entry.path / "files" / "a.txt").read_text() == "fresh"


def test_a_key_is_its_content_not_its_order(tmp_path):
    cache = RunCache(tmp_path)
    assert cache.key_sha({"kind": "t", "a": 1, "b": [1, 2]}) == cache.key_sha({"b": [1, 2], "a": 1, "kind": "t"})
    assert cache.key_sha({"kind": "t", "a": 1}) != cache.key_sha({"kind": "t", "a": 2})


def test_a_failing_compute_publishes_nothing(tmp_path):
    cache = RunCache(tmp_path / "cache")

    def boom():
        (tmp_path / "d").mkdir()
        (tmp_path / "d" / "x").write_text("partial")
        raise RuntimeError("trainer crashed")

    with pytest.raises(RuntimeError):
        cache.run(KEY, tmp_path / "d", boom, dump=json.dumps, load=lambda t, d: json.loads(t))
    assert cache.entries() == [] and cache.lookup(KEY) is None


KILLED = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from experience_bank.runcache import RunCache
cache, dest = RunCache(sys.argv[1]), Path(sys.argv[2])
def slow():
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "a.txt").write_text("x")
    print("computing", flush=True)
    time.sleep(60)
    return 1
cache.run({key!r}, dest, slow, dump=json.dumps, load=lambda t, d: json.loads(t))
"""


def _script(tmp_path) -> Path:
    script = tmp_path / "killed.py"
    script.write_text(KILLED.format(root=str(Path(__file__).resolve().parent.parent), key=KEY))
    return script


def test_a_run_killed_mid_compute_leaves_no_entry_and_the_next_request_recomputes(tmp_path):
    proc = subprocess.Popen([sys.executable, str(_script(tmp_path)), str(tmp_path / "cache"), str(tmp_path / "d")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "computing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    cache = RunCache(tmp_path / "cache")
    assert cache.entries() == []
    value, calls = _run(cache, tmp_path / "again")  # the lock died with the process: no wait
    assert calls == [1] and value == {"score": 5}


def _single_flight_worker(root: str, dest: str, log: str) -> None:
    cache = RunCache(root)

    def compute():
        with open(log, "a") as f:
            f.write("computed\n")
        time.sleep(1.0)  # long enough that the other worker asks while this one computes
        Path(dest).mkdir(parents=True, exist_ok=True)
        (Path(dest) / "a.txt").write_text("once")
        return {"v": 1}

    value = cache.run(KEY, dest, compute, dump=json.dumps, load=lambda t, d: json.loads(t))
    assert value == {"v": 1}


def test_two_jobs_asking_for_one_key_at_once_compute_it_once(tmp_path):
    log = tmp_path / "log"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_single_flight_worker, args=(str(tmp_path / "cache"), str(tmp_path / f"d{i}"), str(log)))
             for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert log.read_text().count("computed") == 1
    assert (tmp_path / "d0" / "a.txt").read_text() == (tmp_path / "d1" / "a.txt").read_text() == "once"
    assert sorted(was_cached(tmp_path / f"d{i}") for i in range(2)) == [False, True]


def test_gc_by_age_by_size_and_all_and_staging_leftovers(tmp_path):
    cache = RunCache(tmp_path / "cache")
    for i in range(3):
        key = KEY | {"model": f"m{i}"}
        dest = tmp_path / f"d{i}"
        cache.run(key, dest, _compute(dest, "x" * (1000 * (i + 1)), []), dump=json.dumps,
                  load=lambda t, d: json.loads(t))
    old = cache.entries()[0]
    os.utime(old.path / "entry.json", (time.time() - 10 * 86400,) * 2)
    stale = cache.root / "staging" / "abc.123.dead"
    stale.mkdir(parents=True)
    os.utime(stale, (time.time() - 7200,) * 2)
    done = cache.gc(older_than_s=5 * 86400)
    assert done["removed"] == 1 and not stale.exists() and old.sha not in {e.sha for e in cache.entries()}
    sizes = {e.sha: e.size_bytes for e in cache.entries()}
    done = cache.gc(max_bytes=max(sizes.values()))  # least recently used goes first
    assert done["removed"] == 1 and done["kept_bytes"] <= max(sizes.values())
    assert cache.gc(everything=True)["kept"] == 0 and cache.entries() == []


def test_from_env_honours_no_cache_and_the_directory(tmp_path, monkeypatch):
    from experience_bank.runcache import default_root, from_env

    monkeypatch.setenv("AGENT_NO_CACHE", "1")
    assert from_env() is None
    monkeypatch.delenv("AGENT_NO_CACHE")
    monkeypatch.setenv("AGENT_RUN_CACHE", str(tmp_path / "rc"))
    assert from_env().root == tmp_path / "rc"
    monkeypatch.delenv("AGENT_RUN_CACHE")
    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "ac"))
    assert default_root() == tmp_path / "ac" / "runs"


def test_cache_cli_ls_and_gc(tmp_path, monkeypatch, capsys):
    from agent.cli.main import main

    monkeypatch.setenv("AGENT_RUN_CACHE", str(tmp_path / "cache"))
    _run(RunCache(tmp_path / "cache"), tmp_path / "d")
    assert main(["cache", "ls", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["kind"] == "eval" and row["files"] == 2
    assert main(["cache", "gc"]) == 2 and "--older-than" in capsys.readouterr().err
    assert main(["cache", "gc", "--all"]) == 0 and "removed 1 entries" in capsys.readouterr().out


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("flag, value", [
    ("--max-gb", "nan"), ("--max-gb", "inf"), ("--max-gb", "1e999"), ("--max-gb", "1e300"), ("--max-gb", "-1"),
    ("--older-than", "nan"), ("--older-than", "inf"), ("--older-than", "1e308"), ("--older-than", "-0.5"),
])
def test_cache_gc_refuses_a_non_finite_or_out_of_range_amount_and_removes_nothing(tmp_path, monkeypatch, capsys,
                                                                                   flag, value):
    from agent.cli.main import main

    monkeypatch.setenv("AGENT_RUN_CACHE", str(tmp_path / "cache"))
    _run(RunCache(tmp_path / "cache"), tmp_path / "d")
    before = _tree(tmp_path / "cache")
    assert main(["cache", "gc", flag, value, "--all"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"agent: error: {flag} ") and f"e.g. {flag} " in err[0], err
    assert _tree(tmp_path / "cache") == before


def test_cache_gc_accepts_the_ends_of_the_range(tmp_path, monkeypatch, capsys):
    from agent.cli.main import main

    monkeypatch.setenv("AGENT_RUN_CACHE", str(tmp_path / "cache"))
    _run(RunCache(tmp_path / "cache"), tmp_path / "d")
    assert main(["cache", "gc", "--older-than", "36500", "--max-gb", "1e6"]) == 0
    assert "removed 0 entries" in capsys.readouterr().out
    assert main(["cache", "gc", "--max-gb", "0"]) == 0 and "removed 1 entries" in capsys.readouterr().out


@pytest.mark.parametrize("env, under", [("AGENT_CACHE", False), ("AGENT_RUN_CACHE", False), ("AGENT_RUN_CACHE", True)])
@pytest.mark.parametrize("command", [["cache", "ls"], ["cache", "ls", "--json"], ["cache", "gc", "--all"]])
def test_a_cache_root_that_is_a_file_is_refused_not_listed_as_empty(tmp_path, monkeypatch, capsys, env, under,
                                                                     command):
    from agent.cli.main import main

    monkeypatch.delenv("AGENT_RUN_CACHE", raising=False)
    plain = tmp_path / "plain"
    plain.write_text("not a folder\n")
    monkeypatch.setenv(env, str(plain / "runs" if under else plain))
    assert main(command) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("agent: error: run cache root ") and str(plain) in err[0], err
    assert "AGENT_RUN_CACHE or AGENT_CACHE at a directory" in err[0]
    assert plain.read_text() == "not a folder\n" and sorted(tmp_path.iterdir()) == [plain]


def test_a_cache_root_not_made_yet_is_an_empty_cache(tmp_path, monkeypatch, capsys):
    from agent.cli.main import main

    monkeypatch.setenv("AGENT_RUN_CACHE", str(tmp_path / "new" / "runs"))
    assert main(["cache", "ls"]) == 0 and "0 entries" in capsys.readouterr().out
    assert not (tmp_path / "new").exists()
