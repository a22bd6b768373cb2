"""The statistics of docs/AUTHORIZER.md §10, as thin functions over scipy.stats (no hand-rolled tests).

Exact sign-flip test over paired differences (all 2^n sign assignments), paired t interval,
the Student-t interval of a mean over a few seeds (`mean_interval`), exact McNemar (binomial test on the discordant cells), Clopper–Pearson intervals, Spearman
rank correlation, and the paired comparison every gate check reports beside its threshold
(`paired_stats`). Out of scope: multiple-comparison corrections and clustered inference (the
seed reports neither).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated

import numpy as np
from pydantic import Field
from scipy import stats

from experience_bank.errors import BadInput
from experience_bank.frozen import Frozen

MAX_EXACT_PAIRS = 20
"""2^20 sign assignments is the largest exact enumeration we allow (about a second)."""


def _finite(xs: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray(xs, dtype=float)
    if arr.ndim != 1 or not np.all(np.isfinite(arr)):
        raise BadInput(f"{what} must be a flat list of finite numbers")
    return arr


def sign_flip_test(diffs: Sequence[float]) -> float:
    """Two-sided exact p of the mean paired difference: every one of the 2^n sign flips."""
    d = _finite(diffs, "paired differences")
    if not 2 <= len(d) <= MAX_EXACT_PAIRS:
        raise BadInput(f"sign-flip test needs 2..{MAX_EXACT_PAIRS} pairs, got {len(d)}")
    # One sample with permutation_type="samples" is scipy's sign-flip null; n_resamples=inf
    # makes it enumerate all 2^n assignments exactly.
    res = stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=math.inf,
                                 alternative="two-sided")
    return float(res.pvalue)


def paired_t_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean of a - b, low, high): the paired t confidence interval."""
    x, y = _finite(a, "first sample"), _finite(b, "second sample")
    if len(x) != len(y) or len(x) < 2:
        raise BadInput(f"paired t interval needs two equal-length samples of at least 2, got {len(x)} and {len(y)}")
    ci = stats.ttest_rel(x, y).confidence_interval(confidence)
    return float(np.mean(x - y)), float(ci.low), float(ci.high)


def mean_interval(xs: Sequence[float], confidence: float = 0.95) -> tuple[float, tuple[float, float] | None]:
    """(mean, two-sided Student-t interval of the mean) of a few independent effects, e.g. one per
    training seed; the interval is None with one value (undefined) and the point itself with no spread."""
    x = _finite(xs, "effects")
    if len(x) == 0:
        raise BadInput("a mean interval needs at least one effect")
    mean = float(np.mean(x))
    if len(x) == 1:
        return mean, None
    if np.ptp(x) == 0:  # scipy's t interval is nan at zero scale; with no spread it is the point
        return mean, (mean, mean)
    ci = stats.ttest_1samp(x, 0.0).confidence_interval(confidence)
    return mean, (float(ci.low), float(ci.high))


def pooled_sd(samples: Sequence[Sequence[float]]) -> tuple[float, int]:
    """(s_p, df): the spread pooled over samples, s_p^2 = sum (n_i - 1) s_i^2 / sum (n_i - 1), on
    df = sum (n_i - 1) degrees of freedom; s_p is nan where df = 0 (no sample has two values)."""
    xs = [_finite(x, "effects") for x in samples]
    if any(len(x) == 0 for x in xs):
        raise BadInput("a pooled spread needs at least one effect per sample")
    df = sum(len(x) - 1 for x in xs)
    return (math.sqrt(sum(float(np.sum((x - np.mean(x)) ** 2)) for x in xs) / df) if df else math.nan), df


def pooled_mean_intervals(samples: Sequence[Sequence[float]],
                          confidence: float = 0.95) -> list[tuple[float, tuple[float, float] | None]]:
    """(mean, two-sided Student-t interval) of each sample's mean with the spread pooled over all of
    them (pooled_sd), interval mean_i +- t s_p / sqrt(n_i). For a few seeds per cell of runs that
    share their noise (the same method, family and controls), this trades mean_interval's 2 degrees
    of freedom at 3 seeds (t = 4.30) for the group's. Intervals are None where no sample has two values."""
    sp, df = pooled_sd(samples)
    means = [float(np.mean(np.asarray(x, dtype=float))) for x in samples]
    if df == 0:
        return [(m, None) for m in means]
    t = float(stats.t.ppf(0.5 + confidence / 2, df))
    return [(m, (m - t * sp / math.sqrt(len(x)), m + t * sp / math.sqrt(len(x)))) for m, x in zip(means, samples)]


