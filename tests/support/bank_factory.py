"""Small factories of valid records for the bank tests (one place that knows the validators)."""

from __future__ import annotations

from experience_bank.hashing import decision_hash
from experience_bank.hashing import content_hash
from experience_bank.cards import Adapter, CandidateCard, DataMix, DataRecipe, DatasetRef, HyperParams, NominalBudget
from experience_bank.records import Applicability, HistoricalRecord, ModelRef, Proposal, Provenance, SourceContext, SourceEvidence
from experience_bank.decisions import Decision, Event, Features, FieldScores


def sha(seed: object) -> str:
    """A deterministic, valid sha256 for any seed."""
    return content_hash(repr(seed))


def card(card_id: str = "S01", n_examples: int = 100) -> CandidateCard:
    data = DatasetRef(id="sql/source/train", sha256=sha("data"))
    return CandidateCard(
        id=card_id, title=f"card {card_id}", method="sft", family="sql",
        data=DataRecipe(mix=(DataMix(dataset=data, weight=1.0),), n_examples=n_examples),
        hparams=HyperParams(learning_rate=1e-4, batch_size=8),
        adapter=Adapter(kind="lora", rank=8, alpha=16, targets=("q_proj", "v_proj")),
        budget=NominalBudget(steps=100, device_hours=1.0), nu="restart")


def source(stage: int = 0) -> SourceContext:
    return SourceContext(
        parent=ModelRef(id="world/base", sha256=sha("model"), arch="qwen3", chat_template_sha256=sha("tpl")),
        stage=stage, family="sql", task="sql/source", datasets={"sql/source/train": sha("data")},
        runtime="trl-sft", eval_protocol="world-eval-v1", output_protocol="sql")


def applicability() -> Applicability:
    return Applicability(family="sql", datasets=(DatasetRef(id="sql/source/train", sha256=sha("data")),),
                         runtime="trl-sft", parent_arch="qwen3", output_protocol="sql")


def provenance(seed: object = 0, artefacts: tuple[str, ...] = ()) -> Provenance:
    return Provenance(model_sha256=sha("model"), data_sha256={"sql/source/train": sha("data")},
                      config_sha256=sha("config"), eval_sha256=sha(("eval", seed)), artefacts=artefacts)


def record(card_id: str = "S01", delta: float = 5.0, grade: str = "B", seed: object = 0, stage: int = 0,
           replicates: int = 1, artefacts: tuple[str, ...] = ()) -> HistoricalRecord:
    """A historical record; `seed` makes otherwise identical observations distinct."""
    evidence = SourceEvidence(target_metric="sql/source.exec_acc", delta_src=delta, delta_point=delta,
                              kappa=10.0, grade=grade, chi=1 if grade == "A" else 0, replicates=replicates)
    return HistoricalRecord(card=card(card_id), source=source(stage), evidence=evidence,
                            applicability=applicability(), provenance=provenance(seed, artefacts))


def proposal(card_id: str = "P01") -> Proposal:
    return Proposal(card=card(card_id), applicability=applicability(), provenance=provenance(card_id))


def decision(card_id: str = "S01", action: str = "train") -> Decision:
    features = Features(
        candidate_id=card_id, record_hash=sha(card_id), context_hash=sha("ctx"), is_new=False, grade="B",
        delta_src=5.0, kappa=10.0, S=0.5, fields=FieldScores(family=1.0, data=1.0, runtime=1.0, parent=1.0,
                                                            protocol=1.0),
        A=1.0, H=0, conflicts=(), Q=0.5, nu="restart", chi=0)
    draft = Decision(candidate_id=card_id, action=action, rule=f"bcit.{action}", numbers={"Q": 0.5},
                     policy="bcit", policy_version="v1", features=features, decision_hash="0" * 64)
    return draft.model_copy(update={"decision_hash": decision_hash(draft.model_dump(mode="json"))})


def event(episode_id: str = "E1", seq: int = 0, card_id: str = "S01", outcome: str = "promoted",
          metric: float = 1.0) -> Event:
    return Event(episode_id=episode_id, seq=seq, candidate_id=card_id, decision=decision(card_id),
                 action="train", cost_device_hours=1.0, wall_seconds=2.0, metrics={"sql/target.exec_acc": metric},
                 outcome=outcome, reason="gate.pass")
