"""Learn-then-Test (Angelopoulos et al. 2021): the threshold on a score, P(harmful) from the go/no-go
(policies/gonogo.py), that bounds the harmful share of what it authorizes.

Go iff P(harmful) <= t, t from the fixed
grid THRESHOLDS. On calibration runs each t is a null hypothesis "harmful among authorized > alpha",
rejected when the one-sided Clopper-Pearson upper bound at level 1 - delta is <= alpha, and the grid
is tested by fixed-sequence testing (LTT's procedure for a risk that grows with t): from the most
conservative t upward, stopping at the first t not rejected; the last rejected t is chosen, and none
rejected means "authorize nothing" (threshold None). The sequence starts at the first t that
authorizes at least min_authorized(alpha, delta) runs: a smaller t cannot be rejected whatever its
labels, and where the sequence starts depends on the scores alone, never on the labels. With
probability >= 1 - delta the chosen t has a harmful share <= alpha (the sequence errs only by
rejecting its first true null), given exchangeable runs and the binomial model of the authorized
runs. Why not Bonferroni over the grid (the first version): it tests each t at delta / 20, which
needs 51 authorized runs, none harmful, at alpha = delta = 0.1 against 22 here; the paired runs of
three worlds (216 at most, a third of them held out) could never pass it. Calibration runs
are either given (a split: the finite-sample statement above holds) or, by default, the training
runs' own out-of-group predictions (cross-fitting, as in CV+: no held-out run is spent, and the
guarantee becomes approximate; the record says which). This module is pure: it sees scores and
labels, never features or a model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from experience_bank.errors import BadInput
from experience_bank.frozen import Frozen
from policies.stats import clopper_pearson

THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(1, 21))
"""The candidate thresholds on P(harmful), fixed before any data, tested in this order (ascending)."""


class Threshold(Frozen):
    """The Learn-then-Test choice on P(harmful)."""

    threshold: float | None
    """go iff P(harmful) <= threshold; None: no candidate passed, authorize nothing."""
    calibration: Literal["cross-fitted", "split"]
    n_calibration: int
    authorized: int
    """Calibration runs the chosen threshold authorizes (0 when None)."""
    harmful: int
    """Harmful runs among them."""
    upper_bound: float | None
    """Their harmful share's one-sided Clopper-Pearson bound at 1 - delta."""



def check_levels(alpha: float, delta: float) -> None:
    if not (0 < alpha < 1 and 0 < delta < 1):
        raise BadInput(f"alpha {alpha} and delta {delta} must lie in (0, 1): e.g. --alpha 0.1 --delta 0.1")


def _confidence(delta: float) -> float:
    """Two-sided CP at 1 - 2d is the one-sided bound at 1 - d: each t of the sequence is tested at delta."""
    return 1 - 2 * delta


def upper_bound(harmful: int, authorized: int, delta: float) -> float:
    """The one-sided Clopper-Pearson bound at 1 - delta on a harmful share (authorized > 0)."""
    return clopper_pearson(harmful, authorized, _confidence(delta))[1]


def min_authorized(alpha: float, delta: float) -> int:
    """The fewest authorized calibration runs, all of them not harmful, whose bound can pass alpha:
    below it no threshold can be chosen, whatever the model."""
    check_levels(alpha, delta)
    # CP upper of 0/n at one-sided level 1 - d is 1 - d^(1/n) <= alpha  <=>  n >= log d / log(1 - alpha).
    n = math.ceil(math.log(delta) / math.log(1 - alpha))
    return n if upper_bound(0, n, delta) <= alpha else n + 1


def choose_threshold(p_harm: Sequence[float], harmful: Sequence[bool], *, alpha: float, delta: float,
                     calibration: Literal["cross-fitted", "split"] = "split") -> Threshold:
    """Learn-then-Test by fixed-sequence testing: the last t of THRESHOLDS, ascending from the first
    that authorizes min_authorized runs, before the first whose harmful-among-authorized bound exceeds alpha."""
    check_levels(alpha, delta)
    p, h = np.asarray(p_harm, dtype=float), np.asarray(harmful, dtype=bool)
    floor = min_authorized(alpha, delta)
    chosen = Threshold(threshold=None, calibration=calibration, n_calibration=len(p), authorized=0, harmful=0,
                       upper_bound=None)
    for t in THRESHOLDS:
        go = p <= t
        n, k = int(go.sum()), int((go & h).sum())
        if n < floor:  # not yet in the sequence: untestable, and skipping it reads no label
            continue
        upper = upper_bound(k, n, delta)
        if upper > alpha:  # the first null not rejected ends the sequence
            break
        chosen = Threshold(threshold=t, calibration=calibration, n_calibration=len(p), authorized=n, harmful=k,
                           upper_bound=upper)
    return chosen
