"""A retrospective cell's ports on a real world (agent.experiments.retro_run.CellPorts): its runs
through the world's card runner, its evaluations at the sizes each split is read at, and the base
context every cell's features are compiled against. Tests give the table fake ports instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experience_bank.families import PRIMARY_METRIC
from agent.config import eval_sizes
from agent.experiments.retro_cells import IFEVAL
from agent.world.embedded import ensure_world
from agent.world.records import current_context
from agent.world.runner import CardRunner


def eval_n(world_size: str, split: str) -> tuple[int, int]:
    """(target items, IFEval prompts) of a cell's evaluations on `split` (agent.config.EVAL_SIZES):
    the trial's readings (validation) at the loop's decision sizes, so that the curves a go/no-go is
    fitted on are read as a loop's trial reads them; the full runs (adoption) at the outcome sizes,
    since their class is the label every predictor is scored against. A split with fewer items
    (a local world's, or a small question space) is read whole."""
    sizes = eval_sizes(world_size)
    return (sizes.outcome_target, sizes.outcome_ifeval) if split == "adoption" else (sizes.target, sizes.ifeval)


class WorldCellPorts:
    """Real runs on a world, through its card runner (agent/world/runner.py)."""

    def __init__(self, world: Any):
        self.world = world
        self.runner = CardRunner(world)  # its run cache is shared with episodes and the seed bank

    def evaluate(self, model_dir: str, family: str, split: str, out_dir: str) -> dict[str, float]:
        n, n_ifeval = eval_n(self.world.size, split)
        target = self.runner.evaluate(model_dir, [f"{family}/target"], split, out_dir=f"{out_dir}/target", n=n)
        ife = self.runner.evaluate(model_dir, ["ifeval"], split, out_dir=f"{out_dir}/ifeval", n=n_ifeval)["ifeval"]
        key = PRIMARY_METRIC[family]
        values = {"target": target[f"{family}/target"].metrics[key]} | {m: ife.metrics[m] for m in IFEVAL}
        unknown = [k for k, v in values.items() if v is None]
        if unknown:  # an evaluator error is UNKNOWN, never a score of 0
            raise RuntimeError(f"evaluation of {model_dir} on {split} is UNKNOWN for {unknown}")
        return values

    def train(self, card: Any, parent_dir: str, fraction: float, seed: int, out_dir: str,
              snapshots: tuple[tuple[float, int], ...] = ()) -> dict[str, Any]:
        result = self.runner.train(card, parent_dir, out_dir=out_dir, run_key=f"retro-{card.id}-s{seed}-f{fraction:.2f}",
                                   seed=seed, fraction=fraction, snapshots=snapshots)
        return {"checkpoint": result.checkpoint, "wall_s": result.wall_seconds,
                "sanity_failures": [s.name for s in result.sanity if not s.ok],
                "snapshots": [{"fraction": s.fraction, "step": s.step, "path": str(Path(result.checkpoint) / s.path)}
                              for s in result.snapshots]}


def base_context(world: Any) -> Any:
    """x_t of every cell: the world's base model at stage 0, everything the world provides."""
    return current_context(world, world.model, 0)


def embedded_ports(size: str, world_seed: int = 0) -> WorldCellPorts:
    """The ports of the embedded world of `size` and `world_seed`, built where they are called (a
    Ray worker reads the world from its $AGENT_CACHE, or builds it when that cache lacks it)."""
    return WorldCellPorts(ensure_world(size, world_seed=world_seed))
