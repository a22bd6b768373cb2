"""The shared adoption rule g (docs/AUTHORIZER.md §6, docs/GATE.md §2): one pure function over SuiteResults.

Every policy's children face the same four checks, in this order, on ADOPTION splits only
(the validation data a trial used would flatter the child):

1. ifeval_guard  - prompt- and instruction-level strict IFEval within -2 pp of the INITIAL
                   parent; non-compensable. The exact McNemar p on per-prompt outcomes is
                   reported beside it (and blocks only if the run config says so).
2. target        - the candidate's target reaches its minimum meaningful gain and U_prom > 0.
3. captrack      - no CapTrack group or sub-capability worse than the allowed regime; a
                   severe or catastrophic verdict needs `min_severe_items` paired items and,
                   on them, a significant loss (exact McNemar p < alpha, more lost than gained).
4. hard_failures - unparseable share, any UNKNOWN metric or item, NaN, a failed sanity check.

Beside each of the first three, the paired comparison of its items (`policies.stats.paired_stats`:
n, mean difference, its standard error, exact McNemar p) says how far the numbers sit above
the noise of the item count (docs/GATE.md §5).

An evaluator error (None = UNKNOWN) makes the check that needs it fail: it never passes.
The CapTrack profile check 3 reads is policies/captrack.py's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated

from pydantic import Field

from experience_bank.errors import BadInput
from experience_bank.families import FAMILIES
from experience_bank.frozen import Frozen, Ident
from experience_bank.results import GateCheck, GateVerdict, MetricSpec, SanityCheck, Severity, SuiteResult
from policies.captrack import SEVERITIES, CapDrift, Outcomes, Results, captrack_profile, metric_value
from policies.stats import PairedStats, paired_stats

_EPS = 1e-9  # float slack so that 48.0 - 50.0 counts as "within -2 pp"


class GateConfig(Frozen):
    """The gate's part of the run config (frozen in the manifest)."""

    ifeval_max_drop_pp: Annotated[float, Field(ge=0.0)] = 2.0
    """Largest allowed absolute drop of IFEval strict accuracy vs the initial parent."""
    block_significant_smaller_drop: bool = False
    """Also block a drop smaller than the threshold when McNemar is significant at alpha."""
    alpha: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.05
    """Significance level of the exact McNemar test."""
    min_gain_pp: dict[str, Annotated[float, Field(ge=0.0)]] = {f: 1.0 for f in FAMILIES}
    """Minimum meaningful gain on the target, per family (pp)."""
    kappa: dict[str, Annotated[float, Field(gt=0.0)]] = {f: 10.0 for f in FAMILIES}
    """Normalising scale of U_prom, per family (pp)."""
    allowed_regime: Severity = "moderate"
    """Worst CapTrack regime a group or sub-capability may reach (default: nothing severe)."""
    min_severe_items: Annotated[int, Field(ge=1)] = 30
    """Paired items a CapTrack group or sub-capability needs before it can be judged severe or
    catastrophic; with fewer, such a drift is capped at moderate (at 7 items one item is 14 pp)."""
    severe_needs_significant_loss: bool = False
    """A severe or catastrophic CapTrack regime also needs its paired items to show a significant
    loss: more items lost than gained, exact McNemar p < alpha; otherwise it is capped at moderate
    (on a probe the base scores 2 of 30, losing both is a -50 % drift, and p = 0.5). Every
    gate a run config builds sets it (uniform_gate_config); False is the rule a manifest frozen
    before the field existed ran, so that reading one back describes the gate that ran."""
    max_unparseable_share: Annotated[float, Field(ge=0.0, le=1.0)] = 0.2
    """Largest share of unparseable child outputs per suite."""
    ifeval_suite: Ident = "ifeval"
    """Suite name of the retention guard."""
    ifeval_prompt_metric: Ident = "prompt_strict"
    """Prompt-level strict accuracy metric of that suite."""
    ifeval_instruction_metric: Ident = "inst_strict"
    """Instruction-level strict accuracy metric of that suite."""


def uniform_gate_config(*, ifeval_max_drop_pp: float, min_gain_pp: float, kappa_pp: float, alpha: float) -> GateConfig:
    """The gate's config with one minimum gain and one kappa for every family (what a run config
    gives); a severe CapTrack regime needs a significant loss on its items."""
    return GateConfig(ifeval_max_drop_pp=ifeval_max_drop_pp, alpha=alpha, min_gain_pp={f: min_gain_pp for f in FAMILIES},
                      kappa={f: kappa_pp for f in FAMILIES}, severe_needs_significant_loss=True)


# --- paired items ----------------------------------------------------------------------




