"""`agent cards import FILE.yaml`: a TRL CLI config (`trl sft|grpo --config`) or a LlamaFactory
SFT/LoRA config -> a Proposal (CandidateCard + applicability + provenance) JSON.

Every key of the file is either mapped onto the card, or taken as one the agent sets itself for
every run (where the run writes, logs and saves, which model it starts from: `RUN_OWNED`, listed
in the card's provenance), or refused with one line naming it. Nothing is dropped silently
(FT-Agent's LlamaFactory writer drops keys the trainer does not know; this does the opposite).
TRL keys are checked against TRL's own dataclasses, the ones its CLI parses (`trl sft`:
ScriptArguments, SFTConfig, ModelConfig, DatasetMixtureConfig; `trl grpo`: GRPOScriptArguments,
GRPOConfig, ModelConfig, DatasetMixtureConfig), names and types, each value read as that parser
reads it (agent/world/usercards/trl_schema.py: `learning_rate: 1e-4` is a float there); LlamaFactory keys against the
table below (LlamaFactory is not a dependency). The datasets must be pools of the run's world:
a recipe trains on data the evaluator's world holds, hashed. The source file's sha256 is the
provenance's config hash.
"""

from __future__ import annotations

import math
import re
import typing
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.config import read_yaml
from agent.world.catalogue import OUTPUT_PROTOCOL, Needs, applicability, runtime_of
from experience_bank.errors import BadInput
from experience_bank.hashing import content_hash, file_sha256
from experience_bank.cards import Adapter, CandidateCard, DataMix, DataRecipe, DatasetRef, HyperParams, NominalBudget
from experience_bank.records import Proposal, Provenance
from agent.world.usercards.trl_schema import as_trl_reads, check_trl, trl_fields

REWARDS = ("execution", "ast_match", "numeric_match", "format")
SCHEDULERS = ("cosine", "linear", "constant")

TRL_RUN_OWNED = frozenset({
    "model_name_or_path", "model_revision", "dtype", "torch_dtype", "attn_implementation", "trust_remote_code",
    "output_dir", "overwrite_output_dir", "run_name", "logging_dir", "logging_steps", "logging_strategy",
    "save_steps", "save_strategy", "save_total_limit", "save_only_model", "eval_strategy", "eval_steps",
    "report_to", "push_to_hub", "hub_model_id", "seed", "data_seed", "bf16", "fp16", "tf32",
    "gradient_checkpointing", "dataset_train_split", "dataset_test_split", "per_device_eval_batch_size",
    "dataloader_num_workers", "resume_from_checkpoint", "use_vllm", "vllm_mode"})
"""Keys the agent sets for every run itself (the parent is the run's, the run writes into its
run directory, seeds and precision are the manifest's); accepted and listed, not carried."""

LF_RUN_OWNED = frozenset({
    "model_name_or_path", "trust_remote_code", "template", "overwrite_cache", "preprocessing_num_workers",
    "dataloader_num_workers", "output_dir", "logging_steps", "save_steps", "plot_loss", "overwrite_output_dir",
    "save_only_model", "report_to", "bf16", "fp16", "ddp_timeout", "resume_from_checkpoint", "val_size",
    "per_device_eval_batch_size", "eval_strategy", "eval_steps", "do_train"})

LF_TYPES: dict[str, tuple[type, ...]] = {
    "stage": (str,), "finetuning_type": (str,), "lora_rank": (int,), "lora_alpha": (int,), "lora_target": (str,),
    "dataset": (str,), "cutoff_len": (int,), "max_samples": (int,), "per_device_train_batch_size": (int,),
    "gradient_accumulation_steps": (int,), "learning_rate": (float,), "num_train_epochs": (float, int),
    "max_steps": (int,), "lr_scheduler_type": (str,), "warmup_ratio": (float, int), "do_train": (bool,),
    **{k: (object,) for k in LF_RUN_OWNED if k != "do_train"}}
"""Every LlamaFactory key this importer knows and the YAML types it accepts."""


