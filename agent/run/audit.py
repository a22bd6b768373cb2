"""runs/ID/decisions.jsonl and outcomes.jsonl: the run's audit files, one line per decision and
per outcome, in policies.decision_ledger's formats (the hash-chained decision ledger and its OutcomeCells)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from experience_bank.results import SHORT_FRACTIONS
from policies.decision_ledger import OutcomeCell, write_ledger_entry, write_outcome
from policies.outcomes import outcome_class

from agent.run.manifest import Manifest
from agent.run.rundir import RunDir


class RunAudit:
    """runs/ID/decisions.jsonl (policies/decision_ledger.py's hash-chained ledger, with the frozen inputs)
    and outcomes.jsonl (its OutcomeCells, the one cell format): one line per decision / outcome,
    written once (a re-run of a node finds its line by decision hash and writes nothing)."""

    def __init__(self, rundir: RunDir, manifest: Manifest):
        self.rundir, self.manifest = rundir, manifest

    def _has(self, path: Path, decision_hash: str) -> bool:
        if not path.exists():
            return False
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("decision_hash", row.get("decision", {}).get("decision_hash")) == decision_hash:
                return True
        return False

    def decision(self, decision, record, context, episode) -> None:
        if self._has(self.rundir.decisions_file, decision.decision_hash):
            return
        write_ledger_entry(self.rundir.decisions_file, episode_id=self.rundir.episode_id, decision=decision,
                           config=self.manifest.policy.config, state=episode, record=record, context=context)

    def outcome(self, event, card) -> None:
        if event.action == "reject" or self._has(self.rundir.outcomes_file, event.decision.decision_hash):
            return  # a rejection ran nothing: its cell stays undetermined, never guessed
        write_outcome(self.rundir.outcomes_file, outcome_cell(event, card, self.manifest))


def outcome_cell(event, card, manifest: Manifest):
    """The OutcomeCell of one event that ran: trial verdict and delta, full-run effects, and the
    outcome class (policies.outcomes) where a full run was judged by the gate."""
    g, family = manifest.gate, card.family
    full, cls = full_run(event, manifest) or {}, None
    if full:
        cls = outcome_class(full["target"], full["ifeval_p"], full["ifeval_i"], band=g.min_gain_pp[family],
                            ifeval_drop_pp=g.ifeval_max_drop_pp, hard_failure=full_hard_failure(event))
    fraction = _short_fraction(manifest.trial.fraction)
    short = {k: p["target"] for k, p in event.trial_curve.items() if k in _SHORT_KEYS}  # the trial's curve
    short |= {fraction: event.trial_delta} if event.trial_delta is not None and fraction is not None else {}
    return OutcomeCell(candidate_id=event.candidate_id, decision_hash=event.decision.decision_hash, outcome=cls,
                       family=family, method=card.method, trial_verdict=event.trial_verdict, trial_delta=event.trial_delta,
                       short=short, trial_curve=event.trial_curve, full=full, trial_device_hours=event.trial_device_hours,
                       full_device_hours=max(event.cost_device_hours - event.trial_device_hours, 0.0))


def full_run(event, manifest: Manifest) -> dict[str, float] | None:
    """An event's full run as the gate judged it: the target gain vs the parent and both IFEval strict
    effects vs the initial parent, adoption split (pp); None where no full run was judged on all three."""
    g = manifest.gate
    if event.target_gain is None or not set(event.retention) >= {g.ifeval_prompt_metric, g.ifeval_instruction_metric}:
        return None
    return {"target": event.target_gain, "ifeval_p": event.retention[g.ifeval_prompt_metric],
            "ifeval_i": event.retention[g.ifeval_instruction_metric]}


def full_hard_failure(event) -> bool:
    """Whether the gate rejected the full run for a hard failure (the outcome rule's hard_failure)."""
    return event.gate_decided_by == "hard_failures"


_SHORT_KEYS = frozenset(f"{f:.2f}" for f in SHORT_FRACTIONS)


def _short_fraction(fraction: float) -> str | None:
    """The cell key ("0.05", "0.10", "0.20") of a trial fraction that is one of them, else None."""
    return next((f"{f:.2f}" for f in SHORT_FRACTIONS if math.isclose(fraction, f)), None)
