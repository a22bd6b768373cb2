"""runs/ID/report_inputs.json: what the report reads besides the run directory's other files.

The report (agent/views/report.py) runs no model and asks no world: whatever it needs that only
the live episode could compute (the library's compatibility with each parent, compiled against
the world's context of that parent; each child's CapTrack drift; the episode's events, which the
bank holds; the final state; the wall-clock up to the report) is stored here by the loop's report
node, so a report is rebuilt from a copy of the run directory alone (`agent runs report`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from experience_bank.frozen import Frozen, Sha256
from experience_bank.decisions import Event


class Compatibility(Frozen):
    """The library compiled against one parent (policies.features.compatibility_summary's counts)."""

    stage: Annotated[int, Field(ge=0)]
    """0 for the initial parent, k for the k-th promoted child."""
    parent_sha256: Sha256
    """The parent's weights hash."""
    n: Annotated[int, Field(ge=0)]
    """Records compiled."""
    A: dict[str, int]
    """Applicability value -> records, in the summary's order."""
    fields: dict[str, dict[str, int]]
    """Field name -> score -> records."""
    H: Annotated[int, Field(ge=0)]
    """Records with a hard conflict."""
    conflicts: dict[str, int]
    """Hard conflict name -> times it fired."""


class RefitSummary(Frozen):
    """What consolidation did with the run's go/no-go model (agent/run/gonogo_refit.py): its refit, or why none."""

    refit: bool
    """Whether the new library version stores a refit model."""
    reason: str
    """What was added, or why nothing was."""
    added: int
    """Paired runs of the episode added to the model's rows."""
    n_train_before: int
    n_train_after: int | None
    threshold_before: float | None
    """The frozen model's Learn-then-Test threshold (None: none chosen, it authorizes nothing)."""
    threshold_after: float | None
    training_hash_before: str
    training_hash_after: str | None
    library_version: int | None
    """The library version that stores the refit."""
    sha256: str | None
    """sha256 of the stored refit's text."""


class ReportInputs(Frozen):
    """Written by the loop's report node before the report; read by the report alone."""

    manifest_hash: str
    """The state's manifest hash (the summary prints its first 16 characters)."""
    stop_reason: str
    """Why the loop stopped."""
    stage: Annotated[int, Field(ge=0)]
    """Promotions in the episode."""
    library_version: int | None
    """The library version consolidation wrote (None: not consolidated)."""
    final_parent_sha256: Sha256
    """The episode's final parent (the endpoint's model)."""
    events: tuple[Event, ...]
    """The episode's events, in order, as the bank holds them."""
    compatibility: tuple[Compatibility, ...]
    """The library against the initial parent and every promoted child, in order."""
    captrack_drift: dict[str, dict[str, float | None]]
    """`<seq>:<candidate>` of every child that reached the gate -> CapTrack group or
    sub-capability -> relative drift (%) against the initial parent (None: unknown)."""
    wall_seconds: Annotated[float, Field(ge=0.0)]
    """From the episode's first checkpoint to the report (0: it did not run under the loop)."""
    gonogo_refit: RefitSummary | None = None
    """The go/no-go refit consolidation stored, or why none (None: the run froze no model)."""
