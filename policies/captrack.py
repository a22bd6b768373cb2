"""The CapTrack profile (docs/GATE.md §1, §5): how far an adapted model drifted from the OOB model
on each capability probe, per metric, per sub-capability and per group, with the paired items
beside each aggregate and its regime as the gate judges it.

Pure arithmetic over SuiteResults. It lives in policies/ (not evaluators/) because policies/ may
import only experience_bank and the gate (policies/gate.py, check 3) must compute it; `agent
profile` (agent/cli/gate.py) and the loop's CapTrack record (agent/loop/ports.py) read the same
numbers. `judged_severity` owns the rule that caps a severe or catastrophic regime.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from experience_bank.errors import BadInput
from experience_bank.frozen import Frozen, Ident
from experience_bank.results import Group, MetricSpec, Severity, SuiteResult
from policies.stats import PairedStats, paired_stats

if TYPE_CHECKING:  # the gate's config holds the thresholds; policies/gate.py imports this module
    from policies.gate import GateConfig

Results = Mapping[str, SuiteResult]
SEVERITIES: tuple[Severity, ...] = ("none", "mild", "moderate", "severe", "catastrophic")
Outcomes = dict[str, bool | None]
"""Per-item correctness keyed by item id (None = UNKNOWN)."""


def _probe_of(metric: str, probes: set[str]) -> str | None:
    # A probe suite names each metric after its probe, alone or with a suffix
    # (`can_arith`, `will_format_rate`, `how_json_valid`): the longest such probe is its own.
    hits = [p for p in probes if metric == p or metric.startswith(f"{p}_")]
    return max(hits, key=len) if hits else None


def metric_items(results: Results, key: str) -> Outcomes:
    """The items one `suite.metric` rests on, keyed `suite|item_id`: its probe's where the items name
    probes (CapTrack), else every item of the suite. Items a scorer crashed on carry no probe: they
    are not attributed here, and hard_failures blocks on them."""
    metric_value(results, key)  # the suite and metric must exist
    suite, _, metric = key.partition(".")
    items = results[suite].items
    probes = {str(i.detail["probe"]) for i in items if "probe" in i.detail}
    probe = _probe_of(metric, probes)
    if probes and probe is None:
        raise BadInput(f"metric {key} matches no probe of its items ({', '.join(sorted(probes))}); "
                       f"name it after its probe (`<probe>` or `<probe>_<what>`)")
    return {f"{suite}|{i.item_id}": i.correct for i in items if probe is None or i.detail.get("probe") == probe}


class MetricDrift(Frozen):
    name: Ident
    """Metric key `suite.metric`."""
    group: Group
    """CAN / WILL / HOW."""
    sub: Ident
    """Sub-capability."""
    base: float | None
    """Score of the OOB (initial) model; None = UNKNOWN."""
    value: float | None
    """Score of the adapted model; None = UNKNOWN."""
    abs_delta: float | None
    """value - base (reported beside the relative number, docs/GATE.md §1)."""
    drift_pct: float | None
    """Relative drift in %, signed so that negative is harm (direction applied)."""
    decides: bool
    """False when the base is zero or below the metric's floor, or a score is UNKNOWN."""


Capped = Literal["too few items", "no significant loss"]
"""Why a CapTrack regime was capped at moderate (judged_severity)."""


class CapDrift(Frozen):
    name: Ident
    """Group (CAN) or sub-capability (`CAN/C1`)."""
    drift_pct: float | None
    """Equal-weight mean of the deciding members' drift; None when none decides."""
    raw_severity: Severity | None
    """Regime of drift_pct alone; None when nothing decides."""
    severity: Severity | None
    """The judged regime: raw_severity, or moderate where the paired items do not bear a severe
    or catastrophic one out (judged_severity owns the rule)."""
    capped_by: Capped | None = None
    """Why severity is below raw_severity (None: it is not)."""
    n_members: Annotated[int, Field(ge=0)]
    """Metrics (for a sub) or subs (for a group) inside it."""
    paired: PairedStats
    """OOB vs adapted model on the items of its deciding metrics (each item once)."""


class Profile(Frozen):
    metrics: tuple[MetricDrift, ...]
    """Per metric."""
    subs: tuple[CapDrift, ...]
    """Per sub-capability."""
    groups: tuple[CapDrift, ...]
    """Per group; never one global mean (a flat mean hides structural collapse)."""


def severity(drift_pct: float) -> Severity:
    """docs/GATE.md §1 regimes at -1 / -5 / -10 / -20 %."""
    if drift_pct > -1.0:
        return "none"
    if drift_pct > -5.0:
        return "mild"
    if drift_pct > -10.0:
        return "moderate"
    if drift_pct > -20.0:
        return "severe"
    return "catastrophic"


