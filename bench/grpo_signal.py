"""How much learning signal do the catalogue's GRPO runs get? Read from the run cache's TRL logs.

    AGENT_CACHE=/work/cache/agent PYTHONPATH=. python bench/grpo_signal.py [--cache DIR]

GRPO learns only from prompt groups whose completions' rewards differ: a group where every
completion scores the same has zero advantage and contributes no policy gradient (TRL logs the
share of such groups as `frac_reward_zero_std`, per logged step). A card whose reward is saturated
(every completion well formatted) or unreachable (no completion matches) trains on noise and the
KL term only; its effect on the target is then the run's drift, not its reward.

Per card (and the matched control, reward `placebo`), over every cached GRPO run that kept its
trainer state (the trials: the run cache keeps TRL's `trainer_state.json` beside their curve
checkpoints): runs, the mean reward, the share of groups with no signal, and the mean reward over
the first and the last third of the logged steps. Nothing is trained; it reads what the cache holds
(agent/run_cache.py's layout: entries/train/<xx>/<key>/files/).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experience_bank.errors import BadInput  # noqa: E402
from trainers.run import reward_signal  # noqa: E402


def signal(log_history: Sequence[dict[str, Any]]) -> dict[str, float] | None:
    """One run's reward and signal from TRL's log history (None: not a GRPO run), by thirds of its
    logged steps (trainers.run.reward_signal, which a run's own result reads by quarters)."""
    steps = [x for x in log_history if "reward" in x and "frac_reward_zero_std" in x]
    if not steps:
        return None
    s = reward_signal(steps, parts=3)
    return {"steps": float(len(steps)), "reward": statistics.fmean(x["reward"] for x in steps),
            "no_signal": s.get("no_signal", math.nan), "reward_first": s["reward_early"], "reward_last": s["reward_late"]}


def runs(cache: Path) -> Iterable[tuple[str, str, dict[str, float]]]:
    """(card id, reward names, signal) of every cached run with a GRPO trainer state."""
    for state in sorted((cache / "runs" / "entries" / "train").glob("*/*/files/trainer_state/trainer_state.json")):
        files = state.parent.parent
        result = json.loads((files / "result.json").read_text()) if (files / "result.json").is_file() else {}
        history = json.loads(state.read_text()).get("log_history", [])
        s = signal(history)
        if s is None:
            continue
        rewards = sorted({k.split("/")[1] for x in history for k in x if k.startswith("rewards/") and k.endswith("/mean")})
        yield result.get("card_id", "?"), "+".join(rewards), s


def table(rows: Iterable[tuple[str, str, dict[str, float]]]) -> list[dict[str, Any]]:
    """Per (card, rewards): the runs and the means of their signals."""
    by: dict[tuple[str, str], list[dict[str, float]]] = {}
    for card, rewards, s in rows:
        by.setdefault((card, rewards), []).append(s)
    return [{"card": card, "rewards": rewards, "runs": len(ss),
             **{k: statistics.fmean(s[k] for s in ss) for k in ("steps", "reward", "no_signal", "reward_first", "reward_last")}}
            for (card, rewards), ss in sorted(by.items())]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default = os.environ.get("AGENT_CACHE", str(Path.home() / ".cache" / "posttrain-agent"))
    p.add_argument("--cache", type=Path, default=Path(default), help="the agent cache (default: $AGENT_CACHE)")
    args = p.parse_args(argv)
    try:
        if not (args.cache / "runs" / "entries").is_dir():
            raise BadInput(f"{args.cache} holds no run cache (runs/entries): pass --cache or set AGENT_CACHE")
        out = table(runs(args.cache))
        if not out:
            raise BadInput(f"no cached GRPO run with a trainer state under {args.cache}: run a GRPO trial first")
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("| card | reward | runs | logged steps | mean reward | groups with no signal | reward, first third | last third |")
    print("|---|---|---|---|---|---|---|---|")
    for r in out:
        print(f"| {r['card']} | {r['rewards']} | {r['runs']} | {r['steps']:.0f} | {r['reward']:.3f} | {100 * r['no_signal']:.0f} % "
              f"| {r['reward_first']:.3f} | {r['reward_last']:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
