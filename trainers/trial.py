"""Bounded validation trials (docs/AUTHORIZER.md §5).

A trial trains at most 20% of the card's nominal steps (trainers.steps.trial_steps: the
floor, never more; a card whose share is under one step is refused with TrialRefused before
anything is written) from the current parent (through the same `train` as a full run, so
nu = continue can resume it), then the caller's `measure`
evaluates the trial child — trainers/ cannot import evaluators/ — and `verdict` applies the
frozen thresholds:

- Fail: a guardrail fired — the target fell by at least `fail_drop_pp`, a retention metric
  fell more than `retention_drop_pp` (no target gain compensates for it), the caller reported
  a hard failure (format / parse / execution), or a training sanity check failed.
- Pass: no guardrail fired and the target gained at least `min_gain_pp`.
- Inconclusive: anything else (the frozen fallback lease decides, outside this module).

The trial checkpoint is never promotable (TrainResult.never_promotable is set for any run
with fraction < 1).

The curve (issue 27): the run also saves the model at trainers.steps.curve_steps (5 % and 10 %
of the nominal steps), and `measure` reads each of them before the trial's own checkpoint, so
TrialResult.curve holds the same measurement at every point, with the loss and gradient norm
logged at its step. The verdict is still the last point's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from experience_bank.files import write_atomic
from experience_bank.errors import BadInput
from experience_bank.cards import CandidateCard
from experience_bank.results import SuiteResult, TrainResult, TrialPoint, TrialResult
from trainers.run import train
from trainers.sanity import failed_checks
from trainers.steps import MAX_TRIAL_FRACTION, curve_steps, trial_steps

TRIAL_FILE = "trial.json"


class Reading(NamedTuple):
    """What `measure` says of one checkpoint."""

    delta_val: float
    retention: Mapping[str, float]
    hard: Sequence[str]
    metrics: Mapping[str, float] = {}
    """Every metric of the model's evaluation (`suite.metric`), where the caller has them."""


Measure = Callable[[str], "Reading | tuple"]
"""checkpoint dir -> Reading (or its first three fields as a tuple)."""


def _point(reading: Reading, fraction: float, step: int, log: Mapping[str, float]) -> TrialPoint:
    metrics = {k: float(v) for k, v in reading.metrics.items()} | {f"train.{k}": float(v) for k, v in log.items()
                                                                    if k in ("loss", "grad_norm")}
    return TrialPoint(fraction=fraction, step=step, delta_val=float(reading.delta_val),
                      retention_deltas={k: float(v) for k, v in reading.retention.items()},
                      hard_failures=tuple(reading.hard), metrics=metrics)


@dataclass(frozen=True)
class TrialThresholds:
    min_gain_pp: float
    """Target gain on validation (pp) a Pass needs."""
    fail_drop_pp: float
    """Target drop (pp, positive) at which the trial Fails."""
    retention_drop_pp: float
    """Largest allowed fall of any retention metric (pp, positive), e.g. 2.0 for IFEval."""

    def __post_init__(self):
        values = (self.min_gain_pp, self.fail_drop_pp, self.retention_drop_pp)
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise BadInput(f"trial thresholds {values} must be finite and >= 0 (drops are positive numbers)")


def verdict(delta_val: float, retention_deltas: Mapping[str, float], hard_failures: Sequence[str],
            thresholds: TrialThresholds, train_failures: Sequence[str] = ()) -> tuple[str, tuple[str, ...]]:
    """(pass | fail | inconclusive, the conditions that fired) — a pure function."""
    fails = ([f"target fell {-delta_val:.3g} pp (fail at {thresholds.fail_drop_pp:g})"]
             if delta_val <= -thresholds.fail_drop_pp else [])
    fails += [f"retention {name} fell {-d:.3g} pp (bound {thresholds.retention_drop_pp:g})"
              for name, d in sorted(retention_deltas.items()) if d < -thresholds.retention_drop_pp]
    fails += [f"hard failure: {h}" for h in hard_failures]
    fails += [f"training sanity: {t}" for t in train_failures]
    if fails:
        return "fail", tuple(fails)
    if delta_val >= thresholds.min_gain_pp:
        return "pass", (f"target gained {delta_val:.3g} pp (need {thresholds.min_gain_pp:g}); retention within bounds",)
    return "inconclusive", (f"target moved {delta_val:.3g} pp: below the {thresholds.min_gain_pp:g} pp gain, above the "
                            f"{thresholds.fail_drop_pp:g} pp drop",)