def outcomes(result: SuiteResult) -> Outcomes:
    """Every item of one suite result."""
    return {i.item_id: i.correct for i in result.items}


def suite_pairs(before: Results, after: Results, suite: str) -> PairedStats:
    """One suite's items compared before vs after, by item id (the noise beside a gate check)."""
    return paired_stats(outcomes(before[suite]), outcomes(after[suite]), suite)


def trial_paired_se(initial: Results, parent: Results, child: Results, target_key: str,
                    config: GateConfig) -> dict[str, float | None]:
    """The paired SE (pp) of a trial's deltas on the pairs the gate reads for the same checks:
    `target`: the target suite, child vs the current parent; the IFEval suite (its name): child vs
    the initial parent, the per-prompt items both IFEval strict deltas rest on. A suite missing on
    either side is left out (the trial's measurement already fails closed on it)."""
    pairs = {"target": (parent, target_key.partition(".")[0]), config.ifeval_suite: (initial, config.ifeval_suite)}
    return {k: suite_pairs(before, child, suite).se_pp for k, (before, suite) in pairs.items()
            if suite in before and suite in child}


def paired_numbers(s: PairedStats, prefix: str = "") -> dict[str, float | str | None]:
    """The paired comparison as GateCheck numbers (the same keys beside every check)."""
    return {f"{prefix}n_items": s.n, f"{prefix}paired_delta_pp": s.delta_pp, f"{prefix}paired_se_pp": s.se_pp,
            f"{prefix}mcnemar_b": s.b, f"{prefix}mcnemar_c": s.c, f"{prefix}mcnemar_p": s.mcnemar_p,
            f"{prefix}unknown_pairs": s.unknown}


# --- the four checks ---------------------------------------------------------------------


def _ifeval_guard(initial: Results, child: Results, cfg: GateConfig) -> GateCheck:
    keys = [f"{cfg.ifeval_suite}.{cfg.ifeval_prompt_metric}", f"{cfg.ifeval_suite}.{cfg.ifeval_instruction_metric}"]
    pairs = suite_pairs(initial, child, cfg.ifeval_suite)
    b, c, p = pairs.b, pairs.c, pairs.mcnemar_p
    noise = f"McNemar p={p:.3g}, {_se_text(pairs)} on {pairs.n} prompts"
    nums: dict[str, float | str | None] = {"max_drop_pp": cfg.ifeval_max_drop_pp, "alpha": cfg.alpha,
                                           **paired_numbers(pairs)}
    deltas = []
    for key, label in zip(keys, ("prompt", "instruction")):
        i0, i1 = metric_value(initial, key), metric_value(child, key)
        nums.update({f"initial_{label}": i0, f"child_{label}": i1, f"delta_{label}": None if None in (i0, i1) else i1 - i0})
        deltas.append(nums[f"delta_{label}"])
    if None in deltas:
        return GateCheck(name="ifeval_guard", passed=False, numbers=nums, reason="IFEval score UNKNOWN: an evaluator error never passes")
    low = [d for d in deltas if d < -cfg.ifeval_max_drop_pp - _EPS]
    if low:
        return GateCheck(name="ifeval_guard", passed=False, numbers=nums,
                         reason=f"IFEval strict fell {-min(low):.2f} pp below the initial parent (limit {cfg.ifeval_max_drop_pp} pp, {noise})")
    if cfg.block_significant_smaller_drop and p < cfg.alpha and b > c:
        return GateCheck(name="ifeval_guard", passed=False, numbers=nums,
                         reason=f"significant per-prompt IFEval loss (McNemar p={p:.3g} < {cfg.alpha}, {b} lost vs {c} gained)")
    return GateCheck(name="ifeval_guard", passed=True, numbers=nums,
                     reason=f"IFEval within {cfg.ifeval_max_drop_pp} pp of the initial parent ({noise})")


