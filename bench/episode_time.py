"""Where a finished episode's wall-clock went, from its run directory (read-only).

    .venv/bin/python bench/episode_time.py runs/ID [--json]

Trials, full runs and evaluations are the ledger's measured wall seconds; the episode's
wall-clock is its first to its last LangGraph checkpoint (the `report` node included; the
process start before the first node is not); the control plane is the rest
(`agent.views.timing.time_breakdown`). Below it, each graph node's share from the checkpoint
timestamps (`agent.views.timing.node_seconds`), which shows where uncharged time sits.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experience_bank import files  # noqa: E402


def read_only(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        sys.exit(f"episode_time: {path} is missing: pass a finished run directory (runs/ID)")
    conn = files.read_only(path)
    conn.row_factory = sqlite3.Row
    return conn


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from agent.run.rundir import RunDir
    from agent.run.checkpoints import checkpoint_marks
    from agent.views.timing import node_seconds, time_breakdown

    rd = RunDir(args.run_dir)
    charges = [dict(r) for r in read_only(rd.ledger_file).execute(
        "SELECT * FROM charges WHERE episode_id = ? ORDER BY rowid", [rd.episode_id])]
    if not rd.checkpoints_file.is_file():
        sys.exit(f"episode_time: {rd.checkpoints_file} is missing: pass a finished run directory (runs/ID)")
    marks = checkpoint_marks(rd.checkpoints_file, rd.episode_id)
    wall = marks[-1][1] - marks[0][1]
    out = {"episode_id": rd.episode_id, **time_breakdown(charges, wall), "nodes": node_seconds(marks)}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"episode {rd.episode_id}: {wall:.1f} s from its first to its last checkpoint")
    for name, part in out["parts"].items():
        print(f"  {name:14s} {part['seconds']:9.1f} s {part['share']:7.2%}  ({part['n']} charged)")
    print(f"  control plane under 1%: {out['control_plane_within_goal']}")
    print("per node:")
    for node, span in out["nodes"].items():
        print(f"  {node:14s} {span['runs']:4d} runs {span['seconds']:9.2f} s {span['seconds'] / wall:7.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
