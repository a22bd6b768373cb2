"""A comparison's results directory: finished episodes that survive the machine they ran on.

A comparison of seven policies at six seeds on three worlds is ten and more CPU-hours over
several sessions, and its run directories (models, banks, the run cache) live under $AGENT_CACHE
on one machine. What its tables need of an episode is small: its digest
(agent.experiments.episodes.digest: manifest values, the events' fields, the scores of the
models it reads, the cache's use). `agent compare --results DIR` keeps one JSON file per finished
episode, DIR/episodes/<policy>-s<seed>.json (with --world-seeds, DIR/world-<N>/episodes/...), as
each finishes, and the tables (compare.json, compare.md) at the end; DIR can be committed, and on
another machine the same command takes every stored episode instead of running it again.

The design is the retrospective's (agent/experiments/retro_results.py, whose `mismatch` and
`code_version` this uses). Each stored episode carries its MATCH fields. Before any episode runs,
those that can be known without running it (KNOWN: policy, seeds, the config, the budget, the
fitted models it is handed, the code version; and the world's id and base weights where the
world is built here) must equal the current ones, else a one-line error names the fields that
differ and nothing runs. The rest (library version, candidates) are the episode's own, checked
across policies by compare.pairing_check, as for an episode run here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experience_bank.errors import BadInput
from experience_bank.files import write_atomic
from experience_bank.hashing import canonical_json, content_hash
from agent.config import RunConfig
from agent.inputs import read_json
from agent.experiments.fitted import EXTRAPOLATION_FILE, FITTED_FILE, GONOGO_FILE
from agent.experiments.retro_results import code_version as _code_version
from agent.experiments.retro_results import copy_new, mismatch, writable_dir
from agent.world.embedded import cached_world, recipe_for, recipe_sha256

EPISODE_CODE = ("agent/__init__.py", "agent/__main__.py", "agent/config.py", "agent/inputs.py", "agent/progress.py",
                "agent/cli/__init__.py", "agent/cli/main.py", "agent/cli/run.py", "agent/loop", "agent/run",
                "agent/world", "policies", "trainers", "evaluators", "experience_bank")
"""The code one episode runs (`agent run`: its command, the loop, the run directory, the world, the
policies, the trainers, the evaluators, the bank): an edit anywhere there makes the stored episodes
another measurement (run them again, or at the commit they were measured at). Not agent/experiments
(this comparison's own code, which no episode runs), agent/views (the report an episode writes,
which no digest reads) nor the other commands' modules (REGISTERED_ONLY), so a measurement spread
over sessions survives edits to any of them."""

EVALUATION_ONLY = ("policies/extrapolate_heldout.py", "policies/gonogo_eval.py", "policies/replay.py")
"""Files of EPISODE_CODE's packages that no episode runs: the held-out evaluations of the forgetting
extrapolation and the go/no-go (`agent gonogo`, `agent compare --fit-from`) and the Retrospective-24
replay (`agent replay`). Left out of the episode code version, so editing an analysis does not restart a
measurement; tests check that no other file of EPISODE_CODE imports them."""

PRESENTATION = ("agent/views",)
"""Packages an episode imports whose code no stored number depends on (tests check every other is in EPISODE_CODE)."""

REGISTERED_ONLY = ("agent/cli/approve.py", "agent/cli/bank.py", "agent/cli/cache.py", "agent/cli/cards.py",
                   "agent/cli/decide.py", "agent/cli/eval.py", "agent/cli/gate.py", "agent/cli/measure.py",
                   "agent/cli/runs.py", "agent/cli/train.py", "agent/cli/world.py")
"""The command modules other than `agent run`'s: an episode's parser registers their commands
(agent/cli/main.py) but never runs them, so an edit there (this comparison's own `agent compare`
among them) changes no episode. Tests check every agent/cli module is here or in EPISODE_CODE, and
that `agent run`'s modules import none of these."""

PER_EPISODE = ("policy", "seed", "world_seed", "episode_budget", "bank", "out", "gonogo_model",
               "extrapolation_model")
"""Config keys compare sets per episode (or that name a machine's paths): matched on their own
(policy, seed, world_seed, budget_h, models) or not at all, so not in `config_sha256`."""

