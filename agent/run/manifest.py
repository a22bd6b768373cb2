"""The run manifest: everything an episode's outcome may depend on, frozen and hashed before
the first node runs (the inputs are hashed and committed before anything is launched).

Nothing in it changes during the episode; a resumed episode reads it back from
`runs/ID/manifest.json` (agent/run/rundir.py knows where), checks its hash and uses its config,
not the new command line's. It is a typed record: nodes read `manifest.cost.mode`, never
`manifest["cost"]["mode"]`, so a renamed key is an error where it is read, not a KeyError
somewhere later.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from agent.config import RunConfig
from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json, content_hash
from experience_bank.frozen import Frozen, Ident, Sha256, parse_model
from policies.authorize import LEASE_READING, PolicyConfig
from policies.curves import Footing
from policies.gate import GateConfig, uniform_gate_config


ENDPOINT_SPLIT = "test"
"""The held-out split the episode's final parent is scored on once, at the end (the gate reads
adoption, so an endpoint there would be optimistic)."""


class ModelAt(Frozen):
    """A model folder and the sha256 of its weights."""

    dir: str
    """Local HF folder."""
    sha256: Sha256
    """Weights hash."""


class WorldId(Frozen):
    """Which world the episode runs on."""

    size: str
    """Embedded world size (test, default, smol)."""
    seed: int = 0
    """World seed (0 in manifests from before world seeds)."""
    recipe_sha256: Sha256
    """Hash of the world's recipe (the cache key)."""
    chat_template_sha256: Sha256
    """Hash of the chat template every model of the world uses."""


class PolicyInfo(Frozen):
    """The authorization policy, frozen with every number it routes by."""

    name: Ident
    """Policy name (policies.POLICIES)."""
    config: PolicyConfig
    """Thresholds, discounts, quota q and the fallback lease."""
    fallback_lease_reading: str = LEASE_READING
    """What the fallback lease means here: the project's interpretation of docs/AUTHORIZER.md §5."""


class GoNoGoInfo(Frozen):
    """The fitted go/no-go bcit_predictive's trial rule reads (policies/gonogo.py), frozen: the run
    reads its copy at runs/ID/gonogo.json, whose sha256 must be this one (agent/run/gonogo_model.py)."""

    sha256: Sha256
    """sha256 of the model file's bytes (the frozen copy's and, on resume, the user's file's)."""
    source: str
    """The path it was read from at the start (the run config's gonogo_model)."""
    training_hash: str
    """policies.gonogo.training_hash of the paired runs and records it was fitted on."""
    feature_names: tuple[str, ...]
    """Its features, in order."""
    threshold: float | None
    """Go iff P(harmful) <= threshold (Learn-then-Test; and beneficial_floor); None: it authorizes nothing."""
    alpha: float
    """Harmful among authorized the threshold bounds."""
    delta: float
    """The bound holds with probability 1 - delta."""
    n_train: int
    """Paired runs it was fitted on."""
    library_version: int | None
    """The library version it was refit at (None: fitted outside an episode)."""
    sklearn_version: str
    """scikit-learn version it was fitted with."""
    footing: Footing = "control"
    """What its curve features were read against (policies.curves.footing_of): `parent` is what the
    loop's trial reads; `control` (a matched control) in models fitted on cells without the parent's scores."""
    footing_warning: str | None = None
    """policies.curves.CONTROL_FOOTING_WARNING where `footing` is not the loop's, else None: the run still
    uses the model (the published world-v3 model has only the control footing), and says so."""
    prior_threshold: float | None = None
    """The prior-only head's threshold (GoNoGo.prior): a plain historical Validate whose prior-only
    P(harmful) is at or under it skips its trial; None: it never skips (no threshold passed, or a
    model fitted before the head existed)."""
    beneficial_floor: float | None = None
    """A go also needs P(beneficial) at least this (policies.gonogo.authorizes), on both heads; None:
    a model fitted before the floor existed, deciding on P(harmful) alone."""


