"""Outcome-blind audit of a recorded run: its ledger verified (policies/decision_ledger.py), every policy's
counterfactual walk over the same frozen decisions, and the audit metrics. The audit verifies every
decision and the chain first, fixes the head hash of the frozen decisions, and only then opens the
outcomes; the report names that head hash.

A cell is *authorized* by a policy when the policy trains it directly, or validates it and
the recorded trial passes, or is Inconclusive while the policy's fallback lease lasts (the
lease is spent in ledger order, per episode). A policy that would validate a cell whose
trial was never run leaves that cell undetermined: it is counted, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


from experience_bank.errors import BadInput
from experience_bank.decisions import Features
from policies import stats
from policies.authorize import (
    POLICIES, WITHOUT_APPLICABILITY, EpisodeState, PolicyConfig, after_trial, authorize, next_state, prior_input, undetermined,
)
from policies.curves import CardFacts, card_facts
from policies.features import compile as compile_features
from policies.gate import GateConfig
from policies.gonogo import GoNoGo
from policies.decision_ledger import Entry, OutcomeCell, ledger_paths, read_lines, read_outcomes, verify_ledger
from policies.outcomes import OUTCOME_CLASSES, UNCERTAIN
from policies.trial_rules import RetentionGuard, TrialFacts, acted_verdict

# --- counterfactual walks and metrics -----------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """A candidate in context as every policy sees it, plus (possibly) what happened."""

    candidate_id: str
    episode_id: str
    features: Features
    features_without_applicability: Features | None
    nu: str
    outcome: OutcomeCell | None
    card: CardFacts | None = None
    """The candidate's card facts (from the frozen record), which a learned trial rule reads."""


def walk(cells: list[Cell], policy: str, config: PolicyConfig, min_gain_pp: Mapping[str, float] | None = None,
         gonogo: GoNoGo | None = None, retention: RetentionGuard | None = None) -> list[dict]:
    """Route every cell in order under `policy`, spending quota and lease per episode.
    `min_gain_pp`: the gate's adoption threshold per family, which a policy with its own trial
    rule compares its prediction with (None: the gate's default); `gonogo`: the run's frozen
    go/no-go model (None: bcit_predictive's trial verdicts, and its trial skips, are undetermined); `retention`: the
    run's frozen extrapolation model and guard (None: the trials' retention is read as recorded)."""
    gains = dict(min_gain_pp) if min_gain_pp is not None else GateConfig().min_gain_pp
    rows, states = [], {}
    for c in cells:
        st = states.get(c.episode_id, EpisodeState())
        f = c.features_without_applicability if policy in WITHOUT_APPLICABILITY else c.features
        if f is None:
            rows.append({"action": None, "rule": "no frozen record to compile without B_i", "authorized": None, "spent": 0.0})
            continue
        prior = prior_input(policy, gonogo, c.card)
        d = authorize(f, policy, st, config, prior)
        if undetermined(d, prior):  # a Validate the frozen model might have made a skip: never guessed
            rows.append({"action": None, "rule": "no frozen go/no-go model or card to decide the trial skip",
                         "authorized": None, "spent": 0.0})
            states[c.episode_id] = next_state(st, d)
            continue
        authorized, spent, note, st = _execute(d.action, c, next_state(st, d), config, policy, gains, gonogo, retention)
        states[c.episode_id] = st
        rows.append({"action": d.action, "rule": d.rule, "authorized": authorized, "spent": spent, "after_trial": note})
    return rows


def _execute(action: str, c: Cell, st: EpisodeState, config: PolicyConfig, policy: str,
             min_gain_pp: Mapping[str, float], gonogo: GoNoGo | None = None, retention: RetentionGuard | None = None):
    """(authorized, device-hours spent, trial note, state after) for one routed cell."""
    o = c.outcome
    full = o.full_device_hours if o else 0.0
    if action == "reject":
        return False, 0.0, None, st
    if action == "train":
        return True, full, None, st
    if o is None or o.trial_verdict is None:
        return None, 0.0, "trial not recorded", st
    # a cell without its family (older ledgers) is held to the strictest family's threshold
    threshold = min_gain_pp[o.family] if o.family in min_gain_pp else max(min_gain_pp.values())
    # an episode's cell carries its whole curve; a retrospective's only the short runs' targets
    curve = o.trial_curve or {k: {"target": v} for k, v in o.short.items()}
    facts = TrialFacts(o.trial_verdict, curve, threshold, o.trial_delta, c.card, c.features, gonogo, retention)
    (verdict, why, _), st, _ = acted_verdict(policy, facts, st)
    if verdict is None:
        return None, 0.0, why, st
    then, note, st = after_trial(verdict, st, config)
    # nu = continue resumes the trial's prefix, so the full run costs only its remainder.
    extra = 0.0 if then == "reject" else (full - o.trial_device_hours if c.nu == "continue" else full)
    return then == "train", o.trial_device_hours + max(extra, 0.0), note, st


