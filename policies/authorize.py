"""Routing: Features -> Decision (docs/AUTHORIZER.md §4 and §8), pure, with every comparison attached.

A policy is a small function `(features, state, config) -> (action, rule, numbers)` in the
POLICIES table. `authorize` wraps it with what every policy shares: the decision carries the policy name, a version that hashes the frozen PolicyConfig, and
  `decision_hash` = sha256 of the canonical JSON of every other field.

Conflicted evidence (consolidation found records of the card that contradict each other) is
handled where the spec puts it: only the evidence-based skip of validation (§4 rule 2, grade-A
replicated evidence) needs agreeing replicates, so a conflicted candidate that would skip is
validated instead (or rejected without a faithful trial). Policies that never skip
(validate_all, applicability_only) or that ignore evidence quality by definition (reuse_all:
"train every historical candidate with positive source evidence") are unaffected.

`bcit_predictive` is the one policy whose routing reads more than features, state and config: the
run's frozen go/no-go model and the candidate's card (`Prior`, built by `prior_input`), with which
it skips the trial of a plain historical Validate where the model's prior-only head authorizes
(policies.predictive.prior_decision). Both are frozen before the decision (the model's copy is in
the run directory, its sha256 in the manifest; the card is in the ledger line's record), so the
audit recomputes the same routing from the same inputs.

`no_applicability` routes exactly like `bcit`; what makes it the ablation is that its
features are compiled with `use_applicability=False` (see policies.features). Callers that
start from records use `decide`, which compiles the way the policy needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, model_serializer

from experience_bank.errors import BadInput
from experience_bank.hashing import content_hash, decision_hash
from experience_bank.frozen import Frozen, omit_empty
from experience_bank.records import CurrentContext, HistoricalRecord, Proposal
from experience_bank.decisions import Decision, Features
from policies.features import compile as compile_features

if TYPE_CHECKING:  # scikit-learn behind it: loaded only where a run reads a model (policies.predictive)
    from policies.curves import CardFacts
    from policies.gonogo import GoNoGo

Verdict = Literal["pass", "fail", "inconclusive"]


class PolicyConfig(Frozen):
    """Frozen per run: the thresholds, discounts, quota and fallback lease of docs/AUTHORIZER.md §3–§5."""

    tau_l: Annotated[float, Field(ge=0.0, le=1.0)] = 0.30
    """Reject below this score."""
    tau_h: Annotated[float, Field(ge=0.0, le=1.0)] = 0.70
    """Grade-A evidence at or above this score trains without validation."""
    discounts: dict[Literal["A", "B", "C"], Annotated[float, Field(ge=0.0, le=1.0)]] = {"A": 1.0, "B": 0.75, "C": 0.5}
    """d(e) per evidence grade."""
    quota: Annotated[int, Field(ge=0)] = 3
    """q: exploratory new proposals per episode (they must validate)."""
    fallback_lease: Annotated[int, Field(ge=0)] = 1
    """Inconclusive trials that may still go to Train, per episode (0: Inconclusive -> Reject)."""

    def version(self) -> str:
        """Policy version: changes whenever any threshold, discount, quota or lease does."""
        return f"v1-{content_hash(self)[:12]}"


class EpisodeState(Frozen):
    """The only episode facts a decision may depend on."""

    new_proposals_used: Annotated[int, Field(ge=0)] = 0
    """New proposals already sent to validation in this episode (quota q)."""
    leases_used: Annotated[int, Field(ge=0)] = 0
    """Fallback leases already spent on Inconclusive trials in this episode."""
    trial_gains: tuple[float, ...] = ()
    """Target gains (pp) of the trials run so far in this episode, in decision order; kept only by a
    policy whose trial rule ranks them (successive_halving, policies.halving)."""

    # Empty for every other policy, and then absent from the JSON: a state written before the field
    # existed keeps its bytes, and the ledger entry that holds it its hash.
    _omit_empty_gains = model_serializer(mode="wrap")(omit_empty("trial_gains"))


LEASE_READING = ("a count of Inconclusive trials per episode that may still go to Train, spent in "
                 "decision order (the project's interpretation of docs/AUTHORIZER.md 5: the spec gives the lease no formula)")
"""What PolicyConfig.fallback_lease means; frozen in every manifest beside the number."""

Routed = tuple[str, str, dict[str, float]]
Policy = Callable[[Features, EpisodeState, PolicyConfig], Routed]


# --- shared pieces ---------------------------------------------------------------------


def _nums(f: Features, cfg: PolicyConfig, **more: float) -> dict[str, float]:
    base = {"S": f.S, "A": f.A, "Q": f.Q, "H": f.H, "chi": f.chi, "tau_l": cfg.tau_l, "tau_h": cfg.tau_h}
    return {k: float(v) for k, v in {**base, **more}.items() if v is not None}


def _new_proposal(p: str, f: Features, st: EpisodeState, cfg: PolicyConfig, veto: bool = True) -> Routed:
    """Eq. 13: Validate iff H = 0 and a faithful trial exists, within the quota q."""
    n = _nums(f, cfg, quota=cfg.quota, quota_used=st.new_proposals_used)
    if st.new_proposals_used >= cfg.quota:
        return "reject", f"{p}.quota_exhausted", n
    if veto and f.H == 1:
        return "reject", f"{p}.new_hard_conflict", n
    if f.nu == "none":
        return "reject", f"{p}.new_no_faithful_trial", n
    return "validate", f"{p}.new_validate", n


def _route(p: str, f: Features, cfg: PolicyConfig, score: float, veto: bool, skip_ok: bool = True) -> Routed:
    """The four historical rules of §4 over a given score."""
    n = _nums(f, cfg, score=score)
    if veto and f.H == 1:
        return "reject", f"{p}.hard_conflict", n
    if score < cfg.tau_l:
        return "reject", f"{p}.below_tau_l", n
    # Only grade-A replicated evidence skips validation; chi is checked with the grade as a
    # second line of defence against a hand-edited features row. Evidence that consolidation
    # found contradicted (conflicted) is not an agreeing replicate, so it cannot skip either.
    if skip_ok and score >= cfg.tau_h and f.chi == 1 and f.grade == "A":
        if f.conflicted:
            return ("validate", f"{p}.conflicted_validate", n) if f.nu != "none" else (
                "reject", f"{p}.conflicted_no_faithful_trial", n)
        return "train", f"{p}.replicated_above_tau_h", n
    if f.nu != "none":
        return "validate", f"{p}.validate", n
    return "reject", f"{p}.no_faithful_trial", n


def _additive(f: Features) -> float:
    return round((f.S + f.A + 1 - f.H) / 3, 12)


# --- the policies ----------------------------------------------------------------------


def bcit(f, st, cfg):
    return _new_proposal("bcit", f, st, cfg) if f.is_new else _route("bcit", f, cfg, f.Q, veto=True)


def flat_additive(f, st, cfg):
    # No veto: a conflict only costs a third of the score, so strong evidence can buy it off.
    if f.is_new:
        return _new_proposal("flat_additive", f, st, cfg, veto=False)
    return _route("flat_additive", f, cfg, _additive(f), veto=False)


def additive_veto(f, st, cfg):
    if f.is_new:
        return _new_proposal("additive_veto", f, st, cfg)
    return _route("additive_veto", f, cfg, _additive(f), veto=True)


def validate_all(f, st, cfg):
    if f.is_new:
        return _new_proposal("validate_all", f, st, cfg, veto=False)
    n = _nums(f, cfg)
    return ("validate", "validate_all.validate", n) if f.nu != "none" else ("reject", "validate_all.no_faithful_trial", n)


def early_stop_extrapolation(f, st, cfg):
    # Routes as validate_all; its trial verdict is its own (policies.early_stop, policies.trial_rules).
    action, rule, n = validate_all(f, st, cfg)
    return action, rule.replace("validate_all", "early_stop_extrapolation"), n


def successive_halving(f, st, cfg):
    # Routes as validate_all (every candidate runs the first rung); its trial verdict is its own
    # (policies.halving, policies.trial_rules).
    action, rule, n = validate_all(f, st, cfg)
    return action, rule.replace("validate_all", "successive_halving"), n


@dataclass(frozen=True)
class Prior:
    """What bcit_predictive's routing reads besides features, state and config, all frozen before the decision."""

    model: GoNoGo
    """The run's frozen go/no-go (agent/run/gonogo_model.frozen_model); its prior-only head decides the skip."""
    card: CardFacts
    """The candidate's card facts (policies.curves.card_facts)."""