class ExtrapolationInfo(Frozen):
    """The fitted forgetting extrapolation the trial's retention check reads (policies/extrapolate.py),
    frozen: the run reads its copy at runs/ID/extrapolation.json, whose sha256 must be this one
    (agent/run/extrapolation_model.py)."""

    sha256: Sha256
    """sha256 of the model file's bytes (the frozen copy's and, on resume, the user's file's)."""
    source: str
    """The path it was read from at the start (the run config's extrapolation_model)."""
    training_hash: str | None
    """content_hash of the paired runs it was fitted on (None: a fit from before it was recorded)."""
    n_runs: int | None
    """Paired runs it was fitted on."""
    groups: tuple[str, ...]
    """Its fitted groups, `method/adapter` (`*`: any), most specific first."""
    trial_fraction: float
    """The trials' share its groups were fitted at (the run's trial fraction)."""
    footing: Footing
    """What its short readings were read against (`parent`: as the loop's trial reads them)."""
    footing_warning: str | None = None
    """policies.curves.CONTROL_FOOTING_WARNING where `footing` is not the loop's, else None."""


class TrialInfo(Frozen):
    """The bounded validation trial (docs/AUTHORIZER.md §5)."""

    fraction: Annotated[float, Field(gt=0.0, le=0.2)]
    """b_val as a share of the card's nominal steps."""
    min_gain_pp: float
    """Pass needs Delta_val at least this."""
    fail_drop_pp: float
    """Fail when the target drops this much."""


class Evaluators(Frozen):
    """How every model of the episode is scored."""

    suites: tuple[str, ...]
    """Suites evaluated on every split."""
    eval_protocol: str
    """The world's evaluation protocol id."""
    backend: Literal["transformers", "vllm", "openai"]
    """Generation backend."""
    n: Annotated[int, Field(ge=1)]
    """Items per target suite and split."""
    sizes: dict[str, Annotated[int, Field(ge=1)]] = {}
    """Items per split of the suites sized apart from `n` (IFEval, CapTrack); {}: all at `n`."""
    batch_size: Annotated[int, Field(ge=1)]
    """Generation batch size."""
    seed: Annotated[int, Field(ge=0)]
    """Run seed (items always come from the world's seed)."""


class Cost(Frozen):
    """The cost model every charge is computed under (trainers/ledger.py)."""

    mode: Literal["nominal", "measured"]
    """nominal: declared device-hours; measured: wall-clock x devices."""
    devices: Annotated[int, Field(ge=1)]
    """Devices a run occupies."""
    eval_device_hours: Annotated[float, Field(ge=0.0)]
    """Nominal device-hours of evaluating one model on one split."""


class Stop(Frozen):
    """Stop rules besides the budget."""

    max_consecutive_rejections: Annotated[int, Field(ge=1)]
    """Stop after this many rejections in a row."""
    max_candidates: Annotated[int, Field(ge=1)] | None
    """Stop after deciding this many candidates (None = all)."""


class Proposer(Frozen):
    """Where LLM proposals come from, and what they may name."""

    kind: Literal["catalogue", "openai"]
    """catalogue only, or catalogue plus an OpenAI-compatible LLM."""
    base_url: str | None
    """Endpoint (openai)."""
    model: str | None
    """Model name at that endpoint (openai)."""
    allowlist: dict[str, Any]
    """Datasets, runtimes and ids a proposal may use."""


class Manifest(Frozen):
    """Everything an episode's outcome may depend on."""

    episode_id: Ident
    """Episode id (= the run directory's name)."""
    config: RunConfig
    """The whole RunConfig as given (for resume). Validated like any config: a manifest written
    before a key existed reads that key at its default (its hash covers what it holds: `_hash`)."""
    budget_device_hours: Annotated[float, Field(gt=0.0)]
    """The episode budget."""
    initial: ModelAt
    """The initial (out-of-the-box) parent the guards compare against."""
    world: WorldId
    """The world."""
    library_version: Annotated[int, Field(ge=0)]
    """The frozen library version the candidates come from."""
    candidates_sha256: Sha256
    """Hash of the candidate record hashes, in decision order."""
    n_candidates: Annotated[int, Field(ge=0)]
    """How many library candidates."""
    policy: PolicyInfo
    """The policy and its numbers."""
    trial: TrialInfo
    """The validation trial's fraction and thresholds."""
    gate: GateConfig
    """The shared adoption rule g (policies/gate.py owns it)."""
    evaluators: Evaluators
    """How models are scored."""
    data_roles: dict[str, Sha256]
    """Every dataset id of the world -> content hash."""
    cost: Cost
    """The cost model."""
    stop: Stop
    """Stop rules."""
    torch_threads: Annotated[int, Field(ge=1)]
    """torch threads of training and generation."""
    launcher: Literal["local", "accelerate"]
    """Training launcher."""
    proposer: Proposer
    """LLM proposals."""
    gonogo: GoNoGoInfo | None = None
    """The go/no-go model bcit_predictive decides trials with; None for every other policy (and in
    manifests from before it existed)."""
    extrapolation: ExtrapolationInfo | None = None
    """The extrapolation model the trial's retention check reads; None where the run has none (and in
    manifests from before it existed)."""
    manifest_hash: Sha256
    """Content hash of every other field."""