def _target(parent: Results, child: Results, cfg: GateConfig, target_key: str,
            family_targets: Mapping[str, str]) -> tuple[GateCheck, float | None]:
    family = next((f for f, k in family_targets.items() if k == target_key), None)
    if family is None:
        raise BadInput(f"target {target_key} is not any family's target in family_targets; add it")
    missing = [f for f in family_targets if f not in cfg.kappa or f not in cfg.min_gain_pp]
    if missing:
        raise BadInput(f"gate config lacks kappa or min_gain_pp for {', '.join(missing)}; add them")
    suite = target_key.partition(".")[0]
    pairs = suite_pairs(parent, child, suite)  # parent vs child, by item id
    nums: dict[str, float | str | None] = {"family": family, "min_gain_pp": cfg.min_gain_pp[family],
                                           **paired_numbers(pairs)}
    terms = []
    for f, key in family_targets.items():
        p0, p1 = metric_value(parent, key), metric_value(child, key)
        delta = None if None in (p0, p1) else p1 - p0
        nums.update({f"parent.{key}": p0, f"child.{key}": p1, f"delta.{key}": delta, f"kappa.{f}": cfg.kappa[f]})
        terms.append(None if delta is None else delta / cfg.kappa[f])
    u_prom = None if None in terms else sum(terms) / len(terms)
    gain = nums[f"delta.{target_key}"]
    nums.update({"target_gain_pp": gain, "u_prom": u_prom})
    if u_prom is None or gain is None:
        return GateCheck(name="target", passed=False, numbers=nums, reason="a target score is UNKNOWN: an evaluator error never passes"), None
    ok_gain = gain >= cfg.min_gain_pp[family] - _EPS
    reason = (f"target {target_key} {gain:+.2f} pp (min {cfg.min_gain_pp[family]}; {_se_text(pairs)}, "
              f"McNemar p={pairs.mcnemar_p:.3g} on {pairs.n} items), U_prom={u_prom:+.3f}"
              + ("" if ok_gain and u_prom > 0 else ": below the minimum meaningful gain or U_prom <= 0"))
    return GateCheck(name="target", passed=ok_gain and u_prom > 0, numbers=nums, reason=reason), u_prom


def _se_text(pairs: PairedStats) -> str:
    return "paired SE n/a" if pairs.se_pp is None else f"paired SE {pairs.se_pp:.2f} pp"


def _capped_text(cap: CapDrift, cfg: GateConfig) -> str:
    head = f"{cap.name}: {cap.drift_pct:.1f}% on {cap.paired.n} items"
    if cap.capped_by == "too few items":
        return f"{head}, below the {cfg.min_severe_items} needed for a {cap.raw_severity} verdict"
    return (f"{head}, {cap.paired.b} lost vs {cap.paired.c} gained (McNemar p={cap.paired.mcnemar_p:.3g}, "
            f"not a significant loss at {cfg.alpha}) for a {cap.raw_severity} verdict")


def _captrack(initial: Results, child: Results, cfg: GateConfig, specs: tuple[MetricSpec, ...]) -> GateCheck:
    prof = captrack_profile(initial, child, specs, cfg)
    nums: dict[str, float | str | None] = {"allowed_regime": cfg.allowed_regime, "min_severe_items": cfg.min_severe_items,
                                           "severe_needs_significant_loss": "yes" if cfg.severe_needs_significant_loss else "no",
                                           "alpha": cfg.alpha}
    for m in prof.metrics:
        nums.update({f"{m.name}.drift_pct": m.drift_pct, f"{m.name}.abs_delta": m.abs_delta,
                     f"{m.name}.decides": "yes" if m.decides else "no"})
    caps = prof.subs + prof.groups
    for cap in caps:
        nums.update({f"{cap.name}.drift_pct": cap.drift_pct, f"{cap.name}.severity": cap.severity,
                     f"{cap.name}.raw_severity": cap.raw_severity, f"{cap.name}.capped_by": cap.capped_by,
                     **paired_numbers(cap.paired, f"{cap.name}.")})
    capped = [_capped_text(c, cfg) for c in caps if c.capped_by is not None]
    nums["capped"] = "; ".join(capped)[:400] or None
    note = f" ({'; '.join(capped)}: capped at moderate)" if capped else ""
    unknown = [m.name for m in prof.metrics if m.base is None or m.value is None]
    if unknown:
        return GateCheck(name="captrack", passed=False, numbers=nums, reason=f"CapTrack metric UNKNOWN: {', '.join(unknown)[:400]}")
    limit = SEVERITIES.index(cfg.allowed_regime)
    worse = [c for c in caps if c.severity is not None and SEVERITIES.index(c.severity) > limit]
    if worse:
        names = ", ".join(f"{c.name} {c.severity} ({c.drift_pct:.1f}%)" for c in worse)
        return GateCheck(name="captrack", passed=False, numbers=nums,
                         reason=f"worse than {cfg.allowed_regime}: {names}{note}"[:500])
    return GateCheck(name="captrack", passed=True, numbers=nums,
                     reason=f"no group or sub-capability worse than {cfg.allowed_regime}{note}"[:500])


