"""Small fakes at the loop's boundary (world context, trainer, evaluator, gate).

The rules run for real: the policy (policies.authorize, next_state, after_trial), the ledger
(trainers.ledger, an SQLite file), the audit writer (RunAudit) and the run directory. The
fake compiler gives each card features that BCIT routes to the PLAN's action. A fake model
is a directory holding `q.json` (its target score). Training adds the card's planned gain;
the evaluator reads it back; the gate promotes iff the target rose. Every
trainer start/finish is logged to `calls.jsonl`, so a test can count completed trainings.
`FAKE_KILL=<point>` SIGKILLs the process at that point (for the kill/resume tests).

Run as a script (`python tests/support/graph_fakes.py RUN_DIR`) to drive one fake episode.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`

from support import bank_factory as bf  # noqa: E402
from experience_bank.bank import Bank  # noqa: E402
from experience_bank.hashing import content_hash  # noqa: E402
from experience_bank.records import CurrentContext, ModelRef  # noqa: E402
from policies.features import features_from_row  # noqa: E402
from trainers.steps import trial_steps  # noqa: E402
from experience_bank.results import (EvalIdentity, GateCheck, GateVerdict, ItemResult, SuiteResult,  # noqa: E402
                                     TrainResult, TrialResult)

# card id -> (action, trial verdict, gain of a full run in pp)
PLAN = {
    "S01": ("reject", None, 0.0),
    "S02": ("validate", "pass", 5.0),       # trial passes, full run promoted
    "S03": ("train", None, -3.0),           # direct train, rolled back
    "S04": ("validate", "fail", 0.0),       # trial fails
    "S05": ("validate", "inconclusive", 2.0),  # leased -> full run, promoted
    "S06": ("train", None, 4.0),            # direct train, promoted
    "X07": ("train", None, 1.0),            # dropped by the executability filter
}


def maybe_kill(point: str) -> None:
    if os.environ.get("FAKE_KILL") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _log(run_dir: Path, **row) -> None:
    with open(run_dir / "calls.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def _q(model_dir: str) -> float:
    return json.loads((Path(model_dir) / "q.json").read_text())["q"]


def _write_model(out_dir: str, q: float) -> str:
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "q.json").write_text(json.dumps({"q": q}))
    return content_hash({"q": q, "dir": Path(out_dir).name})


def _suite(name: str, metric: str, value: float, sha: str, split: str) -> SuiteResult:
    ident = EvalIdentity(suite=name, split=split, data_sha256=bf.sha((name, split)), scorer_version="fake-1",
                         model_sha256=sha, chat_template_sha256=bf.sha("tpl"), backend="transformers",
                         batch_size=1, max_new_tokens=8, seed=0)
    items = (ItemResult(item_id="i0", correct=True),)
    return SuiteResult(identity=ident, generations_sha256=bf.sha((sha, name, split)), metrics={metric: value},
                       items=items, n_unparseable=0, n_unknown=0)


class FakePorts:
    def __init__(self, run_dir: Path):
        self.run_dir = run_dir

    def model_ref(self, model_dir, sha256, lineage=()):
        return ModelRef(id="fake/model", sha256=sha256, arch="qwen3", chat_template_sha256=bf.sha("tpl"),
                        lineage=tuple(lineage))

    def context(self, parent_dir, parent_sha, stage, lineage=()):
        return CurrentContext(parent=self.model_ref(parent_dir, parent_sha, lineage), stage=stage, families=("sql",),
                              tasks={"sql": "sql/target"}, datasets={"sql/source/train": bf.sha("data")},
                              runtimes=("trl-sft",), eval_protocol="fake-eval", output_protocols={"sql": "sql"})

    def executable(self, record):
        return "dataset missing: fake" if record.card.id.startswith("X") else None

    def compile(self, entry, ctx):
        """Features that BCIT routes to the PLAN's action (Q = 0.075 rejects, 0.375 validates,
        1.0 with grade-A replicated evidence trains)."""
        grade, delta = {"reject": ("B", 1.0), "validate": ("B", 5.0), "train": ("A", 10.0)}[PLAN[entry.record.card.id][0]]
        return features_from_row({"id": entry.record.card.id, "grade": grade, "delta_src": delta, "kappa": 10.0,
                                  "family": 1, "data": 1, "runtime": 1, "parent": 1, "protocol": 1, "H": 0,
                                  "nu": "restart", "chi": int(grade == "A"), "is_new": False})

    def model_sha(self, model_dir):
        return content_hash({"q": _q(model_dir), "dir": Path(model_dir).name})

    def evaluate(self, model_dir, split, out_dir):
        q = _q(model_dir)
        sha = _write_model(model_dir, q) if False else content_hash({"q": q, "dir": Path(model_dir).name})
        return {"sql/target": _suite("sql/target", "exec_acc", q, sha, split),
                "ifeval": _suite("ifeval", "prompt_strict", 50.0, sha, split)}

    def _train(self, card, parent_dir, out_dir, run_key, gain, role):
        steps = trial_steps(card, 0.2) if role == "trial" else card.budget.steps
        done = Path(out_dir) / "result.json"
        if done.exists():  # like trainers.train: idempotent on run_key
            return TrainResult.model_validate_json(done.read_text())
        _log(self.run_dir, op="train", key=run_key, phase="start")
        maybe_kill(f"{role}:{card.id}:mid")
        sha = _write_model(out_dir, _q(parent_dir) + gain)
        result = TrainResult(card_id=card.id, run_key=run_key, parent_sha256=content_hash({"q": _q(parent_dir),
                             "dir": Path(parent_dir).name}), checkpoint=out_dir, checkpoint_sha256=sha, steps=steps,
                             fraction=0.2 if role == "trial" else 1.0, wall_seconds=1.5,
                             never_promotable=role == "trial")
        done.write_text(result.model_dump_json())
        _log(self.run_dir, op="train", key=run_key, phase="done")
        maybe_kill(f"{role}:{card.id}:done")
        return result

    def trial(self, card, parent_dir, out_dir, run_key, measure):
        verdict = PLAN[card.id][1]
        run = self._train(card, parent_dir, out_dir, run_key, PLAN[card.id][2] * 0.2, "trial")
        return TrialResult(verdict=verdict, delta_val=PLAN[card.id][2] * 0.2, retention_deltas={"ifeval.prompt_strict": 0.0},
                           reasons=(f"fake {verdict}",), train=run)

    def train(self, card, parent_dir, out_dir, run_key, resume_from):
        return self._train(card, parent_dir, out_dir, run_key, PLAN[card.id][2], "train")

    def gate(self, card, initial, parent, child, run):
        gain = child["sql/target"].metrics["exec_acc"] - parent["sql/target"].metrics["exec_acc"]
        check = GateCheck(name="target", passed=gain > 0, numbers={"gain": gain}, reason=f"gain {gain:+.1f} pp")
        return GateVerdict(promote=gain > 0, decided_by="all_passed" if gain > 0 else "target", checks=(check,),
                           u_prom=gain / 10, child_sha256=child["sql/target"].identity.model_sha256,
                           parent_sha256=parent["sql/target"].identity.model_sha256,
                           initial_sha256=initial["sql/target"].identity.model_sha256)

    def promote(self, run_dir, child_dir, verdict):
        child_sha = verdict.child_sha256
        maybe_kill("promote")
        dest = Path(run_dir) / "parents" / child_sha[:16]
        if not dest.exists():
            shutil.copytree(child_dir, dest.with_suffix(".tmp"), dirs_exist_ok=True)
            os.replace(dest.with_suffix(".tmp"), dest)
        return str(dest)

    def captrack(self, initial, child):
        d = child["sql/target"].metrics["exec_acc"] - initial["sql/target"].metrics["exec_acc"]
        return {"CAN": d, "CAN/C1": d, "WILL": None}

    def observation(self, entry, event, parent, stage):
        gain = event.target_gain if event.target_gain is not None else (event.trial_delta or 0.0)
        return bf.record(entry.record.card.id, delta=gain, seed=(event.episode_id, event.seq))

    def propose(self, library):
        return []


def ledger_rows(run_dir: Path) -> list[dict]:
    """The real ledger's charges of the fake episode, as {"key", "h"} rows."""
    from trainers.ledger import Ledger

    return [{"key": r["key"], "h": r["device_hours"]} for r in Ledger(str(run_dir / "ledger.sqlite")).charges("E-fake")]


