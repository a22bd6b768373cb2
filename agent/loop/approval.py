"""The pause before spending: LangGraph's `interrupt()` inside the `train` and `gate` nodes when
the run asked for approvals (`agent run --approve train,promote`).

The node re-runs from its start on resume (LangGraph replays it with the answer), so everything
before `interrupt()` only reads stored results or rewrites the same pending file, and an answer
already in the ledger is not appended twice (agent/run/approvals.py keeps both files).
"""

from __future__ import annotations

import json

from langgraph.types import interrupt

from experience_bank.errors import BadInput
from experience_bank.files import write_atomic

from agent.run import approvals

def hold(ctx, state: dict, kind: str, device_hours: float) -> dict | None:
    """Pause for approval where the run asked for it. Returns None to go on (approvals off, or
    approved), else the rejection's row of the ledger."""
    if kind not in approvals.kinds(ctx.manifest.config.approve):
        return None
    run_dir, dh = ctx.rundir.path, state["decision_hash"]
    done = approvals.recorded(run_dir, kind, dh)
    if done is None:
        decision = json.loads(ctx.rundir.decision_file(state["cursor"]).read_text(encoding="utf-8"))
        wait = approvals.Pending(kind=kind, episode_id=ctx.episode_id, decision_hash=dh, candidate_id=state["candidate_id"],
                                 device_hours=round(device_hours, 6), decision=decision)
        write_atomic(ctx.rundir.approval_pending_file, wait.model_dump_json(indent=1))
        answer = approvals.Answer.model_validate(interrupt(wait.model_dump(mode="json")))
        if answer.decision_hash != dh:  # `agent approve` refuses first; a stale answer never passes
            raise BadInput(f"approval for {answer.decision_hash[:12]} does not match the pending decision {dh[:12]}")
        done = approvals.append(run_dir, wait, answer)
    ctx.rundir.approval_pending_file.unlink(missing_ok=True)
    return None if done["approved"] else done
