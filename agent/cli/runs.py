"""`agent runs ls`: the episodes under a runs folder, their state, policy, spend and promotions;
`agent runs report RUN`: a finished episode's report written again from its run directory alone.

State, from what the run directory holds:
- running: a live process holds its lock (agent/run/runlock.py);
- finished: its report exists (the report is the loop's last node: agent.run.rundir.RunDir.finished);
- killed: neither, but its manifest is frozen: `agent run --resume ID` finishes it;
- unreadable: a damaged manifest, pointer or ledger (the row names the error).
A directory whose manifest names another episode (a copy, or a rename) is listed under its folder's
name with `copy_of` set, and offers no resume: `agent run --resume` refuses it (RunDir.check_resumable).
A folder without a manifest is not an episode and is not listed.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any
from experience_bank.errors import BadInput

if TYPE_CHECKING:  # imported inside the commands: RunDir pulls in the audit (scipy), `agent --help` stays fast
    from agent.run.rundir import RunDir

EXAMPLES = """examples:
  agent runs ls
  agent runs ls --runs runs/compare-v2/episodes --json
"""

REPORT_EXAMPLES = """examples:
  agent runs report runs/ep-20261130-021003
"""


def register(sub) -> None:
    runs = sub.add_parser("runs", help="the episodes under a runs folder (agent runs ls)")
    rsub = runs.add_subparsers(dest="runs_command", required=True, metavar="COMMAND")
    p = rsub.add_parser("ls", help="list episodes: state (running / finished / killed, resumable), policy, "
                                   "budget spent, promotions", epilog=EXAMPLES,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default="runs", help="runs folder (default runs/)")
    p.add_argument("--json", action="store_true", help="one JSON object per episode, as a list")
    p.set_defaults(func=cmd_ls)
    p = rsub.add_parser("report", help="write a finished episode's report.md and report.html again, from its run "
                                       "directory alone (no world, no bank)", epilog=REPORT_EXAMPLES,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="run directory (runs/ID)")
    p.set_defaults(func=cmd_report)


def episode_state(rd: RunDir) -> str:
    from agent.run.runlock import running  # noqa: PLC0415

    if running(rd.path):
        return "running"
    return "finished" if rd.finished() else "killed"


def describe(run_dir: Path) -> dict[str, Any]:
    """One episode's row: its manifest (hash-checked), parent pointer and ledger, through RunDir."""
    from agent.run.promotion import read_pointer  # noqa: PLC0415
    from agent.run.rundir import RunDir  # noqa: PLC0415

    rd = RunDir(run_dir)
    manifest = rd.manifest()
    spent = rd.read_ledger().spent(manifest.episode_id)
    promotions = read_pointer(run_dir).promotions if rd.parent_file.is_file() else 0
    state = episode_state(rd)
    copy_of = rd.copy_of(manifest)
    return {"id": rd.episode_id, "state": state, "policy": manifest.config.policy,
            "world": manifest.config.world, "spent_h": round(spent, 4),
            "budget_h": manifest.budget_device_hours, "promotions": promotions, "path": str(run_dir),
            "resume": f"agent run --resume {run_dir}" if state == "killed" and copy_of is None else None,
            "copy_of": copy_of}


def list_runs(folder: Path) -> list[dict[str, Any]]:
    """Every episode directly under `folder`, oldest first (by manifest time)."""
    from agent.run.rundir import RunDir  # noqa: PLC0415

    if not folder.is_dir():
        raise BadInput(f"runs folder {folder} not found: pass --runs DIR (the folder that holds runs/ID directories)")
    dirs = [d for d in folder.iterdir() if RunDir(d).started()]
    return [_row(d) for d in sorted(dirs, key=lambda d: (RunDir(d).manifest_file.stat().st_mtime, d.name))]


def _row(run_dir: Path) -> dict[str, Any]:
    """describe(), or a row that names what is damaged: one bad run must not hide the others."""
    try:
        return describe(run_dir)
    except (BadInput, OSError, ValueError, KeyError, sqlite3.Error) as exc:
        return {"id": run_dir.name, "state": "unreadable", "policy": "-", "world": "-", "spent_h": 0.0,
                "budget_h": 0.0, "promotions": 0, "path": str(run_dir), "resume": None, "copy_of": None,
                "error": f"{type(exc).__name__}: {exc}"[:200]}


def cmd_ls(args) -> int:
    rows = list_runs(Path(args.runs))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print(f"no episodes under {args.runs}")
        return 0
    width = max(len(r["id"]) for r in rows)
    print(f"{'episode':<{width}}  {'state':<10}  {'policy':<14}  {'spent / budget h':>17}  promotions")
    for r in rows:
        spend = f"{r['spent_h']:.2f} / {r['budget_h']:g}"
        note = (f"   resume: {r['resume']}" if r["resume"] else f"   {r['error']}" if "error" in r
                else f"   a copy of episode {r['copy_of']} (not resumable under this name)" if r["copy_of"] else "")
        print(f"{r['id']:<{width}}  {r['state']:<10}  {r['policy']:<14}  {spend:>17}  {r['promotions']:>10}{note}")
    return 0


def cmd_report(args) -> int:
    from agent.run.rundir import RunDir  # noqa: PLC0415
    from agent.views.report import write_report  # noqa: PLC0415 (sqlite-utils, through the ledger)

    rd = RunDir(Path(args.run))
    rd.manifest()  # BadInput where it is not a run directory
    if not rd.finished():
        raise BadInput(f"{rd.path} has not finished (no report.md): resume it with agent run --resume {rd.path}")
    print(write_report(rd))
    return 0
