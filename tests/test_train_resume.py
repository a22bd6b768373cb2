"""A run killed (SIGKILL) after its first Trainer save resumes from that checkpoint, never
publishes a half-written child, and is charged to the ledger once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_train_world import build_parent, card, sft_examples
from trainers.ledger import CostModel, Ledger
from trainers.run import train

SCRIPT = """
import sys, time
sys.path[:0] = [{repo!r}, {tests!r}]
import torch; torch.set_num_threads(1)
from test_train_world import card, sft_examples
from trainers.ledger import CostModel, Ledger
from trainers.run import train
c = card("sft", steps=20)
slow = (lambda step, total: time.sleep(0.3)) if sys.argv[1] == "slow" else None
r = train(c, {parent!r}, sft_examples(64), out_dir={out!r}, run_key="E1:S01:train", progress=slow)
Ledger({ledger!r}).charge_run("E1", "train:S01", c, r, CostModel("nominal"))
print("RESUMED", int(r.log["resumed_step"]), r.steps)
"""


@pytest.mark.slow  # two Python subprocesses that import torch/TRL: about a minute on 2 shared cores
def test_killed_run_resumes_and_is_charged_once(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    parent, out, ledger = build_parent(tmp_path / "parent"), tmp_path / "run", tmp_path / "ledger.db"
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format(repo=str(repo), tests=str(repo / "tests"), parent=str(parent), out=str(out),
                                    ledger=str(ledger)))
    proc = subprocess.Popen([sys.executable, str(script), "slow"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    work = tmp_path / "run.work"
    deadline = time.time() + 120
    while not list(work.glob("checkpoint-*/trainer_state.json")) and time.time() < deadline:
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not out.exists(), "a killed run must not publish a child"

    done = subprocess.run([sys.executable, str(script), "fast"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    resumed_at, steps = map(int, done.stdout.split()[-2:])
    assert resumed_at >= 2 and steps == 20

    # A re-run after the crash-and-resume (say the loop's node runs again) trains nothing, charges nothing.
    c = card("sft", steps=20)
    again = train(c, str(parent), sft_examples(64), out_dir=str(out), run_key="E1:S01:train")
    Ledger(str(ledger)).charge_run("E1", "train:S01", c, again, CostModel("nominal"))
    rows = Ledger(str(ledger)).charges("E1")
    assert len(rows) == 1 and rows[0]["device_hours"] == 2.0  # all 20 steps, charged once
