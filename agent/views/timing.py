"""Where an episode's wall-clock went: trials, full runs, evaluations and the control plane.

The ledger (`trainers.ledger.Ledger.charges`) holds the measured wall seconds of every trial,
full run and evaluation it charged; the control plane is everything else in the episode's
wall-clock (proposing, authorizing, the gate's arithmetic, the bank, checkpoints, reports,
tracking, model loading outside a charged span). A pure function over those rows, so the
report, a benchmark and a test compute the same split.
"""

from __future__ import annotations

import math

from experience_bank.errors import BadInput

PARTS = {"trial": "trials", "train": "full_runs", "eval": "evaluations"}
"""Ledger kind -> part of the breakdown; the control plane is the remainder."""

CONTROL_PLANE_GOAL = 0.01
"""The control plane's share of the episode should stay under this (issue 16)."""

_SLACK_S = 1e-6  # float noise when the charged spans fill the whole episode


def _charged(charges: list[dict]) -> dict[str, list[float]]:
    """Wall seconds per part; a kind the ledger does not write, or a bad number, is BadInput.
    A charge the run cache served spent its seconds elsewhere: it is left out here."""
    spans: dict[str, list[float]] = {part: [] for part in PARTS.values()}
    for row in (r for r in charges if not r.get("cached")):
        kind, wall = row.get("kind"), row.get("wall_seconds")
        if kind not in PARTS:
            raise BadInput(f"ledger row {row.get('key')!r} has kind {kind!r}: expected one of {', '.join(PARTS)}")
        if isinstance(wall, bool) or not isinstance(wall, (int, float)) or not math.isfinite(wall) or wall < 0:
            raise BadInput(f"ledger row {row.get('key')!r} has wall_seconds {wall!r}: expected a finite number >= 0")
        spans[PARTS[kind]].append(float(wall))
    return spans


def time_breakdown(charges: list[dict], episode_wall_s: float) -> dict:
    """Seconds, share of the episode and count for trials, full runs and evaluations; the control
    plane is the episode's wall-clock minus all three, with `control_plane_within_goal`."""
    if isinstance(episode_wall_s, bool) or not isinstance(episode_wall_s, (int, float)) \
            or not math.isfinite(episode_wall_s) or episode_wall_s <= 0:
        raise BadInput(f"episode wall-clock {episode_wall_s!r} s: expected a finite number > 0")
    spans = _charged(charges)
    charged = math.fsum(math.fsum(v) for v in spans.values())
    if charged > episode_wall_s + _SLACK_S:
        raise BadInput(f"the ledger charges {charged:.1f} s of wall-clock but the episode took {episode_wall_s:.1f} s: "
                       "pass the whole episode's wall-clock (for a resumed episode, the sum over its processes)")
    parts = {name: {"seconds": math.fsum(v), "share": math.fsum(v) / episode_wall_s, "n": len(v)}
             for name, v in spans.items()}
    control = max(episode_wall_s - charged, 0.0)
    parts["control_plane"] = {"seconds": control, "share": control / episode_wall_s, "n": 0}
    served = [float(r.get("wall_seconds") or 0.0) for r in charges if r.get("cached")]
    return {"episode_wall_s": float(episode_wall_s), "parts": parts,
            "cache": {"hits": len(served), "of": len(charges), "saved_s": math.fsum(served)},
            "control_plane_within_goal": control / episode_wall_s < CONTROL_PLANE_GOAL}


def node_seconds(marks: list[tuple[str, float]]) -> dict[str, dict]:
    """Wall seconds and runs per graph node from checkpoint marks `(node that ran next, its start
    timestamp)` in order: each node's span ends where the next mark starts (the last mark, the
    graph's final checkpoint, only closes the one before it). Sorted by seconds, largest first."""
    if any(b < a for (_, a), (_, b) in zip(marks, marks[1:])):
        raise BadInput("checkpoint timestamps go backwards: pass the marks in checkpoint order")
    spans: dict[str, dict] = {}
    for (node, start), (_, end) in zip(marks, marks[1:]):
        span = spans.setdefault(node, {"seconds": 0.0, "runs": 0})
        span["seconds"] += end - start
        span["runs"] += 1
    return dict(sorted(spans.items(), key=lambda kv: -kv[1]["seconds"]))
