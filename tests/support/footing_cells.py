"""Hand-made executed retrospective cells (the layout of agent/experiments/retro_run.run_cell) that
keep the parent's and the matched controls' absolute scores, so that a short reading on the loop's
footing (effect + control[f] - parent) can be checked against numbers worked out by hand."""

from __future__ import annotations

import copy
from typing import Any

CONTROL = {"0.05": {"target": 40.0, "prompt_strict": 70.0, "inst_strict": 80.0},
           "0.10": {"target": 44.0, "prompt_strict": 72.0, "inst_strict": 81.0},
           "0.20": {"target": 50.0, "prompt_strict": 75.0, "inst_strict": 80.0},
           "1.00": {"target": 60.0, "prompt_strict": 73.0, "inst_strict": 79.0}}
"""The matched control's absolute scores by share (validation split; 1.00 on the adoption split)."""
PARENT = {"validation": {"target": 48.0, "prompt_strict": 70.0, "inst_strict": 80.0},
          "adoption": {"target": 47.0, "prompt_strict": 71.0, "inst_strict": 79.5}}
"""The base model's own scores: a short reading on the parent footing is effect + CONTROL[f] - PARENT
on the validation split, so +2 target, +5 prompt and +0 inst at 20 %; at 5 % -8, 0 and 0."""


def effect(target: float, prompt: float, inst: float) -> dict[str, Any]:
    return {"target": target, "ifeval": {"prompt_strict": prompt, "inst_strict": inst}, "wall_s": 1.0,
            "sanity_failures": []}


def cell(card: str, short: dict[str, tuple[float, float, float]], full: tuple[float, float, float], *,
         method: str = "sft", seed: int = 0, parent: bool = True) -> dict[str, Any]:
    """A cell.json dict: `short` share -> (target, prompt, inst) effects against the control, `full`
    likewise; without `parent` it is a cell from before the parent's scores were kept."""
    out = {"id": card, "family": "sql", "method": method, "seed": seed, "control": CONTROL,
           "short": {f: effect(*e) for f, e in short.items()}, "full": effect(*full),
           "trial_verdict": "inconclusive", "trial_reasons": [], "outcome_class": "neutral"}
    return copy.deepcopy(out | ({"parent": PARENT} if parent else {}))  # a test may break its copy
