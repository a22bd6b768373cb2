"""Device-hour budgets, the cost model, and the append-only ledger every run is charged to.

- `parse_budget("36gpuh" | "2.5h" | "90m") -> float` device-hours.
- `run_hours(card_hours, steps_run, nominal_steps)`: the one conversion of steps into
  nominal device-hours; every estimate and charge of a run goes through it.
- `CostModel`: `measured` charges wall-clock seconds x devices / 3600 (real hardware);
  `nominal` charges device-hours declared per unit of work (a run: the steps it actually ran
  as a share of the card's nominal steps x the card's device-hours — a trial runs the floor
  of its fraction (trainers.steps), so it is charged that, not the fraction asked for; a
  continuation: the steps after the trial's; an evaluation: a configured amount per suite),
  so that a paper-scale budget binds on the embedded world as it would at the paper's
  scale. Measured seconds are recorded beside nominal charges either way.
- `Ledger(path)`: SQLite through sqlite-utils; triggers refuse UPDATE and DELETE, and each
  charge is keyed by (episode_id, key), so a step re-run after a crash is charged once.
- A run that would exceed the remaining budget is not started: the loop asks `Ledger.can_afford`
  (with the endpoint's evaluation kept back: agent/loop/nodes.py `_fits`) before it starts one.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import sqlite_utils

from experience_bank.errors import BadInput
from experience_bank.files import sqlite_fault, sqlite_tables
from experience_bank.cards import CandidateCard
from experience_bank.results import TrainResult
from trainers.steps import MAX_TRIAL_FRACTION, trial_steps

MAX_BUDGET_HOURS = 1_000_000.0  # beyond any real allocation: a typo, not a budget
_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(gpuh|h|m)\s*$", re.IGNORECASE)
_PER_HOUR = {"gpuh": 1.0, "h": 1.0, "m": 1.0 / 60.0}


def parse_budget(text: str) -> float:
    """Device-hours from `36gpuh`, `2.5h` (device-hours) or `90m` (device-minutes)."""
    match = _BUDGET.match(str(text))
    if not match:
        raise BadInput(f"budget {text!r} is not a positive amount with a unit: write e.g. 36gpuh, 2.5h or 90m")
    hours = float(match.group(1)) * _PER_HOUR[match.group(2).lower()]
    if not 0.0 < hours <= MAX_BUDGET_HOURS:
        raise BadInput(f"budget {text!r} is {hours:,.10g} device-hours: give more than 0 and at most {MAX_BUDGET_HOURS:,.0f}")
    return hours


def run_hours(card_hours: float, steps_run: int, nominal_steps: int) -> float:
    """Nominal device-hours of `steps_run` steps of a card whose full run is `nominal_steps`
    steps for `card_hours` device-hours."""
    if nominal_steps < 1 or not 0 <= steps_run <= nominal_steps or not (math.isfinite(card_hours) and card_hours >= 0):
        raise BadInput(f"run of {steps_run} of {nominal_steps} nominal steps at {card_hours} device-hours: "
                       "need 0 <= steps run <= nominal steps, nominal >= 1, hours >= 0")
    return steps_run / nominal_steps * card_hours


@dataclass(frozen=True)
class CostModel:
    kind: Literal["measured", "nominal"]
    """measured: wall x devices; nominal: declared device-hours per unit of work."""
    devices: int = 1
    """Devices a run occupies (measured charges multiply by it)."""
    eval_device_hours: float = 0.0
    """Nominal device-hours charged per evaluated suite."""

    def __post_init__(self):
        if self.kind not in ("measured", "nominal") or self.devices < 1 or not math.isfinite(self.eval_device_hours) \
                or self.eval_device_hours < 0:
            raise BadInput(f"cost model {self}: kind measured|nominal, devices >= 1, eval_device_hours >= 0")

    def measured(self, wall_seconds: float) -> float:
        return wall_seconds * self.devices / 3600.0

    # Estimates are the declared budget in either mode: nothing is known of the wall clock
    # before a run starts.
    def estimate_trial(self, card: CandidateCard, fraction: float = MAX_TRIAL_FRACTION) -> float:
        """Device-hours a bounded trial will cost: the steps it will run (TrialRefused when
        its share is under one step)."""
        return run_hours(card.budget.device_hours, trial_steps(card, fraction), card.budget.steps)

    def estimate_full(self, card: CandidateCard, continued_steps: int = 0) -> float:
        """Device-hours a full run will cost; continuing a trial of `continued_steps` steps
        (nu = continue) pays only the remaining steps."""
        return run_hours(card.budget.device_hours, card.budget.steps - continued_steps, card.budget.steps)

    def estimate_eval(self, n_evaluations: int) -> float:
        """Device-hours `n_evaluations` evaluations (one model, one split, all suites) will cost."""
        return n_evaluations * self.eval_device_hours

    def run_charge(self, card: CandidateCard, result: TrainResult) -> float:
        """Device-hours a finished run is charged: the steps it ran (a continuation's exclude
        the trial's prefix, which the trial paid for; a crash-resumed run pays for all, once)."""
        if result.nominal_steps is not None and result.nominal_steps != card.budget.steps:
            raise BadInput(f"run {result.run_key} is a share of {result.nominal_steps} steps but card {card.id} "
                           f"has {card.budget.steps}: charge it with the card it was trained from")
        if self.kind == "measured":
            return self.measured(result.wall_seconds)
        return run_hours(card.budget.device_hours, result.steps_run, card.budget.steps)

    def eval_charge(self, n_suites: int, wall_seconds: float) -> float:
        if self.kind == "measured":
            return self.measured(wall_seconds)
        return n_suites * self.eval_device_hours


_SCHEMA = {"episode_id": str, "key": str, "kind": str, "device_hours": float, "wall_seconds": float,
           "devices": int, "detail": str, "created_at": float, "cached": int}
"""`cached` = 1: the run cache served this charge's work; it is charged at the cost it had when it
ran (nominal, or its stored wall-clock), so a budget buys the same decisions with or without it."""


def check_existing(path: str | Path) -> None:
    """BadInput where the ledger a run wrote is missing, not SQLite, damaged or holds no charges:
    opening such a path would make an empty ledger in its place, and everything that reads it would
    then say nothing was spent. Nothing is opened for writing."""
    fault = sqlite_fault(path)
    if fault is None and "charges" not in (sqlite_tables(path) or {"charges"}):  # None: in use, opened as it is
        fault = "an SQLite database without a charges table"
    if fault is not None:
        raise BadInput(f"ledger {path} is {fault}: restore it from a copy (a run's charges, the budget it spent, "
                       "cannot be rebuilt)")


class Ledger:
    """Append-only charges of device-hours, one per (episode_id, key)."""

    def __init__(self, path: str):
        """Open the ledger at `path`, made where there is none (a new run's); `existing` for a run's."""
        self.db = sqlite_utils.Database(memory=True) if path == ":memory:" else sqlite_utils.Database(path)
        if "charges" not in self.db.table_names():
            self.db["charges"].create(_SCHEMA, pk=("episode_id", "key"), not_null=set(_SCHEMA))
            for op in ("UPDATE", "DELETE"):
                self.db.execute(f"CREATE TRIGGER charges_no_{op.lower()} BEFORE {op} ON charges "
                                f"BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END")
        elif "cached" not in self.db["charges"].columns_dict:  # a ledger written before the run cache
            self.db["charges"].add_column("cached", int, not_null_default=0)

    @classmethod
    def existing(cls, path: str | Path) -> "Ledger":
        """The ledger a run wrote (check_existing first), opened."""
        check_existing(path)
        return cls(str(path))

    def charge(self, episode_id: str, key: str, *, kind: str, device_hours: float, wall_seconds: float,
               devices: int = 1, detail: str = "", cached: bool = False) -> dict:
        """Record a charge once; a repeat of the same (episode_id, key) returns the first."""
        if not (math.isfinite(device_hours) and device_hours >= 0 and math.isfinite(wall_seconds) and wall_seconds >= 0):
            raise BadInput(f"charge {key}: device_hours and wall_seconds must be finite and >= 0")
        row = dict(episode_id=episode_id, key=key, kind=kind, device_hours=device_hours, wall_seconds=wall_seconds,
                   devices=devices, detail=detail, created_at=time.time(), cached=int(cached))
        self.db["charges"].insert(row, ignore=True)  # INSERT OR IGNORE: the trigger never sees an update
        return self.get(episode_id, key)

    def get(self, episode_id: str, key: str) -> dict | None:
        rows = list(self.db["charges"].rows_where("episode_id = ? and key = ?", [episode_id, key]))
        return rows[0] if rows else None

    def charges(self, episode_id: str) -> list[dict]:
        return list(self.db["charges"].rows_where("episode_id = ?", [episode_id], order_by="rowid"))

    def spent(self, episode_id: str) -> float:
        return math.fsum(r["device_hours"] for r in self.charges(episode_id))

    def remaining(self, episode_id: str, budget: float) -> float:
        return budget - self.spent(episode_id)

    def can_afford(self, episode_id: str, budget: float, device_hours: float) -> bool:
        # A hair of tolerance so that a budget spent exactly by its parts is not refused by round-off.
        return device_hours <= self.remaining(episode_id, budget) + 1e-9

    def charge_run(self, episode_id: str, key: str, card: CandidateCard, result: TrainResult, cost: CostModel,
                   cached: bool = False) -> dict:
        """Charge a finished run or trial under the cost model (`cached`: the run cache served it)."""
        kind = "trial" if result.never_promotable else "train"
        detail = f"{card.id} steps={result.steps_run}/{card.budget.steps} fraction={result.fraction:g} cost={cost.kind}"
        return self.charge(episode_id, key, kind=kind, device_hours=cost.run_charge(card, result),
                           wall_seconds=result.wall_seconds, devices=cost.devices, detail=detail, cached=cached)