def seeds_to_resolve(sp: float, cells: int, margin: float, *, confidence: float = 0.95,
                     most: int = 50) -> int | None:
    """The fewest seeds K per cell at which a cell whose effect is exactly 0 has its pooled interval
    (cells x (K - 1) degrees of freedom, spread sp) strictly inside (-margin, +margin): below it no
    cell of the group can be decided on that side of the boundary, whatever its effect. None when
    even `most` seeds do not suffice (or the spread is unknown)."""
    if not (sp >= 0 and margin > 0 and cells >= 1):
        return None
    for k in range(2, most + 1):
        if float(stats.t.ppf(0.5 + confidence / 2, cells * (k - 1))) * sp / math.sqrt(k) < margin:
            return k
    return None


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p from the discordant counts b (only first) and c (only second)."""
    if b < 0 or c < 0:
        raise BadInput(f"discordant counts must be non-negative, got {b} and {c}")
    if b + c == 0:
        return 1.0
    return float(stats.binomtest(min(b, c), b + c, 0.5).pvalue)


def mcnemar_paired(first: Sequence[bool], second: Sequence[bool]) -> tuple[int, int, float]:
    """(b, c, p) for two paired boolean outcomes over the same cells."""
    if len(first) != len(second):
        raise BadInput(f"McNemar needs paired outcomes, got {len(first)} and {len(second)} cells")
    b = sum(1 for x, y in zip(first, second) if x and not y)
    c = sum(1 for x, y in zip(first, second) if y and not x)
    return b, c, mcnemar_exact(b, c)


class PairedStats(Frozen):
    """Two models compared item by item on the same items (docs/GATE.md §5)."""

    n: Annotated[int, Field(ge=0)]
    """Items known (not UNKNOWN) on both sides: the pairs everything below rests on."""
    b: Annotated[int, Field(ge=0)]
    """Pairs right before and wrong after (losses)."""
    c: Annotated[int, Field(ge=0)]
    """Pairs wrong before and right after (gains)."""
    unknown: Annotated[int, Field(ge=0)]
    """Items left out because either side is UNKNOWN."""
    delta_pp: float | None
    """Mean per-item difference after - before, in pp (positive = more right after); None when n = 0."""
    se_pp: float | None
    """Standard error of that mean, in pp; None when n = 0."""
    mcnemar_p: Annotated[float, Field(ge=0.0, le=1.0)]
    """Exact two-sided McNemar p on (b, c)."""


def paired_stats(before: Mapping[str, bool | None], after: Mapping[str, bool | None], what: str) -> PairedStats:
    """Per-item outcomes of two models (keyed by item id) -> n, b, c, mean difference, its SE, McNemar p."""
    if before.keys() != after.keys():
        raise BadInput(f"{what}: item ids differ between the two models; evaluate both on the same split")
    known = [k for k in before if before[k] is not None and after[k] is not None]
    diffs = np.array([float(after[k]) - float(before[k]) for k in known])
    b, c = int(np.sum(diffs < 0)), int(np.sum(diffs > 0))
    if not known:
        return PairedStats(n=0, b=0, c=0, unknown=len(before), delta_pp=None, se_pp=None, mcnemar_p=1.0)
    # ddof=0: for 0/1 outcomes this is the usual paired-proportion SE,
    # sqrt((b + c) - (b - c)^2 / n) / n (Agresti, Categorical Data Analysis §10.1).
    se = float(stats.sem(diffs, ddof=0)) if len(diffs) > 1 else 0.0
    return PairedStats(n=len(known), b=b, c=c, unknown=len(before) - len(known), delta_pp=100.0 * float(diffs.mean()),
                       se_pp=100.0 * se, mcnemar_p=mcnemar_exact(b, c))


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact binomial (Clopper–Pearson) interval for k successes of n; (nan, nan) when n = 0."""
    if n == 0:
        return math.nan, math.nan
    if not 0 <= k <= n:
        raise BadInput(f"need 0 <= k <= n, got k={k}, n={n}")
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    a, b = _finite(x, "x"), _finite(y, "y")
    if len(a) != len(b) or len(a) < 3:
        raise BadInput(f"Spearman needs two equal-length samples of at least 3, got {len(a)} and {len(b)}")
    return float(stats.spearmanr(a, b).statistic)
