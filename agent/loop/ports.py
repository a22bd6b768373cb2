"""The real boundary of the loop's nodes: thin adapters over the other packages' public APIs.

`WorldPorts` binds the frozen run values (policy, thresholds, seeds, sizes, backend) once, from
the manifest, so a node calls e.g. `ports.train(card, parent_dir, out_dir, run_key,
resume_from)` and never sees them. Training and evaluation go through the world's one card
runner (agent/world/runner.py) and records are built by agent/world/records.py; tests replace
the whole object with fakes (tests/support/graph_fakes.py). Heavy imports (torch, TRL, scipy)
happen inside the methods that need them.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from experience_bank.families import family_targets, target_metric
from experience_bank.cards import CandidateCard
from experience_bank.records import CurrentContext, HistoricalRecord, ModelRef, Proposal
from experience_bank.decisions import Event
from experience_bank.results import GateVerdict, SuiteResult, TrainResult, TrialResult
from experience_bank.runcache import from_env
from policies.authorize import WITHOUT_APPLICABILITY
from policies.features import compile as compile_features
from trainers.checkpoint import weights_sha256
from trainers.launch import LaunchSpec

from agent.config import RunConfig
from agent.loop.state import Entry
from agent.run.manifest import Manifest
from agent.world import records
from agent.world.catalogue import runtime_of
from agent.world.runner import CardRunner
from agent.world.store import RUNTIMES, SUITES
from agent.loop.proposer import OpenAIProposer
from agent.run.promotion import promote
import evaluators
from policies.captrack import captrack_profile
from policies.gate import gate
from trainers.trial import TrialThresholds


def trial_thresholds(manifest) -> TrialThresholds:
    """The frozen trial thresholds of a run: its trial section, the gate's IFEval bound."""
    return TrialThresholds(min_gain_pp=manifest.trial.min_gain_pp, fail_drop_pp=manifest.trial.fail_drop_pp,
                           retention_drop_pp=manifest.gate.ifeval_max_drop_pp)


class WorldPorts:
    def __init__(self, world: Any, cfg: RunConfig, allow: Any, manifest: Manifest):
        self.world, self.cfg, self.allow, self.manifest = world, cfg, allow, manifest
        self.suites, self.runtimes = tuple(SUITES), tuple(RUNTIMES)
        self.cache = from_env()  # None under --no-cache (AGENT_NO_CACHE)

    @cached_property
    def runner(self) -> CardRunner:
        """The card runner under the manifest's evaluation and launch settings."""
        m, ev = self.manifest, self.manifest.evaluators
        launch = LaunchSpec(deepspeed_config=self.cfg.deepspeed_config) if m.launcher == "accelerate" else None
        return CardRunner(self.world, cache=self.cache, backend=ev.backend, eval_batch_size=ev.batch_size,
                          replay_batch_size=ev.batch_size, threads=m.torch_threads, launch=launch)

    # --- contexts and the executability filter ---------------------------------------
    def model_ref(self, model_dir: str, sha256: str, lineage: tuple[str, ...] = ()) -> ModelRef:
        return records.model_ref(self.world, sha256, lineage)

    def context(self, parent_dir: str, parent_sha: str, stage: int, lineage: tuple[str, ...] = ()) -> CurrentContext:
        return records.current_context(self.world, self.model_ref(parent_dir, parent_sha, lineage), stage)

    def executable(self, record: HistoricalRecord | Proposal) -> str | None:
        card = record.card
        for mix in card.data.mix:
            if self.world.datasets.get(mix.dataset.id) != mix.dataset.sha256:
                return f"dataset {mix.dataset.id} is missing here or has another hash"
        if runtime_of(card) not in self.runtimes:
            return f"runtime {runtime_of(card)} is not available"
        if f"{card.family}/target" not in self.suites:
            return f"no evaluator for {card.family}/target"
        return None

    # --- decisions --------------------------------------------------------------------
    def compile(self, entry: Entry, ctx: CurrentContext):
        policy = self.manifest.policy
        return compile_features(entry.record, ctx, use_applicability=policy.name not in WITHOUT_APPLICABILITY,
                                conflicted=entry.conflicted, discounts=policy.config.discounts)

    # --- evaluation, training, the gate ----------------------------------------------
    def evaluate(self, model_dir: str, split: str, out_dir: str) -> dict[str, SuiteResult]:
        # items come from the world's split (embedded or local), whatever the run seed
        ev = self.manifest.evaluators
        return self.runner.evaluate(model_dir, self.suites, split, out_dir=out_dir, n=ev.n, sizes=ev.sizes)

    def model_sha(self, model_dir: str) -> str:
        return weights_sha256(model_dir)

    def trial(self, card, parent_dir, out_dir, run_key, measure) -> TrialResult:
        m = self.manifest
        return self.runner.trial(card, parent_dir, out_dir=out_dir, run_key=run_key, seed=m.evaluators.seed,
                                 measure=measure, thresholds=trial_thresholds(m), fraction=m.trial.fraction)

    def train(self, card, parent_dir, out_dir, run_key, resume_from) -> TrainResult:
        return self.runner.train(card, parent_dir, out_dir=out_dir, run_key=run_key, seed=self.manifest.evaluators.seed,
                                 resume_from=resume_from)

    def gate(self, card, initial, parent, child, run: TrainResult) -> GateVerdict:
        # U_prom is the mean over every target capability (docs/GATE.md), not the card's own.
        suite, _, metric = target_metric(card.family).partition(".")
        return gate(initial, parent, child, self.manifest.gate, evaluators.metric_specs(), target_suite=suite,
                    target_metric=metric, family_targets=family_targets(), sanity=run.sanity)

    def captrack(self, initial, child) -> dict[str, float | None]:
        prof = captrack_profile(initial, child, evaluators.metric_specs(), self.manifest.gate)
        return {c.name: c.drift_pct for c in prof.groups + prof.subs}

    def promote(self, run_dir: str, child_dir: str, verdict: GateVerdict) -> str:
        return promote(run_dir, child_dir, verdict).parent.path

    # --- memory and proposals ---------------------------------------------------------
    def observation(self, entry: Entry, event: Event, parent: ModelRef, stage: int) -> HistoricalRecord | None:
        """One paired run (grade B) in the current context, for consolidation."""
        kappa = self.manifest.gate.kappa[entry.record.card.family]
        return records.observation(self.world, entry.record, event, parent, stage, kappa)

    def propose(self, library: list[Entry]) -> list[dict[str, Any]]:
        if self.cfg.proposer != "openai":
            return []

        return OpenAIProposer(self.cfg.base_url, self.cfg.model, self.allow, self.to_proposal,
                              limit=self.cfg.max_proposals, timeout_s=self.cfg.proposer_timeout_s)(library)

    def to_proposal(self, card: CandidateCard, needs) -> Proposal:
        """A proposal whose B_i is built from the needs it declares (BadInput where they contradict the card)."""
        return records.proposal(self.world, card, needs, f"proposer openai {self.cfg.model}")
