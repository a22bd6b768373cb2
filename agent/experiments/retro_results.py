"""A retrospective's results directory: what of a table survives the machine it ran on.

A seeded retrospective costs hours of CPU per world and its run directory (models, run cache)
lives outside the work tree on one machine. Its results are small: the ledger, the frozen
features and decisions, and one `cell.json` per cell and seed. `agent retrospective --execute
--results DIR` keeps those in DIR as each finishes; DIR can be committed, and on another machine
the same command takes every finished seed from it instead of running it again.

A finished seed is taken only when DIR's ledger says it was measured in the same conditions as
the table being run: the same world (recipe, seed, base weights), catalogue, evaluation sizes,
class rules, and the same code version (`code_version`: the source hash of CELL_CODE, plus the
libraries a run's key names). Anything else is another
measurement: a one-line error says which fields differ. Nothing already in the run directory is
replaced by something different (that error names the file).

The frozen features and decisions come with the results: a table resumed from DIR reads them
instead of compiling them again from the world's seed bank (whose runs would cost another hour),
and the decision ledger is verified (policies.decision_ledger.verify_ledger) before it is used.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from experience_bank.errors import BadInput
from experience_bank.files import write_atomic
from experience_bank.hashing import canonical_json
from experience_bank.decisions import Features
from experience_bank.runcache import source_version

from agent.world.embedded import native_env
from policies.decision_ledger import verify_ledger

CELL_CODE = ("trainers", "evaluators", "experience_bank/results.py", "agent/experiments/retro_run.py",
             "agent/world/runner.py", "agent/world/controls.py", "agent/world/catalogue.py", "agent/world/examples.py")
"""The code one seed of one cell runs: the trainers, the evaluators and their result records, the
module that runs a cell, and the world's runner, its controls, the catalogue that owns the
controls' reference recipe (catalogue.reference_recipe) and the module that builds a card's rows
(agent/world/examples.py: its mix, self-replay and, from catalogue v6, the GRPO prompt filter). Not
experience_bank/{frozen,cards,records}.py, which a run's cache key also hashes: the cards enter
through the catalogue's hash, and the other records (events, bank records) do not touch a run, so a change to them must not
make a committed measurement count as another."""

MATCH = ("kind", "world", "world_seed", "base_sha256", "catalogue_sha256", "fractions", "min_effect_pp",
         "ifeval_drop_pp", "eval_n", "control", "code")
"""The ledger fields two tables must share for one's finished seeds to count in the other's."""

FROZEN = ("features.jsonl", "decisions.jsonl")
TABLE = ("ledger.json", "cells.jsonl", "outcomes.jsonl", "summary.json", "retrospective.md", "retrospective.json")
"""Files of the table's root kept in the results directory (FROZEN first, then these)."""


