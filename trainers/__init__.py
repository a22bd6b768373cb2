"""TRL training runs, bounded validation trials and the device-hour ledger.

Public API (loaded on first use, so `import trainers` does not load torch):
- `train(card, parent_dir, examples, *, out_dir, run_key, fraction=1.0, reward_funcs=None,
  resume_from=None, seed=0, threads=None, progress=None) -> TrainResult`   (trainers.run)
- `trial(card, parent_dir, examples, *, out_dir, run_key, measure, thresholds, fraction=0.2,
  reward_funcs=None, seed=0) -> TrialResult`; `TrialThresholds`; `verdict`  (trainers.trial)
- `trial_steps(card, fraction=0.2) -> int` (the floor of the share; `TrialRefused` under one
  step), `plan_steps`                                                     (trainers.steps)
- `trainers.ledger`: `parse_budget`, `run_hours`, `CostModel`, `Ledger`
- `trainers.data`: `sample_recipe`, `mix_replay`, `build_examples`
- `trainers.sanity`: `is_hard_failure`, `failed_checks`
"""

from __future__ import annotations

import importlib

_LAZY = {"train": "trainers.run", "trial": "trainers.trial", "TrialThresholds": "trainers.trial",
         "verdict": "trainers.trial", "trial_steps": "trainers.steps", "TrialRefused": "trainers.steps",
         "plan_steps": "trainers.steps"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trainers' has no attribute {name!r}")


__all__ = sorted(_LAZY)
