"""Early-stop extrapolation: the trial verdict of the `early_stop_extrapolation` baseline (issue 27).

The multi-fidelity literature's plainest predictor of a full run from a short one (TuneAhead's
baseline): fit a curve to the trial's own target readings and continue when the curve's value at
full length clears the adoption threshold. Nothing is learned across runs.

The curve is a power law through the origin, Delta(f) = c * f**b, with f the share of the
nominal steps taken. Through the origin because at f = 0 the child is the parent (Delta = 0 by
definition); b in [0, 1] because learning curves decelerate, and an accelerating fit to three
noisy points extrapolates the noise fivefold (b = 0 is a flat curve: the readings' mean; b = 1
a straight line from the origin). For each b on a grid of 0.01, c is the least-squares solution
in closed form, and the b with the smallest squared error is kept (the smaller b on a tie), so
the fit is exact and deterministic with no optimiser to converge. The prediction at full length
is c.

A trial with fewer than two points (a card too short for a 5 % or 10 % snapshot, or a trial
recorded before curves existed) has no curve: the verdict is Inconclusive, and the episode's
fallback lease decides, as for every other policy. Hard failures are not this rule's business:
the gate still refuses a full run with one. The loop and the audit reach this rule through
policies.trial_rules.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from policies.authorize import Verdict

EXPONENTS = np.round(np.arange(0.0, 1.0 + 1e-9, 0.01), 2)
"""The grid of b searched."""
MIN_POINTS = 2


def fit(curve: Mapping[float, float]) -> tuple[float, float]:
    """(c, b) of the least-squares Delta(f) = c * f**b, b in EXPONENTS, over the curve's points (share -> pp)."""
    f = np.array(sorted(curve), dtype=float)
    y = np.array([curve[k] for k in sorted(curve)], dtype=float)
    best = None
    for b in EXPONENTS:
        x = f ** b
        c = float(x @ y / (x @ x))
        sse = float(((y - c * x) ** 2).sum())
        if best is None or sse < best[0] - 1e-12:
            best = (sse, c, float(b))
    return best[1], best[2]


def verdict(curve: Mapping[float, float], min_gain_pp: float) -> tuple[Verdict, str]:
    """Pass when the curve's value at full length reaches `min_gain_pp` (the gate's adoption
    threshold), else Fail; Inconclusive without a curve."""
    points = {float(k): float(v) for k, v in curve.items() if 0.0 < float(k) < 1.0}
    if len(points) < MIN_POINTS:
        return "inconclusive", f"early stop: {len(points)} trial point(s), no curve to extrapolate"
    c, b = fit(points)
    label: Verdict = "pass" if c >= min_gain_pp else "fail"
    return label, (f"early stop: target extrapolated to {c:.3g} pp at full length (c f^b, b = {b:.2f}, "
                   f"{len(points)} points); adoption needs {min_gain_pp:g}")