def code_version(parts: tuple[str, ...] = CELL_CODE, name: str = "cell", exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """What a finished unit's numbers depend on besides its inputs: the source hash of the code it
    runs (`parts` less the files of `exclude`, under `name`; default: a retrospective cell's) and the
    libraries a run's key names."""
    from trainers.run import libraries  # noqa: PLC0415 (torch)

    return {name: source_version(parts, exclude), "libraries": libraries()}


def _read_ledger(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict):
            raise TypeError("not a JSON object")
        return doc
    except (OSError, ValueError, TypeError) as exc:
        raise BadInput(f"{path} is not a retrospective ledger ({exc}): pass a results directory written by "
                       "`agent retrospective --execute --results DIR`, or a new, empty one") from None


def mismatch(theirs: dict[str, Any], ours: dict[str, Any], fields: tuple[str, ...] = MATCH) -> list[str]:
    """The `fields` (default: a retrospective ledger's MATCH) on which two records of a measurement's
    conditions differ, compared as JSON (pure)."""
    theirs, ours = json.loads(json.dumps(theirs)), json.loads(json.dumps(ours))
    return [k for k in fields if theirs.get(k) != ours.get(k)]


def copy_new(src: Path, dest: Path) -> bool:
    """Copy src to dest unless dest holds the same bytes; a different dest is never replaced."""
    if dest.exists():
        if dest.read_bytes() != src.read_bytes():
            raise BadInput(f"{dest} differs from {src}: the run directory holds another measurement; "
                           "pass a new --out, or the --results directory it was run with")
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(dest, src.read_text(encoding="utf-8"))
    return True


def writable_dir(results: Path) -> None:
    """BadInput, before anything runs, where a results directory could never be written: it, or the
    nearest of its parents that exists, is not a directory (else hours of runs would end in a result
    that cannot be kept)."""
    there = next((p for p in (results, *results.parents) if p.exists()), None)
    if there is not None and not there.is_dir():
        raise BadInput(f"--results {results}: {there} is a file, not a directory: pass a new directory, or one "
                       "written by --results before")


def _seed_cell_ok(path: Path) -> bool:
    """A published per-seed cell.json names the cell and seed of its path (else it is not taken)."""
    try:
        cell = json.loads(path.read_text(encoding="utf-8"))
        return cell.get("id") == path.parent.parent.name and f"s{cell.get('seed')}" == path.parent.name
    except (OSError, ValueError, AttributeError):
        return False


def _same_measurement(folder: Path, ledger: dict[str, Any], what: str, flag: str) -> bool:
    """Whether `folder` holds a ledger (False: a new folder); BadInput when that ledger names another
    world, catalogue, rule or code than `ledger` (the fields that differ, and `flag` as the fix)."""
    path = folder / "ledger.json"
    if not path.is_file():
        return False
    diff = mismatch(_read_ledger(path), ledger)
    if diff:
        raise BadInput(f"{folder} {what} another world, catalogue, rule or code ({', '.join(diff)} differ): "
                       f"pass a new {flag} directory, or run the code and world it was measured with")
    return True


def check_run_dir(out: Path, ledger: dict[str, Any]) -> None:
    """Refuse a run directory that holds a table of another measurement: its cells' cached steps
    (short runs, full runs, evaluations, by card id and seed) would be served as this one's, e.g.
    a new catalogue's card given the old card's numbers under the same id."""
    _same_measurement(out, ledger, "holds a table measured on", "--out")


def take(results: Path, out: Path, ledger: dict[str, Any]) -> int:
    """Copy into the run directory `out` the frozen files and every finished seed of `results` (when
    its ledger matches `ledger`); returns how many seeds were taken. A results directory without a
    ledger is a new one: nothing to take."""
    if not _same_measurement(results, ledger, "was measured on", "--results"):
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for name in FROZEN:
        if (results / name).is_file():
            copy_new(results / name, out / name)
    bad = [p for p in sorted(results.glob("cells/*/s*/cell.json")) if not _seed_cell_ok(p)]
    if bad:
        raise BadInput(f"{bad[0]} does not name the cell and seed of its path: remove it from {results}")
    return sum(copy_new(p, out / p.relative_to(results)) for p in sorted(results.glob("cells/*/s*/cell.json")))


def frozen_inputs(out: Path, card_ids: list[str]) -> tuple[dict[str, Features], dict[str, str]] | None:
    """The frozen features and BCIT decision hashes of every card from `out`'s features.jsonl and its
    verified decisions.jsonl; None when either is missing or does not cover the cards (then they
    are compiled from the seed bank)."""
    fpath, dpath = out / "features.jsonl", out / "decisions.jsonl"
    if not (fpath.is_file() and dpath.is_file()):
        return None
    rows = [json.loads(line) for line in fpath.read_text(encoding="utf-8").splitlines() if line.strip()]
    features = {r["cell"]: Features.model_validate_json(json.dumps(r["features"])) for r in rows}
    problems, entries, _ = verify_ledger([json.loads(line) for line in dpath.read_text(encoding="utf-8").splitlines()
                                          if line.strip()])
    if problems:
        raise BadInput(f"{dpath} does not verify ({problems[0]}): remove the run directory's frozen files "
                       "to compile them again from the seed bank")
    hashes = {e.decision.candidate_id: e.decision.decision_hash for e in entries}
    if [r["cell"] for r in rows] != card_ids or sorted(hashes) != sorted(card_ids):
        return None
    for e in entries:
        if e.features != features[e.decision.candidate_id]:
            raise BadInput(f"{fpath} and {dpath} disagree on {e.decision.candidate_id}'s features: "
                           "use a new --out")
    return features, hashes


def publish_seed(results: Path, card_id: str, seed: int, cell: dict[str, Any]) -> None:
    """Keep one finished seed of one cell in the results directory, with the machine that ran it
    beside it (`machine.json`: its own kernel level and numerics fingerprint): on a world built with
    portable numerics (agent/world/portable.py) a cell's seeds may come from several kinds of CPU."""
    here = native_env()
    write_atomic(results / "cells" / card_id / f"s{seed}" / "machine.json",
                 canonical_json({"cpu": here.cpu, "machine": here.machine, "numerics": here.numerics}))
    write_atomic(results / "cells" / card_id / f"s{seed}" / "cell.json", canonical_json(cell))


def publish_table(out: Path, results: Path) -> None:
    """Keep the table's small files (FROZEN, TABLE and every seeded cells/<id>/cell.json) in `results`."""
    results.mkdir(parents=True, exist_ok=True)
    for name in FROZEN + TABLE:
        if (out / name).is_file():
            shutil.copyfile(out / name, results / name)
    for path in sorted(out.glob("cells/*/cell.json")):
        dest = results / path.relative_to(out)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
