"""The parent pointer: `parent.json` in a run directory, moved atomically.

It holds the current parent (path + weights sha256) and the rollback target (the parent it
replaced). A promotion writes a temporary file beside it, fsyncs it, `os.replace`s it over
`parent.json` and fsyncs the directory, so a crash at any point leaves either the old or the
new pointer on disk, never neither and never half a file. A rejected child (a rollback)
leaves the pointer untouched: the current parent simply stays.

Out of scope: the checkpoints themselves (trainers/ writes them atomically) and concurrent
promoters (one episode owns one run directory).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import Field

from agent.run.killpoints import kill_point
from agent.run.rundir import RunDir
from experience_bank.files import write_atomic
from experience_bank.errors import BadInput
from experience_bank.frozen import Frozen, Sha256, parse_model
from experience_bank.results import GateVerdict


class ModelPointer(Frozen):
    path: Annotated[str, Field(min_length=1)]
    """Directory of the model (safetensors)."""
    sha256: Sha256
    """Hash of its weights."""


class ParentFile(Frozen):
    """The content of parent.json."""

    parent: ModelPointer
    """The current parent m_t."""
    rollback: ModelPointer | None = None
    """The parent it replaced (None before the first promotion)."""
    promotions: Annotated[int, Field(ge=0)] = 0
    """Promotions so far (the stage)."""
    verdict_sha256: Sha256 | None = None
    """Content hash of the gate verdict behind the last promotion."""


def _write_atomic(run_dir: Path, state: ParentFile, before_replace=None) -> None:
    write_atomic(RunDir(Path(run_dir)).parent_file, state.model_dump_json(indent=2) + "\n", before_replace)


def read_pointer(run_dir: str | os.PathLike) -> ParentFile:
    """The whole parent.json; BadInput when the run has none."""
    path = RunDir(Path(run_dir)).parent_file
    if not path.is_file():
        raise BadInput(f"{path} not found: initialise the run's parent first (init_parent)")
    return parse_model(ParentFile, path.read_text(encoding="utf-8"), "parent.json")


def current_parent(run_dir: str | os.PathLike) -> ModelPointer:
    """The current parent of a run."""
    return read_pointer(run_dir).parent


def init_parent(run_dir: str | os.PathLike, path: str, sha256: str) -> ParentFile:
    """Set the initial parent once; a second call with the same model is a no-op."""
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    if RunDir(run).parent_file.is_file():
        state = read_pointer(run)
        if state.promotions == 0 and state.parent.sha256 == sha256:
            return state
        raise BadInput(f"{RunDir(run).parent_file} already holds parent {state.parent.sha256[:12]}; use a fresh run directory")
    state = ParentFile(parent=ModelPointer(path=str(path), sha256=sha256))
    _write_atomic(run, state)
    return state


def promote(run_dir: str | os.PathLike, child: str, verdict: GateVerdict) -> ParentFile:
    """Make `child` the parent iff the verdict promotes it; otherwise leave the pointer as it is.

    Idempotent: re-running a promotion that already landed (a resumed episode) changes nothing.
    """
    run = Path(run_dir)
    state = read_pointer(run)
    if not verdict.promote:
        return state  # rollback: the current parent stays
    if state.parent.sha256 == verdict.child_sha256 and state.verdict_sha256 == verdict.content_hash():
        return state
    if state.parent.sha256 != verdict.parent_sha256:
        raise BadInput(f"verdict judged parent {verdict.parent_sha256[:12]} but the run's parent is "
                       f"{state.parent.sha256[:12]}; gate the child against the current parent")
    new = ParentFile(parent=ModelPointer(path=str(child), sha256=verdict.child_sha256), rollback=state.parent,
                     promotions=state.promotions + 1, verdict_sha256=verdict.content_hash())
    _write_atomic(run, new, before_replace=lambda: kill_point("promote.replace"))
    kill_point("promote.done")
    return new
