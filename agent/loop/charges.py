"""What a loop node pays and keeps: a result computed once per decision and stored where the
run directory says, an evaluation stored and charged once per (model, split), the budget check that
keeps the endpoint's evaluation paid for, and what the ledger charged under a decision's keys.
The budget arithmetic itself is the ledger's (trainers/ledger.py); the cost model is ctx.cost."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from experience_bank import files
from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json
from experience_bank.frozen import parse_model
from experience_bank.results import SuiteResult
from experience_bank.runcache import provenance, was_cached
from trainers.ledger import CostModel

from agent.loop.state import Ctx, cost_model
from agent.run.manifest import ENDPOINT_SPLIT, Cost

def once(path: Path, compute: Callable[[], Any], cls: type) -> Any:
    """The record stored at `path`, or compute it and store it (atomically) first."""
    return files.once(path, compute, dump=lambda value: canonical_json(value.model_dump(mode="json")),
                      load=lambda text: parse_model(cls, text, str(path)))


def budget(ctx: Ctx) -> float:
    return ctx.manifest.budget_device_hours


def spent(ctx: Ctx) -> float:
    return round(ctx.ledger.spent(ctx.episode_id), 9)


def endpoint_estimate(cost: CostModel) -> float:
    """Device-hours the final parent's test evaluation is estimated at (one model, one split)."""
    return cost.estimate_eval(1)


def check_budget(budget_h: float, cost: Cost) -> None:
    """A budget must pay for the final parent's test evaluation, which every episode ends with and
    every decision keeps back (endpoint_reserve): a smaller one would be overspent by it."""
    need = endpoint_estimate(cost_model(cost))
    if budget_h < need:
        raise BadInput(f"--episode-budget {budget_h:g} device-hours does not pay for the final test evaluation "
                       f"({need:g} device-hours, eval_device_hours): give at least {need:g}gpuh")


def endpoint_reserve(ctx: Ctx) -> float:
    """Device-hours kept back for the final parent's test evaluation until it is charged."""
    paid = ctx.ledger.get(ctx.episode_id, f"endpoint:{ENDPOINT_SPLIT}") is not None
    return 0.0 if paid else endpoint_estimate(ctx.cost)


def fits(ctx: Ctx, estimate_h: float) -> bool:
    """Whether a run fits the budget with the endpoint's evaluation still paid for."""
    return ctx.ledger.can_afford(ctx.episode_id, budget(ctx), estimate_h + endpoint_reserve(ctx))


def evaluation(ctx: Ctx, model_dir: str, model_sha: str, split: str, key: str = "") -> dict[str, SuiteResult]:
    """Evaluate a model on a split once per episode (stored and charged under its hash, or `key`)."""
    rd = ctx.rundir
    out = rd.eval_dir(model_sha, split)
    if not rd.has_evaluation(model_sha, split):
        start = time.monotonic()
        results = ctx.ports.evaluate(model_dir, split, str(out))
        served = provenance(out)  # the run cache's wall-clock: what it cost when it ran
        rd.write_evaluation(model_sha, split, results, served["wall_seconds"] if served else time.monotonic() - start)
    wall = rd.eval_wall(model_sha, split)
    ctx.ledger.charge(ctx.episode_id, key or f"eval:{model_sha}:{split}", kind="eval",
                      device_hours=ctx.cost.eval_charge(1, wall), wall_seconds=wall, devices=ctx.cost.devices,
                      detail=f"evaluate {model_sha[:12]} on {split}", cached=was_cached(out))
    return rd.evaluation(model_sha, split)


def evals_to_pay(ctx: Ctx, shas: list[str], split: str) -> float:
    """Device-hours still to pay for evaluating these models on a split (stored ones are paid)."""
    return ctx.cost.estimate_eval(sum(not ctx.rundir.has_evaluation(s, split) for s in set(shas)))


def charged(ctx: Ctx, keys: list[str]) -> tuple[float, float]:
    """(device-hours, seconds) the ledger charged under these keys."""
    rows = [r for r in (ctx.ledger.get(ctx.episode_id, k) for k in keys) if r is not None]
    return sum(r["device_hours"] for r in rows), sum(r["wall_seconds"] for r in rows)
