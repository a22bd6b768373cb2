"""The initial experience library L(0): historical records from real runs in SOURCE contexts.

For every catalogue card we train its source-task analogue (the card's recipe with its data
replaced by `<family>/source/train`, at a short step count) from the card's source parent,
and its trained matched control (agent/world/controls.py: same parent, seed, data size,
steps and evaluation items, without the intervention), and evaluate both on the SAME items
(the family's source suite, validation split) and on the retention suite (IFEval). Honest by
construction: the numbers in a record are the numbers the runs produced.

Source contexts differ from the current one the way a library gathered earlier and
elsewhere does: the frozen plan and the functions that build x_s and B_i from it are
agent/world/source_contexts.py (source parents with their lineage, earlier pool releases, a
differently templated parent).

Evidence grades follow a plan frozen before any run (`GRADE_PLAN`, outcome-blind):
- A: two replicated pairs (training seeds 0 and 1), each intervention paired with its own
  control on every item. If both pairs' deltas have the same sign the record is grade A,
  chi = 1, and delta_src is experience_bank.evidence.lower_bound (one-sided 95% Student-t) of
  the item-level paired differences (mean over pairs of intervention minus control).
  Replicates that disagree in sign make it grade B with the point estimate.
- B: one pair; delta_src = the paired point estimate.
- C: log-only: one run, scored on only the second half of the items and compared with the
  control's logged mean over all items: a difference of two logged means over different
  samples, not a matched comparison; delta_src = that point estimate.
kappa is pre-specified per family (`KAPPA`). Retention effects on IFEval (prompt- and
instruction-level strict) are recorded as intervention minus control.

Controls are shared where their match keys coincide (`controls.control_key`): the whole
catalogue's 33 pairs need one control run per (parent, seed, method); `timing.json` records
how many runs that saved.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterable, Sequence
from typing import Any
from dataclasses import dataclass
from pathlib import Path

from experience_bank.families import PRIMARY_METRIC
from experience_bank.files import write_atomic
from experience_bank.errors import BadInput
from experience_bank.evidence import lower_bound
from experience_bank.hashing import content_hash, sha256_text
from experience_bank.cards import CandidateCard
from experience_bank.records import HistoricalRecord, ModelRef, Provenance, RetentionEffect, SourceEvidence, parse_record

from agent.config import eval_sizes
from agent.world.catalogue import catalogue, catalogue_sha256
from agent.world.controls import control_card, control_key
from agent.world.source_contexts import (
    DATA_RELEASE, SOURCE_SYSTEM_PROMPT, parent_ref, source_applicability, source_parents, source_card,
    source_context, templated,
)
from agent.progress import Progress
from agent.world.interface import WorldData as World
from agent.world import controls
from agent.world.runner import CardRunner
from experience_bank.bank import Bank

GRADE_PLAN = {
    "S01": "A", "S02": "C", "S03": "A", "S04": "B", "G01": "A", "G02": "B", "G03": "C", "G04": "C",
    "S05": "A", "S06": "C", "S07": "B", "S08": "C", "G05": "A", "G06": "B", "G07": "B", "G08": "C",
    "S09": "A", "S10": "A", "S11": "B", "S12": "C", "G09": "A", "G10": "B", "G11": "B", "G12": "C",
}
"""Frozen before any run (catalogue v7: S02 and S06, now aggressive, logged only): 8 A, 8 B, 8 C (standard recipes and their closest variants are
the ones a practitioner would have replicated; LoRA / aggressive variants only logged)."""
STAGE1_PARENT = ("S01", 0)
"""(card, seed) of the source run promoted to the stage-1 parent."""
KAPPA = {"finance": 8.0, "sql": 10.0, "function": 10.0}
RETENTION_METRICS = ("prompt_strict", "inst_strict")
REPLICATE_SEEDS = (0, 1)
PRODUCED_BY = "agent world seed-bank"


SEED_STEP_SCALE = {"test": 0.5, "default": 0.25, "smol": 0.25, "local": 0.25}
"""Share of each card's nominal steps a source run takes, per world size (`local`: every local
world, whose steps are scaled by its own step_scale first). Evaluation sizes: agent.config.EVAL_SIZES."""


@dataclass(frozen=True)
class SeedSize:
    """Per-world-size cost knobs of the seed bank."""

    step_scale: float
    """Share of each card's nominal steps a source run takes."""
    eval_n: int
    """Source-suite items evaluated (validation split)."""
    retention_n: int
    """IFEval items evaluated."""