class Imported(typing.NamedTuple):
    proposal: Proposal
    fmt: str
    """llamafactory, trl-sft or trl-grpo."""
    mapped: dict[str, str]
    """Source key -> the card field it became."""
    run_owned: tuple[str, ...]
    """Source keys the agent sets itself."""


def recipe_format(raw: dict) -> str:
    """`llamafactory` (it names a `stage` and a `finetuning_type`), else `trl-grpo` when a
    GRPO-only key is present, else `trl-sft`."""
    if "stage" in raw or "finetuning_type" in raw:
        return "llamafactory"
    return "trl-grpo" if raw.keys() & {"num_generations", "reward_funcs", "beta", "max_completion_length"} else "trl-sft"


# --- shared -----------------------------------------------------------------------------------


def _need(raw: dict, key: str, where: str, hint: str) -> Any:
    if key not in raw or raw[key] is None:
        raise BadInput(f"{where}: missing {key}: {hint}")
    return raw[key]


def _datasets(ids: list[str], world_datasets: dict[str, str], where: str) -> tuple[DataMix, ...]:
    for ds in ids:
        if ds not in world_datasets:
            raise BadInput(f"{where}: dataset {ds!r} is not a pool of this world: use one of "
                           f"{', '.join(sorted(world_datasets))}")
    weight = 1.0 / len(ids)
    return tuple(DataMix(dataset=DatasetRef(id=ds, sha256=world_datasets[ds]), weight=weight) for ds in ids)


def _scheduler(value: str, where: str) -> str:
    if value not in SCHEDULERS:
        raise BadInput(f"{where}: lr_scheduler_type {value!r} cannot be carried: use one of {', '.join(SCHEDULERS)}")
    return value


def _refuse(key: str, where: str, why: str) -> typing.NoReturn:
    raise BadInput(f"{where}: key {key!r} is refused: {why}")


# --- the two formats --------------------------------------------------------------------------


def _from_trl(raw: dict, method: str, where: str) -> tuple[dict, dict, list]:
    known = trl_fields(method)
    raw = as_trl_reads(raw, method, known)
    check_trl(raw, method, where, known)
    mapped, owned, card = {}, [], {}
    grpo = method == "grpo"
    for key in raw:
        if key in TRL_RUN_OWNED:
            owned.append(key)
    ds = _need(raw, "dataset_name", where, "name one of the world's pools, e.g. dataset_name: sql/target/train")
    card["datasets"], mapped["dataset_name"] = [ds], "data.mix"
    steps = _need(raw, "max_steps", where, "set max_steps > 0: the card's nominal steps")
    if steps <= 0:
        raise BadInput(f"{where}: max_steps = {steps}: set max_steps > 0 (the card's nominal steps)")
    card["steps"], mapped["max_steps"] = steps, "budget.steps"
    if "num_train_epochs" in raw:  # transformers: max_steps > 0 overrides it
        mapped["num_train_epochs"] = "budget.steps (max_steps overrides it)"
    batch = _batch(raw, where, default=8)  # TRL's per-device default
    card["batch"] = batch
    mapped |= {k: "hparams.batch_size" for k in ("per_device_train_batch_size", "gradient_accumulation_steps")
               if k in raw}
    card["lr"] = _need(raw, "learning_rate", where, "set learning_rate")
    mapped["learning_rate"] = "hparams.learning_rate"
    if "lr_scheduler_type" in raw:
        card["sched"], mapped["lr_scheduler_type"] = _scheduler(raw["lr_scheduler_type"], where), "hparams.lr_scheduler"
    if "warmup_steps" in raw:
        w = raw["warmup_steps"]
        card["warmup"] = w if w < 1 else w / steps  # transformers: a value below 1 is a ratio
        mapped["warmup_steps"] = "hparams.warmup_ratio"
    if "max_length" in raw and raw["max_length"] is not None:
        card["max_length"], mapped["max_length"] = raw["max_length"], "hparams.max_length"
    if raw.get("use_peft"):
        card["lora"] = (_need(raw, "lora_r", where, "set lora_r with use_peft"), raw.get("lora_alpha", 2 * raw["lora_r"]),
                        tuple(_need(raw, "lora_target_modules", where, "list lora_target_modules with use_peft")))
        mapped |= {k: "adapter" for k in ("use_peft", "lora_r", "lora_alpha", "lora_target_modules") if k in raw}
    elif raw.keys() & {"lora_r", "lora_alpha", "lora_target_modules"}:
        _refuse(sorted(raw.keys() & {"lora_r", "lora_alpha", "lora_target_modules"})[0], where,
                "LoRA settings without use_peft: true would be ignored by TRL; set use_peft or remove them")
    elif "use_peft" in raw:
        mapped["use_peft"] = "adapter"
    if grpo:
        for key in ("num_generations", "max_completion_length", "beta", "temperature"):
            card[key] = _need(raw, key, where, f"a GRPO card fixes {key}")
            mapped[key] = f"hparams.{key}"
        rewards = _need(raw, "reward_funcs", where, f"list reward_funcs from {', '.join(REWARDS)}")
        for r in rewards:
            if r not in REWARDS:
                raise BadInput(f"{where}: reward_funcs entry {r!r} is not one of the world's verifiable rewards "
                               f"({', '.join(REWARDS)})")
        card["rewards"], mapped["reward_funcs"] = tuple(rewards), "hparams.rewards"
        if batch % card["num_generations"]:
            raise BadInput(f"{where}: the batch ({batch}) must be a multiple of num_generations "
                           f"({card['num_generations']}), as GRPOTrainer requires")
    for key in raw:
        if key not in mapped and key not in owned:
            _refuse(key, where, "a candidate card has no field for it (the agent's runs would not honour it); "
                                "remove it")
    return card, mapped, owned


