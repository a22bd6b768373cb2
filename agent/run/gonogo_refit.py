"""bcit_predictive's go/no-go refit at consolidation (issue 27, item 3): the model is an artefact of
a library version, refit on the paired runs every episode that used it adds.

Where each part lives, and why (docs/ARCHITECTURE.md layers):
- the refit itself is pure, in policies.gonogo.refit: the model's own rows plus the new runs,
  fitted again with the same alpha, delta, C, footing and outcome settings;
- the gathering is here, in agent/run: an episode's paired runs are read from its Events (the
  bank's history), its candidates' cards and its frozen manifest (gate metrics, seeds), which only
  the agent layer sees together;
- the bank (experience_bank) stores the refit as text beside the new library version, in the
  same transaction (Bank.consolidate's `artefacts`), and never reads it: it imports nothing of ours.

An episode's paired run: a decision whose trial ran and recorded its curve, and whose full run
ran and was judged by the gate on all three of its readings (agent/run/audit.full_run). Its curve
is the trial's, read against the parent (target) and the initial parent (IFEval), the loop's own
footing; its full run is the gate's target gain against the parent and IFEval against the initial
parent, adoption split. A loop has no matched control, so both of its curves are that one reading
and it is only ever read on the parent footing: a model fitted on the control footing is not
refit with it (never mixed, policies.curves.footing_of), and the summary says so. Its label is
the model's own rule (policies.gonogo._labels through PairedRun.outcome), never a copy.

Out of scope: two episodes of one bank consolidating at once each refit the model their own run
froze, so the later version's model lacks the earlier episode's runs (the records are merged,
the model rows are not); and `agent bank consolidate`, which has no run directory, stores no
refit (the loop's consolidate node does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent.run.audit import full_hard_failure, full_run
from agent.run.gonogo_model import LIBRARY_KIND, frozen_model
from agent.run.manifest import Manifest
from agent.run.report_inputs import RefitSummary
from agent.run.rundir import RunDir
from experience_bank.errors import BadInput
from experience_bank.hashing import sha256_text
from experience_bank.cards import CandidateCard
from experience_bank.decisions import Event
from policies import gonogo
from policies.curves import RETENTION, CurvePoint, PairedRun, card_facts, trial_curve
from policies.predictive import record_of

def is_paired(event: Event, manifest: Manifest) -> bool:
    """Whether the event's trial recorded its curve and its full run ran and was judged on all three readings."""
    return bool(event.trial_curve) and event.full_run == "ran" and full_run(event, manifest) is not None


def paired_run(event: Event, card: CandidateCard, manifest: Manifest) -> PairedRun | None:
    """The event as a paired run on the parent footing, where it is one (is_paired); else None."""
    full = full_run(event, manifest)
    if not is_paired(event, manifest) or full is None:
        return None
    curve = trial_curve(event.trial_curve)
    point = CurvePoint(fraction=1.0, target_pp=full["target"], hard_failure=full_hard_failure(event),
                       retention_pp={RETENTION[0]: full["ifeval_p"], RETENTION[1]: full["ifeval_i"]})
    facts = card_facts(card).model_dump(include={"adapter", "learning_rate", "nominal_steps", "replay_share"})
    return PairedRun(card_id=event.candidate_id, family=card.family, method=card.method, seed=manifest.config.seed,
                     world_seed=manifest.world.seed, curve=curve, full=point, parent_curve=curve, **facts)


def episode_runs(events: Sequence[Event], cards: Mapping[str, CandidateCard],
                 manifest: Manifest) -> tuple[list[PairedRun], list[dict | None]]:
    """The episode's paired runs in event order, with the record numbers each decision read (S, A,
    grade); `cards` by record hash (the decision's features.record_hash: the run's candidates).
    BadInput where a paired event's card is not among them."""
    runs, records = [], []
    for e in (e for e in events if is_paired(e, manifest)):
        card = cards.get(e.decision.features.record_hash)
        if card is None:
            raise BadInput(f"event {e.seq} ({e.candidate_id}) decided record {e.decision.features.record_hash[:12]}, "
                           "which is not among the run's candidates: the run directory does not match its bank")
        runs.append(paired_run(e, card, manifest))
        records.append(record_of(e.decision.features))
    return runs, records


@dataclass(frozen=True)
class Plan:
    """The refit an episode's consolidation makes (or why none), decided before it writes anything."""

    before: gonogo.GoNoGo
    runs: tuple[PairedRun, ...]
    records: tuple[dict | None, ...]
    skip: str | None
    """Why no refit is stored (None: one is)."""

    def texts(self, version: int) -> dict[str, str]:
        """The artefacts of library version `version` (Bank.consolidate calls it with the new number)."""
        if self.skip is not None:
            return {}
        model = gonogo.refit(self.before, self.runs, self.records, library_version=version)
        return {LIBRARY_KIND: gonogo.dumps(model)}


def plan(rundir: RunDir, manifest: Manifest, events: Sequence[Event],
         cards: Mapping[str, CandidateCard]) -> Plan | None:
    """The refit of the run's frozen model with the episode's paired runs; None where the run froze
    no model (its policy reads none): such a consolidation stores nothing."""
    model = frozen_model(rundir, manifest)
    if model is None:
        return None
    try:
        runs, records = episode_runs(events, cards, manifest)
    except BadInput as exc:  # said in the report; the consolidation itself goes on (a resume would meet it again)
        return Plan(model, (), (), f"{exc}")
    skip = gonogo.refit_refusal(model)
    if skip is None and model.footing != "parent":
        skip = ("the frozen model reads short runs against matched controls (control footing), and an episode's "
                "trials are read against the parent only: not mixed; fit one on retrospective cells that keep the "
                "parent's scores (`agent gonogo`), which the loop refits")
    if skip is None and not runs:
        skip = "no decision of the episode ran both a trial with its curve and a full run the gate judged"
    return Plan(model, tuple(runs), tuple(records), skip)


def summary(refit: Plan, stored: tuple[int, str] | None, version: int) -> RefitSummary:
    """The report's account of a consolidation's refit: `stored` is Bank.artefact(LIBRARY_KIND, version)."""
    before = refit.before
    common = dict(n_train_before=before.n_train, threshold_before=before.threshold.threshold,
                  training_hash_before=before.training_hash)
    reason = refit.skip
    if reason is None and (stored is None or stored[0] != version):
        reason = "the episode was consolidated without it (by `agent bank consolidate`, which has no run directory)"
    if reason is not None:
        return RefitSummary(refit=False, reason=reason, added=0, n_train_after=None, threshold_after=None,
                            training_hash_after=None, library_version=None, sha256=None, **common)
    after = gonogo.loads(stored[1])
    return RefitSummary(refit=True, reason=f"added the episode's {len(refit.runs)} paired runs", added=len(refit.runs),
                        n_train_after=after.n_train, threshold_after=after.threshold.threshold,
                        training_hash_after=after.training_hash, library_version=version,
                        sha256=sha256_text(stored[1]), **common)
