"""Training sanity checks: silent failures become hard failures.

The checks read the Trainer's `log_history` (TRL's logged metrics) and compare the child's
weights with the parent's. A failing check does not raise: the run's TrainResult carries it
with `ok=False`, `is_hard_failure` reads it, and the gate and the trial verdict treat it as a
hard failure. Raising would throw away the checkpoint and the numbers that explain it.

Covered: NaN/inf loss or gradient norm; a loss that did not move (SFT); weights identical to
the parent; a reward with zero variance over the whole GRPO run; every completion clipped at
the length limit over the whole GRPO run. Not covered: slow divergence or reward hacking —
the evaluation and the gate judge those.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from safetensors.torch import load_file

from experience_bank.results import SanityCheck, TrainResult
from trainers.checkpoint import weight_files

# A loss "moved" when the mean of its last quarter differs from the mean of its first
# quarter by at least this share of the first; 0.1% is far below any real learning signal
# and far above float round-off of an unchanged model on the same batches.
LOSS_MOVE_REL = 1e-3


def _series(history: Sequence[dict], key: str) -> list[float]:
    return [float(h[key]) for h in history if key in h]


def finite_loss(history: Sequence[dict]) -> SanityCheck:
    values = _series(history, "loss") + _series(history, "grad_norm")
    bad = [v for v in values if not math.isfinite(v)]
    detail = f"{len(bad)} of {len(values)} logged loss/grad_norm values are NaN or inf"
    return SanityCheck(name="finite_loss", ok=bool(values) and not bad, detail=detail if values else "no loss logged")


def loss_moved(history: Sequence[dict]) -> SanityCheck:
    losses = _series(history, "loss")
    if len(losses) < 2:
        return SanityCheck(name="loss_moved", ok=False, detail=f"only {len(losses)} loss value(s) logged")
    k = max(1, len(losses) // 4)
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    rel = abs(last - first) / max(abs(first), 1e-12)
    ok = math.isfinite(rel) and rel >= LOSS_MOVE_REL
    return SanityCheck(name="loss_moved", ok=ok, detail=f"loss {first:.6g} -> {last:.6g} (relative change {rel:.3g}, need >= {LOSS_MOVE_REL:g})")


def reward_variance(history: Sequence[dict]) -> SanityCheck:
    stds = _series(history, "reward_std")
    peak = max(stds, default=0.0)
    ok = bool(stds) and peak > 0.0
    return SanityCheck(name="reward_variance", ok=ok, detail=f"max reward_std over {len(stds)} logs = {peak:.6g}")


def not_all_clipped(history: Sequence[dict]) -> SanityCheck:
    ratios = _series(history, "completions/clipped_ratio")
    low = min(ratios, default=1.0)
    ok = bool(ratios) and low < 1.0
    return SanityCheck(name="not_all_clipped", ok=ok, detail=f"min clipped_ratio over {len(ratios)} logs = {low:.4g}")


def weights_changed(parent_dir: str, child_dir: str) -> SanityCheck:
    """The largest absolute parameter change; zero means the run trained nothing."""
    parent = _load_weights(parent_dir)
    child = _load_weights(child_dir)
    shared = sorted(set(parent) & set(child))
    delta = max((float((child[k].float() - parent[k].float()).abs().max()) for k in shared), default=0.0)
    ok = bool(shared) and math.isfinite(delta) and delta > 0.0
    return SanityCheck(name="weights_changed", ok=ok, detail=f"max |child - parent| over {len(shared)} tensors = {delta:.3g}")


def _load_weights(model_dir: str) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in weight_files(model_dir):
        out.update(load_file(str(f)))
    return out


def run_checks(method: str, history: Sequence[dict], parent_dir: str, child_dir: str) -> tuple[SanityCheck, ...]:
    """All checks that apply to a method. GRPO's loss sits near 0 by design, so its
    learning signal is checked through the reward instead of the loss."""
    checks = [finite_loss(history), weights_changed(parent_dir, child_dir)]
    if method == "sft":
        checks.append(loss_moved(history))
    else:
        checks += [reward_variance(history), not_all_clipped(history)]
    return tuple(checks)


def is_hard_failure(result: TrainResult) -> bool:
    """True when any sanity check of the run failed."""
    return any(not c.ok for c in result.sanity)


def failed_checks(result: TrainResult) -> list[str]:
    return [f"{c.name}: {c.detail}" for c in result.sanity if not c.ok]