def judged_severity(regime: Severity | None, pairs: PairedStats, cfg: GateConfig) -> tuple[Severity | None, Capped | None]:
    """(judged regime, why it was capped): a severe or catastrophic regime stands only on at
    least cfg.min_severe_items paired items that show a significant loss (more lost than gained
    at exact McNemar p < cfg.alpha, where cfg.severe_needs_significant_loss); otherwise it is
    capped at moderate. A relative drift on a near-floor probe is large on one or two items:
    the items, not the percentage, say whether the capability moved (docs/GATE.md §5)."""
    if regime not in ("severe", "catastrophic"):
        return regime, None
    if pairs.n < cfg.min_severe_items:
        return "moderate", "too few items"
    if cfg.severe_needs_significant_loss and not (pairs.b > pairs.c and pairs.mcnemar_p < cfg.alpha):
        return "moderate", "no significant loss"
    return regime, None


def _harm_signed(rel: float, direction: str) -> float:
    if direction == "higher":
        return rel
    if direction == "lower":
        return -rel
    return -abs(rel)  # "change": any move of a style metric is drift


def metric_drift(spec: MetricSpec, base: float | None, value: float | None) -> MetricDrift:
    """Relative drift of one metric; a zero or sub-floor base is reported but does not decide."""
    known = base is not None and value is not None
    abs_delta = value - base if known else None
    rel = (value - base) / abs(base) * 100.0 if known and base != 0 else None
    drift = _harm_signed(rel, spec.direction) if rel is not None else None
    decides = drift is not None and abs(base) >= spec.floor
    return MetricDrift(name=spec.name, group=spec.group, sub=spec.sub, base=base, value=value,
                       abs_delta=abs_delta, drift_pct=drift, decides=decides)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


Member = tuple[float | None, Outcomes, Outcomes]
"""(deciding drift or None, OOB items, adapted items) of one metric in a sub, or one sub in a group."""


def _pooled(members: list[Member]) -> tuple[Outcomes, Outcomes]:
    # Only what decides is evidence for the verdict; an item under two metrics counts once.
    before: Outcomes = {}
    after: Outcomes = {}
    for drift, b, a in members:
        if drift is not None:
            before |= b
            after |= a
    return before, after


def _cap(name: str, members: list[Member], cfg: GateConfig) -> CapDrift:
    d = _mean([x for x, _, _ in members if x is not None])
    raw = None if d is None else severity(d)
    pairs = paired_stats(*_pooled(members), name)
    judged, capped_by = judged_severity(raw, pairs, cfg)
    return CapDrift(name=name, drift_pct=d, raw_severity=raw, severity=judged, capped_by=capped_by,
                    n_members=len(members), paired=pairs)


def metric_value(results: Results, key: str) -> float | None:
    """`suite.metric` -> score (None = UNKNOWN); a missing suite or metric is BadInput."""
    suite, _, metric = key.partition(".")
    if suite not in results:
        raise BadInput(f"no results for suite {suite!r} (needed by {key}); evaluate that suite too")
    if metric not in results[suite].metrics:
        raise BadInput(f"suite {suite!r} has no metric {metric!r}; fix the metric name in the spec or config")
    return results[suite].metrics[metric]


def captrack_profile(base: Results, model: Results, specs: tuple[MetricSpec, ...], cfg: GateConfig) -> Profile:
    """Per-metric drift vs the OOB model, aggregated per sub-capability, then per group; each
    aggregate carries its paired items and its regime as `cfg` (the run's gate) judges it."""
    rows = [metric_drift(s, metric_value(base, s.name), metric_value(model, s.name)) for s in specs]
    subs: dict[tuple[str, str], list[Member]] = {}
    for s, r in zip(specs, rows):
        member = (r.drift_pct if r.decides else None, metric_items(base, s.name), metric_items(model, s.name))
        subs.setdefault((r.group, r.sub), []).append(member)
    sub_caps = [_cap(f"{g}/{s}", m, cfg) for (g, s), m in subs.items()]
    groups: dict[str, list[Member]] = {}
    for members, cap in zip(subs.values(), sub_caps):  # equal weight per sub-capability
        groups.setdefault(cap.name.partition("/")[0], []).append((cap.drift_pct, *_pooled(members)))
    return Profile(metrics=tuple(rows), subs=tuple(sub_caps),
                   groups=tuple(_cap(g, m, cfg) for g, m in groups.items()))