def seed_size(world: World) -> SeedSize:
    kind = world.size if world.size in SEED_STEP_SCALE else "local"
    sizes = eval_sizes(kind)
    return SeedSize(SEED_STEP_SCALE[kind], sizes.seed_source, sizes.seed_ifeval)


def seed_dir(world: World) -> Path:
    return Path(world.root) / "seed-bank"


def plan_sha256(world: World, card_ids: Sequence[str]) -> str:
    """Everything that determines the seed records: world, its base's weights, catalogue, plan and sizes."""
    return content_hash({"world": world.recipe_sha256, "base": world.model.sha256, "catalogue": catalogue_sha256(),
                         "grades": GRADE_PLAN,
                         "parents": source_parents(world.seed), "release": DATA_RELEASE, "system": SOURCE_SYSTEM_PROMPT,
                         "control": [controls.CONTROL_POOL, controls.REFERENCE, controls.CONTROL_COMPLETION_TOKENS,
                                     controls.CONTROL_TARGETS],
                         "kappa": KAPPA, "seeds": REPLICATE_SEEDS,
                         "size": seed_size(world).__dict__, "cards": sorted(card_ids)})


# --- the public entry ---------------------------------------------------------------------


def build_seed_bank(world: World, bank_path: str | os.PathLike, progress: Progress | None = None,
                    *, cards: Sequence[str] | None = None, threads: int | None = None) -> int:
    """Build (or load from the cache) L(0) and import it into the bank at `bank_path`.

    Returns the library version that holds exactly the seed records. `cards` restricts the
    catalogue (tests); the cache is keyed by the world recipe hash and the plan."""
    if threads:
        import torch  # noqa: PLC0415 (torch)

        torch.set_num_threads(threads)
    records = seed_records(world, progress, cards=cards)
    bank_dir = Path(bank_path).resolve().parent
    _copy_artefacts(world, bank_dir)
    with Bank.init(bank_path) as bank:
        hashes = bank.import_records(records)
        version = bank.current_library_version()
        if sorted(e.hash for e in bank.library_records(version)) == sorted(hashes):  # already imported
            return version
        return bank.create_library_version(hashes, f"L(0): seed bank of world {world.size}-{world.recipe_sha256[:12]}")


def seed_records(world: World, progress: Progress | None = None, *,
                 cards: Sequence[str] | None = None) -> list[HistoricalRecord]:
    """The seed records, from the cache or from real runs (then cached)."""
    all_cards = catalogue(world)
    unknown = sorted(set(cards or ()) - {c.id for c in all_cards})
    if unknown:
        raise BadInput(f"unknown card ids {', '.join(unknown)}: choose from {', '.join(c.id for c in all_cards)}")
    chosen = [c for c in all_cards if cards is None or c.id in cards]
    cache = seed_dir(world) / f"records-{plan_sha256(world, [c.id for c in chosen])[:16]}.jsonl"
    if cache.exists():
        return _made_on(world, [parse_record(line) for line in cache.read_text().splitlines() if line.strip()], cache)
    t0 = time.monotonic()
    runner = _Runner(world, progress, total=sum(_runs(c) for c in chosen))  # ticks once per intervention run
    records = [runner.record(card) for card in chosen]
    write_atomic(cache, "".join(r.model_dump_json() + "\n" for r in records))
    (seed_dir(world) / "timing.json").write_text(json.dumps({
        "seconds": round(time.monotonic() - t0, 1), "records": len(records), "pairs": runner.pairs,
        "control_runs": len(runner.control_runs), "control_runs_saved": runner.pairs - len(runner.control_runs)}))
    return records


