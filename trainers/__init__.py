"""TRL training runs, bounded validation trials and the device-hour ledger.

Public API (heavy imports are deferred: `import trainers` does not load torch):
- `train(card, parent_dir, examples, *, out_dir, run_key, fraction=1.0, reward_funcs=None,
  resume_from=None, seed=0, threads=None, progress=None) -> TrainResult`
- `trial(card, parent_dir, examples, *, out_dir, run_key, measure, thresholds, fraction=0.2,
  reward_funcs=None, seed=0) -> TrialResult`; `TrialThresholds`; `verdict(...)`
- `trainers.ledger`: `parse_budget`, `CostModel`, `Ledger`, `BudgetExceeded`
- `trainers.data`: `sample_recipe`, `mix_replay`, `build_examples`
- `trainers.sanity`: `is_hard_failure`, `failed_checks`
"""

from __future__ import annotations


def train(*args, **kwargs):
    from trainers.run import train as _train

    return _train(*args, **kwargs)


def trial(*args, **kwargs):
    from trainers.trial import trial as _trial

    return _trial(*args, **kwargs)


__all__ = ["train", "trial"]
