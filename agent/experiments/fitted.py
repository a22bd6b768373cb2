"""What a comparison learns, fitted on other worlds only (issue 27, item 5).

bcit_predictive's go/no-go (policies/gonogo.py) and the trial's forgetting extrapolation
(policies/extrapolate.py) are fitted on executed retrospectives. Measured on the world they were
fitted on, they would be read on their own training data. So `agent compare --fit-from SOURCES`
fits, for each world it compares on, both models on the sources of every *other* world seed
(leave-one-world-out), writes them into that world's comparison directory and hands them to its
episodes: the go/no-go to bcit_predictive's, the extrapolation to every policy's (it is the
trial's own retention check, so every policy acts on the same check).

A source is an executed retrospective directory or its results directory (`--results DIR`); its
world seed is its ledger's. A world never compared on (a held-out one) gets models fitted on
every source. The models are written once per comparison directory: a resumed comparison reuses
them (a resumed episode refuses a model whose bytes changed, agent/run/gonogo_model.py), so the
sources growing between sittings never changes what a started comparison runs with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experience_bank.errors import BadInput
from experience_bank.files import jsonl_text, write_atomic
from experience_bank.hashing import file_sha256, loads_strict, sha256_text
from agent.world.catalogue import catalogue, catalogue_sha256
from agent.world.embedded import recipe_for
from agent.world.store import CardWorld
from policies.authorize import NEEDS_GONOGO
from policies.curves import ledger, paired_runs, paired_runs_json, world_seed_of

GONOGO_FILE = "gonogo.json"
EXTRAPOLATION_FILE = "extrapolation.json"
FITTED_FILE = "fitted.json"
"""In a world's comparison directory: the two models and what they were fitted on."""


def gonogo_rule(alpha: float, delta: float) -> dict[str, float]:
    """The go/no-go's fitting rule: the levels asked for, and the outcome classes of the retrospective
    the sources were executed with (agent.experiments.retro_cells: its effect band and IFEval guard)."""
    from agent.experiments.retro_cells import IFEVAL_DROP_PP, MIN_EFFECT_PP  # noqa: PLC0415 (scipy)

    return {"alpha": alpha, "delta": delta, "band": MIN_EFFECT_PP, "ifeval_drop_pp": IFEVAL_DROP_PP}


def _cards(path: Path) -> dict:
    """The catalogue's cards of a retrospective directory where its catalogue is this one (else none:
    its runs are read without card features). A card's steps and datasets are its world's size's and
    seed's, not its weights' (CardWorld), so a source measured on a machine that built the world with
    other numerics is read without building anything; BadInput for a world size with no recipe."""
    facts = ledger(path)
    if facts.get("catalogue_sha256") != catalogue_sha256():
        return {}
    size, seed = str(facts.get("world", "")).split("-")[0], world_seed_of(path)
    try:
        recipe_for(size, seed)
    except BadInput as exc:
        raise BadInput(f"{path}: its ledger names world {facts.get('world')!r}: {exc}") from None
    return {c.id: c for c in catalogue(CardWorld(size, seed))}


def gonogo_source(path: Path) -> tuple[list, dict]:
    """(paired runs, records by policies.gonogo_features.record_key) of one source; cards only where this catalogue
    and world made it."""
    if path.is_file():
        return paired_runs_json(path), {}
    if not path.is_dir():
        raise BadInput(f"{path} not found: pass an executed retrospective directory or a retrospective JSON")
    features, world_seed = path / "features.jsonl", world_seed_of(path)
    # a retrospective from before the frozen features has none; a folder of that name is refused
    return paired_runs(path, cards=_cards(path)), (_records(features, world_seed) if features.exists() else {})


def _records(features: Path, world_seed: int) -> dict:
    """The frozen records of a retrospective's features.jsonl (one {cell, features} object a line) by
    record_key; BadInput naming the file and line that is not one."""
    from policies.gonogo_features import record_features, record_key  # noqa: PLC0415 (scikit-learn)

    records = {}
    for n, line in jsonl_text(features, "retrospective features"):  # names a non-UTF-8 or oversized line
        try:
            row = loads_strict(line)
            if not (isinstance(row, dict) and isinstance(row.get("cell"), str) and isinstance(row.get("features"), dict)):
                raise TypeError("not an object with a string `cell` and an object `features`")
            record_features(row["features"])  # the go/no-go reads it so: a value it cannot is refused here
            records[record_key(world_seed, row["cell"])] = row["features"]
        except (BadInput, KeyError, TypeError, ValueError, AttributeError) as exc:
            why = f"no {exc} key" if isinstance(exc, KeyError) else str(exc)
            raise BadInput(f"{features} line {n} is not a frozen cell record ({why}): restore it from git or run "
                           "the retrospective again") from None
    return records


