"""The records a world builds around a model: its current context x_t, a child's ModelRef, a
grade-B observation of a run in that context, and an LLM proposal's Proposal record.

The one definition each: the loop's ports, the retrospective and the seed bank call these, so
the fields of a record built in an episode and of one built offline cannot drift apart.
"""

from __future__ import annotations

from experience_bank.families import target_metric
from experience_bank.hashing import content_hash
from experience_bank.cards import CandidateCard
from experience_bank.records import CurrentContext, HistoricalRecord, ModelRef, Proposal, Provenance, RetentionEffect, SourceContext, SourceEvidence
from experience_bank.decisions import Event

from agent.world.catalogue import Needs, applicability, runtime_of
from agent.world.interface import WorldData
from agent.world.store import RUNTIMES


def current_context(world: WorldData, parent: ModelRef, stage: int) -> CurrentContext:
    """x_t: the world's families, target tasks, datasets, runtimes and protocols around `parent`
    (the one definition: the loop's authorize node and the retrospective's cells both call it)."""
    # sorted: a world loaded from its world.json (keys sorted) and the same world as its build
    # returned it must give one context, and one decision hash
    families = tuple(sorted(world.output_protocols))
    return CurrentContext(parent=parent, stage=stage, families=families, tasks={f: f"{f}/target" for f in families},
                          datasets=dict(world.datasets), runtimes=RUNTIMES, eval_protocol=world.eval_protocol,
                          output_protocols={f: world.output_protocols[f] for f in families})


def model_ref(world: WorldData, sha256: str, lineage: tuple[str, ...] = ()) -> ModelRef:
    """The world's base model, or a child of its lineage named by its weights hash."""
    if sha256 == world.model.sha256:
        return world.model
    return ModelRef(id=f"world-{world.size}/child-{sha256[:12]}", sha256=sha256, arch=world.model.arch,
                    chat_template_sha256=world.chat_template_sha256, lineage=tuple(lineage))


def _data(card: CandidateCard) -> dict[str, str]:
    return {m.dataset.id: m.dataset.sha256 for m in card.data.mix}


def observation(world: WorldData, record: HistoricalRecord | Proposal, event: Event, parent: ModelRef, stage: int,
                kappa: float) -> HistoricalRecord | None:
    """One paired run (grade B) of `record`'s card in the current context, for consolidation;
    None when the event measured no gain (neither a full run nor a trial)."""
    card = record.card
    gain = event.target_gain if event.target_gain is not None else event.trial_delta
    if gain is None:
        return None
    data = _data(card)
    retention = tuple(RetentionEffect(metric=f"ifeval.{k}", delta=v) for k, v in sorted(event.trial_retention.items()))
    return HistoricalRecord(
        card=card,
        source=SourceContext(parent=parent, stage=stage, family=card.family, task=f"{card.family}/target",
                             datasets=data, runtime=runtime_of(card), eval_protocol=world.eval_protocol,
                             output_protocol=world.output_protocols[card.family]),
        evidence=SourceEvidence(target_metric=target_metric(card.family), delta_src=gain, delta_point=gain,
                                kappa=kappa, grade="B", chi=0, retention=retention, replicates=1,
                                trial_curve=event.trial_curve),
        applicability=record.applicability,
        provenance=Provenance(model_sha256=parent.sha256, data_sha256=data, config_sha256=card.content_hash(),
                              eval_sha256=content_hash(event.metrics), produced_by=f"episode {event.episode_id}"))


def proposal(world: WorldData, card: CandidateCard, needs: Needs, produced_by: str) -> Proposal:
    """A proposal whose B_i is built from the needs it declares (BadInput where they contradict the card)."""
    return Proposal(card=card, applicability=applicability(card, world, needs), provenance=Provenance(
        model_sha256=world.model.sha256, data_sha256=_data(card), config_sha256=card.content_hash(),
        eval_sha256=content_hash(world.eval_protocol), produced_by=produced_by))