def _rate(k: int, n: int) -> tuple[float | None, list[float] | None]:
    if n == 0:
        return None, None
    lo, hi = stats.clopper_pearson(k, n)
    return k / n, [lo, hi]


def _classified(c: Cell) -> bool:
    """A cell in one of the three classes (an uncertain cell is counted apart, in no figure)."""
    return c.outcome is not None and c.outcome.outcome in OUTCOME_CLASSES


def _uncertain(c: Cell) -> bool:
    return c.outcome is not None and c.outcome.outcome == UNCERTAIN


def policy_metrics(cells: list[Cell], rows: list[dict]) -> dict:
    """HER, BCov, harmful share (Clopper–Pearson 95%) and budget spent on harmful cells."""
    known = [(c.outcome.outcome, r) for c, r in zip(cells, rows) if _classified(c) and r["authorized"] is not None]
    auth = [cls for cls, r in known if r["authorized"]]
    n_h = sum(cls == "harmful" for cls, _ in known)
    n_b = sum(cls == "beneficial" for cls, _ in known)
    her, her_ci = _rate(auth.count("harmful"), n_h)
    bcov, bcov_ci = _rate(auth.count("beneficial"), n_b)
    share, share_ci = _rate(auth.count("harmful"), len(auth))
    return {"her": her, "her_ci": her_ci, "bcov": bcov, "bcov_ci": bcov_ci, "harmful_share": share,
            "harmful_share_ci": share_ci, "authorized": {k: auth.count(k) for k in ("beneficial", "harmful", "neutral")},
            "cells": {"beneficial": n_b, "harmful": n_h, "neutral": len(known) - n_h - n_b},
            "undetermined": sum(1 for c, r in zip(cells, rows) if _classified(c) and r["authorized"] is None),
            "budget_spent_harmful": sum(r["spent"] for (c, r) in zip(cells, rows) if _classified(c) and c.outcome.outcome == "harmful"),
            "budget_spent": sum(r["spent"] for r in rows)}


def mcnemar_table(cells: list[Cell], walks: dict[str, list[dict]], base: str = "bcit") -> dict[str, float]:
    """Exact McNemar p of `base` against every other policy, on harmful and on beneficial cells."""
    out = {}
    for other in walks:
        if other == base:
            continue
        for cls in ("harmful", "beneficial"):
            pairs = [(a["authorized"], b["authorized"]) for c, a, b in zip(cells, walks[base], walks[other])
                     if _classified(c) and c.outcome.outcome == cls and None not in (a["authorized"], b["authorized"])]
            out[f"{base}_vs_{other}_{cls}"] = stats.mcnemar_paired([a for a, _ in pairs], [b for _, b in pairs])[2]
    return out


def score_policies(cells: list[Cell], config: PolicyConfig, min_gain_pp: Mapping[str, float] | None = None,
                   gonogo: GoNoGo | None = None, retention: RetentionGuard | None = None) -> dict:
    """Counterfactual walks of every policy, and the audit metrics where outcomes exist (`min_gain_pp`,
    `gonogo`, `retention`: the run's adoption thresholds, go/no-go and extrapolation, as `walk` takes them)."""
    walks = {p: walk(cells, p, config, min_gain_pp, gonogo, retention) for p in POLICIES}
    has_outcomes = any(_classified(c) for c in cells)
    return {"walks": walks, "policies": {p: policy_metrics(cells, w) for p, w in walks.items()} if has_outcomes else {},
            "mcnemar_p": mcnemar_table(cells, walks) if has_outcomes else {}, "coverage": coverage(cells)}