def gonogo_inputs(sources: list[Path]) -> tuple[list, dict]:
    """Every source's paired runs, and the records of their cells."""
    runs, records = [], {}
    for source in sources:
        r, rec = gonogo_source(source)
        runs, records = runs + r, records | rec
    return runs, records


def world_of(source: Path) -> int:
    """A source directory's world seed (its ledger's); BadInput for anything else."""
    if not (source / "ledger.json").is_file():
        raise BadInput(f"--fit-from {source}: not an executed retrospective or results directory (no ledger.json); "
                       "pass directories written by `agent retrospective --execute [--results DIR]`")
    return world_seed_of(source)


def held_out_sources(sources: list[Path], world_seed: int) -> list[Path]:
    """The sources of every world but `world_seed`; BadInput when none is left."""
    others = [s for s in sources if world_of(s) != world_seed]
    if not others:
        raise BadInput(f"--fit-from: every source is of world seed {world_seed}, so nothing is left to fit its "
                       "models on without reading that world: add a retrospective of another world seed")
    return others


@dataclass(frozen=True)
class Fitted:
    """The model files one world's episodes run with."""

    gonogo: Path | None
    """bcit_predictive's go/no-go (None where no policy compared reads one)."""
    extrapolation: Path
    """The trials' forgetting extrapolation."""

    def flags(self, policy: str) -> list[str]:
        """`agent run` flags of one policy's episodes."""
        wants = self.gonogo is not None and policy in NEEDS_GONOGO
        return (["--gonogo-model", str(self.gonogo)] if wants else []) + ["--extrapolation-model", str(self.extrapolation)]

    def sha256s(self, policy: str) -> dict[str, str]:
        """sha256 of each model file one policy's episodes run with, by flag (a stored episode's `models`)."""
        flags = self.flags(policy)
        return {flag.removeprefix("--"): file_sha256(path) for flag, path in zip(flags[::2], flags[1::2])}


def fit_for_world(out: Path, world_seed: int, sources: list[Path], *, gonogo: bool, alpha: float = 0.1,
                  delta: float = 0.1) -> Fitted:
    """Fit (once) and write a world's models in `out` from the other worlds' sources; a directory that
    already holds them keeps them (see the module's docstring)."""
    from agent.experiments.extrapolation import load_runs  # noqa: PLC0415 (scipy)
    from policies import extrapolate  # noqa: PLC0415
    from policies import gonogo as gng  # noqa: PLC0415 (scikit-learn)
    from policies import ltt  # noqa: PLC0415

    g_path, x_path, meta = out / GONOGO_FILE, out / EXTRAPOLATION_FILE, out / FITTED_FILE
    if (fitted := kept(out, gonogo=gonogo)) is not None:
        return fitted
    others = held_out_sources(sources, world_seed)
    doc: dict[str, Any] = {"world_seed": world_seed, "sources": [str(s) for s in others],
                           "source_world_seeds": sorted({world_of(s) for s in others})}
    texts = {x_path: extrapolate.dumps(extrapolate.fit(load_runs(others)))}
    doc["extrapolation_sha256"] = sha256_text(texts[x_path])
    if gonogo:
        ltt.check_levels(alpha, delta)
        runs, records = gonogo_inputs(others)
        model = gng.fit(runs, records, **gonogo_rule(alpha, delta))
        texts[g_path] = gng.dumps(model)
        doc |= {"gonogo_sha256": sha256_text(texts[g_path]), "gonogo_n_train": model.n_train,
                "gonogo_threshold": model.threshold.threshold, "alpha": alpha, "delta": delta}
    # written only once both fits stand: a refused fit leaves the directory as it was
    for path, text in texts.items():
        write_atomic(path, text)
    write_atomic(meta, json.dumps(doc, indent=1, sort_keys=True))
    return Fitted(g_path if gonogo else None, x_path)


def kept(out: Path, *, gonogo: bool) -> Fitted | None:
    """The models a world's directory already holds (None: not every one asked for): what its
    episodes ran with, so a resumed comparison and a report read them rather than fit again."""
    g_path, x_path = out / GONOGO_FILE, out / EXTRAPOLATION_FILE
    if (out / FITTED_FILE).is_file() and x_path.is_file() and (g_path.is_file() or not gonogo):
        return Fitted(g_path if gonogo else None, x_path)
    return None


def fitted_summary(out: Path) -> dict[str, Any] | None:
    """What a world's comparison directory's models were fitted on (None: it fitted none)."""
    path = out / FITTED_FILE
    return loads_strict(path.read_text(encoding="utf-8")) if path.is_file() else None
