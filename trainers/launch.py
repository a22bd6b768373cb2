"""`launcher: accelerate`: every training run as `accelerate launch --config_file CFG -m agent train`.

The launched processes run the same code as a local run (trainers.run.train, through the
`agent train` command) on the exact rows the loop built (`--examples`, written beside the run),
and rank 0 publishes the child and its TrainResult in the same place a local run does; the
caller then reads that result with trainers.checkpoint.read_result, as it reads a local run's.
A finished run (same run key) is returned without launching anything.

What is covered here and what is not: on CPU the plumbing runs with accelerate's multi-CPU
launch (`cpu=True`, two processes; tests/test_local_world.py). The DeepSpeed path
(runs/accelerate_zero2.yaml, distributed_type DEEPSPEED with runs/deepspeed_zero2.json, ZeRO-2)
is the same command with that config; it needs GPUs and the `gpu` extra (deepspeed), and this
build never imitates it on CPU.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json
from experience_bank.cards import CandidateCard
from experience_bank.results import TrainResult

ACCELERATE_CONFIG = "runs/accelerate_zero2.yaml"
ENTRY = ("-m", "agent", "train")
"""The command every process runs (agent/cli/train.py)."""
_TAIL = 400


@dataclass(frozen=True)
class LaunchSpec:
    """How a training run is launched under accelerate."""

    config_file: str = ACCELERATE_CONFIG
    """accelerate config (runs/accelerate_zero2.yaml: DeepSpeed ZeRO-2)."""
    deepspeed_config: str | None = None
    """DeepSpeed JSON passed as --deepspeed_config_file (overrides the config's own)."""
    num_processes: int | None = None
    """--num_processes (None: the config's)."""
    cpu: bool = False
    """--cpu: accelerate's multi-CPU launch (the plumbing test on a machine without GPUs)."""


def check_launch(launcher: str, deepspeed_config: str | None, config_file: str = ACCELERATE_CONFIG) -> None:
    """Everything a launch needs, checked before a run directory exists (BadInput: one line)."""
    if deepspeed_config is not None and not Path(deepspeed_config).is_file():
        raise BadInput(f"DeepSpeed config {deepspeed_config} not found: fix deepspeed_config")
    if launcher != "accelerate":
        return
    if importlib.util.find_spec("accelerate") is None:
        raise BadInput("launcher accelerate needs the accelerate package: pip install accelerate")
    if not Path(config_file).is_file():
        raise BadInput(f"accelerate config {config_file} not found: run from the project root or restore it")
    text = Path(config_file).read_text(encoding="utf-8")
    if ("DEEPSPEED" in text or deepspeed_config) and importlib.util.find_spec("deepspeed") is None:
        raise BadInput(f"launcher accelerate with {config_file} uses DeepSpeed, which is not installed: "
                       "pip install -e .[gpu] on the GPU machine (or launcher: local)")


def command(spec: LaunchSpec, args: Sequence[str]) -> list[str]:
    """The argv of one launched run (accelerate's launcher in this interpreter's environment)."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", spec.config_file]
    if spec.deepspeed_config:
        cmd += ["--use_deepspeed", "--deepspeed_config_file", spec.deepspeed_config]
    if spec.num_processes:
        cmd += ["--num_processes", str(spec.num_processes)]
    if spec.cpu:
        cmd += ["--cpu"]
    return cmd + [*ENTRY, *args]


def train_launched(card: CandidateCard, parent_dir: str, examples: Sequence[dict], *, out_dir: str, run_key: str,
                   fraction: float, resume_from: str | None, seed: int, threads: int | None,
                   spec: LaunchSpec, snapshots: Sequence[tuple[float, int]] = ()) -> TrainResult:
    """Launch the run, wait for it, and read its published TrainResult."""
    from trainers import checkpoint as ckpt

    out = Path(out_dir).resolve()
    done = ckpt.read_result(out)
    if done is not None and done.run_key == run_key:
        return done
    io = out.with_name(out.name + ".launch")
    io.mkdir(parents=True, exist_ok=True)
    (io / "card.json").write_text(card.model_dump_json(), encoding="utf-8")
    (io / "examples.jsonl").write_text("".join(canonical_json(r) + "\n" for r in examples), encoding="utf-8")
    args = ["--card", str(io / "card.json"), "--parent", str(parent_dir), "--out", str(out),
            "--fraction", repr(float(fraction)), "--run-key", run_key, "--seed", str(seed),
            "--examples", str(io / "examples.jsonl")]
    args += ["--resume-from", str(resume_from)] if resume_from else []
    args += ["--threads", str(threads)] if threads else []
    args += ["--snapshots", ",".join(f"{f!r}:{s}" for f, s in snapshots)] if snapshots else []
    proc = subprocess.run(command(spec, args), capture_output=True, text=True, check=False)
    result = ckpt.read_result(out)
    if proc.returncode != 0 or result is None:
        tail = (proc.stderr or proc.stdout).strip()[-_TAIL:].replace("\n", " | ")
        raise RuntimeError(f"accelerate launch of run {run_key} failed (exit {proc.returncode}): {tail}")
    shutil.rmtree(io, ignore_errors=True)
    return result
