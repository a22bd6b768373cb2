"""The real boundary of the loop's nodes: thin adapters over the other packages' public APIs.

`WorldPorts` binds the frozen run values (policy, thresholds, seeds, sizes, backend) once, so
a node calls e.g. `ports.train(card, parent_dir, out_dir, run_key, resume_from)` and never
sees the config. Tests replace the whole object with fakes (tests/test_graph_fakes.py).
Heavy imports (torch, TRL) happen inside the methods that need them.
"""

from __future__ import annotations

from typing import Any

from experience_bank.hashing import content_hash
from experience_bank.records import (CandidateCard, CurrentContext, Event, HistoricalRecord, ModelRef, Proposal,
                                     Provenance, RetentionEffect, SourceContext, SourceEvidence)
from experience_bank.results import GateVerdict, SuiteResult, TrainResult, TrialResult
from agent.config import RunConfig
from agent.run.manifest import Manifest
from experience_bank.families import family_targets, target_metric
from agent.world.examples import card_examples, card_rewards, parent_generator
from agent.loop.state import Entry
import trainers
from agent.world.catalogue import applicability, runtime_of
from agent.world.interface import current_context
from agent.world.store import RUNTIMES, SUITES
from experience_bank.runcache import from_env
from policies.authorize import WITHOUT_APPLICABILITY
from policies.features import compile as compile_features
from trainers.checkpoint import weights_sha256
from trainers.launch import LaunchSpec