SKIPPABLE_RULES = frozenset({"bcit_predictive.validate"})
"""The Validate rules whose trial the prior-only go/no-go may skip: BCIT's plain historical Validate.
Not a new proposal's (eq. 13: exploration validates, within its quota) nor a conflicted candidate's
(contradicted evidence must be tried, §4), nor any Reject (the veto and tau_l stand)."""
SKIP_RULE = "bcit_predictive.prior_skip"


def bcit_predictive(f, st, cfg, prior: Prior | None = None):
    # Routes as bcit; its trial verdict is the learned go/no-go's (policies.predictive, policies.trial_rules).
    # Where the prior-only go/no-go authorizes a skippable Validate, the evidence suffices: train directly.
    action, rule, n = bcit(f, st, cfg)
    rule = rule.replace("bcit", "bcit_predictive", 1)
    if rule not in SKIPPABLE_RULES or prior is None:
        return action, rule, n
    from policies.predictive import prior_decision  # scikit-learn, only where a run reads a model
    d = prior_decision(prior.model, prior.card, f)
    if d is None:  # a prior-only head that authorizes nothing, or none (an older model file): never skips
        return action, rule, n
    n = n | {"prior_p_harmful": d.p_harmful, "prior_threshold": d.threshold}
    if prior.model.prior is not None and prior.model.prior.beneficial_floor is not None:  # older models: as they were
        n |= {"prior_p_beneficial": d.p_beneficial}
    return ("train", SKIP_RULE, n) if d.go else (action, rule, n)