KNOWN = ("policy", "seed", "world_seed", "config_sha256", "budget_h", "models", "code")
"""Match fields known before an episode runs."""
WORLD = ("world", "base_sha256")
"""The world's recipe hash and base weights: known before running where the world is built here."""
MATCH = KNOWN + WORLD + ("library_version", "candidates_sha256")
"""Every field a stored episode records about the conditions it was measured in."""
TABLE = ("compare.json", "compare.md")
OUT_CODE = "code.json"
"""In a comparison directory: the code version its episodes run at (claim_out)."""
"""The comparison's table files kept beside the episodes."""
MODELS = (GONOGO_FILE, EXTRAPOLATION_FILE, FITTED_FILE)
"""A world's fitted models (--fit-from), kept beside its episodes: a comparison resumed elsewhere runs
with the models its stored episodes ran with, however the sources have grown since."""


@dataclass(frozen=True)
class Keep:
    """Where a job keeps its finished episode, and the conditions it records with it."""

    results: Path
    """The (world's) results directory."""
    match: dict[str, Any]
    """The KNOWN (and WORLD) fields of this episode."""


@dataclass(frozen=True)
class Stored:
    """One world's comparison and its results directory: every job's match fields, and the
    episodes taken from the directory instead of running."""

    results: Path
    """The (world's) results directory."""
    matches: dict[str, dict[str, Any]]
    """Job name -> the KNOWN (and WORLD) fields of its episode."""
    taken: dict[str, dict[str, Any]]
    """Job name -> the stored digest of its finished episode (only those `results` holds)."""
    codes: dict[str, Any] = field(default_factory=dict)
    """Job name -> the code version its stored episode was measured at (of those taken)."""

    def keep(self, name: str) -> Keep:
        return Keep(self.results, self.matches[name])


def stored(results: Path, matches: dict[str, dict[str, Any]]) -> Stored:
    """`results` with the episodes it holds of these jobs; BadInput, before anything runs, when it
    cannot be a directory (`writable_dir`) or one was measured in other conditions (`take`)."""
    writable_dir(results / "episodes")  # the folder episodes are kept in, or the nearest that exists
    docs = take(results, matches)
    return Stored(results, matches, {n: d["digest"] for n, d in docs.items()},
                  {n: d["match"].get("code") for n, d in docs.items()})


def one_code(stored: list[Stored]) -> dict[str, Any] | None:
    """The one code version every taken episode of these worlds was measured at (None: none taken);
    BadInput when they differ. A report (`agent compare --report`) pools episodes as they were
    measured, at whatever commit ran them, but never two code versions in one table."""
    codes = {canonical_json(c): c for s in stored for c in s.codes.values()}
    if len(codes) > 1:
        raise BadInput(f"the stored episodes were measured at {len(codes)} code versions: report each measurement "
                       "from its own --results directory")
    return next(iter(codes.values()), None)


def code_version() -> dict[str, Any]:
    """The source hash of EPISODE_CODE and the library versions."""
    return _code_version(EPISODE_CODE, "episode", exclude=EVALUATION_ONLY)


def claim_out(outs: list[Path], code: dict[str, Any] | None) -> None:
    """Stamp comparison directories (one per world) with the code their episodes run at (OUT_CODE),
    or BadInput, before any episode runs and stamping none, when one holds another code's: a finished
    run directory there is taken as done (compare.run_one) and kept with the current conditions, so
    one left by another code would be published as this code's. `code` None (no results directory,
    or a report): nothing is kept, so nothing is stamped. A directory from before the stamp is
    stamped as it is."""
    if code is None:
        return
    for out in outs:
        if (out / OUT_CODE).is_file():
            theirs = read_json(out / OUT_CODE, "comparison code stamp")
            if canonical_json(theirs) != canonical_json(code):
                episode = theirs.get("episode", "?") if isinstance(theirs, dict) else "?"
                raise BadInput(f"{out} holds episodes run at episode code {str(episode)[:12]}, not this checkout's "
                               f"{code['episode'][:12]}: pass a new --out (its finished episodes would be kept as "
                               "this code's)")
    for out in outs:
        if not (out / OUT_CODE).is_file():
            out.mkdir(parents=True, exist_ok=True)
            write_atomic(out / OUT_CODE, json.dumps(code, indent=1, sort_keys=True))