def _from_llamafactory(raw: dict, where: str) -> tuple[dict, dict, list]:
    for key, value in raw.items():
        if key not in LF_TYPES:
            raise BadInput(f"{where}: unknown key {key!r}: not a LlamaFactory SFT/LoRA key this importer knows; "
                           "fix or remove it")
        if object not in LF_TYPES[key] and not (isinstance(value, LF_TYPES[key]) and not (
                isinstance(value, bool) and bool not in LF_TYPES[key])):
            kinds = " or ".join(t.__name__ for t in LF_TYPES[key])
            raise BadInput(f"{where}: {key} = {value!r} is not a {kinds}; fix its type (write 1.0e-4, not 1e-4)")
    mapped, card = {}, {}
    owned = [k for k in raw if k in LF_RUN_OWNED]
    if _need(raw, "stage", where, "stage: sft") != "sft":
        _refuse("stage", where, f"stage {raw['stage']!r}: only sft recipes import (GRPO comes from a TRL config)")
    if raw.get("do_train") is False:
        _refuse("do_train", where, "do_train: false trains nothing")
    mapped["stage"] = "method"
    kind = _need(raw, "finetuning_type", where, "finetuning_type: lora or full")
    if kind not in ("lora", "full"):
        _refuse("finetuning_type", where, f"{kind!r}: only lora and full import")
    mapped["finetuning_type"] = "adapter.kind"
    if kind == "lora":
        targets = _need(raw, "lora_target", where, "name the modules, e.g. lora_target: q_proj,v_proj")
        if targets == "all":
            _refuse("lora_target", where, "'all' depends on the model; name the modules, e.g. q_proj,v_proj")
        rank = raw.get("lora_rank", 8)
        card["lora"] = (rank, raw.get("lora_alpha", 2 * rank), tuple(t.strip() for t in targets.split(",")))
        mapped |= {k: "adapter" for k in ("lora_rank", "lora_alpha", "lora_target") if k in raw}
    elif raw.keys() & {"lora_rank", "lora_alpha", "lora_target"}:
        _refuse(sorted(raw.keys() & {"lora_rank", "lora_alpha", "lora_target"})[0], where,
                "LoRA settings with finetuning_type: full; remove them")
    ids = [d.strip() for d in _need(raw, "dataset", where, "name the world's pools, e.g. dataset: sql/target/train")
           .split(",")]
    card["datasets"], mapped["dataset"] = ids, "data.mix"
    batch = _batch(raw, where, default=1)  # LlamaFactory's
    card["batch"] = batch
    mapped |= {k: "hparams.batch_size" for k in ("per_device_train_batch_size", "gradient_accumulation_steps")
               if k in raw}
    card["lr"], mapped["learning_rate"] = _need(raw, "learning_rate", where, "set learning_rate"), "hparams.learning_rate"
    if "max_steps" in raw:
        card["steps"], mapped["max_steps"] = raw["max_steps"], "budget.steps"
        if "num_train_epochs" in raw:
            _refuse("num_train_epochs", where, "max_steps already fixes the run's length; keep one of the two")
    else:
        epochs = _need(raw, "num_train_epochs", where, "set max_steps, or num_train_epochs with max_samples")
        samples = _need(raw, "max_samples", where, "num_train_epochs needs max_samples to fix the steps")
        card["steps"], mapped["num_train_epochs"] = max(1, math.ceil(epochs * samples / batch)), "budget.steps"
    if "max_samples" in raw:
        card["n_examples"], mapped["max_samples"] = raw["max_samples"], "data.n_examples"
    if "cutoff_len" in raw:
        card["max_length"], mapped["cutoff_len"] = raw["cutoff_len"], "hparams.max_length"
    if "lr_scheduler_type" in raw:
        card["sched"], mapped["lr_scheduler_type"] = _scheduler(raw["lr_scheduler_type"], where), "hparams.lr_scheduler"
    if "warmup_ratio" in raw:
        card["warmup"], mapped["warmup_ratio"] = float(raw["warmup_ratio"]), "hparams.warmup_ratio"
    return card, mapped, owned


