"""The loop's nodes: small `State -> partial State` functions (see agent/graph.py).

Every node may run twice: LangGraph resumes a crashed episode at the start of the node that
was running. So a node that has an effect keys it by (episode, decision hash):
- results (decision, trial, full run, evaluations, verdict) are written atomically under
  `runs/ID/steps/<decision hash>/` and read back on a re-run instead of being recomputed;
- ledger charges carry the key `<decision hash>:<role>` and the ledger ignores a key it has;
- the bank freezes a decision once per hash and an event once per (episode, seq);
- the trainer is idempotent on its run key `<episode>:<decision hash>:<role>`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from langgraph.runtime import Runtime
from pydantic import BaseModel

from experience_bank.files import write_atomic
from experience_bank.hashing import canonical_json
from experience_bank.records import CandidateCard, Decision, Event, parse_model
from experience_bank.results import GateVerdict, SuiteResult, TrainResult, TrialResult
from agent.state import Ctx, State

# --- keyed results ---------------------------------------------------------------------


def once(path: Path, compute: Callable[[], Any], load: Callable[[str], Any]) -> Any:
    """The result stored at `path`, or compute it and store it (atomically) first."""
    if path.exists():
        return load(path.read_text(encoding="utf-8"))
    value = compute()
    plain = {k: v.model_dump(mode="json") for k, v in value.items()} if isinstance(value, dict) else value
    write_atomic(path, canonical_json(plain))
    return value


def _model_loader(cls: type[BaseModel]) -> Callable[[str], Any]:
    return lambda text: parse_model(cls, text)


def _suites_loader(text: str) -> dict[str, SuiteResult]:
    return {k: SuiteResult.model_validate_json(json.dumps(v)) for k, v in json.loads(text).items()}


def _budget_h(ctx: Ctx) -> float:
    return float(ctx.manifest["budget_device_hours"])


def _charge(ctx: Ctx, key: str, nominal_h: float, wall_s: float, what: str) -> float:
    """Charge the ledger once per key; return the device-hours of this charge."""
    hours = _hours(ctx, nominal_h, wall_s)
    ctx.ledger.charge(ctx.episode_id, key, hours, wall_s, what)
    return hours


def _fits(ctx: Ctx, estimate_h: float) -> bool:
    """A run is started only if its estimated cost fits in what is left."""
    return ctx.ledger.spent(ctx.episode_id) + estimate_h <= _budget_h(ctx) + 1e-9


def _card(ctx: Ctx, state: State) -> CandidateCard:
    return ctx.entries[state["record_hash"]].record.card


def _evaluation(ctx: Ctx, model_dir: str, model_sha: str, split: str) -> dict[str, SuiteResult]:
    """Evaluate a model on a split once per episode (cached and charged under its hash)."""
    out = ctx.run_dir / "evals" / f"{model_sha[:16]}-{split}"

    def timed() -> dict[str, SuiteResult]:
        start = time.monotonic()
        results = ctx.ports.evaluate(model_dir, split, str(out))
        write_atomic(out / "wall.json", json.dumps({"wall_seconds": round(time.monotonic() - start, 3)}))
        return results

    results = once(out / "results.json", timed, _suites_loader)
    wall = json.loads((out / "wall.json").read_text())["wall_seconds"]
    _charge(ctx, f"eval:{model_sha}:{split}", ctx.manifest["cost"]["eval_device_hours"], wall,
            f"evaluate {model_sha[:12]} on {split}")
    return results


def _eval_estimate(ctx: Ctx, shas: list[str], split: str) -> float:
    """Device-hours still to pay for evaluating these models on a split."""
    todo = [s for s in set(shas) if not (ctx.run_dir / "evals" / f"{s[:16]}-{split}" / "results.json").exists()]
    return len(todo) * ctx.manifest["cost"]["eval_device_hours"]


def _spent(ctx: Ctx) -> float:
    return round(ctx.ledger.spent(ctx.episode_id), 9)


# --- propose, filter, select -------------------------------------------------------------


def propose(state: State, runtime: Runtime[Ctx]) -> dict:
    """Catalogue candidates (the library) plus at most q LLM proposals (kept in proposals.json)."""
    ctx = runtime.context
    library = list(ctx.entries)
    from agent.proposer import load_or_propose  # noqa: PLC0415 (the proposer imports the openai client)
    accepted = load_or_propose(ctx.run_dir, lambda: ctx.ports.propose([ctx.entries[h] for h in library]))
    for entry in accepted:
        ctx.entries[entry.hash] = entry
    return {"candidates": library + [e.hash for e in accepted], "n_proposed": len(library) + len(accepted),
            "node": "propose"}


def filter_candidates(state: State, runtime: Runtime[Ctx]) -> dict:
    """Drop what cannot be reproduced here (config, data, trainer or evaluator missing)."""
    ctx = runtime.context
    kept, dropped = [], {}
    for h in state["candidates"]:
        reason = ctx.ports.executable(ctx.entries[h].record)
        if reason is None:
            kept.append(h)
        else:
            dropped[ctx.entries[h].record.card.id] = reason
    write_atomic(ctx.run_dir / "filtered.json", canonical_json(dropped))
    return {"candidates": kept, "n_dropped": len(dropped), "node": "filter"}


def select(state: State, runtime: Runtime[Ctx]) -> dict:
    """Pick the next candidate, or a stop reason (stop rules are frozen in the manifest)."""
    ctx = runtime.context
    stop = ctx.manifest["stop"]
    cursor = state.get("cursor", 0)
    if _spent(ctx) >= _budget_h(ctx):
        reason = "budget_exhausted"
    elif state.get("consecutive_rejections", 0) >= stop["max_consecutive_rejections"]:
        reason = "consecutive_rejections"
    elif stop["max_candidates"] is not None and cursor >= stop["max_candidates"]:
        reason = "max_candidates"
    elif cursor >= len(state["candidates"]):
        reason = "candidates_exhausted"
    else:
        h = state["candidates"][cursor]
        return {"record_hash": h, "candidate_id": ctx.entries[h].record.card.id, "decision_hash": "", "action": "",
                "rule": "", "trial_verdict": "", "proceed": False, "train_status": "", "verdict": "", "decided_by": "",
                "node": "select"}
    return {"stop_reason": reason, "node": "select"}


def after_select(state: State) -> str:
    return "consolidate" if state.get("stop_reason") else "authorize"


# --- authorize ---------------------------------------------------------------------------


def authorize(state: State, runtime: Runtime[Ctx]) -> dict:
    """Compile outcome-blind features, authorize, and freeze the decision before any outcome."""
    ctx = runtime.context
    entry = ctx.entries[state["record_hash"]]
    episode = {"proposals_authorized": state.get("proposals_authorized", 0),
               "leases_used": state.get("leases_used", 0), "stage": state["stage"]}

    current = ctx.ports.context(state["parent_dir"], state["parent_sha"], state["stage"])
    path = ctx.run_dir / "steps" / f"{state['cursor']:03d}-decision.json"
    decision = once(path, lambda: ctx.ports.authorize(ctx.ports.compile(entry, current), episode),
                    _model_loader(Decision))
    ctx.bank.record_decision(ctx.episode_id, decision)
    ctx.audit.decision(decision, entry.record, current, episode)
    new_proposal = decision.features.is_new and decision.action != "reject"
    return {"decision_hash": decision.decision_hash, "action": decision.action, "rule": decision.rule,
            "proposals_authorized": episode["proposals_authorized"] + int(new_proposal), "node": "authorize"}


def after_authorize(state: State) -> str:
    return {"reject": "commit", "validate": "validate", "train": "train"}[state["action"]]


# --- validate, train, gate ---------------------------------------------------------------


def validate(state: State, runtime: Runtime[Ctx]) -> dict:
    """Bounded trial from the current parent: Pass -> train, Fail -> reject, Inconclusive -> lease."""
    ctx = runtime.context
    card, dh = _card(ctx, state), state["decision_hash"]
    step = ctx.step_dir(dh)
    initial = ctx.manifest["initial"]
    trial_h = card.budget.device_hours * ctx.manifest["trial_fraction"]
    estimate = trial_h + ctx.manifest["cost"]["eval_device_hours"] + _eval_estimate(
        ctx, [initial["sha256"], state["parent_sha"]], "validation")
    if not (step / "trial.json").exists() and not _fits(ctx, estimate):
        return {"trial_verdict": "not_started", "decided_by": "budget: the trial does not fit", "proceed": False,
                "spent_h": _spent(ctx), "node": "validate"}
    initial_val = _evaluation(ctx, initial["dir"], initial["sha256"], "validation")
    parent_val = _evaluation(ctx, state["parent_dir"], state["parent_sha"], "validation")
    result = once(step / "trial.json", lambda: ctx.ports.trial(
        card, state["parent_dir"], str(step / "trial"), f"{ctx.episode_id}:{dh[:16]}:trial", parent_val, initial_val),
        _model_loader(TrialResult))
    _charge(ctx, f"{dh}:trial", trial_h + ctx.manifest["cost"]["eval_device_hours"], result.train.wall_seconds,
            f"trial of {card.id}")
    leased = result.verdict == "inconclusive" and state.get("leases_used", 0) < ctx.manifest["fallback_lease"]
    return {"trial_verdict": result.verdict, "decided_by": "; ".join(result.reasons) or result.verdict,
            "proceed": result.verdict == "pass" or leased, "leases_used": state.get("leases_used", 0) + int(leased),
            "spent_h": _spent(ctx), "node": "validate"}


def after_validate(state: State) -> str:
    return "train" if state["proceed"] else "commit"


def train(state: State, runtime: Runtime[Ctx]) -> dict:
    """Full TRL run from the current parent (continuing the trial's prefix when nu = continue)."""
    ctx = runtime.context
    card, dh = _card(ctx, state), state["decision_hash"]
    step = ctx.step_dir(dh)
    trial_file = step / "trial.json"
    prefix = parse_model(TrialResult, trial_file.read_text()).train.checkpoint if (
        card.nu == "continue" and trial_file.exists()) else None
    full_h = card.budget.device_hours * (1.0 - ctx.manifest["trial_fraction"] if prefix else 1.0)
    initial = ctx.manifest["initial"]
    estimate = full_h + ctx.manifest["cost"]["eval_device_hours"] + _eval_estimate(
        ctx, [initial["sha256"], state["parent_sha"]], "adoption")
    if not (step / "train.json").exists() and not _fits(ctx, estimate):
        return {"train_status": "not_started", "decided_by": "budget: the full run does not fit",
                "spent_h": _spent(ctx), "node": "train"}
    result = once(step / "train.json", lambda: ctx.ports.train(
        card, state["parent_dir"], str(step / "train"), f"{ctx.episode_id}:{dh[:16]}:train", prefix),
        _model_loader(TrainResult))
    _charge(ctx, f"{dh}:train", full_h, result.wall_seconds, f"full run of {card.id}")
    return {"train_status": "done", "spent_h": _spent(ctx), "node": "train"}


def gate(state: State, runtime: Runtime[Ctx]) -> dict:
    """The shared adoption rule g on adoption data: initial, parent and child."""
    ctx = runtime.context
    step = ctx.step_dir(state["decision_hash"])
    child = parse_model(TrainResult, (step / "train.json").read_text())
    initial = ctx.manifest["initial"]
    initial_ad = _evaluation(ctx, initial["dir"], initial["sha256"], "adoption")
    parent_ad = _evaluation(ctx, state["parent_dir"], state["parent_sha"], "adoption")
    child_ad = _evaluation(ctx, child.checkpoint, child.checkpoint_sha256, "adoption")
    verdict = once(step / "verdict.json", lambda: ctx.ports.gate(_card(ctx, state), initial_ad, parent_ad, child_ad,
                                                                 child), _model_loader(GateVerdict))
    return {"verdict": "promote" if verdict.promote else "rollback", "decided_by": verdict.decided_by,
            "spent_h": _spent(ctx), "node": "gate"}


def after_train(state: State) -> str:
    return "gate" if state["train_status"] == "done" else "commit"


# --- commit, consolidate, report ---------------------------------------------------------


def _outcome(state: State) -> tuple[str, str]:
    if state["action"] == "reject":
        return "rejected", state["rule"]
    if "not_started" in (state.get("trial_verdict"), state.get("train_status")):
        return "not_started", state["decided_by"]
    if state.get("trial_verdict") and not state.get("proceed"):
        return "trial_failed", f"trial {state['trial_verdict']}: {state['decided_by']}"
    return ("promoted" if state["verdict"] == "promote" else "rolled_back"), f"gate: {state['decided_by']}"


def _measured(ctx: Ctx, state: State, decision: Decision) -> dict[str, Any]:
    """Cost, wall time, metrics, fidelity and artefacts of one decision, read from its step files."""
    step, card, eval_h = ctx.step_dir(decision.decision_hash), _card(ctx, state), ctx.manifest["cost"]["eval_device_hours"]
    m: dict[str, Any] = {"cost": 0.0, "wall": 0.0, "metrics": {}, "fidelity": None, "artefacts": []}
    trial = parse_model(TrialResult, (step / "trial.json").read_text()) if (step / "trial.json").exists() else None
    run = parse_model(TrainResult, (step / "train.json").read_text()) if (step / "train.json").exists() else None
    if trial:
        m["cost"] += _hours(ctx, card.budget.device_hours * ctx.manifest["trial_fraction"] + eval_h, trial.train.wall_seconds)
        m["wall"] += trial.train.wall_seconds
        m["metrics"] |= {"trial.delta_val": trial.delta_val} | {f"trial.retention.{k}": v for k, v in trial.retention_deltas.items()}
        m["artefacts"].append(os.path.relpath(trial.train.checkpoint, ctx.run_dir))
    if run:
        full_h = card.budget.device_hours * (1.0 - ctx.manifest["trial_fraction"] if run.resumed_from else 1.0)
        m["cost"] += _hours(ctx, full_h, run.wall_seconds)
        m["wall"] += run.wall_seconds
        m["artefacts"].append(os.path.relpath(run.checkpoint, ctx.run_dir))
    if (step / "verdict.json").exists():
        child_dir = ctx.run_dir / "evals" / f"{run.checkpoint_sha256[:16]}-adoption"
        m["cost"] += _hours(ctx, eval_h, json.loads((child_dir / "wall.json").read_text())["wall_seconds"])
        child = _suites_loader((child_dir / "results.json").read_text())
        parent = _suites_loader((ctx.run_dir / "evals" / f"{state['parent_sha'][:16]}-adoption" / "results.json").read_text())
        m["metrics"] |= {f"{s}.{k}": v for s, r in child.items() for k, v in r.metrics.items() if v is not None}
        target = ctx.ports.target_metric(card)
        gain = _metric(child, target) - _metric(parent, target) if None not in (_metric(child, target), _metric(parent, target)) else None
        if gain is not None:
            m["metrics"]["gain." + target] = gain
        if trial and gain is not None:
            m["fidelity"] = {"trial_delta_val": trial.delta_val, "full_delta_adoption": gain}
    return m


def _metric(results: dict[str, SuiteResult], key: str) -> float | None:
    suite, _, name = key.partition(".")
    return results[suite].metrics.get(name) if suite in results else None


def _hours(ctx: Ctx, nominal_h: float, wall_s: float) -> float:
    cost = ctx.manifest["cost"]
    return nominal_h if cost["mode"] == "nominal" else wall_s / 3600.0 * cost["devices"]


def commit(state: State, runtime: Runtime[Ctx]) -> dict:
    """Move or keep the parent, append the Event, stage the new evidence, write the outcome."""
    ctx = runtime.context
    decision = parse_model(Decision, (ctx.run_dir / "steps" / f"{state['cursor']:03d}-decision.json").read_text())
    outcome, reason = _outcome(state)
    rejected = outcome == "rejected"
    m = _measured(ctx, state, decision) if not rejected else {"cost": 0.0, "wall": 0.0, "metrics": {},
                                                              "fidelity": None, "artefacts": []}
    event = Event(episode_id=ctx.episode_id, seq=state.get("seq", 0), candidate_id=decision.candidate_id,
                  decision=decision, action=decision.action, cost_device_hours=round(m["cost"], 9),
                  wall_seconds=round(m["wall"], 3), metrics=m["metrics"], fidelity=m["fidelity"], outcome=outcome,
                  reason=reason[:500], artefacts=tuple(m["artefacts"]))
    parent_dir, parent_sha, stage = state["parent_dir"], state["parent_sha"], state["stage"]
    if outcome == "promoted":
        step = ctx.step_dir(decision.decision_hash)
        run = parse_model(TrainResult, (step / "train.json").read_text())
        verdict = parse_model(GateVerdict, (step / "verdict.json").read_text())
        parent_dir = ctx.ports.promote(str(ctx.run_dir), run.checkpoint, verdict)
        parent_sha, stage = run.checkpoint_sha256, stage + 1
    ctx.bank.append_event(event)
    if not rejected and outcome != "not_started":
        observed = ctx.ports.observation(ctx.entries[state["record_hash"]], event,
                                         ctx.ports.model_ref(state["parent_dir"], state["parent_sha"]), state["stage"])
        if observed is not None:
            ctx.bank.stage_observation(ctx.episode_id, observed)
    ctx.audit.outcome(event, state.get("trial_verdict") or None)
    return {"seq": event.seq + 1, "cursor": state["cursor"] + 1, "parent_dir": parent_dir, "parent_sha": parent_sha,
            "stage": stage, "consecutive_rejections": state.get("consecutive_rejections", 0) + 1 if rejected else 0,
            "spent_h": _spent(ctx), "verdict": state.get("verdict", ""), "node": "commit"}


def consolidate(state: State, runtime: Runtime[Ctx]) -> dict:
    """Close the history and consolidate it into a new frozen library version."""
    ctx = runtime.context
    ctx.bank.finish_episode(ctx.episode_id)
    return {"library_version": ctx.bank.consolidate(ctx.episode_id), "node": "consolidate"}


def report(state: State, runtime: Runtime[Ctx]) -> dict:
    """Write runs/ID/report.md and report.html (pure over what the run stored)."""
    from agent.report import write_report  # noqa: PLC0415 (matplotlib)
    write_report(runtime.context, dict(state))
    return {"node": "report"}