def _nan_or_unknown(results: Results) -> tuple[list[str], list[str]]:
    unknown = [f"{s}.{k}" for s, r in results.items() for k, v in r.metrics.items() if v is None]
    nan = [f"{s}.{k}" for s, r in results.items() for k, v in r.metrics.items() if v is not None and not math.isfinite(v)]
    for s, r in results.items():
        # n_unknown is the scorer's own count; the items are the evidence: trust the larger.
        n = max(r.n_unknown, sum(1 for i in r.items if i.correct is None))
        unknown += [f"{s} ({n} items)"] if n else []
    return unknown, nan


def _hard_failures(roles: Mapping[str, Results], cfg: GateConfig, sanity: tuple[SanityCheck, ...]) -> GateCheck:
    nums: dict[str, float | str | None] = {"max_unparseable_share": cfg.max_unparseable_share}
    problems = []
    for suite, r in roles["child"].items():
        share = r.n_unparseable / len(r.items) if r.items else 1.0  # no items: nothing was judged
        nums[f"unparseable_share.{suite}"] = share
        if share > cfg.max_unparseable_share + _EPS:
            problems.append(f"{suite} unparseable {share:.1%}")
    for role, results in roles.items():
        unknown, nan = _nan_or_unknown(results)
        nums.update({f"unknown.{role}": len(unknown), f"nan.{role}": len(nan)})
        problems += [f"{role} UNKNOWN {u}" for u in unknown[:3]] + [f"{role} NaN {n}" for n in nan[:3]]
    failed = [s.name for s in sanity if not s.ok]
    nums["failed_sanity"] = ", ".join(failed) or None
    problems += [f"sanity {n} failed" for n in failed]
    if problems:
        return GateCheck(name="hard_failures", passed=False, numbers=nums, reason="; ".join(problems)[:500])
    return GateCheck(name="hard_failures", passed=True, numbers=nums, reason="no hard failure")


# --- input checks and the rule -----------------------------------------------------------


def _model_sha(role: str, results: Results) -> str:
    if not results:
        raise BadInput(f"no suite results for the {role} model; evaluate it on the adoption split")
    for name, r in results.items():
        if r.identity.split != "adoption":
            raise BadInput(f"{role} {name} is on the {r.identity.split} split; the gate reads adoption splits only")
        if r.identity.suite != name:
            raise BadInput(f"{role} result keyed {name!r} is for suite {r.identity.suite!r}; key results by suite")
    shas = {r.identity.model_sha256 for r in results.values()}
    if len(shas) != 1:
        raise BadInput(f"{role} results come from {len(shas)} different models; pass one model's results")
    return shas.pop()


def _same_data(roles: Mapping[str, Results], suites: set[str]) -> None:
    for suite in sorted(suites):
        hashes = {role: r[suite].identity.data_sha256 for role, r in roles.items() if suite in r}
        if len(hashes) < len(roles):
            missing = [role for role in roles if role not in hashes]
            raise BadInput(f"suite {suite} missing for the {', '.join(missing)} model; evaluate it")
        if len(set(hashes.values())) != 1:
            raise BadInput(f"suite {suite} was evaluated on different data across models; use one adoption split")


def gate(initial: Results, parent: Results, child: Results, config: GateConfig, specs: tuple[MetricSpec, ...], *,
         target_suite: str, target_metric: str, family_targets: Mapping[str, str],
         sanity: tuple[SanityCheck, ...] = ()) -> GateVerdict:
    """Apply g to one child: promote iff all four checks pass; decided_by is the first failing one."""
    roles = {"initial": initial, "parent": parent, "child": child}
    shas = {role: _model_sha(role, r) for role, r in roles.items()}
    needed = {config.ifeval_suite} | {s.name.partition(".")[0] for s in specs}
    needed |= {k.partition(".")[0] for k in family_targets.values()}
    try:
        _same_data(roles, needed)
        u_check, u_prom = _target(parent, child, config, f"{target_suite}.{target_metric}", family_targets)
        checks = (_ifeval_guard(initial, child, config), u_check, _captrack(initial, child, config, specs),
                  _hard_failures(roles, config, tuple(sanity)))
    except BadInput as exc:  # a suite, metric or item set the rule needs is missing: fail closed, never promote
        check = GateCheck(name="hard_failures", passed=False, numbers={}, reason=f"cannot judge: {exc}"[:500])
        return GateVerdict(promote=False, decided_by="hard_failures", checks=(check,), u_prom=None,
                           child_sha256=shas["child"], parent_sha256=shas["parent"], initial_sha256=shas["initial"])
    failing = next((c.name for c in checks if not c.passed), None)
    return GateVerdict(promote=failing is None, decided_by=failing or "all_passed", checks=checks, u_prom=u_prom,
                       child_sha256=shas["child"], parent_sha256=shas["parent"], initial_sha256=shas["initial"])
