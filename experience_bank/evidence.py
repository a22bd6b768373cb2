"""The one definition of delta_src: the lower confidence bound of a source effect.

A record's delta_src is what the authorizer may count on, so it is a ONE-sided bound: the
question is only "how small could the effect plausibly be?". At level 1 - alpha (0.95):

    LCB = mean(d) - t_{1-alpha, n-1} * sd(d) / sqrt(n)

over n >= 2 independent paired effects d (child minus matched control on the same unit),
with sd the sample standard deviation and t the Student-t quantile (scipy.stats.t). The
lower end of a two-sided 95% interval would be a 97.5% one-sided bound under a 95% name.

The unit of d is the finest independent paired unit the caller has: the seed bank pairs
child and control item by item (d_i = the replicates' mean score on item i minus the
control's, in pp); consolidation has only each merged record's paired point estimate
(d_r = a replicate's effect), since records do not keep their items. docs/ARCHITECTURE.md
states this in prose.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from scipy import stats

CONFIDENCE = 0.95
"""One-sided level of the bound."""


def lower_bound(effects: Sequence[float], confidence: float = CONFIDENCE) -> float:
    """One-sided Student-t lower confidence bound of the mean of paired effects (pp)."""
    n = len(effects)
    if n < 2 or not all(math.isfinite(e) for e in effects):
        raise ValueError(f"a lower confidence bound needs at least two finite paired effects, got {list(effects)[:5]}")
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence {confidence} must be in [0.5, 1)")
    mean, sd = statistics.fmean(effects), statistics.stdev(effects)
    if sd == 0.0:
        return mean  # no spread: the bound is the effect itself (the t term is 0 x finite)
    return mean - float(stats.t.ppf(confidence, n - 1)) * sd / math.sqrt(n)
