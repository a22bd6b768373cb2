"""The loop's nodes: small `State -> partial State` functions (see agent/loop/graph.py).

Every node may run twice: LangGraph resumes a crashed episode at the start of the node that
was running. So a node that has an effect keys it by (episode, decision hash):
- results (decision, trial, full run, evaluations, verdict) are written atomically where
  agent/run/rundir.py says and read back on a re-run instead of being recomputed;
- ledger charges carry the key `<decision hash>:<role>` and the ledger ignores a key it has;
- the bank freezes a decision once per hash and an event once per (episode, seq);
- the trainer is idempotent on its run key `<episode>:<decision hash>:<role>`.

The rules are not here: routing, the quota and the lease are policies' (`authorize`,
`next_state`, `after_trial`, and the trial verdict a policy acts on `acted_verdict`), budget
arithmetic is the ledger's (trainers/ledger.py), a trial's measurement and verdict are
trainers.trial's, the adoption rule is policies.gate's. What a node pays and keeps (a result
computed once, an evaluation charged once, the budget check) is agent/loop/charges.py.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from langgraph.runtime import Runtime

from experience_bank.families import target_metric
from experience_bank.files import write_atomic
from experience_bank.hashing import canonical_json
from experience_bank.errors import BadInput
from experience_bank.cards import CandidateCard
from experience_bank.frozen import parse_model
from experience_bank.records import ActedTrial, ExtrapolatedRetention
from experience_bank.decisions import Decision, Event, Features
from experience_bank.runcache import was_cached
from experience_bank.results import GateVerdict, SuiteResult, TrainResult, TrialResult
from policies import EpisodeState, after_trial, authorize as route, next_state
from policies.authorize import SKIP_RULE, prior_input
from policies.curves import card_facts
from policies.gate import trial_paired_se
from policies.gonogo import top_contributions
from policies.predictive import prior_decision
from policies.trial_rules import OwnVerdict, TrialFacts, acted_verdict
from trainers.steps import TrialRefused, curve_steps
from trainers.trial import Reading, measurement
from agent.loop.approval import hold
from agent.loop.charges import budget, charged, evaluation, evals_to_pay, fits, once, spent
from agent.loop.state import Ctx, State
from agent.run.approvals import why
from agent.run.extrapolation_model import frozen_guard
from agent.run.gonogo_model import frozen_model
from agent.run.manifest import ENDPOINT_SPLIT
from agent.loop.proposer import load_or_propose
from agent.loop.reporting import refit_plan, report_inputs
from agent.views.modelcard import write_promotion_cards
from agent.views.report import write_report

# --- the decision at the cursor ------------------------------------------------------


def _card(ctx: Ctx, state: State) -> CandidateCard:
    return ctx.entries[state["record_hash"]].record.card


def _episode_state(state: State) -> EpisodeState:
    return EpisodeState(new_proposals_used=state.get("proposals_authorized", 0), leases_used=state.get("leases_used", 0),
                        trial_gains=tuple(state.get("trial_gains") or ()))


# --- propose, filter, select -------------------------------------------------------------


def propose(state: State, runtime: Runtime[Ctx]) -> dict:
    """Catalogue candidates (the library) plus at most q LLM proposals (kept in proposals.json)."""
    ctx = runtime.context
    library = list(ctx.entries)
    accepted = load_or_propose(ctx.run_dir, lambda: ctx.ports.propose([ctx.entries[h] for h in library]))
    for entry in accepted:
        ctx.entries[entry.hash] = entry
    return {"candidates": library + [e.hash for e in accepted], "n_proposed": len(library) + len(accepted)}


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
    write_atomic(ctx.rundir.filtered_file, canonical_json(dropped))
    return {"candidates": kept, "n_dropped": len(dropped)}


def select(state: State, runtime: Runtime[Ctx]) -> dict:
    """Pick the next candidate, or a stop reason (stop rules are frozen in the manifest)."""
    ctx = runtime.context
    stop = ctx.manifest.stop
    cursor = state.get("cursor", 0)
    if spent(ctx) >= budget(ctx):
        reason = "budget_exhausted"
    elif state.get("consecutive_rejections", 0) >= stop.max_consecutive_rejections:
        reason = "consecutive_rejections"
    elif stop.max_candidates is not None and cursor >= stop.max_candidates:
        reason = "max_candidates"
    elif cursor >= len(state["candidates"]):
        reason = "candidates_exhausted"
    else:
        h = state["candidates"][cursor]
        return {"record_hash": h, "candidate_id": ctx.entries[h].record.card.id, "decision_hash": None, "action": None,
                "rule": None, "trial_verdict": None, "proceed": False, "train_status": None, "verdict": None,
                "decided_by": None, "refused": None}
    return {"stop_reason": reason}


def after_select(state: State) -> str:
    return "endpoint" if state.get("stop_reason") else "authorize"


# --- authorize ---------------------------------------------------------------------------


def _lineage(state: State) -> tuple[str, ...]:
    # a checkpoint written before the field existed resumes with the lineage unknown
    return tuple(state.get("lineage") or ())


def authorize(state: State, runtime: Runtime[Ctx]) -> dict:
    """Compile outcome-blind features, authorize, and freeze the decision before any outcome."""
    ctx = runtime.context
    entry = ctx.entries[state["record_hash"]]
    episode = _episode_state(state)
    policy = ctx.manifest.policy
    current = ctx.ports.context(state["parent_dir"], state["parent_sha"], state["stage"], _lineage(state))
    # bcit_predictive's routing reads the run's frozen go/no-go and the card (its trial skip); the audit, the same
    prior = prior_input(policy.name, frozen_model(ctx.rundir, ctx.manifest), card_facts(entry.record.card))
    decision = once(ctx.rundir.decision_file(state["cursor"]),
                    lambda: route(ctx.ports.compile(entry, current), policy.name, episode, policy.config, prior),
                    Decision)
    ctx.bank.record_decision(ctx.episode_id, decision)
    ctx.audit.decision(decision, entry.record, current, episode)
    return {"decision_hash": decision.decision_hash, "action": decision.action, "rule": decision.rule,
            "proposals_authorized": next_state(episode, decision).new_proposals_used}


def after_authorize(state: State) -> str:
    return {"reject": "commit", "validate": "validate", "train": "train"}[state["action"]]


# --- validate, train, gate ---------------------------------------------------------------


def _measure(ctx: Ctx, card: CandidateCard, parent_val: dict, initial_val: dict, seen: dict | None = None):
    """The trial checkpoint's measurement: evaluated (and charged) like every model, then
    trainers.trial.measurement with the gate's retention metrics and unparseable limit.
    `seen["child"]`: the child's results, kept for the trial's paired SE."""
    g = ctx.manifest.gate

    def measure(checkpoint: str):
        child = evaluation(ctx, checkpoint, ctx.ports.model_sha(checkpoint), "validation")
        if seen is not None:
            seen["child"] = child
        delta, retention, hard = measurement(child, parent_val, initial_val, target=target_metric(card.family),
                                             retention=(f"{g.ifeval_suite}.{g.ifeval_prompt_metric}",
                                                        f"{g.ifeval_suite}.{g.ifeval_instruction_metric}"),
                                             max_unparseable_share=g.max_unparseable_share)
        metrics = {f"{s}.{k}": v for s, r in child.items() for k, v in r.metrics.items() if v is not None}
        return Reading(delta, retention, hard, metrics)
    return measure


def validate(state: State, runtime: Runtime[Ctx]) -> dict:
    """Bounded trial from the current parent; policies.after_trial routes its verdict."""
    ctx = runtime.context
    card, dh = _card(ctx, state), state["decision_hash"]
    initial = ctx.manifest.initial
    fraction = ctx.manifest.trial.fraction
    try:
        trial_h = ctx.cost.estimate_trial(card, fraction)
    except TrialRefused as exc:  # no bounded trial exists for this card: a Fail that never ran
        return _after_verdict(ctx, _episode_state(state), "fail", f"trial refused: {exc.reason}", refused=exc.reason)
    models = 1 + len(curve_steps(card, fraction))  # the trial's end and its curve's snapshots
    estimate = trial_h + ctx.cost.estimate_eval(models) + evals_to_pay(ctx, [initial.sha256, state["parent_sha"]],
                                                                        "validation")
    if not ctx.rundir.trial_file(dh).exists() and not fits(ctx, estimate):
        return {"trial_verdict": "not_started", "decided_by": "budget: the trial does not fit", "proceed": False,
                "refused": f"budget: the trial needs {estimate:.3f} h", "spent_h": spent(ctx)}
    initial_val = evaluation(ctx, initial.dir, initial.sha256, "validation")
    parent_val = evaluation(ctx, state["parent_dir"], state["parent_sha"], "validation")
    seen: dict = {}
    result = once(ctx.rundir.trial_file(dh), lambda: _with_paired_se(ctx, card, ctx.ports.trial(
        card, state["parent_dir"], str(ctx.rundir.trainer_out(dh, "trial")), f"{ctx.episode_id}:{dh[:16]}:trial",
        _measure(ctx, card, parent_val, initial_val, seen)), seen.get, parent_val, initial_val), TrialResult)
    ctx.ledger.charge_run(ctx.episode_id, f"{dh}:trial", card, result.train, ctx.cost,
                          cached=was_cached(result.train.checkpoint))
    own, episode, check = _own_verdict(ctx, card, _decision(ctx, state).features, result, _episode_state(state))
    write_atomic(ctx.rundir.acted_file(dh), ActedTrial(verdict=own.verdict, reason=own.reason,
                                                       contributions=own.contributions,
                                                       retention_extrapolated=check).model_dump_json())
    return _after_verdict(ctx, episode, own.verdict, own.reason or "; ".join(result.reasons) or result.verdict)


def _own_verdict(ctx: Ctx, card: CandidateCard, features: Features, trial: TrialResult,
                 episode: EpisodeState) -> tuple[OwnVerdict, EpisodeState, ExtrapolatedRetention | None]:
    """The verdict the run's policy acts on, the episode state after it and the trial's extrapolated
    retention check (policies.trial_rules.acted_verdict; the audit's walk calls the same), from the
    trial and the run's frozen inputs: the gate's threshold and guard, the go/no-go model's copy and
    the extrapolation model's copy."""
    facts = TrialFacts(trial.verdict, trial.curve_table(), ctx.manifest.gate.min_gain_pp[card.family],
                       trial.delta_val, card_facts(card), features, frozen_model(ctx.rundir, ctx.manifest),
                       frozen_guard(ctx.rundir, ctx.manifest))
    own, after, check = acted_verdict(ctx.manifest.policy.name, facts, episode)
    if own.verdict is None:  # only where the manifest froze no model for a policy that reads one
        raise BadInput(f"{ctx.rundir.path}: {own.reason}; start a new run with --gonogo-model")
    return own, after, check


def _acted_before(ctx: Ctx, card: CandidateCard, decision: Decision, trial: TrialResult) -> ActedTrial:
    """What a trial's policy acted on where its validate node kept no acted.json (a run directory
    written before that file existed, resumed between its trial and its commit): recomputed from the frozen inputs. The contributions
    and the extrapolated retention depend on the trial and the frozen models, not on the episode state,
    so a fresh state gives the ones the verdict was decided with."""
    own, _, check = _own_verdict(ctx, card, decision.features, trial, EpisodeState())
    return ActedTrial(verdict=own.verdict, reason=own.reason, contributions=own.contributions,
                      retention_extrapolated=check)


def _decision(ctx: Ctx, state: State) -> Decision:
    return parse_model(Decision, ctx.rundir.decision_file(state["cursor"]).read_text(encoding="utf-8"))


def _with_paired_se(ctx: Ctx, card: CandidateCard, trial: TrialResult, seen: Callable[[str], Any],
                    parent_val: dict, initial_val: dict) -> TrialResult:
    """The trial's record with the paired SE of its deltas (the verdict stays the single run's),
    from the child's results its measurement saw; unchanged where no measurement ran here (a
    trainer that served a stored trial, or a fake)."""
    child = seen("child")
    if child is None:
        return trial
    se = trial_paired_se(initial_val, parent_val, child, target_metric(card.family), ctx.manifest.gate)
    return trial.model_copy(update={"paired_se_pp": se})


def _after_verdict(ctx: Ctx, episode: EpisodeState, verdict: str, why: str, refused: str | None = None) -> dict:
    then, _, episode = after_trial(verdict, episode, ctx.manifest.policy.config)
    return {"trial_verdict": verdict, "decided_by": why, "proceed": then == "train", "refused": refused,
            "leases_used": episode.leases_used, "trial_gains": list(episode.trial_gains), "spent_h": spent(ctx)}


def after_validate(state: State) -> str:
    return "train" if state["proceed"] else "commit"


def train(state: State, runtime: Runtime[Ctx]) -> dict:
    """Full TRL run from the current parent (continuing the trial's prefix when nu = continue)."""
    ctx = runtime.context
    card, dh = _card(ctx, state), state["decision_hash"]
    initial = ctx.manifest.initial
    trial = ctx.rundir.trial(dh)
    prefix = trial.train if card.nu == "continue" and trial is not None else None
    estimate = ctx.cost.estimate_full(card, prefix.steps if prefix else 0) + ctx.cost.estimate_eval(1) + evals_to_pay(
        ctx, [initial.sha256, state["parent_sha"]], "adoption")
    if not ctx.rundir.train_file(dh).exists() and not fits(ctx, estimate):
        return {"train_status": "not_started", "decided_by": "budget: the full run does not fit",
                "refused": f"budget: the full run needs {estimate:.3f} h", "spent_h": spent(ctx)}
    if (no := hold(ctx, state, "train", estimate)) is not None:  # --approve train, answered no
        return {"train_status": "not_started", "decided_by": why(no), "refused": why(no),
                "spent_h": spent(ctx)}
    result = once(ctx.rundir.train_file(dh), lambda: ctx.ports.train(
        card, state["parent_dir"], str(ctx.rundir.trainer_out(dh, "train")), f"{ctx.episode_id}:{dh[:16]}:train",
        prefix.checkpoint if prefix else None), TrainResult)
    ctx.ledger.charge_run(ctx.episode_id, f"{dh}:train", card, result, ctx.cost, cached=was_cached(result.checkpoint))
    return {"train_status": "done", "spent_h": spent(ctx),
            "decision_hash": dh, "candidate_id": card.id}  # the same values: observers (the registry) read them


def gate(state: State, runtime: Runtime[Ctx]) -> dict:
    """The shared adoption rule g on adoption data: initial, parent and child."""
    ctx = runtime.context
    dh, initial = state["decision_hash"], ctx.manifest.initial
    child = ctx.rundir.train(dh)
    initial_ad = evaluation(ctx, initial.dir, initial.sha256, "adoption")
    parent_ad = evaluation(ctx, state["parent_dir"], state["parent_sha"], "adoption")
    child_ad = evaluation(ctx, child.checkpoint, child.checkpoint_sha256, "adoption")
    verdict = once(ctx.rundir.verdict_file(dh),
                   lambda: ctx.ports.gate(_card(ctx, state), initial_ad, parent_ad, child_ad, child), GateVerdict)
    if verdict.promote and (no := hold(ctx, state, "promote", charged(ctx, [f"{dh}:train"])[0])) is not None:
        return {"verdict": "rollback", "decided_by": why(no), "spent_h": spent(ctx)}
    return {"verdict": "promote" if verdict.promote else "rollback", "decided_by": verdict.decided_by,
            "spent_h": spent(ctx)}


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


def _effects(ctx: Ctx, state: State, decision: Decision) -> dict[str, Any]:
    """The typed Event fields of one decision that ran, read from its step files and the ledger."""
    rd, dh, card = ctx.rundir, decision.decision_hash, _card(ctx, state)
    trial, run, verdict = rd.trial(dh), rd.train(dh), rd.verdict(dh)
    trial_keys = [f"{dh}:trial"] + ([f"eval:{sha}:validation" for sha in (*(s.sha256 for s in trial.train.snapshots),
                                                                          trial.train.checkpoint_sha256)]
                                     if trial else [])
    keys, out, artefacts = trial_keys + [f"{dh}:train"], {}, []
    if trial:
        artefacts.append(trial.train.checkpoint)
        acted = rd.acted(dh) or _acted_before(ctx, card, decision, trial)
        out |= {"trial_delta": trial.delta_val, "trial_retention": {k.partition(".")[2]: v for k, v in
                                                                    trial.retention_deltas.items()},
                "trial_curve": trial.curve_table(), "trial_verdict": trial.verdict,
                "trial_contributions": acted.contributions,
                "trial_retention_extrapolated": acted.retention_extrapolated}
    if decision.rule == SKIP_RULE:  # no trial ran: why the prior-only go/no-go let it skip
        skip = prior_decision(frozen_model(ctx.rundir, ctx.manifest), card_facts(card), decision.features)
        out["prior_contributions"] = top_contributions(skip)
    if run:
        artefacts.append(run.checkpoint)
    metrics: dict[str, float] = {}
    if verdict:
        keys.append(f"eval:{run.checkpoint_sha256}:adoption")
        child, parent = rd.evaluation(run.checkpoint_sha256, "adoption"), rd.evaluation(state["parent_sha"], "adoption")
        initial = rd.evaluation(ctx.manifest.initial.sha256, "adoption")
        metrics = {f"{s}.{k}": v for s, r in child.items() for k, v in r.metrics.items() if v is not None}
        key, g = target_metric(card.family), ctx.manifest.gate
        out |= {"target_metric": key, "target_gain": _delta(child, parent, key), "gate_decided_by": verdict.decided_by,
                "retention": {m: d for m in (g.ifeval_prompt_metric, g.ifeval_instruction_metric)
                              if (d := _delta(child, initial, f"{g.ifeval_suite}.{m}")) is not None}}
    cost, wall = charged(ctx, keys)
    out["trial_device_hours"] = round(charged(ctx, trial_keys)[0], 9)
    fidelity = ({"trial_delta_val": out["trial_delta"], "full_delta_adoption": out["target_gain"]}
                if trial and out.get("target_gain") is not None else None)
    return out | {"cost_device_hours": round(cost, 9), "wall_seconds": round(wall, 3), "metrics": metrics,
                  "fidelity": fidelity, "artefacts": tuple(os.path.relpath(a, rd.path) for a in artefacts)}


def _delta(after: dict[str, SuiteResult], before: dict[str, SuiteResult], key: str) -> float | None:
    suite, _, name = key.partition(".")
    a = after[suite].metrics.get(name) if suite in after else None
    b = before[suite].metrics.get(name) if suite in before else None
    return None if None in (a, b) else a - b


def _full_run(state: State) -> str | None:
    if state["action"] == "reject":
        return None
    if state.get("train_status") == "done":
        return "ran"
    return "refused" if state.get("refused") and state.get("train_status") == "not_started" else "not_authorized"


def commit(state: State, runtime: Runtime[Ctx]) -> dict:
    """Move or keep the parent, append the Event, stage the new evidence, write the outcome."""
    ctx = runtime.context
    decision = _decision(ctx, state)
    outcome, reason = _outcome(state)
    rejected = outcome == "rejected"
    effects = {} if rejected else _effects(ctx, state, decision)
    # the trial's own verdict where it ran (what every policy's counterfactual reads, also where a policy
    # acted on its own rule); else the state's (a refused trial is a fail that never ran)
    trial_verdict = effects.pop("trial_verdict", None) or (
        state.get("trial_verdict") if state.get("trial_verdict") in ("pass", "fail", "inconclusive") else None)
    event = Event(episode_id=ctx.episode_id, seq=state.get("seq", 0), candidate_id=decision.candidate_id,
                  decision=decision, action=decision.action, cost_device_hours=effects.pop("cost_device_hours", 0.0),
                  wall_seconds=effects.pop("wall_seconds", 0.0), metrics=effects.pop("metrics", {}),
                  outcome=outcome, reason=reason[:500], trial_verdict=trial_verdict, full_run=_full_run(state),
                  refused=state.get("refused") or None, **effects)
    parent_dir, parent_sha, stage, lineage = state["parent_dir"], state["parent_sha"], state["stage"], _lineage(state)
    if outcome == "promoted":
        run, verdict = ctx.rundir.train(decision.decision_hash), ctx.rundir.verdict(decision.decision_hash)
        write_promotion_cards(ctx, state, event, _card(ctx, state), run, verdict)  # the folder carries its card
        parent_dir = ctx.ports.promote(str(ctx.run_dir), run.checkpoint, verdict)
        parent_sha, stage, lineage = run.checkpoint_sha256, stage + 1, (*lineage, state["parent_sha"])
    ctx.bank.append_event(event)
    if not rejected and outcome != "not_started":
        observed = ctx.ports.observation(ctx.entries[state["record_hash"]], event,
                                         ctx.ports.model_ref(state["parent_dir"], state["parent_sha"], _lineage(state)),
                                         state["stage"])
        if observed is not None:
            ctx.bank.stage_observation(ctx.episode_id, observed)
    ctx.audit.outcome(event, _card(ctx, state))
    return {"seq": event.seq + 1, "cursor": state["cursor"] + 1, "parent_dir": parent_dir, "parent_sha": parent_sha,
            "stage": stage, "lineage": list(lineage),
            "consecutive_rejections": state.get("consecutive_rejections", 0) + 1 if rejected else 0,
            "spent_h": spent(ctx), "verdict": state.get("verdict")}


def endpoint(state: State, runtime: Runtime[Ctx]) -> dict:
    """Score the final parent once on the held-out test split (charged like any evaluation;
    `fits` kept its cost back, so it always fits)."""
    ctx = runtime.context
    evaluation(ctx, state["parent_dir"], state["parent_sha"], ENDPOINT_SPLIT, key=f"endpoint:{ENDPOINT_SPLIT}")
    return {"spent_h": spent(ctx)}


def consolidate(state: State, runtime: Runtime[Ctx]) -> dict:
    """Close the history and consolidate it into a new frozen library version, which stores the
    go/no-go refit on the episode's paired runs where the run froze one (agent/run/gonogo_refit.py;
    planned before anything is written, made in the bank's transaction for the new version's number)."""
    ctx = runtime.context
    refit = refit_plan(ctx)
    ctx.bank.finish_episode(ctx.episode_id)
    return {"library_version": ctx.bank.consolidate(ctx.episode_id, artefacts=refit.texts if refit else None)}


def report(state: State, runtime: Runtime[Ctx]) -> dict:
    """Store what only the live episode can compute (report_inputs.json), then write runs/ID/report.md
    and report.html from the run directory alone."""
    ctx = runtime.context
    ctx.rundir.write_report_inputs(report_inputs(ctx, state))
    write_report(ctx.rundir)
    return {}
