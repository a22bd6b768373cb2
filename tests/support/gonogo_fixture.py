"""A small go/no-go model fitted by the real code (policies.gonogo.fit) on synthetic paired runs,
for the tests of bcit_predictive: a run's short-run target foretells its full run's class, so the
model authorizes a rising trial and stops a falling one."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from policies import gonogo, gonogo_features
from policies.curves import CurvePoint, PairedRun

RULE = dict(band=1.0, ifeval_drop_pp=2.0)
"""The outcome rule's band and IFEval drop the labels are made with (the gate's defaults)."""


def _point(fraction: float, target: float, retention: float) -> CurvePoint:
    return CurvePoint(fraction=fraction, target_pp=target,
                      retention_pp={"ifeval.prompt_strict": retention, "ifeval.inst_strict": retention})


def synthetic_runs(n: int = 36, seed: int = 0) -> list[PairedRun]:
    """n paired runs, a third each harmful (the trial falls), neutral and beneficial (it rises)."""
    rng = np.random.default_rng(seed)
    runs = []
    for i in range(n):
        full, trial = [(-4.0, -0.8), (0.0, 0.0), (4.0, 0.8)][i % 3]
        curve = tuple(_point(f, trial * (f / 0.2) + rng.normal(0, 0.15), rng.normal(0, 0.3)) for f in (0.05, 0.10, 0.20))
        runs.append(PairedRun(card_id=f"C{i:02d}", family=("sql", "finance", "function")[i % 2], method="sft", seed=0,
                              world_seed=0, curve=curve, full=_point(1.0, full + rng.normal(0, 0.2), 0.0)))
    return runs


def fitted_model(alpha: float = 0.1, delta: float = 0.2) -> gonogo.GoNoGo:
    # alpha 0.1: at 0.2 the fixed-sequence test also admits the threshold that lets a falling trial go
    return gonogo.fit(synthetic_runs(), alpha=alpha, delta=delta, **RULE)


def on_parent(runs: list[PairedRun]) -> list[PairedRun]:
    """The runs with their short curves on the parent footing too (here the same readings), so a fit
    reads them as a loop's trial reads (footing `parent`)."""
    return [r.model_copy(update={"parent_curve": r.curve}) for r in runs]


def parent_model(alpha: float = 0.1, delta: float = 0.2) -> gonogo.GoNoGo:
    """fitted_model's runs on the parent footing: the model a loop refits at consolidation."""
    return gonogo.fit(on_parent(synthetic_runs()), alpha=alpha, delta=delta, **RULE)


def write_model(path: Path, **kw) -> Path:
    """The fitted model's JSON file, as `agent gonogo --model` writes it."""
    path.write_text(gonogo.dumps(fitted_model(**kw)), encoding="utf-8")
    return path


def synthetic_records(runs: list[PairedRun] | None = None) -> dict[str, dict]:
    """Records whose source evidence foretells the class as the curve does: S 0.0 (grade C) for a
    harmful run, 0.45 (B) for a neutral one, 0.75 to 1.0 (B or A) for a beneficial one; A = 1 throughout.
    With them the prior-only head (card and record, no curve) learns to authorize strong evidence."""
    out = {}
    for i, run in enumerate(runs or synthetic_runs()):
        s, grade = [(0.0, "C"), (0.45, "B"), ((0.75, 1.0)[i % 2], ("B", "A")[i % 2])][i % 3]
        out[gonogo_features.record_key(run.world_seed, run.card_id)] = {"S": s, "A": 1.0, "grade": grade}
    return out


def skip_model(alpha: float = 0.2, delta: float = 0.2) -> gonogo.GoNoGo:
    """A go/no-go fitted on the synthetic runs and records: its prior-only head has a threshold."""
    return gonogo.fit(synthetic_runs(), synthetic_records(), alpha=alpha, delta=delta, **RULE)


AS_FITTED = object()


def write_skip_model(path: Path, prior_threshold: float | None = None, prior_floor=AS_FITTED, **kw) -> Path:
    """skip_model's JSON file; `prior_threshold` replaces its prior-only threshold (0.9 as fitted, which
    lets nearly every candidate skip; 0.5 keeps grade C's trials and skips grade A's and B's), and
    `prior_floor` its prior-only floor on P(beneficial) (None: P(harmful) alone, as before the floor)."""
    model = skip_model(**kw)
    if prior_threshold is not None:
        cut = model.prior.threshold.model_copy(update={"threshold": prior_threshold})
        model = model.model_copy(update={"prior": model.prior.model_copy(update={"threshold": cut})})
    if prior_floor is not AS_FITTED:
        model = model.model_copy(update={"prior": model.prior.model_copy(update={"beneficial_floor": prior_floor})})
    path.write_text(gonogo.dumps(model), encoding="utf-8")
    return path
