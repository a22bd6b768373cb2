"""RunDir: the one piece of code that knows a run directory's layout.

    runs/ID/manifest.json            the frozen, hashed Manifest (agent/run/manifest.py)
    runs/ID/parent.json              the promotion pointer with its rollback target (agent/run/promotion.py)
    runs/ID/ledger.sqlite            every charge, once (trainers/ledger.py)
    runs/ID/decisions.jsonl          the hash-chained decision ledger (policies/decision_ledger.py)
    runs/ID/outcomes.jsonl           one OutcomeCell per decision that ran (policies/decision_ledger.py)
    runs/ID/proposals.json           the LLM's frozen answer (agent/loop/proposer.py)
    runs/ID/filtered.json            candidates the executability filter dropped, with reasons
    runs/ID/checkpoints.sqlite       LangGraph's checkpoints (resume)
    runs/ID/evals/<sha16>-<split>/   raw generations, results.json and wall.json of one model on one split
    runs/ID/steps/<NNN>-decision.json  the frozen decision of the NNN-th candidate
    runs/ID/steps/<hash16>/          one decision's trial.json, acted.json (the verdict its policy acted on),
                                     train.json, verdict.json and checkpoints
    runs/ID/report.md, report.html   the report, its figures (<id>.png) and the CapTrack heat map
                                     (captrack_heatmap.png, captrack_heatmap.json)
    runs/ID/report_inputs.json       what the report reads besides the files above (agent/run/report_inputs.py)
    runs/ID/run.lock                 held by the live process that runs the episode (agent/run/runlock.py)
    runs/ID/user_cards.json          the user's imported cards, frozen when the episode starts (agent/world/usercards)
    runs/ID/gonogo.json              bcit_predictive's go/no-go model, frozen when the episode starts (agent/run/gonogo_model.py)
    runs/ID/extrapolation.json       the trial's forgetting extrapolation, frozen when the episode starts
                                     (agent/run/extrapolation_model.py)
    runs/ID/approval_pending.json    what waits for a person's approval (agent/run/approvals.py)
    runs/ID/approvals.jsonl          the hash-chained answers (agent/run/approvals.py)

A run has finished when its report exists: the report is the loop's last node.

Every other module reads and writes a run directory through this type (the decision ledger's
and the outcome cells' names are policies.decision_ledger's, which `agent audit` reads on its own).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.files import sqlite_fault, write_atomic
from experience_bank.hashing import canonical_json
from experience_bank.frozen import parse_model
from experience_bank.records import ActedTrial
from experience_bank.results import GateVerdict, SuiteResult, TrainResult, TrialResult
from policies.decision_ledger import DECISIONS_FILE, OUTCOMES_FILE
from trainers.ledger import Ledger, check_existing
from agent.run.manifest import Manifest, parse_manifest
from agent.run.report_inputs import ReportInputs


@dataclass(frozen=True)
class RunDir:
    """A run directory (it need not exist yet)."""

    path: Path

    @property
    def episode_id(self) -> str:
        return self.path.name

    # --- files at the top --------------------------------------------------------------
    @property
    def manifest_file(self) -> Path:
        return self.path / "manifest.json"

    @property
    def parent_file(self) -> Path:
        return self.path / "parent.json"

    @property
    def ledger_file(self) -> Path:
        return self.path / "ledger.sqlite"

    @property
    def decisions_file(self) -> Path:
        return self.path / DECISIONS_FILE

    @property
    def outcomes_file(self) -> Path:
        return self.path / OUTCOMES_FILE

    @property
    def proposals_file(self) -> Path:
        return self.path / "proposals.json"

    @property
    def filtered_file(self) -> Path:
        return self.path / "filtered.json"

    @property
    def checkpoints_file(self) -> Path:
        return self.path / "checkpoints.sqlite"

    @property
    def user_cards_file(self) -> Path:
        return self.path / "user_cards.json"

    @property
    def gonogo_file(self) -> Path:
        return self.path / "gonogo.json"

    @property
    def extrapolation_file(self) -> Path:
        return self.path / "extrapolation.json"

    @property
    def approval_pending_file(self) -> Path:
        return self.path / "approval_pending.json"

    @property
    def approvals_file(self) -> Path:
        return self.path / "approvals.jsonl"

    @property
    def report_md(self) -> Path:
        return self.path / "report.md"

    @property
    def report_html(self) -> Path:
        return self.path / "report.html"

    def figure_file(self, figure_id: str) -> Path:
        """A report figure's PNG beside report.md."""
        return self.path / f"{figure_id}.png"

    @property
    def heatmap_png(self) -> Path:
        return self.path / "captrack_heatmap.png"

    @property
    def heatmap_json(self) -> Path:
        return self.path / "captrack_heatmap.json"

    @property
    def report_inputs_file(self) -> Path:
        return self.path / "report_inputs.json"

    @property
    def lock_file(self) -> Path:
        return self.path / "run.lock"

    def finished(self) -> bool:
        """Whether the episode ran to its end: the report is the loop's last node."""
        return self.report_md.exists()

    def started(self) -> bool:
        """Whether an episode was frozen here (its manifest exists)."""
        return self.manifest_file.is_file()

    def graph_started(self) -> bool:
        """Whether the graph ran its first node (propose writes proposals.json). Its checkpoints and
        its ledger are written before that node, so from then on a run without them has lost its
        history; before it, a killed run has neither yet and simply starts."""
        return self.proposals_file.exists()

    def _has_ledger(self) -> bool:
        """Whether the run must have a ledger: it has one, or its graph started (which writes it first)."""
        return self.ledger_file.exists() or self.graph_started()

    def read_ledger(self) -> Ledger:
        """The run's ledger as the run wrote it (`Ledger.existing`: refused where it is missing after
        the graph started, empty, not SQLite or damaged, so that no reader writes an empty ledger in its
        place and reports nothing spent). A run that has none yet has spent nothing: an empty one."""
        return Ledger.existing(self.ledger_file) if self._has_ledger() else Ledger(":memory:")

    def copy_of(self, manifest: Manifest) -> str | None:
        """The episode a copied or renamed directory holds (its manifest's id), None where the directory's
        name is its episode id."""
        return manifest.episode_id if manifest.episode_id != self.episode_id else None

    def check_resumable(self, manifest: Manifest) -> None:
        """A started run resumes as itself, with its history, or not at all (nothing written):
        - the directory's name is its episode id (the bank's episode, the ledger's charges and the
          checkpoints' thread are keyed by it), so a copy or a rename would run the whole episode
          again under a new id, paying for everything twice;
        - after the graph's first node its checkpoints and its ledger must be there and sound: without
          the checkpoints the graph would start again from its first node, without the ledger every
          charge (the budget spent) would be forgotten."""
        if self.copy_of(manifest) is not None:
            raise BadInput(f"{self.path} holds episode {manifest.episode_id!r} (its manifest), and a run directory's "
                           f"name is its episode id: resume it as {self.path.with_name(manifest.episode_id)}, or start a "
                           "new run with another --out")
        fault = sqlite_fault(self.checkpoints_file)
        if fault is not None and (self.graph_started() or fault not in ("missing", "empty (0 bytes)")):
            raise BadInput(f"{self.checkpoints_file} (the run's graph checkpoints) is {fault}: restore it from a copy to "
                           "resume, or start a new run with another --out")
        if self._has_ledger():
            check_existing(self.ledger_file)  # checked, not opened: the episode opens it

    # --- the manifest ------------------------------------------------------------------
    def freeze(self, manifest: Manifest) -> None:
        """Write the manifest once (atomically); a second write must be byte-identical."""
        text = canonical_json(manifest.model_dump(mode="json"))
        if self.manifest_file.exists():
            if self.manifest_file.read_text(encoding="utf-8") != text:
                raise BadInput(f"{self.manifest_file} already holds another manifest: use a new --out or --resume it")
            return
        write_atomic(self.manifest_file, text)

    def manifest(self) -> Manifest:
        """The frozen manifest, its hash checked; BadInput when missing or damaged."""
        if not self.manifest_file.is_file():
            raise BadInput(f"{self.path} has no manifest.json: it is not a run directory (a run killed in its first "
                           "seconds has none: run the original command again instead of --resume)")
        try:
            text = self.manifest_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"{self.manifest_file} cannot be read ({type(exc).__name__}): restore it or start a new run") from None
        return parse_manifest(text, str(self.manifest_file))

    # --- the report's inputs ---------------------------------------------------------
    def write_report_inputs(self, inputs: ReportInputs) -> None:
        # model_dump_json, not canonical_json: the counts' and the heat map's order is the report's
        write_atomic(self.report_inputs_file, inputs.model_dump_json())

    def report_inputs(self) -> ReportInputs:
        """What the loop's report node stored for the report; BadInput when it is missing."""
        if not self.report_inputs_file.is_file():
            raise BadInput(f"{self.path} has no {self.report_inputs_file.name}: its episode has not reached the "
                           "report (resume it with agent run --resume), or ran before the report kept its inputs")
        return _read(self.report_inputs_file, ReportInputs)

    # --- evaluations -------------------------------------------------------------------
    def eval_dir(self, model_sha: str, split: str) -> Path:
        return self.path / "evals" / f"{model_sha[:16]}-{split}"

    def has_evaluation(self, model_sha: str, split: str) -> bool:
        return (self.eval_dir(model_sha, split) / "results.json").is_file()

    def evaluation(self, model_sha: str, split: str) -> dict[str, SuiteResult]:
        """Stored suite results of one model on one split."""
        text = (self.eval_dir(model_sha, split) / "results.json").read_text(encoding="utf-8")
        return {k: SuiteResult.model_validate_json(json.dumps(v)) for k, v in json.loads(text).items()}

    def write_evaluation(self, model_sha: str, split: str, results: dict[str, SuiteResult], wall_s: float) -> None:
        out = self.eval_dir(model_sha, split)
        write_atomic(out / "wall.json", json.dumps({"wall_seconds": round(wall_s, 3)}))
        write_atomic(out / "results.json", canonical_json({k: v.model_dump(mode="json") for k, v in results.items()}))

    def eval_wall(self, model_sha: str, split: str) -> float:
        return json.loads((self.eval_dir(model_sha, split) / "wall.json").read_text())["wall_seconds"]

    # --- decisions and their steps -----------------------------------------------------
    def decision_file(self, cursor: int) -> Path:
        return self.path / "steps" / f"{cursor:03d}-decision.json"

    def step(self, decision_hash: str) -> Path:
        """Where one decision's side effects keep their results."""
        return self.path / "steps" / decision_hash[:16]

    def trainer_out(self, decision_hash: str, role: str) -> Path:
        """Where the trainer writes the `trial` or `train` run of a decision."""
        return self.step(decision_hash) / role

    def trial_file(self, decision_hash: str) -> Path:
        return self.step(decision_hash) / "trial.json"

    def acted_file(self, decision_hash: str) -> Path:
        return self.step(decision_hash) / "acted.json"

    def train_file(self, decision_hash: str) -> Path:
        return self.step(decision_hash) / "train.json"

    def verdict_file(self, decision_hash: str) -> Path:
        return self.step(decision_hash) / "verdict.json"

    def trial(self, decision_hash: str) -> TrialResult | None:
        return _read(self.trial_file(decision_hash), TrialResult)

    def acted(self, decision_hash: str) -> ActedTrial | None:
        return _read(self.acted_file(decision_hash), ActedTrial)

    def train(self, decision_hash: str) -> TrainResult | None:
        return _read(self.train_file(decision_hash), TrainResult)

    def verdict(self, decision_hash: str) -> GateVerdict | None:
        return _read(self.verdict_file(decision_hash), GateVerdict)


def _read(path: Path, cls):
    return parse_model(cls, path.read_text(encoding="utf-8"), str(path)) if path.is_file() else None
