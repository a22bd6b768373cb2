"""A model file frozen into a run (the go/no-go, the extrapolation): the one check of its frozen
copy and of the user's file on resume, shared by agent/run/gonogo_model.py and
agent/run/extrapolation_model.py.

A run copies the file into its directory before the manifest is frozen and records the copy's
sha256 in the manifest; from then on every reader reads the copy. A copy that no longer matches
the manifest, or a user's file that changed before a resume, is refused with BadInput.
"""

from __future__ import annotations

from pathlib import Path

from agent.inputs import read_text
from experience_bank.errors import BadInput
from experience_bank.hashing import sha256_text


def frozen_text(path: Path, sha256: str, source: str, noun: str) -> str:
    """The frozen copy's text; BadInput when it is gone or differs from the sha256 the manifest froze."""
    text = read_text(path, f"frozen {noun}") if path.is_file() else None
    if text is None or sha256_text(text) != sha256:
        raise BadInput(f"{path} is missing or differs from the model the run froze (sha256 {sha256[:12]}): "
                       f"restore it (a copy of {source} as it was), or start a new run")
    return text


def check_source(source: str, sha256: str, frozen: Path, episode_id: str, noun: str) -> None:
    """Before a resume: the user's file, where it still exists, is the model the run froze (a refit
    file would otherwise be silently ignored)."""
    if not Path(source).is_file():
        return
    now = sha256_text(read_text(source, noun))
    if now != sha256:
        raise BadInput(f"the {noun} {source} changed since {episode_id} started (sha256 {now[:12]}, "
                       f"frozen {sha256[:12]}): the run decides with its frozen copy {frozen}; "
                       "restore the file to resume, or start a new run to use the new model")