def reuse_all(f, st, cfg):
    n = _nums(f, cfg, delta_src=f.delta_src)
    if f.is_new:
        return "reject", "reuse_all.no_evidence", n
    return ("train", "reuse_all.positive_source", n) if f.delta_src > 0 else ("reject", "reuse_all.nonpositive_source", n)


def no_memory(f, st, cfg):
    # The bank is ignored: every candidate is an exploratory proposal under the quota.
    return _new_proposal("no_memory", f, st, cfg)


def reject_unresolved(f, st, cfg):
    action, rule, n = bcit(f, st, cfg)
    return ("reject", "reject_unresolved.unresolved", n) if action == "validate" else (action, rule, n)


def no_applicability(f, st, cfg):
    return _new_proposal("no_applicability", f, st, cfg) if f.is_new else _route("no_applicability", f, cfg, f.Q, veto=True)


def no_hard_veto(f, st, cfg):
    if f.is_new:
        return _new_proposal("no_hard_veto", f, st, cfg, veto=False)
    return _route("no_hard_veto", f, cfg, f.Q, veto=False)


def applicability_only(f, st, cfg):
    # Source evidence (S, chi) is ignored, so nothing can skip validation: score = A.
    if f.is_new:
        return _new_proposal("applicability_only", f, st, cfg)
    return _route("applicability_only", f, cfg, f.A, veto=True, skip_ok=False)


POLICIES: dict[str, Policy] = {
    "bcit": bcit, "flat_additive": flat_additive, "additive_veto": additive_veto,
    "validate_all": validate_all, "reuse_all": reuse_all, "no_memory": no_memory,
    "reject_unresolved": reject_unresolved, "no_applicability": no_applicability,
    "no_hard_veto": no_hard_veto, "applicability_only": applicability_only,
    "early_stop_extrapolation": early_stop_extrapolation, "successive_halving": successive_halving,
    "bcit_predictive": bcit_predictive,
}
WITHOUT_APPLICABILITY = frozenset({"no_applicability"})
"""Policies whose features are compiled with use_applicability=False."""
COUNTS_AS_NEW = frozenset({"no_memory"})
"""Policies that spend the exploration quota on historical candidates too."""
NEEDS_GONOGO = frozenset({"bcit_predictive"})
"""Policies whose trial rule reads a fitted go/no-go model (the run config's gonogo_model, frozen
in the manifest), and whose routing reads it too (`Prior`: the trial skip). Which policies have
their own trial rule: policies.trial_rules.TRIAL_RULES."""


