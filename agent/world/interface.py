"""The one interface every world implements: what the loop, the seed bank, the retrospective and
`compare` read of a world, and nothing more (agent/world/factory.py builds one from a config).

Two implementations: `agent.world.store.World` (the embedded world, its tasks generated from
its seed by evaluators.tasks) and `agent.world.local.LocalWorld` (a user's HF model folder and
dataset files in their upstream formats). Callers hold a `WorldData` and never ask which one
it is: identity and hashes are attributes, data is three methods with the contracts of
evaluators.tasks (items `{"id", "messages", "reference"}`; TRL prompt/completion rows with
`task` and JSON `reference` columns).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from experience_bank.records import ModelRef


@runtime_checkable
class WorldData(Protocol):
    """A world as the loop sees it."""

    size: str
    """World name in ids and cache keys (`test`, `default`, `smol`, `local`)."""
    seed: int
    """Seed of the world's items (evaluation items never follow the run seed)."""
    recipe_sha256: str
    """Hash that identifies the world (embedded recipe, or local model + dataset files)."""
    root: str
    """Folder of the world's own files (seed-bank cache)."""
    base_dir: str
    """The out-of-the-box parent, a local HF folder."""
    model: ModelRef
    chat_template_sha256: str
    datasets: dict[str, str]
    """Every training dataset id -> content hash (the frozen data roles of the manifest)."""
    output_protocols: dict[str, str]
    eval_protocol: str
    early_dir: str
    """An earlier checkpoint of the base's own lineage ("" when the world has none)."""
    early_model: ModelRef | None

    @property
    def step_scale(self) -> float:
        """Share of the catalogue's nominal steps a card takes in this world."""
        ...

    def items(self, task: str, split: str, n: int | None = None) -> list[dict]:
        """The first n items of a suite's split (train / validation / adoption / test)."""
        ...

    def sft_examples(self, dataset_id: str, n: int | None = None) -> list[dict]:
        """A training pool as TRL conversational prompt/completion rows."""
        ...

    def grpo_examples(self, dataset_id: str, n: int | None = None) -> list[dict]:
        """A training pool as `{"prompt", "task", "reference"}` rows."""
        ...

    def release_sha256(self, dataset_id: str, release: int) -> str | None:
        """Hash of another release of a training pool, or None when the world knows only one."""
        ...
