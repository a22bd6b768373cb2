"""Evaluators: tasks, generation backends, pure scorers, CapTrack metric specs.

`evaluation.py` holds evaluate()/rescore() (named so that the module never shadows the
function `evaluators.evaluate`). Heavy imports (torch, transformers) happen only inside
generation and model loading.
"""

from evaluators.evaluation import evaluate, rescore
from evaluators.scoring.suites import metric_specs, score

__all__ = ["evaluate", "rescore", "score", "metric_specs"]