def config_sha256(cfg: RunConfig) -> str:
    """Content hash of the run config every episode shares, less the keys set per episode."""
    return content_hash(cfg.model_dump(mode="json", exclude=set(PER_EPISODE)))


def conditions(cfg: RunConfig, world_seed: int, budget_h: float, code: dict[str, Any] | None) -> dict[str, Any]:
    """The match fields shared by every episode on one world (add policy, seed and models per job):
    for the embedded world its id, known before anything is built (it names this machine's
    numerics, so episodes stored on a machine that rounds differently are refused at once), and
    its base weights where it is built here."""
    ours = {"world_seed": world_seed, "config_sha256": config_sha256(cfg), "budget_h": budget_h} | (
        {} if code is None else {"code": code})  # a report takes episodes at any one code (one_code)
    if cfg.base_model is not None:
        return ours
    world = cached_world(cfg.world, world_seed)
    if world is None:
        return ours | {"world": recipe_sha256(recipe_for(cfg.world, world_seed))}
    return ours | {"world": world.recipe_sha256, "base_sha256": world.model.sha256}


def measured(d: dict[str, Any]) -> dict[str, Any]:
    """The match fields an episode's digest names (its manifest's)."""
    return {"world": d["world"], "base_sha256": d["initial_sha256"],
            "library_version": d["pairing"]["library_version"], "candidates_sha256": d["pairing"]["candidates_sha256"]}


def episode_file(results: Path, name: str) -> Path:
    return results / "episodes" / f"{name}.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not (isinstance(doc, dict) and isinstance(doc.get("match"), dict) and isinstance(doc.get("digest"), dict)):
            raise TypeError("not an object with `match` and `digest`")
        return doc
    except (OSError, ValueError, TypeError) as exc:
        raise BadInput(f"{path} is not a stored episode ({exc}): remove it, or pass a results directory written "
                       "by `agent compare --results DIR`") from None


def take(results: Path, wanted: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The stored episodes ({match, digest}) of those `wanted` (job name -> its current match fields)
    that `results` holds; BadInput, before anything runs, when one was measured in other conditions
    (on the fields `wanted` names: a report names no code)."""
    taken = {}
    for name, ours in wanted.items():
        path = episode_file(results, name)
        if not path.exists():  # a folder of its name is refused by _read, not taken as not run
            continue
        doc = _read(path)
        diff = mismatch(doc["match"], ours, tuple(k for k in MATCH if k in ours))
        if diff:
            raise BadInput(f"{path} was measured in other conditions ({', '.join(diff)} differ): pass a new "
                           "--results directory, or run the code commit, config and world it was measured with")
        taken[name] = doc
    return taken


def stored_all(results: Path) -> dict[str, dict[str, Any]]:
    """Every episode `results` holds, whatever its policy, by file stem (its job name) -> its digest,
    without matching its conditions: what an episode that ends is checked to pair with (another
    command may have stored the other policies', e.g. the short ones first)."""
    every = episode_file(results, "*")  # the layout's one owner, as a glob
    return {path.stem: _read(path)["digest"] for path in sorted(every.parent.glob(every.name))}


def publish(keep: Keep, name: str, d: dict[str, Any]) -> None:
    """Keep one finished episode's digest and its match fields in the results directory."""
    write_atomic(episode_file(keep.results, name), canonical_json({"match": keep.match | measured(d), "digest": d}))


def take_models(results: Path, out: Path) -> None:
    """Copy a world's MODELS from its results directory into its comparison directory (a comparison
    directory that holds other models is refused: copy_new)."""
    for name in MODELS:
        if (results / name).is_file():
            copy_new(results / name, out / name)


def publish_models(out: Path, results: Path) -> None:
    """Keep a world's MODELS in its results directory."""
    for name in MODELS:
        if (out / name).is_file():
            write_atomic(results / name, (out / name).read_text(encoding="utf-8"))


def publish_table(out: Path, results: Path) -> None:
    """Keep the comparison's TABLE files of `out` in `results`."""
    for name in TABLE:
        if (out / name).is_file():
            write_atomic(results / name, (out / name).read_text(encoding="utf-8"))
