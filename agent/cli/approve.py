"""`agent approve RUN_ID --decision HASH --yes|--no`: answer the decision an episode waits on."""

from __future__ import annotations

import argparse

from agent.cli.run import waiting_text
from agent.config import build_config
from agent.run.approvals import Answer, pending
from experience_bank.errors import BadInput

EXAMPLES = """examples:
  agent run --config runs/test.yaml --approve train,promote --out runs/ep-1
  agent approve ep-1 --decision 3f2a...c9 --yes --by alice
  agent approve ep-1 --decision 3f2a...c9 --no --by alice --reason "too expensive this week"
"""


def register(sub) -> None:
    p = sub.add_parser("approve", help="approve or reject the full run / promotion an episode waits on",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", metavar="RUN_ID", help="the waiting run (runs/ID or a run directory)")
    p.add_argument("--decision", required=True, metavar="HASH", help="the pending decision's hash, in full")
    answer = p.add_mutually_exclusive_group(required=True)
    answer.add_argument("--yes", dest="approved", action="store_true", help="approve: the episode goes on")
    answer.add_argument("--no", dest="approved", action="store_false", help="reject: a rollback with your reason")
    p.add_argument("--by", default="", help="who answers (recorded)")
    p.add_argument("--reason", default="", help="why (recorded; a rejection carries it)")
    p.set_defaults(func=cmd_approve)


def cmd_approve(args) -> int:
    from agent.loop.episode import _run_dir, run_episode  # noqa: PLC0415 (langgraph, numpy)

    run_dir = _run_dir(build_config(None, {}), args.run)
    wait = pending(run_dir.path)
    if wait is None:
        raise BadInput(f"{run_dir.path} waits for no approval: nothing to answer (see its report)")
    if args.decision != wait.decision_hash:
        raise BadInput(f"decision {args.decision[:16]} is not the pending one ({wait.decision_hash}, {wait.kind} of "
                       f"{wait.candidate_id}): approval refused; pass that hash")
    answer = Answer(decision_hash=wait.decision_hash, approved=args.approved, by=args.by, reason=args.reason)
    final = run_episode(build_config(None, {"quiet": True}), resume=str(run_dir.path), answer=answer.model_dump())
    print(f"{wait.kind} of {wait.candidate_id} {'approved' if args.approved else 'rejected'}")
    if (again := pending(final["run_dir"])) is not None:
        print(waiting_text(again, final["episode_id"]))
        return 0
    print(f"episode {final.get('episode_id')}: stopped ({final.get('stop_reason')}), {final.get('stage', 0)} "
          f"promotion(s); report in the run directory (report.md, report.html)")
    return 0