def check_reads_gonogo(policy: str) -> None:
    """BadInput where a go/no-go model is given to a policy that reads none: it would be ignored in
    silence (`agent run`, `agent authorize`; `agent compare` hands one config to every policy, so it
    does not ask)."""
    if policy not in NEEDS_GONOGO:
        raise BadInput(f"--gonogo-model is read by {', '.join(sorted(NEEDS_GONOGO))} only, not --policy {policy}: "
                       f"drop --gonogo-model or pass --policy {sorted(NEEDS_GONOGO)[0]}")


# --- the public functions --------------------------------------------------------------


def _policy(name: str) -> Policy:
    if name not in POLICIES:
        raise BadInput(f"unknown policy {name!r}: choose one of {', '.join(POLICIES)}")
    return POLICIES[name]


def prior_input(policy: str, model: GoNoGo | None, card: CardFacts | None) -> Prior | None:
    """What `policy`'s routing reads beyond features, state and config: for a policy in NEEDS_GONOGO the
    run's frozen model and the card, else None. None too where either is missing (an audit without
    the run's frozen copy): a SKIPPABLE_RULES Validate then cannot be told from a skip (`undetermined`)."""
    return Prior(model, card) if policy in NEEDS_GONOGO and model is not None and card is not None else None


def undetermined(decision: Decision, prior: Prior | None) -> bool:
    """A decision routed without the frozen inputs its policy reads, where they could have changed it."""
    return prior is None and decision.policy in NEEDS_GONOGO and decision.rule in SKIPPABLE_RULES


def authorize(features: Features, policy: str, state: EpisodeState, config: PolicyConfig,
              prior: Prior | None = None) -> Decision:
    """Pure: the same features, policy, state, config and (for a policy in NEEDS_GONOGO) frozen
    model and card always give the same Decision and hash."""
    fn = _policy(policy)
    action, rule, numbers = fn(features, state, config, prior) if policy in NEEDS_GONOGO else fn(features, state, config)
    body = {"candidate_id": features.candidate_id, "action": action, "rule": rule, "numbers": numbers,
            "policy": policy, "policy_version": config.version(), "features": features.model_dump(mode="json")}
    fields = {**body, "features": features}
    return Decision(**fields, decision_hash=decision_hash(body))


def decide(record: HistoricalRecord | Proposal, ctx: CurrentContext, policy: str, state: EpisodeState,
           config: PolicyConfig, *, conflicted: bool = False, prior: Prior | None = None) -> Decision:
    """Compile the way `policy` needs, then authorize (`prior`: what bcit_predictive's routing reads)."""
    _policy(policy)
    f = compile_features(record, ctx, use_applicability=policy not in WITHOUT_APPLICABILITY, conflicted=conflicted, discounts=config.discounts)
    return authorize(f, policy, state, config, prior)


def next_state(state: EpisodeState, decision: Decision) -> EpisodeState:
    """The state after a decision: a validated new proposal spends one unit of quota."""
    new = decision.features.is_new or decision.policy in COUNTS_AS_NEW
    used = state.new_proposals_used + int(new and decision.action == "validate")
    return state.model_copy(update={"new_proposals_used": used})


def after_trial(verdict: Verdict, state: EpisodeState, config: PolicyConfig) -> tuple[str, str, EpisodeState]:
    """§5: Pass -> train, Fail -> reject, Inconclusive -> train only while the fallback lease lasts."""
    if verdict == "pass":
        return "train", "trial.pass", state
    if verdict == "fail":
        return "reject", "trial.fail", state
    if state.leases_used < config.fallback_lease:
        return "train", "trial.inconclusive_leased", state.model_copy(update={"leases_used": state.leases_used + 1})
    return "reject", "trial.inconclusive_no_lease", state
