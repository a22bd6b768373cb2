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
from trainers.steps import curve_steps, share_steps
from trainers.trial import TrialThresholds, verdict


class CellPorts(Protocol):
    """The boundary to trainers/ and evaluators/ (tests bind fakes)."""

    def evaluate(self, model_dir: str, family: str, split: str, out_dir: str) -> dict[str, float]:
        """{"target": pp, "prompt_strict": pp, "inst_strict": pp} on the same items for every model."""

    def train(self, card: Any, parent_dir: str, fraction: float, seed: int, out_dir: str,
              snapshots: tuple[tuple[float, int], ...] = ()) -> dict[str, Any]:
        """{"checkpoint": dir, "wall_s": seconds, "sanity_failures": [names], "snapshots": [{"fraction",
        "step", "path"}]}: the models saved at `snapshots` ((share, step), trainers.steps.curve_steps)."""


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


TRIAL = FRACTIONS[-1]
"""The trial's share (trainers.steps.MAX_TRIAL_FRACTION): the shorter readings are its curve."""


def _train(ports: CellPorts, card: Any, parent: str, fraction: float, seed: int, out_dir: str) -> dict[str, Any]:
    """A run of `fraction` of the card; a trial-length run also saves the snapshots of its curve,
    so that its 5 % and 10 % readings are the models a loop's trial measures (trainers.trial), not
    separate shorter runs (which a restart card would run on schedules of their own)."""
    for f in FRACTIONS if fraction == TRIAL else ():
        share_steps(card, f)  # TrialRefused where a reading would be under one step
    return ports.train(card, parent, fraction, seed, out_dir, curve_steps(card, TRIAL) if fraction == TRIAL else ())


def _points(card: Any, run: dict[str, Any]) -> dict[str, tuple[str, float]]:
    """Each reading of a trial-length run: share -> (model dir, wall-clock up to it, prorated by steps)."""
    last = share_steps(card, TRIAL)
    points = {f"{s['fraction']:.2f}": (s["path"], run["wall_s"] * s["step"] / last) for s in run["snapshots"]}
    return points | {f"{TRIAL:.2f}": (run["checkpoint"], run["wall_s"])}


def _trial_readings(ports: CellPorts, card: Any, cell: Path, parent: str, seed: int) -> dict[str, dict]:
    """The trial-length run and its readings on the validation split, one cached step each."""
    run = _once(cell / "trial-run.json", lambda: _train(ports, card, parent, TRIAL, seed, str(cell / "runs" / "trial")))
    out = {}
    for f, (model, wall_s) in _points(card, run).items():
        out[f] = _once(cell / f"f{f}.json", lambda: {
            "scores": ports.evaluate(model, card.family, "validation", str(cell / "evals" / f"f{f}-validation")),
            "wall_s": wall_s, "sanity_failures": list(run["sanity_failures"])})
    return out


def _full(ports: CellPorts, card: Any, cell: Path, parent: str, seed: int) -> dict:
    def go() -> dict:
        run = _train(ports, card, parent, 1.0, seed, str(cell / "runs" / "f1.00"))
        scores = ports.evaluate(run["checkpoint"], card.family, "adoption", str(cell / "evals" / "f1.00-adoption"))
        return {"scores": scores, "wall_s": run["wall_s"], "sanity_failures": list(run["sanity_failures"])}
    return _once(cell / "f1.00.json", go)


def control_scores(ports: CellPorts, control: Any, parent: Any, parent_dir: str, fraction: float, seed: int,
                   family: str, split: str, root: Path) -> dict[str, float]:
    """The matched control's scores at `fraction`, read as the intervention's are: a short share is a
    snapshot of the control's trial-length run. Trained once per control_key, evaluated once per
    family, split and reading."""
    length = 1.0 if fraction == 1.0 else TRIAL
    key_dir = root / control_key(control, parent, seed, length)
    run = _once(key_dir / "run.json", lambda: _train(ports, control, parent_dir, length, seed, str(key_dir / "run")))
    name = f"{family}-{split}" + ("" if fraction == length else f"-f{fraction:.2f}")
    model = run["checkpoint"] if fraction == length else _points(control, run)[f"{fraction:.2f}"][0]
    return _once(key_dir / f"{name}.json", lambda: ports.evaluate(model, family, split, str(key_dir / "evals" / name)))


def run_cell(ports: CellPorts, card: Any, cell: Path, parent_dir: str, seed: int, *, control: Any, parent: Any,
             controls_dir: Path) -> dict[str, Any]:
    """The trial-length run with its curve, the full run and their matched controls for one
    candidate; cached step by step."""
    controls: dict[str, dict[str, float]] = {}  # fraction -> the matched control's scores

    def ctrl(fraction: float, split: str) -> dict[str, float]:
        controls[f"{fraction:.2f}"] = control_scores(ports, control, parent, parent_dir, fraction, seed, card.family,
                                                     split, controls_dir)
        return controls[f"{fraction:.2f}"]

    readings = _trial_readings(ports, card, cell, parent_dir, seed)
    short = {}
    for f in FRACTIONS:
        r = readings[f"{f:.2f}"]
        short[f"{f:.2f}"] = _effect(r["scores"], ctrl(f, "validation")) | {"wall_s": r["wall_s"],
                                                                          "sanity_failures": r["sanity_failures"]}
    full_run = _full(ports, card, cell, parent_dir, seed)
    full = _effect(full_run["scores"], ctrl(1.0, "adoption")) | {"wall_s": full_run["wall_s"],
                                                                "sanity_failures": full_run["sanity_failures"]}
    v, reasons = _trial_verdict(short["0.20"])
    cls = outcome_class(full["target"], full["ifeval"], hard_failure=bool(full["sanity_failures"]))
    return {"id": card.id, "family": card.family, "method": card.method, "seed": seed, "control": controls,
            "parent": {split: parent_scores(ports, parent, parent_dir, card.family, split, controls_dir.parent / "parents")
                       for split in ("validation", "adoption")},
            "short": short, "full": full, "trial_verdict": v, "trial_reasons": list(reasons), "outcome_class": cls}


def parent_scores(ports: CellPorts, parent: Any, parent_dir: str, family: str, split: str, root: Path) -> dict:
    """The parent's own scores on a family's split, once per parent (greedy decoding: seed-free).
    A loop's trial reads its target against the parent and IFEval against the initial parent
    (here both are the world's base), not against a matched control; with these beside the
    control's scores a cell's readings can be put on either footing."""
    where = root / parent.sha256[:16] / f"{family}-{split}"
    return _once(where.with_suffix(".json"), lambda: ports.evaluate(parent_dir, family, split, str(where / "evals")))
