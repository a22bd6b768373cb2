"""Approval before spending, optional (`agent run --approve train,promote`): what waits and the answers,
as files of the run directory (the pause itself is agent/loop/approval.py).

With approvals on, the loop pauses with LangGraph's `interrupt()` before a full run and/or
before a promotion. What waits is written to `approval_pending.json` in the run directory (the
decision record, its hash, the device-hours it will cost) and the process ends; the
checkpoint holds the interrupted node. `agent approve RUN_ID --decision HASH --yes|--no`
resumes it with the answer, refused when HASH is not the pending decision's. Each answer is
appended to `approvals.jsonl`, a hash-chained ledger of its own (the decisions ledger's
entries are decisions only), and listed in the report. A rejected full run is not started; a
rejected promotion is a rollback; both carry the approver's reason.

Idempotent: the node re-runs from its start on resume (LangGraph replays it with the answer),
so everything before `interrupt()` only reads stored results or rewrites the same pending file,
and an answer already in the ledger is not appended twice. `agent run --resume` of a waiting
run pauses again at the same point. Default: no approvals, so benchmarks run unattended.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from experience_bank.errors import BadInput
from experience_bank.files import write_atomic
from experience_bank.hashing import canonical_json, chain_hash, content_hash
from experience_bank.frozen import Frozen, Sha256

from agent.run.rundir import RunDir

KINDS = ("train", "promote")
GENESIS = "0" * 64

Kind = Literal["train", "promote"]


class Pending(Frozen):
    """What waits for a person: shown by `agent run` and checked by `agent approve`."""

    kind: Kind
    episode_id: str
    decision_hash: Sha256
    candidate_id: str
    device_hours: float = Field(ge=0.0)
    """What it will cost (train: the full run's estimate) or has cost (promote: the run's charges)."""
    decision: dict[str, Any]
    """The decision record."""


class Answer(Frozen):
    decision_hash: Sha256
    approved: bool
    by: str = Field(default="", max_length=100)
    reason: str = Field(default="", max_length=500)


def kinds(text: str | None) -> tuple[str, ...]:
    """The config's `approve` value as kinds; BadInput on an unknown one, and on a value that names
    none (",", " "): approvals were asked for, so running unattended would ignore the request."""
    out = tuple(k.strip() for k in (text or "").split(",") if k.strip())
    if text is not None and not out:
        raise BadInput(f"--approve {text!r} names no kind: pass one or both of {', '.join(KINDS)} "
                       "(e.g. --approve train,promote), or leave --approve out to run unattended")
    for k in out:
        if k not in KINDS:
            raise BadInput(f"--approve {text!r}: {k!r} is not one of {', '.join(KINDS)} (e.g. --approve train,promote)")
    return out


def pending(run_dir: str | Path) -> Pending | None:
    """The decision a paused run waits on (None: it waits on none); BadInput where the file is
    damaged. The paused node writes it again when the run resumes (agent/loop/approval.py)."""
    path = RunDir(Path(run_dir)).approval_pending_file
    if not path.exists():
        return None
    try:
        return Pending.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        why = f"{exc.error_count()} problem(s), first: {exc.errors()[0]['msg']}"
    except OSError as exc:  # a folder of its name, say
        why = exc.strerror
    raise BadInput(f"{path} is not a pending approval ({why}): run `agent run --resume {run_dir}`, which writes it again")


def entries(run_dir: str | Path) -> list[dict]:
    path = RunDir(Path(run_dir)).approvals_file
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()] if path.is_file() else []


def verify(run_dir: str | Path) -> list[str]:
    """Problems of the approvals chain (empty when intact)."""
    prev, out = GENESIS, []
    for n, e in enumerate(entries(run_dir), start=1):  # the file's line, as an editor shows it
        body = {k: v for k, v in e.items() if k not in ("prev_hash", "entry_hash")}
        if e.get("prev_hash") != prev or chain_hash(prev, content_hash(body)) != e.get("entry_hash"):
            out.append(f"approvals.jsonl line {n}: broken chain")
        prev = e.get("entry_hash", "")
    return out


def recorded(run_dir: Path, kind: str, dh: str) -> dict | None:
    return next((e for e in entries(run_dir) if e["kind"] == kind and e["decision_hash"] == dh), None)


def append(run_dir: Path, wait: Pending, answer: Answer) -> dict:
    rows = entries(run_dir)
    prev = rows[-1]["entry_hash"] if rows else GENESIS
    body = {"seq": len(rows), "episode_id": wait.episode_id, "kind": wait.kind, "decision_hash": wait.decision_hash,
            "candidate_id": wait.candidate_id, "device_hours": wait.device_hours, "approved": answer.approved,
            "by": answer.by, "reason": answer.reason}
    row = body | {"prev_hash": prev, "entry_hash": chain_hash(prev, content_hash(body))}
    text = "".join(canonical_json(r) + "\n" for r in [*rows, row])
    write_atomic(RunDir(run_dir).approvals_file, text)
    return row


def why(row: dict) -> str:
    """The reason a rejection carries into the outcome."""
    who = f" by {row['by']}" if row["by"] else ""
    return f"approval: {row['kind']} rejected{who}: {row['reason'] or 'no reason given'}"[:300]


def report_rows(run_dir: str | Path) -> list[list[Any]]:
    """The report's table of answers."""
    return [[e["seq"], e["kind"], e["candidate_id"], e["decision_hash"][:12], round(e["device_hours"], 3),
             "approved" if e["approved"] else "rejected", e["by"], e["reason"]] for e in entries(run_dir)]