def _made_on(world: World, records: list[HistoricalRecord], where: Path) -> list[HistoricalRecord]:
    """`records`, after checking each was made on this world's base, its early checkpoint or a
    child of the base: cached records of another base would silently stand for this one."""
    ours = {world.model.sha256, (world.early_model or world.model).sha256}
    for r in records:
        parent = r.source.parent
        if parent.sha256 not in ours and world.model.sha256 not in parent.lineage:
            raise BadInput(f"{where}: record {r.card.id} was made on parent {parent.sha256[:12]}, not on world "
                           f"{world.size}-{world.recipe_sha256[:12]}'s base {world.model.sha256[:12]}: "
                           f"remove {where} and run `agent world seed-bank` again")
    return records


def run_name(src: CandidateCard, where: str, seed: int) -> str:
    """The name of one source run's evaluation (and its artefact): the card, where it ran, the
    source card's content and the seed. The content is in the name because the evaluation is cached
    under it: an edited card under the same id (a new catalogue version, a user's own card) is
    trained and evaluated again, never given the cached scores of the recipe it replaced. The seed
    comes last (`_assemble` reads it back)."""
    return f"{src.id}-{where}-{content_hash(src.model_dump(mode='json'))[:12]}-seed{seed}"


def _runs(card: CandidateCard) -> int:
    return len(REPLICATE_SEEDS) if GRADE_PLAN[card.id] == "A" else 1


# --- runs ---------------------------------------------------------------------------------