def coverage(cells: list[Cell]) -> dict:
    """How many candidates have an outcome class, and why a figure can be undefined.

    HER needs at least one harmful cell and BCov one beneficial cell; in a single episode
    most candidates are rejected and never run, so they have no outcome at all."""
    counts = {k: sum(_classified(c) and c.outcome.outcome == k for c in cells) for k in OUTCOME_CLASSES}
    trial_only = sum(1 for c in cells if c.outcome is not None and c.outcome.outcome is None)
    uncertain = sum(map(_uncertain, cells))
    never_run = sum(1 for c in cells if c.outcome is None)
    notes = []
    if counts["harmful"] == 0:
        notes.append("HER is undefined: no candidate with a harmful outcome was observed")
    if counts["beneficial"] == 0:
        notes.append("BCov is undefined: no candidate with a beneficial outcome was observed")
    if notes:
        notes.append(f"{never_run} of {len(cells)} candidates have no outcome because they were never run and "
                     f"{trial_only} ran only a trial; `agent retrospective --execute` runs every candidate to the "
                     "end and defines both figures")
    if uncertain:
        notes.append(f"{uncertain} of {len(cells)} candidates are uncertain (their seed intervals straddle a class "
                     "boundary): left out of every figure")
    return {"cells": len(cells), "classified": counts, "uncertain": uncertain, "trial_only": trial_only,
            "never_run": never_run, "notes": notes}


# --- the audit of a recorded run --------------------------------------------------------

def cells_from_entries(entries: list[Entry], outcomes: dict[str, OutcomeCell]) -> list[Cell]:
    """Cells for the counterfactual walks (no_applicability needs the frozen record)."""
    def without(e: Entry) -> Features | None:
        if e.record is None or e.context is None:
            return None
        return compile_features(e.record, e.context, use_applicability=False, conflicted=e.features.conflicted,
                                discounts=e.config.discounts)
    return [Cell(e.decision.candidate_id, e.episode_id, e.features, without(e), e.features.nu,
                 outcomes.get(e.decision.decision_hash), card_facts(e.record.card) if e.record is not None else None)
            for e in entries]


def own_policy_agreement(entries: list[Entry], walks: dict[str, list[dict]]) -> dict:
    """Does the counterfactual walk of the policy that ran reproduce every recorded action?"""
    policy = entries[0].decision.policy
    differs = [i for i, (row, e) in enumerate(zip(walks[policy], entries)) if row["action"] != e.decision.action]
    return {"policy": policy, "agree": len(entries) - len(differs), "of": len(entries), "differs_at": differs}


def audit(path: str | Path, min_gain_pp: Mapping[str, float] | None = None, gonogo: GoNoGo | None = None,
          retention: RetentionGuard | None = None) -> dict:
    """Verify every decision hash for hash, then (only then) score outcomes; `ok` False on any mismatch.
    `min_gain_pp`: the run's adoption thresholds per family (its manifest's gate; None: the gate's default);
    `gonogo`: the run's frozen go/no-go model (agent/run/gonogo_model.py reads it; None: none was frozen);
    `retention`: its frozen extrapolation model and guard (agent/run/extrapolation_model.py; None: none)."""
    ledger, outcomes_path = ledger_paths(path)
    lines = read_lines(ledger)
    if not lines:
        raise BadInput(f"{ledger} holds no decisions: nothing to audit")
    problems, entries, head = verify_ledger(lines, gonogo)
    report = {"ledger": str(ledger), "decisions": len(entries), "frozen_decisions_head": head, "ok": not problems,
              "problems": problems}
    if problems:
        return report
    config = entries[0].config
    cells = cells_from_entries(entries, read_outcomes(outcomes_path))  # outcomes opened only now
    scored = score_policies(cells, config, min_gain_pp, gonogo, retention)
    report["own_policy"] = own_policy_agreement(entries, scored["walks"])
    if report["own_policy"]["differs_at"]:
        report["ok"] = False
        report["problems"] = [f"decision {i}: the {report['own_policy']['policy']} walk differs from the recorded action"
                              for i in report["own_policy"]["differs_at"]]
    report["counterfactual"] = [
        {"seq": i, "candidate_id": c.candidate_id, "recorded": e.decision.action,
         **{p: scored["walks"][p][i]["action"] for p in POLICIES}} for i, (c, e) in enumerate(zip(cells, entries))]
    report["outcomes"] = str(outcomes_path) if outcomes_path else None
    report["policies"], report["mcnemar_p"], report["coverage"] = scored["policies"], scored["mcnemar_p"], scored["coverage"]
    return report