def _batch(raw: dict, where: str, default: int) -> int:
    """The card's batch: per_device_train_batch_size x gradient_accumulation_steps, each at least 1 (a 0
    would surface later as a derived field, data.n_examples, that the recipe never names)."""
    sizes = {"per_device_train_batch_size": raw.get("per_device_train_batch_size", default),
             "gradient_accumulation_steps": raw.get("gradient_accumulation_steps", 1)}
    for key, value in sizes.items():
        if value < 1:
            raise BadInput(f"{where}: {key} = {value}: set it to 1 or more")
    return math.prod(sizes.values())


DERIVED = {"n_examples": "max_steps x the batch (per_device_train_batch_size x gradient_accumulation_steps)"}
"""Card fields computed from several recipe keys where the recipe sets none directly (max_samples)."""


def _named(loc: str, mapped: dict[str, str]) -> str:
    """The recipe keys that set the card field `loc` (a dotted path from the card, or from the record
    inside it that refused), for a refusal to name what the user wrote."""
    field = loc.rsplit(".", 1)[-1]
    fields = {k: to.split(" ")[0] for k, to in mapped.items()}  # "budget.steps (max_steps overrides it)"
    keys = [k for k, to in fields.items() if to == loc or to.endswith("." + loc)]
    return f" (from {', '.join(keys)})" if keys else f" (from {DERIVED[field]})" if field in DERIVED else ""


# --- the card -------------------------------------------------------------------------------


def card_id(path: Path) -> str:
    """The default card id: `U-` and the file's stem in the Ident alphabet."""
    return "U-" + re.sub(r"[^A-Za-z0-9_.-]", "-", path.stem)[:60]


