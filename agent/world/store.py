"""A built world and its cache: the `World` record, where worlds live, and atomic publication.

`World` is the embedded implementation of agent.world.interface.WorldData (its items and
pools are generated from its seed); agent/world/local.py is the other one.

Shared by every way of making a world (the embedded build in agent/world/embedded.py, the
smol conversion in agent/world/smol.py), which is why it is a module of its own: the two
builders import it, and neither imports the other.

Cache layout (root: `$AGENT_CACHE`, else `~/.cache/posttrain-agent`):

    worlds/<size>-<hash12>/base/        the out-of-the-box parent (safetensors + tokenizer)
    worlds/<size>-<hash12>/world.json   the World manifest (hashes, build seconds)
    worlds/<size>-<hash12>/seed-bank/   L(0), built by agent.world.seed_bank

A cached world is read through `load_world`, which refuses (BadInput, one line) a world whose
weights no longer hash to what its world.json records: <hash12> names one set of weights.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.hashing import file_sha256
from experience_bank.records import ModelRef
from agent.world.catalogue import STEP_SCALE
from evaluators import tasks

OUTPUT_PROTOCOLS = {"finance": "answer-scale", "sql": "sql", "function": "json-call"}
RUNTIMES = ("trl-sft", "trl-grpo", "peft-lora")
EVAL_PROTOCOL = "embedded-v1"
SUITES = ("finance/source", "finance/target", "sql/source", "sql/target",
          "function/source", "function/target", "ifeval", "captrack")


@dataclass(frozen=True)
class BuildEnv:
    """What a built base's weights depend on besides its recipe and that the build cannot pin:
    the same recipe trained under another torch (or TRL, transformers, tokenizers, accelerate)
    or on another CPU kernel set is a different world (agent/world/embedded.py hashes this into
    the world's id). A BLAS that picks other kernels at the same capability level (MKL on an AMD
    and on an Intel AVX512 CPU: measured, another base for the same recipe) is told apart by
    `numerics`, so the id names one set of weights before anything is built."""

    libraries: dict[str, str] = field(hash=False)
    """Package -> version of the libraries the build runs."""
    cpu: str
    """torch's CPU kernel level (torch.backends.cpu.get_cpu_capability(): AVX2, AVX512, ...)."""
    machine: str
    """platform.machine() (x86_64, arm64, ...)."""
    numerics: str = ""
    """Fingerprint of this machine's float32 arithmetic at the model's shapes
    (embedded.numerics_fingerprint); "" in a world.json written before it was recorded."""


def seed_datasets(seed: int) -> dict[str, str]:
    """Every training dataset id a world of this seed generates -> its content hash (what
    `World.datasets` records and the world id hashes)."""
    return {ds: tasks.dataset_sha256(ds, seed) for ds in sorted(tasks.DATASET_IDS)}


def step_scale(size: str) -> float:
    """The scale of the catalogue's nominal steps on a world of this size."""
    return STEP_SCALE.get(size, 1.0)


@dataclass(frozen=True)
class CardWorld:
    """What the catalogue reads of an embedded world (agent.world.catalogue.catalogue): its size's
    step scale and its seed's dataset hashes, never its weights. So the cards of a world built on
    another machine, whose numerics gave other weights, are read here without building it."""

    size: str
    seed: int

    @functools.cached_property
    def datasets(self) -> dict[str, str]:  # once: catalogue() reads it for every card's data mix
        return seed_datasets(self.seed)

    @property
    def step_scale(self) -> float:
        return step_scale(self.size)


