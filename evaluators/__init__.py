"""Evaluators: tasks, generation backends, pure scorers, CapTrack metric specs.

`evaluate`, `rescore` (evaluators/evaluation.py), `score` and `metric_specs`
(evaluators/scoring/suites.py) are resolved on first use (PEP 562), so that importing
`evaluators.tasks` for a CLI parser does not pull in numpy/scipy.
"""

from importlib import import_module

_LAZY = {"evaluate": "evaluators.evaluation", "rescore": "evaluators.evaluation",
         "score": "evaluators.scoring.suites", "metric_specs": "evaluators.scoring.suites"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'evaluators' has no attribute {name!r}")
    return getattr(import_module(_LAZY[name]), name)
