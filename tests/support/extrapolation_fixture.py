"""A small forgetting extrapolation fitted by the real code (policies.extrapolate.fit) on synthetic
paired runs on the parent footing: every run's full-length IFEval change is its 20 % reading less
GROWTH_PP, so a trial reading r at 20 % extrapolates to r - 3 pp at full length (on both metrics)."""

from __future__ import annotations

from pathlib import Path

from policies import extrapolate
from policies.curves import RETENTION, CurvePoint, PairedRun

GROWTH_PP = -3.0
"""The full run's change less the trial's reading, the same for every run (so the interval is a point)."""


def _point(fraction: float, value: float) -> CurvePoint:
    return CurvePoint(fraction=fraction, target_pp=0.0, retention_pp={m: value for m in RETENTION})


def synthetic_runs(n: int = 8) -> list[PairedRun]:
    runs = []
    for i in range(n):
        reading = 0.5 * i
        curve = (_point(0.05, 0.0), _point(0.10, 0.0), _point(0.2, reading))
        runs.append(PairedRun(card_id=f"C{i:02d}", family="sql", method="sft", seed=0, world_seed=0, curve=curve,
                              parent_curve=curve, full=_point(1.0, reading + GROWTH_PP)))
    return runs


def fitted() -> extrapolate.Fit:
    return extrapolate.fit(synthetic_runs(), choice="offset")


def write_model(path: Path) -> Path:
    """The fit's JSON file, as `agent extrapolate --save` writes it."""
    path.write_text(extrapolate.dumps(fitted()), encoding="utf-8")
    return path