def trial(card: CandidateCard, parent_dir: str, examples: Sequence[dict], *, out_dir: str, run_key: str,
          measure: Measure, thresholds: TrialThresholds, fraction: float = MAX_TRIAL_FRACTION,
          reward_funcs: Mapping[str, Callable] | None = None, seed: int = 0, threads: int | None = None, launch=None,
          cache=None) -> TrialResult:
    """Train the trial prefix, measure it, and return its verdict (idempotent on run_key;
    `cache`: the prefix may be served from the run cache, the measurement always runs)."""
    if card.nu == "none":
        raise BadInput(f"card {card.id} has nu = none: no faithful short run exists; route it to Reject or Train")
    trial_steps(card, fraction)  # refuses a fraction above 20% and a share under one step
    saved = Path(out_dir) / TRIAL_FILE
    if saved.is_file():
        done = TrialResult.model_validate_json(saved.read_text())
        if done.train.run_key == run_key:
            return done
    run: TrainResult = train(card, parent_dir, examples, out_dir=out_dir, run_key=run_key, fraction=fraction,
                             reward_funcs=reward_funcs, seed=seed, threads=threads, launch=launch, cache=cache,
                             snapshots=curve_steps(card, fraction))
    # the snapshots first: the last model measured is the trial's own (callers keep its results)
    curve = [_point(Reading(*measure(str(Path(run.checkpoint) / s.path))), s.fraction, s.step, s.log)
             for s in run.snapshots]
    end = Reading(*measure(run.checkpoint))
    curve.append(_point(end, fraction, run.steps, run.log))
    label, reasons = verdict(end.delta_val, end.retention, end.hard, thresholds, failed_checks(run))
    result = TrialResult(verdict=label, delta_val=float(end.delta_val),
                         retention_deltas={k: float(v) for k, v in end.retention.items()},
                         reasons=reasons, train=run, curve=tuple(curve))
    write_atomic(saved, result.model_dump_json(indent=2))  # a crash leaves the trial unmeasured, never half-written
    return result


def measurement(child: Mapping[str, SuiteResult], parent: Mapping[str, SuiteResult],
                initial: Mapping[str, SuiteResult], *, target: str, retention: Sequence[str],
                max_unparseable_share: float) -> tuple[float, dict[str, float], list[str]]:
    """(Delta_val, retention deltas vs the initial parent, hard failures) of a trial checkpoint.

    Fail closed (docs/AUTHORIZER.md §5: Pass needs no format / parse / execution failure): a missing
    suite, an UNKNOWN metric (an evaluator error) or a target suite whose unparseable share
    exceeds the gate's limit is a hard failure, so the verdict is Fail with that reason; the
    episode goes on. A delta that cannot be measured is reported as 0.0 beside the failure."""
    hard: list[str] = []

    def value(results: Mapping[str, SuiteResult], key: str, role: str) -> float | None:
        suite, _, metric = key.partition(".")
        if suite not in results:
            hard.append(f"{role} has no {suite} results")
            return None
        v = results[suite].metrics.get(metric)
        if v is None:
            hard.append(f"{role} {key} is UNKNOWN (an evaluator error)")
        return v

    c, p = value(child, target, "child"), value(parent, target, "parent")
    delta = c - p if None not in (c, p) else 0.0
    deltas = {}
    for key in retention:
        c, i = value(child, key, "child"), value(initial, key, "initial")
        if None not in (c, i):
            deltas[key] = c - i
    suite = target.partition(".")[0]
    if suite in child and child[suite].items:
        share = child[suite].n_unparseable / len(child[suite].items)
        if share > max_unparseable_share + 1e-9:
            hard.append(f"{suite}: {share:.0%} of outputs unparseable (limit {max_unparseable_share:.0%})")
    return delta, deltas, hard
