"""The parent pointer: promotion is atomic, a rollback leaves it untouched, a crash never loses it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_gate_factory import sha

from agent.run import promotion
from agent.run.promotion import current_parent, init_parent, promote, read_pointer
from experience_bank.errors import BadInput
from experience_bank.results import GateVerdict


def verdict(ok: bool, child: str = "child", parent: str = "initial") -> GateVerdict:
    return GateVerdict(promote=ok, decided_by="all_passed" if ok else "ifeval_guard", checks=(), u_prom=0.5,
                       child_sha256=sha(child), parent_sha256=sha(parent), initial_sha256=sha("initial"))


def test_promote_moves_parent_and_records_rollback_target(tmp_path):
    init_parent(tmp_path, "models/base", sha("initial"))
    state = promote(tmp_path, "runs/s1/train", verdict(True))
    assert current_parent(tmp_path).path == "runs/s1/train" and current_parent(tmp_path).sha256 == sha("child")
    assert state.rollback.sha256 == sha("initial") and state.promotions == 1
    assert read_pointer(tmp_path) == state
    assert promote(tmp_path, "runs/s1/train", verdict(True)) == state  # a resumed promotion is a no-op


def test_rollback_leaves_pointer_untouched(tmp_path):
    init_parent(tmp_path, "models/base", sha("initial"))
    before = (tmp_path / "parent.json").read_bytes()
    promote(tmp_path, "runs/s1/train", verdict(False))
    assert (tmp_path / "parent.json").read_bytes() == before


def test_stale_verdict_is_refused(tmp_path):
    init_parent(tmp_path, "models/base", sha("initial"))
    with pytest.raises(BadInput, match="current parent"):
        promote(tmp_path, "runs/s1/train", verdict(True, parent="someone-else"))


def test_crash_at_replace_leaves_the_old_parent(tmp_path, monkeypatch):
    init_parent(tmp_path, "models/base", sha("initial"))

    def crash(src, dst):
        raise OSError("power cut")

    monkeypatch.setattr(promotion.os, "replace", crash)
    with pytest.raises(OSError):
        promote(tmp_path, "runs/s1/train", verdict(True))
    assert current_parent(tmp_path).sha256 == sha("initial")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent.json"]  # no orphaned temp file


def test_crash_while_writing_temp_leaves_the_old_parent(tmp_path, monkeypatch):
    init_parent(tmp_path, "models/base", sha("initial"))
    def disk_gone(fd):
        raise OSError("disk gone")

    monkeypatch.setattr(promotion.os, "fsync", disk_gone)
    with pytest.raises(OSError):
        promote(tmp_path, "runs/s1/train", verdict(True))
    assert current_parent(tmp_path).sha256 == sha("initial")


def test_killed_promoter_leaves_old_or_new_never_neither(tmp_path):
    # A child process promotes back and forth as fast as it can; SIGKILL lands mid-way.
    script = textwrap.dedent(f"""
        import sys; sys.path[:0] = {sys.path!r}
        from test_promotion import verdict
        from agent.run.promotion import init_parent, promote
        run = {str(tmp_path)!r}
        init_parent(run, "a", verdict(True).initial_sha256)
        names = ["initial", "child"]
        i = 0
        print("ready", flush=True)
        while True:
            promote(run, names[(i + 1) % 2], verdict(True, child=names[(i + 1) % 2], parent=names[i % 2]))
            i += 1
    """)
    for _ in range(3):
        for p in tmp_path.iterdir():
            p.unlink()
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=Path(__file__).parent)
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        state = read_pointer(tmp_path)
        assert state.parent.sha256 in {sha("initial"), sha("child")}  # parses: never half a file