class KillingBank:
    """The real bank, with kill points right after its writes."""

    def __init__(self, bank: Bank):
        self.bank = bank

    def record_decision(self, episode_id, decision):
        self.bank.record_decision(episode_id, decision)
        maybe_kill(f"decided:{decision.candidate_id}")

    def append_event(self, event):
        self.bank.append_event(event)
        maybe_kill(f"appended:{event.candidate_id}")

    def stage_observation(self, episode_id, record):
        return self.bank.stage_observation(episode_id, record)

    def finish_episode(self, episode_id):
        self.bank.finish_episode(episode_id)

    def events(self, episode_id):
        return self.bank.events(episode_id)

    def consolidate(self, episode_id, artefacts=None):
        return self.bank.consolidate(episode_id, artefacts=artefacts)

    def artefact(self, kind, version=None):
        return self.bank.artefact(kind, version)


def library_bank(path: Path, cards=tuple(PLAN)) -> Bank:
    """A bank whose current library lists these cards (the PLAN's by default) in order."""
    if path.exists():
        return Bank.open(path)
    bank = Bank.init(path)
    bank.import_records([bf.record(cid, seed=cid) for cid in cards], library_note="fake seed library")
    return bank


def make_ctx(run_dir: Path, budget_h: float = 100.0, max_rejections: int = 5, policy: str = "bcit",
             fallback_lease: int = 1, cards=tuple(PLAN), ports=None, approve: str | None = None,
             gonogo_model: str | None = None, extrapolation_model: str | None = None, episode_id: str = "E-fake"):
    """`gonogo_model`: a go/no-go file, frozen into the run as agent run freezes it (bcit_predictive);
    `extrapolation_model`: an extrapolation file, frozen likewise (any policy); `episode_id`: another
    id, for a second episode in a bank copied from a first."""
    from agent.run import extrapolation_model as extrapolation
    from agent.config import RunConfig
    from agent.run.audit import RunAudit
    from agent.run.gonogo_model import freeze_copy, read_model
    from agent.run.manifest import Evaluators, ModelAt, WorldId, build_manifest
    from agent.run.rundir import RunDir
    from agent.loop.state import Ctx, Entry
    from trainers.ledger import Ledger

    run_dir.mkdir(parents=True, exist_ok=True)
    rd = RunDir(run_dir)
    bank = library_bank(run_dir / "bank.sqlite", cards)
    base = run_dir / "base"
    base_sha = _write_model(str(base), 40.0)
    if not rd.started():  # a resumed episode reads the manifest it froze, never the bank's head
        cfg = RunConfig(policy=policy, bank=str(run_dir / "bank.sqlite"), world="test", fallback_lease=fallback_lease,
                        max_consecutive_rejections=max_rejections, approve=approve, gonogo_model=gonogo_model,
                        extrapolation_model=extrapolation_model)
        model, fit = read_model(cfg), extrapolation.read_model(cfg)
        if model is not None:
            freeze_copy(rd, model[0])
        if fit is not None:
            extrapolation.freeze_copy(rd, fit[0])
        rd.freeze(build_manifest(
            episode_id=episode_id, config=cfg, budget_h=budget_h,
            initial=ModelAt(dir=str(base), sha256=base_sha),
            world=WorldId(size="test", recipe_sha256=bf.sha("recipe"), chat_template_sha256=bf.sha("tpl")),
            library_version=bank.current_library_version(), candidate_hashes=[], evaluators=Evaluators(
                suites=("sql/target", "ifeval"), eval_protocol="fake-eval", backend="transformers", n=1, batch_size=1,
                seed=0), datasets={}, allowlist={}, gonogo=model[1] if model else None,
            extrapolation=fit[1] if fit else None))
    manifest = rd.manifest()
    entries = {e.hash: Entry(e.hash, e.record, e.conflicted) for e in bank.library_records(manifest.library_version)}
    bank.start_episode(episode_id, manifest.manifest_hash, manifest.library_version)
    ctx = Ctx(rundir=rd, episode_id=episode_id, manifest=manifest, entries=entries, ports=ports or FakePorts(run_dir),
              bank=KillingBank(bank), ledger=Ledger(str(rd.ledger_file)), audit=RunAudit(rd, manifest))
    initial = {"episode_id": episode_id, "manifest_hash": manifest.manifest_hash, "cursor": 0, "seq": 0, "stage": 0,
               "parent_dir": str(base), "parent_sha": base_sha, "spent_h": 0.0, "consecutive_rejections": 0,
               "proposals_authorized": 0, "leases_used": 0, "stop_reason": None}
    return ctx, initial, bank


def run_fake(run_dir: Path, **kw) -> dict:
    from agent.loop.episode import drive

    ctx, initial, bank = make_ctx(run_dir, **kw)
    try:
        return drive(ctx, initial, run_dir / "checkpoints.sqlite")
    finally:
        bank.close()


if __name__ == "__main__":
    final = run_fake(Path(sys.argv[1]))
    print(json.dumps({"stop_reason": final.get("stop_reason"), "seq": final.get("seq")}))
