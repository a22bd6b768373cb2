"""Files around a run that another process or a hostile user prepared (issue 31): a held MLflow
store lock, a '?' in the runs folder, a run.lock planted as a symbolic link."""

from __future__ import annotations

import fcntl
import os
import threading
import time

import pytest

from agent.views import tracking
from agent.run.rundir import RunDir
from agent.run.runlock import hold, running
from experience_bank.errors import BadInput

MANIFEST = {"episode_id": "ep-1", "config": {"policy": "bcit", "world": "w"}, "budget_device_hours": 1.0,
            "library_version": 1, "manifest_hash": "0" * 64, "initial": {"sha256": "1" * 64}}


def _start_in_thread(tracker: tracking.Tracker, wait_s: float = 20.0) -> float:
    """Seconds `tracker.start` took; fails (leaving the thread) when it is still blocked after wait_s."""
    began = time.monotonic()
    thread = threading.Thread(target=tracker.start, args=(MANIFEST,), daemon=True)
    thread.start()
    thread.join(wait_s)
    assert not thread.is_alive(), "the tracker is still waiting"
    return time.monotonic() - began


def test_a_store_lock_held_by_another_process_is_a_bounded_wait_and_one_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking, "LOCK_WAIT_S", 0.5, raising=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    said: list[str] = []
    tracker = tracking.Tracker(uri, tmp_path / "ep-1", said.append)
    with open(tmp_path / "mlflow.db.lock", "a") as other:  # an open file of its own: flock conflicts as across processes
        fcntl.flock(other.fileno(), fcntl.LOCK_EX)
        took = _start_in_thread(tracker)
        tracker.sync([], [], {}, "lineage")
        tracker.finish(finished=True)
    assert 0.5 <= took < 5.0
    assert len(said) == 1 and "mlflow.db.lock" in said[0] and "goes on without it" in said[0], said
    assert tracker.down and not (tmp_path / "mlflow.db").exists()


def test_a_question_mark_in_the_runs_folder_never_puts_the_store_at_a_truncated_path(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    runs = tmp_path / "team?b"
    (runs / "ep-1").mkdir(parents=True)
    uri = tracking.tracking_uri(None, runs)
    said: list[str] = []
    tracker = tracking.Tracker(uri, runs / "ep-1", said.append)
    _start_in_thread(tracker, wait_s=120.0)
    assert len(said) == 1 and "holds a '?'" in said[0] and "--tracking-uri" in said[0], said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["team?b"]  # no store at tmp_path/team
    assert sorted(p.name for p in runs.iterdir()) == ["ep-1"]


def test_sqlite_options_after_a_question_mark_are_not_a_path():
    tracking._check_store("sqlite:////srv/runs/mlflow.db?timeout=20")
    tracking._check_store("http://tracker:5000/?a=b/c")
    with pytest.raises(ValueError, match="holds a '\\?'"):
        tracking._check_store("sqlite:////srv/a?b/mlflow.db")


def test_a_run_lock_planted_as_a_link_is_not_followed(tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me\n")
    run_dir = tmp_path / "ep-1"
    run_dir.mkdir()
    os.symlink(victim, RunDir(run_dir).lock_file)
    with pytest.raises(BadInput, match="must be a plain file"):
        with hold(run_dir):
            pass
    assert victim.read_text() == "keep me\n"
    assert not running(run_dir)
    (RunDir(run_dir).lock_file).unlink()
    with hold(run_dir):
        assert running(run_dir)
