"""A Hugging Face model card in every promoted model's folder (README.md), written with
huggingface_hub's ModelCard / ModelCardData.

The metadata says where the weights came from once they leave the run directory: the parent
as `base_model` and how the folder relates to it (`base_model_relation`: `finetune` for merged
weights, `adapter` for a LoRA adapter folder), the library and trainer tags, the training data
as the card's dataset ids (their sha256 under `posttrain_agent.datasets`), and the gate's
adoption-split numbers of the target suites and IFEval as `eval_results` (n and split in each).
The text is the decision chain a reviewer needs: manifest and decision hashes, the parent,
S/A/H/Q, action and rule, the trial and full-run deltas and every gate check with its paired
delta and McNemar p.

The card is written into the child's folder before the parent pointer moves, so a copy of the
folder (the promoted parent) carries it; writing it twice writes the same text (a resumed commit).
"""

from __future__ import annotations

from pathlib import Path

from experience_bank.files import write_atomic
from experience_bank.cards import CandidateCard
from experience_bank.records import ModelRef
from experience_bank.decisions import Event
from experience_bank.results import GateVerdict, SuiteResult, TrainResult

CARD = "README.md"
LIBRARY = "transformers"
TAGS = ("trl", "posttrain-agent")
PAIRED = ("n_items", "paired_delta_pp", "mcnemar_p")
"""The GateCheck numbers (policies.gate.paired_numbers, with or without a prefix) the text lists."""


def card_path(model_dir: str | Path) -> Path:
    """Where a model folder's card lives (the Hub's convention)."""
    return Path(model_dir) / CARD


def relation(model_dir: str | Path) -> str:
    """`adapter` for a PEFT adapter folder, `finetune` for full (merged) weights."""
    return "adapter" if (Path(model_dir) / "adapter_config.json").is_file() else "finetune"


def eval_suites(card: CandidateCard, results: dict[str, SuiteResult]) -> list[str]:
    """The suites the card reports: every target suite evaluated, and IFEval."""
    return sorted(s for s in results if s.endswith("/target") or s == "ifeval")


def _eval_results(model_name: str, results: dict[str, SuiteResult], suites: list[str]):
    from huggingface_hub import EvalResult  # noqa: PLC0415 (huggingface_hub)

    return [EvalResult(task_type="text-generation", dataset_type=f"posttrain-agent/{s}", dataset_name=s,
                       dataset_split=r.identity.split, dataset_revision=r.identity.data_sha256,
                       dataset_args={"n": len(r.items), "scorer": r.identity.scorer_version},
                       metric_type=m, metric_name=f"{s}.{m}", metric_value=v)
            for s in suites for r in [results[s]] for m, v in r.metrics.items() if v is not None]


def _pp(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2f} pp"


def _checks(verdict: GateVerdict) -> list[str]:
    rows = ["| check | passed | paired numbers | reason |", "|---|---|---|---|"]
    for c in verdict.checks:
        paired = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in c.numbers.items() if k.endswith(PAIRED))
        rows.append(f"| {c.name} | {'yes' if c.passed else 'no'} | {paired or '-'} | {c.reason} |")
    return rows


def _text(event: Event, card: CandidateCard, verdict: GateVerdict, parent: ModelRef, manifest_hash: str,
          run: TrainResult) -> str:
    d, f = event.decision, event.decision.features
    score = lambda v: "n/a" if v is None else f"{v:.4f}"  # noqa: E731
    return "\n".join([
        f"# {card.id}: {card.title}", "",
        f"A {card.method.upper()} child of `{parent.id}` promoted by the CapTrack gate in episode "
        f"`{event.episode_id}` (decision {event.seq}).", "",
        "## Decision chain", "",
        f"- manifest hash: `{manifest_hash}`",
        f"- decision hash: `{d.decision_hash}`",
        f"- parent: `{parent.id}` (sha256 `{parent.sha256}`)",
        f"- child weights: sha256 `{run.checkpoint_sha256}` ({run.steps} steps)",
        f"- S/A/H/Q: {score(f.S)} / {score(f.A)} / {f.H} / {score(f.Q)}",
        f"- action: {d.action} by rule `{d.rule}` (policy {d.policy} {d.policy_version})",
        f"- trial delta (validation): {_pp(event.trial_delta)}",
        f"- full-run delta (adoption, {event.target_metric or 'target'}): {_pp(event.target_gain)}",
        f"- gate: {verdict.decided_by}, U_prom {score(verdict.u_prom)}", "",
        "## Gate checks", "", *_checks(verdict), ""])


def write_model_card(model_dir: str | Path, *, event: Event, card: CandidateCard, run: TrainResult,
                     verdict: GateVerdict, child_eval: dict[str, SuiteResult], parent: ModelRef,
                     manifest_hash: str) -> Path:
    """Write README.md into `model_dir` (the promoted child's folder) and return its path."""
    from huggingface_hub import ModelCard, ModelCardData  # noqa: PLC0415 (huggingface_hub)

    datasets = {m.dataset.id: m.dataset.sha256 for m in card.data.mix}
    name = f"{card.id}-{run.checkpoint_sha256[:12]}"
    data = ModelCardData(
        model_name=name, base_model=parent.id, base_model_relation=relation(model_dir), library_name=LIBRARY,
        tags=[*TAGS, card.method], datasets=sorted(datasets),
        eval_results=_eval_results(name, child_eval, eval_suites(card, child_eval)),
        posttrain_agent={"datasets": datasets, "parent_sha256": parent.sha256, "weights_sha256": run.checkpoint_sha256,
                         "decision_hash": event.decision.decision_hash, "manifest_hash": manifest_hash,
                         "episode_id": event.episode_id, "card_id": card.id})
    model_card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n{_text(event, card, verdict, parent, manifest_hash, run)}")
    path = card_path(model_dir)
    write_atomic(path, str(model_card))  # a kill -9 leaves the old card or the new one, never half
    return path


def write_promotion_cards(ctx, state: dict, event: Event, card: CandidateCard, run: TrainResult,
                          verdict: GateVerdict) -> list[Path]:
    """The cards of one promotion (the loop's commit calls this before the pointer moves): the
    merged child's folder, and the kept LoRA adapter's folder where there is one."""
    parent = ctx.ports.model_ref(state["parent_dir"], state["parent_sha"], tuple(state.get("lineage") or ()))
    child_eval = ctx.rundir.evaluation(run.checkpoint_sha256, "adoption")
    folders = [run.checkpoint] + ([run.adapter_dir] if run.adapter_dir and Path(run.adapter_dir).is_dir() else [])
    return [write_model_card(folder, event=event, card=card, run=run, verdict=verdict, child_eval=child_eval,
                             parent=parent, manifest_hash=ctx.manifest.manifest_hash) for folder in folders]
