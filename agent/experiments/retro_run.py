"""How one seed of one retrospective cell is run: its short runs, its full run and their
trained matched controls, each step cached (resume skips it), into the seed's cell.json.

This module is the code a per-seed cell.json depends on (with the trainers, the evaluators and
the world's runner): its source is part of the code version a published results directory
carries (agent/experiments/retro_results.py), so a change here, and only a change to what runs
a cell, makes finished cells on another machine count as another measurement.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from experience_bank.files import once
from experience_bank.hashing import canonical_json
from agent.experiments.retro_cells import DEFAULTS, FRACTIONS, IFEVAL, IFEVAL_DROP_PP, outcome_class
from agent.world.controls import control_key
from trainers.trial import TrialThresholds, verdict


class CellPorts(Protocol):
    """The boundary to trainers/ and evaluators/ (tests bind fakes)."""

    def evaluate(self, model_dir: str, family: str, split: str, out_dir: str) -> dict[str, float]:
        """{"target": pp, "prompt_strict": pp, "inst_strict": pp} on the same items for every model."""

    def train(self, card: Any, parent_dir: str, fraction: float, seed: int, out_dir: str) -> dict[str, Any]:
        """{"checkpoint": dir, "wall_s": seconds, "sanity_failures": [names]}."""


def _once(path: Path, compute: Callable[[], dict]) -> dict:
    """A cached step of a cell, single flight: when two cells run at once (Ray workers, threads)
    and need the same matched control, one trains it while the other waits and then reads it;
    without the lock both would train into the same directory. Each cell holds at most its own
    cell.json lock and one step's lock, so no two cells wait on each other in a cycle."""
    return once(path, compute, dump=canonical_json, load=json.loads, single_flight=True)


def _effect(child: dict[str, float], control: dict[str, float]) -> dict[str, Any]:
    return {"target": round(child["target"] - control["target"], 6),
            "ifeval": {m: round(child[m] - control[m], 6) for m in IFEVAL}}


TRIAL_THRESHOLDS = TrialThresholds(min_gain_pp=DEFAULTS.trial_min_gain_pp, fail_drop_pp=DEFAULTS.trial_fail_drop_pp,
                                   retention_drop_pp=IFEVAL_DROP_PP)


def _trial_verdict(t: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The 20 % run's verdict (trainers.trial.verdict under the run config's default thresholds)."""
    return verdict(t["target"], {f"ifeval.{m}": d for m, d in t["ifeval"].items()}, (), TRIAL_THRESHOLDS,
                   train_failures=t["sanity_failures"])


def _run(ports: CellPorts, card: Any, cell: Path, parent: str, fraction: float, seed: int, split: str) -> dict:
    name = f"f{fraction:.2f}"

    def go() -> dict:
        run = ports.train(card, parent, fraction, seed, str(cell / "runs" / name))
        scores = ports.evaluate(run["checkpoint"], card.family, split, str(cell / "evals" / f"{name}-{split}"))
        return {"scores": scores, "wall_s": run["wall_s"], "sanity_failures": list(run["sanity_failures"])}
    return _once(cell / f"{name}.json", go)


def control_scores(ports: CellPorts, control: Any, parent: Any, parent_dir: str, fraction: float, seed: int,
                   family: str, split: str, root: Path) -> dict[str, float]:
    """The matched control's scores: trained once per control_key, evaluated once per family and split."""
    key_dir = root / control_key(control, parent, seed, fraction)
    run = _once(key_dir / "run.json", lambda: ports.train(control, parent_dir, fraction, seed, str(key_dir / "run")))
    return _once(key_dir / f"{family}-{split}.json",
                 lambda: ports.evaluate(run["checkpoint"], family, split, str(key_dir / "evals" / f"{family}-{split}")))


def run_cell(ports: CellPorts, card: Any, cell: Path, parent_dir: str, seed: int, *, control: Any, parent: Any,
             controls_dir: Path) -> dict[str, Any]:
    """Short runs, the full run and their matched controls for one candidate; cached step by step."""
    controls: dict[str, dict[str, float]] = {}  # fraction -> the matched control's scores

    def ctrl(fraction: float, split: str) -> dict[str, float]:
        controls[f"{fraction:.2f}"] = control_scores(ports, control, parent, parent_dir, fraction, seed, card.family,
                                                     split, controls_dir)
        return controls[f"{fraction:.2f}"]

    short = {}
    for f in FRACTIONS:
        r = _run(ports, card, cell, parent_dir, f, seed, "validation")
        short[f"{f:.2f}"] = _effect(r["scores"], ctrl(f, "validation")) | {"wall_s": r["wall_s"],
                                                                          "sanity_failures": r["sanity_failures"]}
    full_run = _run(ports, card, cell, parent_dir, 1.0, seed, "adoption")
    full = _effect(full_run["scores"], ctrl(1.0, "adoption")) | {"wall_s": full_run["wall_s"],
                                                                "sanity_failures": full_run["sanity_failures"]}
    v, reasons = _trial_verdict(short["0.20"])
    cls = outcome_class(full["target"], full["ifeval"], hard_failure=bool(full["sanity_failures"]))
    return {"id": card.id, "family": card.family, "method": card.method, "seed": seed, "control": controls,
            "short": short, "full": full, "trial_verdict": v, "trial_reasons": list(reasons), "outcome_class": cls}