class WorldPorts:
    def __init__(self, world: Any, cfg: RunConfig, allow: Any, manifest: Manifest):

        self.world, self.cfg, self.allow, self.manifest = world, cfg, allow, manifest
        self.suites, self.runtimes = tuple(SUITES), tuple(RUNTIMES)
        self.cache = from_env()  # None under --no-cache (AGENT_NO_CACHE)

    # --- contexts and the executability filter ---------------------------------------
    def model_ref(self, model_dir: str, sha256: str, lineage: tuple[str, ...] = ()) -> ModelRef:
        if sha256 == self.world.model.sha256:
            return self.world.model
        return ModelRef(id=f"world-{self.world.size}/child-{sha256[:12]}", sha256=sha256, arch=self.world.model.arch,
                        chat_template_sha256=self.world.chat_template_sha256, lineage=tuple(lineage))

    def context(self, parent_dir: str, parent_sha: str, stage: int, lineage: tuple[str, ...] = ()) -> CurrentContext:
        return current_context(self.world, self.model_ref(parent_dir, parent_sha, lineage), stage)

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
        from evaluators import evaluate

        # items come from the world's split (embedded or local), whatever the run seed
        items = {s: self.world.items(s, split, self.cfg.suite_n(s)) for s in self.suites}
        return evaluate(model_dir, self.suites, split, out_dir=out_dir, backend=self.cfg.backend,
                        batch_size=self.cfg.eval_batch_size, n=self.cfg.eval_n, seed=self.world.seed, items=items,
                        cache=self.cache)

    def _examples(self, card: CandidateCard, parent_dir: str) -> list[dict]:
        gen = parent_generator(parent_dir, backend=self.cfg.backend, batch_size=self.cfg.eval_batch_size,
                               seed=self.cfg.seed)
        return card_examples(card, self.world, self.cfg.seed, generate=gen)

    def model_sha(self, model_dir: str) -> str:
        return weights_sha256(model_dir)

    def trial(self, card, parent_dir, out_dir, run_key, measure) -> TrialResult:
        from trainers.trial import TrialThresholds, trial

        m = self.manifest
        thresholds = TrialThresholds(min_gain_pp=m.trial.min_gain_pp, fail_drop_pp=m.trial.fail_drop_pp,
                                     retention_drop_pp=m.gate.ifeval_max_drop_pp)
        return trial(card, parent_dir, self._examples(card, parent_dir), out_dir=out_dir, run_key=run_key,
                     measure=measure, thresholds=thresholds, fraction=m.trial.fraction,
                     reward_funcs=card_rewards(card), seed=self.cfg.seed, threads=self.cfg.torch_threads,
                     launch=self._launch(), cache=self.cache)

    def train(self, card, parent_dir, out_dir, run_key, resume_from) -> TrainResult:
        return trainers.train(card, parent_dir, self._examples(card, parent_dir), out_dir=out_dir, run_key=run_key,
                              fraction=1.0, reward_funcs=card_rewards(card), resume_from=resume_from,
                              seed=self.cfg.seed, threads=self.cfg.torch_threads, launch=self._launch(),
                              cache=self.cache)

    def _launch(self):
        """None for a local run; `launcher: accelerate` launches every run (trainers/launch.py)."""
        if self.cfg.launcher != "accelerate":
            return None

        return LaunchSpec(deepspeed_config=self.cfg.deepspeed_config)

    def gate(self, card, initial, parent, child, run: TrainResult) -> GateVerdict:
        from evaluators import metric_specs
        from policies.gate import gate

        # U_prom is the mean over every target capability (docs/GATE.md), not the card's own.
        suite, _, metric = target_metric(card.family).partition(".")
        return gate(initial, parent, child, self.manifest.gate, metric_specs(), target_suite=suite,
                    target_metric=metric, family_targets=family_targets(), sanity=run.sanity)

    def captrack(self, initial, child) -> dict[str, float | None]:
        from evaluators import metric_specs
        from policies.gate import captrack_profile

        prof = captrack_profile(initial, child, metric_specs())
        return {c.name: c.drift_pct for c in prof.groups + prof.subs}

    def promote(self, run_dir: str, child_dir: str, verdict: GateVerdict) -> str:
        from agent.run.promotion import promote

        return promote(run_dir, child_dir, verdict).parent.path

    # --- memory and proposals ---------------------------------------------------------
    def observation(self, entry: Entry, event: Event, parent: ModelRef, stage: int) -> HistoricalRecord | None:
        """One paired run (grade B) in the current context, for consolidation."""
        card, target = entry.record.card, target_metric(entry.record.card.family)
        gain = event.target_gain if event.target_gain is not None else event.trial_delta
        if gain is None:
            return None

        data = {m.dataset.id: m.dataset.sha256 for m in card.data.mix}
        retention = tuple(RetentionEffect(metric=f"ifeval.{k}", delta=v) for k, v in sorted(event.trial_retention.items()))
        return HistoricalRecord(
            card=card,
            source=SourceContext(parent=parent, stage=stage, family=card.family, task=f"{card.family}/target",
                                 datasets=data, runtime=runtime_of(card), eval_protocol=self.world.eval_protocol,
                                 output_protocol=self.world.output_protocols[card.family]),
            evidence=SourceEvidence(target_metric=target, delta_src=gain, delta_point=gain,
                                    kappa=self.manifest.gate.kappa[card.family], grade="B", chi=0, retention=retention, replicates=1),
            applicability=entry.record.applicability,
            provenance=Provenance(model_sha256=parent.sha256, data_sha256=data, config_sha256=card.content_hash(),
                                  eval_sha256=content_hash(event.metrics), produced_by=f"episode {event.episode_id}"))

    def propose(self, library: list[Entry]) -> list[dict[str, Any]]:
        if self.cfg.proposer != "openai":
            return []
        from agent.loop.proposer import OpenAIProposer

        return OpenAIProposer(self.cfg.base_url, self.cfg.model, self.allow, self.to_proposal,
                              limit=self.cfg.max_proposals, timeout_s=self.cfg.proposer_timeout_s)(library)

    def to_proposal(self, card: CandidateCard, needs) -> Proposal:
        """A proposal whose B_i is built from the needs it declares (BadInput where they contradict the card)."""
        data = {m.dataset.id: m.dataset.sha256 for m in card.data.mix}
        return Proposal(card=card, applicability=applicability(card, self.world, needs), provenance=Provenance(
            model_sha256=self.world.model.sha256, data_sha256=data, config_sha256=card.content_hash(),
            eval_sha256=content_hash(self.world.eval_protocol), produced_by=f"proposer openai {self.cfg.model}"))

