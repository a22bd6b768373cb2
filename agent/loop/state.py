"""The graph's state (ids and scalars, checkpointed) and its runtime context (everything else).

The state is what LangGraph writes to the checkpoint database after every node; it holds only
JSON-able ids and numbers, so the strict (no-pickle) serializer round-trips it and the
database stays small. Records, models, the bank, the ledger and clients live in `Ctx`, which
LangGraph hands every node as `runtime.context` (`StateGraph(State, context_schema=Ctx)`).

Every result a side-effecting node produces is written under `runs/ID/steps/<decision hash>/`
before the node returns, so a node re-run after a crash reads its result back instead of
training, charging or appending again (see agent/loop/nodes.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, TypedDict

from experience_bank.cards import CandidateCard
from experience_bank.records import CurrentContext, HistoricalRecord, ModelRef, Proposal
from experience_bank.decisions import Decision, Event, Features
from experience_bank.results import GateVerdict, SuiteResult, TrainResult, TrialResult
from trainers.ledger import CostModel, Ledger
from agent.run.manifest import Cost, Manifest
from agent.run.rundir import RunDir


class State(TypedDict, total=False):
    """A key that may be absent holds None. A checkpoint written before 0.1's typed state holds ''
    there instead; every reader tests such a key for truth (`state.get(key)`), never against
    None or '', so a checkpoint from before resumes as it would have (tests/test_resume.py)."""

    episode_id: str
    """Episode id (= the run directory's name)."""
    manifest_hash: str
    """Hash of the frozen run manifest."""
    candidates: list[str]
    """Record hashes of the executable candidates, in decision order."""
    cursor: int
    """Index of the next candidate to decide."""
    n_proposed: int
    """Candidates proposed (catalogue + accepted LLM proposals)."""
    n_dropped: int
    """Candidates the executability filter dropped."""
    record_hash: str
    """Current candidate's record hash."""
    candidate_id: str
    """Current candidate's card id."""
    decision_hash: str | None
    """Current decision's hash (the key of every side effect); None until it is authorized."""
    action: str | None
    """reject | validate | train; None until it is authorized."""
    rule: str | None
    """Rule that fired; None until it is authorized."""
    trial_verdict: str | None
    """pass | fail | inconclusive | not_started; None: no trial."""
    proceed: bool
    """The trial allows the full run (pass, or inconclusive within the fallback lease)."""
    train_status: str | None
    """done | not_started | failed; None: no full run."""
    verdict: str | None
    """promote | rollback; None: no gate."""
    decided_by: str | None
    """Gate check that decided, or the rule / trial reason; None: none yet."""
    parent_sha: str
    """Current parent's weights hash."""
    lineage: list[str]
    """Weights hashes of the current parent's ancestors, oldest first (the authorizer's parent
    field compares it with a record's source parent)."""
    parent_dir: str
    """Current parent's directory."""
    stage: int
    """Promotions so far."""
    seq: int
    """Next event's position in the episode history."""
    spent_h: float
    """Device-hours charged so far."""
    consecutive_rejections: int
    """Rejections in a row (stop rule)."""
    proposals_authorized: int
    """Exploratory proposals routed to Validate so far (quota q)."""
    leases_used: int
    """Inconclusive trials that went on to a full run (fallback lease)."""
    trial_gains: list[float]
    """Target gains (pp) of the trials run so far, kept by a policy that ranks them (EpisodeState.trial_gains)."""
    refused: str | None
    """Why a trial or full run the decision allowed was not started (None: none was refused)."""
    stop_reason: str | None
    """Why the loop stopped (None while running)."""
    library_version: int
    """Library version written by consolidation."""


@dataclass(frozen=True)
class Entry:
    """A candidate the loop can decide: a library record or an accepted proposal."""

    hash: str
    record: HistoricalRecord | Proposal
    conflicted: bool = False


class Ports(Protocol):
    """The boundary to the other packages. episode.py binds the real ones; tests bind fakes.

    Each method is a thin adapter over one public function of another package, with the
    frozen manifest values (policy, thresholds, seeds, sizes) already bound.
    """

    def context(self, parent_dir: str, parent_sha: str, stage: int, lineage: tuple[str, ...] = ()) -> CurrentContext: ...
    def executable(self, record: HistoricalRecord | Proposal) -> str | None: ...
    def compile(self, entry: Entry, ctx: CurrentContext) -> Features: ...
    def evaluate(self, model_dir: str, split: str, out_dir: str) -> dict[str, SuiteResult]: ...
    def model_sha(self, model_dir: str) -> str: ...
    def trial(self, card: CandidateCard, parent_dir: str, out_dir: str, run_key: str,
              measure: Callable[[str], tuple[float, dict[str, float], list[str]]]) -> TrialResult: ...
    def train(self, card: CandidateCard, parent_dir: str, out_dir: str, run_key: str,
              resume_from: str | None) -> TrainResult: ...
    def gate(self, card: CandidateCard, initial: dict[str, SuiteResult], parent: dict[str, SuiteResult],
             child: dict[str, SuiteResult], run: TrainResult) -> GateVerdict: ...
    def captrack(self, initial: dict[str, SuiteResult], child: dict[str, SuiteResult]) -> dict[str, float | None]: ...
    def observation(self, entry: Entry, event: Event, parent: ModelRef, stage: int) -> HistoricalRecord | None: ...
    def model_ref(self, model_dir: str, sha256: str, lineage: tuple[str, ...] = ()) -> ModelRef: ...
    def promote(self, run_dir: str, child_dir: str, verdict: GateVerdict) -> str: ...
    def propose(self, library: list[Entry]) -> list[dict[str, Any]]: ...


class BankPort(Protocol):
    def record_decision(self, episode_id: str, decision: Decision) -> Any: ...
    def append_event(self, event: Event) -> Any: ...
    def stage_observation(self, episode_id: str, record: HistoricalRecord) -> Any: ...
    def finish_episode(self, episode_id: str) -> Any: ...
    def events(self, episode_id: str) -> list[Event]: ...
    def consolidate(self, episode_id: str, artefacts: Callable[[int], dict[str, str]] | None = None) -> Any: ...
    def artefact(self, kind: str, version: int | None = None) -> tuple[int, str] | None: ...


class AuditPort(Protocol):
    def decision(self, decision: Decision, record: HistoricalRecord | Proposal, context: CurrentContext,
                 episode: dict[str, int]) -> None: ...
    def outcome(self, event: Event, card: CandidateCard) -> None: ...


@dataclass
class Ctx:
    """Runtime context: everything a node needs that is not checkpointed state."""

    rundir: RunDir
    """runs/ID: the one owner of its layout."""
    episode_id: str
    """Episode id."""
    manifest: Manifest
    """The frozen run manifest (values nodes read: budget, cost model, policy, stop rules, ...)."""
    entries: dict[str, Entry]
    """Library entries by record hash; accepted proposals are added by `propose`."""
    ports: Ports
    """Other packages, behind adapters."""
    bank: BankPort
    """The experience bank."""
    ledger: Ledger
    """The budget ledger: the only place charges are added up (trainers/ledger.py)."""
    audit: AuditPort
    """runs/ID/decisions.jsonl + outcomes.jsonl writer."""
    progress: Callable[[str, dict[str, Any]], None] = field(default=lambda node, update: None)
    """Called after every node with its name and partial state (the live display)."""

    @property
    def run_dir(self) -> Path:
        return self.rundir.path

    @property
    def cost(self) -> CostModel:
        """The frozen cost model every charge and estimate is computed under."""
        return cost_model(self.manifest.cost)


def cost_model(c: Cost) -> CostModel:
    """The ledger's cost model of a manifest's frozen cost record."""
    return CostModel(kind=c.mode, devices=c.devices, eval_device_hours=c.eval_device_hours)