def _build(k: dict, *, cid: str, title: str, method: str, family: str, device_hours: float, nu: str) -> CandidateCard:
    grpo = method == "grpo"
    n = k.get("n_examples") or k["steps"] * (k["batch"] // k["num_generations"] if grpo else k["batch"])
    rank = k.get("lora")
    return CandidateCard(
        id=cid, title=title, method=method, family=family,
        data=DataRecipe(mix=k["mix"], n_examples=n),
        hparams=HyperParams(learning_rate=k["lr"], batch_size=k["batch"], lr_scheduler=k.get("sched", "cosine"),
                            warmup_ratio=k.get("warmup", 0.0), max_length=k.get("max_length", 512),
                            num_generations=k.get("num_generations"), max_completion_length=k.get("max_completion_length"),
                            beta=k.get("beta"), temperature=k.get("temperature"), rewards=k.get("rewards", ())),
        adapter=Adapter(kind="lora", rank=rank[0], alpha=rank[1], targets=rank[2]) if rank else Adapter(kind="full"),
        budget=NominalBudget(steps=k["steps"], device_hours=device_hours), nu=nu)


class Recipe(typing.NamedTuple):
    """What a recipe file says, checked without the world (read_recipe): every key but whether its
    datasets are pools of the world, which only the built world can say."""

    path: Path
    fmt: str
    """llamafactory, trl-sft or trl-grpo."""
    method: str
    family: str
    fields: dict[str, Any]
    """The card's values by short name (`datasets`: the pool ids, not yet bound to the world)."""
    mapped: dict[str, str]
    owned: list[str]


def read_recipe(path: str | Path, *, family: str | None = None, targets: tuple[str, ...] = ()) -> Recipe:
    """A recipe file's keys, types, format and family checked without the world (a world can take
    minutes to build: `agent cards import` calls this first); BadInput naming the key."""
    path = Path(path)
    where = path.name
    raw = read_yaml(str(path), "recipe")
    if not isinstance(raw, dict) or not raw:
        raise BadInput(f"{where}: expected a mapping of keys (a TRL or LlamaFactory YAML config)")
    fmt = recipe_format(raw)
    method = "grpo" if fmt == "trl-grpo" else "sft"
    k, mapped, owned = _from_llamafactory(raw, where) if fmt == "llamafactory" else _from_trl(raw, method, where)
    fam = family or k["datasets"][0].split("/")[0]
    if fam not in OUTPUT_PROTOCOL:
        raise BadInput(f"{where}: family {fam!r} is not one of {', '.join(OUTPUT_PROTOCOL)}: pass --family")
    for suite in targets:
        if suite != f"{fam}/target":
            raise BadInput(f"{where}: --target {suite} is not the target suite of family {fam} ({fam}/target)")
    return Recipe(path, fmt, method, fam, k, mapped, owned)


def import_recipe(path: str | Path, world, *, family: str | None = None, targets: tuple[str, ...] = (),
                  device_hours: float, card_id_: str | None = None, title: str | None = None,
                  nu: str = "restart") -> Imported:
    """The Proposal of one recipe file against a world (its datasets, arch, output protocols);
    BadInput (one line naming the key) for anything it cannot carry."""
    recipe = read_recipe(path, family=family, targets=targets)
    path, where = recipe.path, recipe.path.name
    k = recipe.fields | {"mix": _datasets(recipe.fields["datasets"], dict(world.datasets), where)}
    cid = card_id_ or card_id(path)
    try:
        card = _build(k, cid=cid, title=title or f"{recipe.fmt} recipe {path.name}", method=recipe.method,
                      family=recipe.family, device_hours=device_hours, nu=nu)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise BadInput(f"{where}: {loc}{_named(loc, recipe.mapped)}: {err['msg']}") from None
    needs = Needs(datasets=tuple(m.dataset.id for m in card.data.mix), runtime=runtime_of(card),
                  output_protocol=OUTPUT_PROTOCOL[recipe.family])
    proposal = Proposal(card=card, applicability=applicability(card, world, needs), provenance=Provenance(
        model_sha256=world.model.sha256, data_sha256={m.dataset.id: m.dataset.sha256 for m in card.data.mix},
        config_sha256=file_sha256(str(path)), eval_sha256=content_hash(world.eval_protocol),
        produced_by=_produced_by(recipe.fmt, path)))
    return Imported(proposal, recipe.fmt, recipe.mapped, tuple(sorted(recipe.owned)))


def _produced_by(fmt: str, path: Path) -> str:
    return f"agent cards import ({fmt}) {path.name}"[:200]


def card_file(imported: Imported, path: Path) -> dict:
    """What `agent cards import` writes: the record, and how each source key was taken."""
    return {"record": imported.proposal.model_dump(mode="json"),
            "import": {"source": path.name, "sha256": imported.proposal.provenance.config_sha256, "format": imported.fmt,
                       "mapped": imported.mapped, "run_owned": list(imported.run_owned)}}