@dataclass(frozen=True)
class World:
    """A built world: where its base model lives and the hashes that identify it."""

    size: str
    seed: int
    recipe_sha256: str
    root: str
    """World directory (holds base/, world.json, seed-bank/)."""
    base_dir: str
    """The out-of-the-box parent, a local HF folder."""
    model: ModelRef
    chat_template_sha256: str
    datasets: dict[str, str] = field(hash=False)
    """Every training dataset id of the world -> content hash."""
    build_seconds: float = 0.0
    output_protocols: dict[str, str] = field(default_factory=lambda: dict(OUTPUT_PROTOCOLS), hash=False)
    eval_protocol: str = EVAL_PROTOCOL
    early_dir: str = ""
    """An earlier checkpoint of the base's pretraining (the seed bank's usual source parent); ""
    when the world has none (then the base itself stands in)."""
    early_model: ModelRef | None = None
    build: BuildEnv | None = None
    """The environment the base was built in (None: a world converted, not trained: smol)."""

    def to_json(self) -> str:
        d = asdict(self)
        d["model"] = self.model.model_dump(mode="json")
        d["early_model"] = self.early_model.model_dump(mode="json") if self.early_model else None
        return json.dumps(d, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "World":
        d = json.loads(text)
        d["model"] = ModelRef.model_validate_json(json.dumps(d["model"]))
        if d.get("early_model"):
            d["early_model"] = ModelRef.model_validate_json(json.dumps(d["early_model"]))
        if d.get("build"):
            d["build"] = BuildEnv(**d["build"])
        return cls(**d)

    # --- agent.world.interface.WorldData: the tasks this world's seed generates ----------
    @property
    def step_scale(self) -> float:
        return step_scale(self.size)

    def items(self, task: str, split: str, n: int | None = None) -> list[dict]:
        return EmbeddedTasks(self.seed).items(task, split, n)

    def sft_examples(self, dataset_id: str, n: int | None = None) -> list[dict]:
        return EmbeddedTasks(self.seed).sft_examples(dataset_id, n)

    def grpo_examples(self, dataset_id: str, n: int | None = None) -> list[dict]:
        return EmbeddedTasks(self.seed).grpo_examples(dataset_id, n)

    def release_sha256(self, dataset_id: str, release: int) -> str | None:
        """Hash of an earlier release of a pool: the same generator drawn with the world's seed
        plus `release` (what a library written against that release names)."""
        return tasks.dataset_sha256(dataset_id, self.seed + release)


@dataclass(frozen=True)
class EmbeddedTasks:
    """The embedded world's generated items and pools of one seed (evaluators.tasks), also
    without a built world (`agent train --world-seed N`)."""

    seed: int

    def items(self, task: str, split: str, n: int | None = None) -> list[dict]:
        return tasks.items(task, split, self.seed, n)

    def sft_examples(self, dataset_id: str, n: int | None = None) -> list[dict]:
        return tasks.sft_examples(dataset_id, self.seed, n)

    def grpo_examples(self, dataset_id: str, n: int | None = None) -> list[dict]:
        return tasks.grpo_examples(dataset_id, self.seed, n)


def cache_root() -> Path:
    """`$AGENT_CACHE` if set, else `~/.cache/posttrain-agent`."""
    env = os.environ.get("AGENT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "posttrain-agent"

def world_dir(size: str, recipe_hash: str) -> Path:
    return cache_root() / "worlds" / f"{size}-{recipe_hash[:12]}"


def load_world(root: Path, world_hash: str) -> World:
    """The cached world at `root`, after checking that it is the world `world_hash` names and
    that its weights are the ones its world.json records (a base changed in place, or a world
    copied under another world's id, would otherwise be served as this world)."""
    world = World.from_json((root / "world.json").read_text())
    name = f"{world.size}-{world.recipe_sha256[:12]}"
    if world.recipe_sha256 != world_hash:
        raise BadInput(f"{root} holds world {name}, not {root.name}: remove {root} and build the world again")
    models = [(world.base_dir, world.model)] + ([(world.early_dir, world.early_model)] if world.early_model else [])
    for folder, ref in models:
        weights = Path(folder) / "model.safetensors"
        sha = file_sha256(str(weights)) if weights.is_file() else "nothing"
        if sha != ref.sha256:
            raise BadInput(f"world {name}: {weights} has sha256 {sha[:12]}, its world.json records "
                           f"{ref.sha256[:12]}: the cached world was changed; remove {root} and build it again")
    return world


def publish_world(root: Path, make: Callable[[Path], World]) -> World:
    """Build into a temp dir beside `root` with `make(tmp) -> World`, then rename it into place,
    so a crash never leaves a half-built world that looks complete. If a concurrent build
    finished first, keep that one."""
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        world = make(tmp)
        (tmp / "world.json").write_text(world.to_json())
        if root.exists():
            shutil.rmtree(tmp)
            return World.from_json((root / "world.json").read_text())
        os.rename(tmp, root)
        return world
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