class _Runner:
    """Trains and evaluates, caching every finished step on disk so a crash resumes."""

    def __init__(self, world: World, progress: Progress | None, total: int):
        self.world, self.progress, self.total, self.done = world, progress, total, 0
        self.size = seed_size(world)
        self.root = seed_dir(world)
        self.cards = {c.id: c for c in catalogue(world)}
        self.pairs, self.control_runs = 0, set()
        self.runner = CardRunner(world)  # the retrospective's and the episodes' runs of the same content are reused

    def tick(self, what: str) -> None:
        self.done += 1
        if self.progress:
            self.progress(what, min(self.done, self.total), self.total)

    # parents and controls
    def parent(self, where: str) -> tuple[str, ModelRef]:
        w = self.world
        early_dir = w.early_dir if w.early_dir and w.early_model else w.base_dir
        if where in ("base", "early"):
            return (w.base_dir if where == "base" else early_dir), parent_ref(where, w)
        if where == "early-template":
            out, template = self._templated(early_dir)
            return out, parent_ref(where, w, template_sha256=sha256_text(template))
        card_id, seed = STAGE1_PARENT
        child, sha, _ = self.train(self.cards[card_id], w.base_dir, seed=seed)
        return child, parent_ref(where, w, stage1_sha256=sha)

    def _templated(self, parent_dir: str) -> tuple[str, str]:
        """A copy of the parent served with `templated`'s chat template: (folder, template)."""
        from transformers import AutoTokenizer  # noqa: PLC0415 (transformers)

        out = self.root / "parents" / "early-template"
        tok = AutoTokenizer.from_pretrained(parent_dir, local_files_only=True)
        tok.chat_template = templated(tok.chat_template)
        if not (out / "model.safetensors").exists():
            tmp = out.with_name(out.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(parent_dir, tmp)
            tok.save_pretrained(tmp)
            os.replace(tmp, out)
        return str(out), tok.chat_template

    def control(self, card: CandidateCard, parent_dir: str, parent: ModelRef, seed: int) -> tuple[str, dict]:
        """The matched control of (card, parent, seed), trained once per match key and evaluated
        once per family; returns its evaluation name and summary."""

        # the control of the source run: its steps and examples, the reference recipe, no intervention
        ctrl = control_card(source_card(card, self.world, self.size.step_scale), self.world)
        key = f"control-{control_key(ctrl, parent, seed)}"
        name = f"{key}-{card.family}"
        self.pairs += 1
        self.control_runs.add(key)
        out = self.root / "evals" / name / "summary.json"
        if out.exists():
            return name, json.loads(out.read_text())
        run = self.root / "runs" / key  # kept: the next family's cards are evaluated on it too
        self.runner.train(ctrl, parent_dir, out_dir=str(run), run_key=key, seed=seed)
        return name, self.evaluate(str(run), name, card.family)

    def evaluate(self, model_dir: str, name: str, family: str, sample: str = "full") -> dict:
        """Cached evaluation: per-item scores on the family's source suite and on IFEval."""
        out = self.root / "evals" / name
        summary = out / "summary.json"
        if summary.exists():
            return json.loads(summary.read_text())
        # Scored with evaluation seed 0 (evaluators.evaluate's default), as every seed bank so far:
        # the cached records and the run cache's keys carry it.
        n, r = self.size.eval_n, self.size.retention_n
        results = self.runner.evaluate(model_dir, [f"{family}/source"], "validation", out_dir=str(out / "source"), n=n,
                                       seed=0)
        results |= self.runner.evaluate(model_dir, ["ifeval"], "validation", out_dir=str(out / "ifeval"), n=r, seed=0)
        src = results[f"{family}/source"]
        data = {"items": _item_scores(src), "metric": _primary(src), "ifeval": _retention(results["ifeval"]),
                "generations": {k: v.generations_sha256 for k, v in sorted(results.items())},
                "identity": {k: v.identity.model_dump(mode="json") for k, v in sorted(results.items())}}
        if sample == "half":  # grade C: a different, smaller sample than the control's (the second half
            # of the items evaluated: a local split may hold fewer than eval_n)
            data["items"] = dict(list(data["items"].items())[len(src.items) // 2:])
        summary.write_text(json.dumps(data, sort_keys=True))
        return data

    def train(self, card: CandidateCard, parent_dir: str, seed: int) -> tuple[str, str, list[str]]:
        """Train the card's source analogue (idempotent by run key); returns (child dir, sha,
        names of the sanity checks it failed)."""

        src = source_card(card, self.world, self.size.step_scale)
        digest = content_hash([src.model_dump(mode="json"), parent_dir, seed])
        key = f"seed-{card.id}-{digest[:12]}"
        out = self.root / "runs" / key
        result = self.runner.train(src, parent_dir, out_dir=str(out), run_key=key, seed=seed)
        # A run that fails a sanity check (e.g. GRPO with zero reward variance on a weak parent)
        # is still an observation: its child is evaluated like any other and the failed checks
        # are kept in the evaluation summary, never hidden and never turned into a made-up score.
        return str(out), result.checkpoint_sha256, [s.name for s in result.sanity if not s.ok]

    def intervention(self, card: CandidateCard, parent_dir: str, seed: int, name: str, sample: str) -> dict:
        out = self.root / "evals" / name / "summary.json"
        if out.exists():
            return json.loads(out.read_text())
        child, _, sanity_failed = self.train(card, parent_dir, seed)
        data = self.evaluate(child, name, card.family, sample)
        if sanity_failed:
            data["sanity_failed"] = sanity_failed
            out.write_text(json.dumps(data, sort_keys=True))
        if (card.id, seed) != STAGE1_PARENT or parent_dir != self.world.base_dir:
            shutil.rmtree(child, ignore_errors=True)  # keep only the stage-1 parent
        return data

    # one record
    def record(self, card: CandidateCard) -> HistoricalRecord:
        where = source_parents(self.world.seed)[card.id]
        parent_dir, parent = self.parent(where)
        grade = GRADE_PLAN[card.id]
        seeds = REPLICATE_SEEDS if grade == "A" else REPLICATE_SEEDS[:1]
        controls, runs = [], []
        for seed in seeds:
            controls.append(self.control(card, parent_dir, parent, seed))
            name = run_name(source_card(card, self.world, self.size.step_scale), where, seed)
            runs.append((name, self.intervention(card, parent_dir, seed, name, "half" if grade == "C" else "full")))
            self.tick(f"{card.id} seed {seed}")
        evidence = evidence_from(card, [c for _, c in controls], [r for _, r in runs], grade)
        return self._assemble(card, 1 if where == "stage1" else 0, parent, controls, runs, evidence)

    def _assemble(self, card, stage, parent, controls, runs, evidence) -> HistoricalRecord:
        src = source_card(card, self.world, self.size.step_scale)
        named = dict(controls) | dict(runs)
        gens = {n: named[n]["generations"] for n in sorted(named)}
        source = source_context(card, self.world, parent, stage, self.size.step_scale)
        ds = source.datasets
        prov = Provenance(
            model_sha256=parent.sha256, data_sha256=ds,
            config_sha256=content_hash({"source_card": src.model_dump(mode="json"), "seeds": [int(n.rsplit("seed", 1)[1]) for n, _ in runs],
                                        "size": self.size.__dict__}),
            eval_sha256=content_hash(gens),
            artefacts=tuple(f"{artefact_prefix(self.world)}/{n}" for n in sorted(named)), produced_by=PRODUCED_BY)
        return HistoricalRecord(card=card, source=source, evidence=evidence,
                                applicability=source_applicability(card, self.world, parent), provenance=prov)


# --- evidence arithmetic (pure) -------------------------------------------------------------


def evidence_from(card: CandidateCard, controls: list[dict], runs: list[dict], grade: str) -> SourceEvidence:
    """SourceEvidence from matched (control, intervention) summaries, one pair per seed."""
    pairs = list(zip(controls, runs, strict=True))
    per_run = [100.0 * (_mean(r["items"].values()) - _mean(c["items"].values())) if grade == "C"
               else 100.0 * _mean(r["items"][i] - c["items"][i] for i in r["items"] if i in c["items"])
               for c, r in pairs]
    point = sum(per_run) / len(per_run)
    delta_src, final = point, grade
    if grade == "A":
        if not _agree(per_run):
            final = "B"  # REPLICATES_DISAGREED: not a replicated matched control
        else:
            common = [i for i in controls[0]["items"] if all(i in c["items"] and i in r["items"] for c, r in pairs)]
            diffs = [100.0 * _mean(r["items"][i] - c["items"][i] for c, r in pairs) for i in common]
            delta_src = lower_bound(diffs)
    retention = tuple(RetentionEffect(metric=f"ifeval.{m}", delta=round(
        sum(r["ifeval"][m] - c["ifeval"][m] for c, r in pairs) / len(pairs), 6)) for m in RETENTION_METRICS)
    return SourceEvidence(target_metric=f"{card.family}/source.{controls[0]['metric']}", delta_src=round(delta_src, 6),
                          delta_point=round(point, 6), kappa=KAPPA[card.family], grade=final,
                          chi=1 if final == "A" else 0, retention=retention, replicates=len(runs))


def _agree(deltas: list[float]) -> bool:
    return all(d > 0 for d in deltas) or all(d < 0 for d in deltas) or all(d == 0 for d in deltas)


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


# --- helpers over other packages' results ----------------------------------------------------

def _primary(result) -> str:
    family = result.identity.suite.split("/")[0]
    return PRIMARY_METRIC[family]


def _item_scores(result) -> dict[str, float]:
    """Item id -> score in [0, 1]; UNKNOWN items are left out (never scored 0)."""
    out = {}
    for it in result.items:
        value = it.score if it.score is not None else (None if it.correct is None else float(it.correct))
        if value is not None:
            out[it.item_id] = float(value)
    return out


def _retention(result) -> dict[str, float]:
    return {m: float(result.metrics[m]) for m in RETENTION_METRICS}


def artefact_prefix(world: World) -> str:
    return f"artefacts/seed-{world.size}-{world.recipe_sha256[:12]}"


def foreign_seed_bank(world: World, records: Iterable[Any]) -> str | None:
    """The world id (`<size>-<hash12>`) whose seed bank a library was built from, when it is another
    world of the same size and none of its records are this world's: the evidence was observed in
    another world (another world seed, recipe or build environment), so its L(0) is not this world's.
    None when the library holds this world's seed records, or none from a world of this size."""
    mine, size_tag = artefact_prefix(world).removeprefix("artefacts/seed-"), f"artefacts/seed-{world.size}-"
    seen = {a.removeprefix("artefacts/seed-").split("/")[0] for r in records
            for a in getattr(getattr(r, "provenance", None), "artefacts", ()) if a.startswith(size_tag)}
    return None if not seen or mine in seen else sorted(seen)[0]


def _copy_artefacts(world: World, bank_dir: Path) -> None:
    dest = bank_dir / artefact_prefix(world)
    src = seed_dir(world) / "evals"
    if src.exists():
        shutil.copytree(src, dest, dirs_exist_ok=True)