def cost_of(config: RunConfig) -> Cost:
    """The cost model a run of `config` freezes in its manifest."""
    return Cost(mode=config.cost_mode, devices=config.devices, eval_device_hours=config.eval_device_hours)


def build_manifest(*, episode_id: str, config: RunConfig, budget_h: float, initial: ModelAt, world: WorldId,
                   library_version: int, candidate_hashes: list[str], evaluators: Evaluators,
                   datasets: dict[str, str], allowlist: dict[str, Any], gonogo: GoNoGoInfo | None = None,
                   extrapolation: ExtrapolationInfo | None = None) -> Manifest:
    """The manifest of a new episode from its RunConfig values; `manifest_hash` over the rest."""
    c = config.model_dump(mode="json")
    body = {
        "episode_id": episode_id, "config": c, "budget_device_hours": budget_h,
        "initial": initial.model_dump(mode="json"), "world": world.model_dump(mode="json"),
        "library_version": library_version, "candidates_sha256": content_hash(candidate_hashes),
        "n_candidates": len(candidate_hashes),
        "policy": {"name": c["policy"], "config": policy_config(c).model_dump(mode="json"),
                   "fallback_lease_reading": LEASE_READING},
        "trial": {"fraction": c["trial_fraction"], "min_gain_pp": c["trial_min_gain_pp"],
                  "fail_drop_pp": c["trial_fail_drop_pp"]},
        "gate": uniform_gate_config(ifeval_max_drop_pp=c["gate_ifeval_drop_pp"], min_gain_pp=c["gate_min_gain_pp"],
                                   kappa_pp=c["gate_kappa_pp"], alpha=c["gate_alpha"]).model_dump(mode="json"),
        "evaluators": evaluators.model_dump(mode="json"), "data_roles": datasets,
        "cost": cost_of(config).model_dump(mode="json"),
        "stop": {"max_consecutive_rejections": c["max_consecutive_rejections"], "max_candidates": c["max_candidates"]},
        "torch_threads": c["torch_threads"], "launcher": c["launcher"],
        "proposer": {"kind": c["proposer"], "base_url": c["base_url"], "model": c["model"], "allowlist": allowlist},
        "gonogo": gonogo.model_dump(mode="json") if gonogo is not None else None,
        "extrapolation": extrapolation.model_dump(mode="json") if extrapolation is not None else None,
    }
    draft = parse_model(Manifest, canonical_json(body | {"manifest_hash": "0" * 64}), "manifest")
    return draft.model_copy(update={"manifest_hash": _hash(draft)})


def _hash(manifest: Manifest) -> str:
    # Over the typed record's own dump, so that parsing and hashing can never disagree on a
    # number's spelling (36 vs 36.0); over the fields the file holds (exclude_unset), so that a
    # manifest written before a field with a default existed still matches the hash it was
    # written with (a new manifest sets every field).
    return content_hash(manifest.model_dump(mode="json", exclude={"manifest_hash"}, exclude_unset=True))


def policy_config(config: dict[str, Any]) -> PolicyConfig:
    """The policy's frozen numbers from a RunConfig dump."""
    return PolicyConfig(tau_l=config["tau_l"], tau_h=config["tau_h"], quota=config["max_proposals"],
                        fallback_lease=config["fallback_lease"])


def parse_manifest(text: str, where: str = "manifest") -> Manifest:
    """A Manifest from its JSON text, its hash checked; BadInput names what is wrong."""
    manifest = parse_model(Manifest, text, where)
    if _hash(manifest) != manifest.manifest_hash:
        raise BadInput(f"{where} does not match its manifest_hash: it was edited; restore it or start a new run")
    return manifest
