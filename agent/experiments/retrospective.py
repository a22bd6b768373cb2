"""`agent retrospective --execute`: the embedded world's own Retrospective-24 and ShortFull-24.

One cell per catalogue candidate, in a context where it was not trained before: the world's
base model (stage 0). Per cell, all from the same parent, seed, data recipe and evaluation
items (greedy decoding):
- the trial-length run (20% of the card's nominal steps) with its curve: the models at 5% and
  10% are its snapshots (trainers.steps.curve_steps), as a loop's trial measures them, each
  evaluated on the validation split (what a bounded trial reads), with the trial verdict of
  the 20% reading from `trainers.trial.verdict` under the run config's default thresholds;
- the full run, evaluated on the adoption split (what the gate reads);
- beside each, its trained matched control (agent/world/controls.py: the same parent, seed,
  steps, examples and items, without the intervention). Controls are keyed by
  `controls.control_key` and kept under `controls/`: one trial-length run (read at its
  snapshots too) and one full run per method serve every cell, evaluated once per family,
  split and reading.
Effects are intervention minus control in pp on the family's target metric and on IFEval
prompt / instruction strict accuracy; the parent's own scores on both splits are kept beside
them (`parent`), since a loop's trial reads against the parent, not a control. Every candidate is run short and full, so trial
fidelity is measured without selecting only the passing trials.

Seeds: every cell (intervention, control, short and full runs) runs at K training seeds
(`seeds`, default DEFAULT_SEEDS). A cell's effects are the means over its seeds, each with the
95 % Student-t interval over the K per-seed effects (policies.stats.mean_interval; undefined at
K = 1). Its trial verdict is `trainers.trial.verdict` of the mean 20 % effects (any seed's
training sanity failure fails it); the trial and the gate of an episode stay single runs.

Outcome class of a cell: policies/outcomes.py (`outcome_class_interval`, the one definition,
shared with the run audit and the replay), with band MIN_EFFECT_PP and IFEval bound
IFEVAL_DROP_PP fixed in retro_cells.py before any run, on the intervals (at K = 1: the points, so a
single-seed table is today's); a full run with a failed sanity check on any seed is harmful. A
cell whose intervals straddle a class boundary is "uncertain": it is counted apart and left
out of every figure of summary.json (each says how many it left out). The intervals that decide
are pooled (retro_cells.pool_classes): per metric, the between-seed spread of the cells of one
pool group (retro_cells.pool_group: family and method at one learning rate relative to the
standard), which share their controls' and their step size's noise, on the group's degrees of
freedom (6 for three cells at three seeds, t = 2.45) rather than a cell's own two (t = 4.30). Each cell keeps its
own-spread interval (`ci95`) and class (`outcome_class_per_cell`) beside, and summary.json both counts.

A second stage (`extend_to`, Stein's two-stage design): at K seeds some pool groups cannot decide
even a zero effect (retro_mix.precision: at v7's three seeds, e.g. a finance GRPO group of SD 0.8 pp
needs four), so no cell of theirs can be neutral. retro_mix.second_stage reads the first stage's
pooled spreads, never an effect, and gives the cells of each such group the seeds it needs, at most
`extend_to`; the table is then decided over all their seeds, and summary.json keeps the plan and the
first stage's outcome mix.

Ledger (DIR): `features.jsonl` is written first — the outcome-blind features of every cell,
compiled from the seed bank's record of the card against the base-model context, hashed
(`features_sha256` in ledger.json, which also records `seeds`) — then per cell and seed
`cells/<id>/s<seed>/` (its steps `trial-run.json`, `f0.05.json` .. `f1.00.json`, runs, evaluations and
`cell.json`; resume skips every finished step), the seeded cell `cells/<id>/cell.json`, and
`cells.jsonl` (features + outcomes, one line per cell) plus `summary.json`. Controls are kept
per seed (`controls.control_key` includes it).

Execution (agent/experiments/executor.py): one job per (cell, seed); the jobs run one after
another in this process, or as Ray tasks side by side (`--executor ray`), each building its own ports where it runs; the
steps two cells share (a matched control's run and evaluations) are single-flight (`_once`), so
the files are the same whichever executor ran them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from experience_bank.errors import BadInput
from experience_bank.files import write_atomic
from experience_bank.hashing import canonical_json, content_hash
from experience_bank.results import check_seed
from policies.stats import mean_interval
from agent.config import RunConfig
from agent.experiments.executor import (Executor, Job, LocalExecutor, Outcome, Progress, Resources, say_on_stderr,
                                        task_resources)
from agent.experiments import retro_results
from agent.experiments.retro_cells import (  # the table's pure rules
    FRACTIONS, IFEVAL, IFEVAL_DROP_PP, MIN_EFFECT_PP, card_pool_group, interval_class, pool_classes, summarise_cells,
)
from agent.experiments.retro_mix import mix, precision, second_stage
from agent.experiments.retro_ports import WorldCellPorts, base_context, embedded_ports, eval_n
from agent.experiments.retro_run import CellPorts, _once, _trial_verdict, run_cell
from agent.experiments.retro_summary import write_summary
from agent.world.catalogue import catalogue, catalogue_sha256
from agent.world.controls import control_card
from agent.world.embedded import ensure_world
from policies import EpisodeState, PolicyConfig, compile as compile_features
from policies.authorize import decide
from agent.world.seed_bank import seed_records
from agent.progress import lines as progress_lines
from policies.decision_ledger import OUTCOMES_FILE, OutcomeCell, write_ledger_entry

DEFAULT_SEEDS = 3
"""Training seeds per cell (`agent retrospective --seeds`)."""


# --- a seeded cell: its seeds' cells, averaged ---------------------------------------------------


def _mean(xs: list[float]) -> float:
    return mean_interval(xs)[0]


def _pooled(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, list[float]] | None]:
    """The seed means of one run length (effects rounded as a single seed's are) and their
    intervals per metric, None at one seed (undefined)."""
    series = {"target": [r["target"] for r in runs]} | {m: [r["ifeval"][m] for r in runs] for m in IFEVAL}
    cis = {k: mean_interval(v)[1] for k, v in series.items()}
    mean = {"target": round(_mean(series["target"]), 6), "ifeval": {m: round(_mean(series[m]), 6) for m in IFEVAL},
            "wall_s": _mean([r["wall_s"] for r in runs]),
            "sanity_failures": list(dict.fromkeys(f for r in runs for f in r["sanity_failures"]))}
    return mean, (None if len(runs) == 1 else {k: list(v) for k, v in cis.items()})


def seeded_cell(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell from its per-seed cells (run_cell's, in seed order): seed-mean effects with their
    95 % intervals (`ci95`, None at one seed), the trial verdict of the means, and the interval
    class (policies.outcomes.outcome_class_interval). At one seed it is that seed's cell."""
    first = per_seed[0]
    short, ci = {}, {}
    for f in first["short"]:
        short[f], ci[f] = _pooled([c["short"][f] for c in per_seed])
    full, ci["full"] = _pooled([c["full"] for c in per_seed])
    control = {f: {m: _mean([c["control"][f][m] for c in per_seed]) for m in first["control"][f]}
               for f in first["control"]}
    v, reasons = _trial_verdict(short["0.20"])
    points = {"target": [full["target"]] * 2} | {m: [full["ifeval"][m]] * 2 for m in IFEVAL}
    cls = interval_class(ci["full"] or points, hard_failure=bool(full["sanity_failures"]))
    return {"id": first["id"], "family": first["family"], "method": first["method"], "seed": first["seed"],
            "control": control, **({"parent": first["parent"]} if "parent" in first else {}), "short": short, "full": full, "trial_verdict": v, "trial_reasons": list(reasons),
            "outcome_class": cls, "seeds": [c["seed"] for c in per_seed],
            "ci95": None if ci["full"] is None else ci,
            "by_seed": [{"seed": c["seed"], "full_target": c["full"]["target"], "full_ifeval": c["full"]["ifeval"],
                         "trial_target": c["short"]["0.20"]["target"], "trial_verdict": c["trial_verdict"],
                         "outcome_class": c["outcome_class"]} for c in per_seed]}


# --- the whole table ------------------------------------------------------------------------------


def freeze_features(out: Path, rows: list[tuple[str, Any]]) -> str:
    """Write features.jsonl (cell id + outcome-blind Features) once; return its hash."""
    path = out / "features.jsonl"
    text = "".join(canonical_json({"cell": cid, "features": f.model_dump(mode="json")}) + "\n" for cid, f in rows)
    if path.exists() and path.read_text(encoding="utf-8") != text:
        raise BadInput(f"{path} holds other frozen features (different cells or world): use a new --out")
    if not path.exists():
        write_atomic(path, text)
    return content_hash(path.read_text(encoding="utf-8"))


_CI_KEYS = {"target": "target", "ifeval_p": "prompt_strict", "ifeval_i": "inst_strict"}


def _deciding_ci(cell: dict) -> dict[str, list[float]]:
    """The full-run intervals a seeded cell's class was decided on: pooled where the table pooled."""
    return cell.get("ci95_pooled") or cell["ci95"]["full"]


def write_outcomes(out: Path, cells: list[dict], decision_hashes: dict[str, str]) -> None:
    """outcomes.jsonl in policies/decision_ledger.py's OutcomeCell form, rewritten whole (atomic)."""
    lines = [OutcomeCell(
        candidate_id=c["id"], decision_hash=decision_hashes[c["id"]], outcome=c["outcome_class"],
        family=c["family"], method=c["method"],
        trial_verdict=c["trial_verdict"], trial_delta=c["short"]["0.20"]["target"],
        short={k: v["target"] for k, v in c["short"].items()},
        full={"target": c["full"]["target"], "ifeval_p": c["full"]["ifeval"]["prompt_strict"],
              "ifeval_i": c["full"]["ifeval"]["inst_strict"]},
        trial_device_hours=c.get("device_hours", {}).get("trial", 0.0),
        full_device_hours=c.get("device_hours", {}).get("full", 0.0), seeds=len(c.get("seeds", [0])),
        full_ci={k: tuple(_deciding_ci(c)[m]) for k, m in _CI_KEYS.items()} if c.get("ci95") else {},
    ).model_dump_json() for c in cells]
    write_atomic(out / OUTCOMES_FILE, "".join(x + "\n" for x in lines))


def freeze_decisions(out: Path, cells: list[tuple[Any, Any]], ctx: Any) -> dict[str, str]:
    """decisions.jsonl (policies/decision_ledger.py's chained ledger): BCIT's decision per cell from a fresh
    episode state, with the record and context, written once before any outcome; returns the hashes."""
    path, cfg, hashes = out / "decisions.jsonl", PolicyConfig(), {}
    fresh = not path.exists()
    for card, record in cells:
        d = decide(record, ctx, "bcit", EpisodeState(), cfg)
        hashes[card.id] = d.decision_hash
        if fresh:
            write_ledger_entry(path, episode_id="retrospective", decision=d, config=cfg, state=EpisodeState(),
                               record=record, context=ctx)
    return hashes


def seed_dir(out: Path, card_id: str, seed: int) -> Path:
    """Where one seed of one cell keeps its steps, runs, evaluations and cell.json."""
    return out / "cells" / card_id / f"s{seed}"


def cell_job(make_ports: Callable[[], CellPorts], card: Any, cell_dir: Path, parent_dir: str, seed: int,
             control: Any, parent: Any, controls_dir: Path, results: Path | None = None) -> dict[str, Any]:
    """One seed of one cell where the executor runs it (this process or a Ray worker), cached as
    cell.json in its seed directory and kept in `results` when given. Its ports are built there,
    from `make_ports`: models, caches and open files do not cross processes."""
    cell = _once(cell_dir / "cell.json", lambda: run_cell(make_ports(), card, cell_dir, parent_dir, seed,
                                                          control=control, parent=parent, controls_dir=controls_dir))
    if results is not None:
        retro_results.publish_seed(results, card.id, seed, cell)
    return cell


def cell_resources() -> Resources:
    """What one cell holds on a Ray worker: a run of the default run config (the retrospective
    takes no --config; the embedded world is a CPU world: its threads, no GPU)."""
    return task_resources(RunConfig())


def run_order(cards: Sequence[Any], first: Sequence[str] = ()) -> list[Any]:
    """The cells in the order their seeds run: those named in `first` in that order, then the rest
    in the catalogue's. The table and its classes do not depend on it; what a partial measurement
    holds does (v6 changed GRPO alone, so its GRPO cells are what to read first)."""
    ids = [c.id for c in cards]
    unknown = [f for f in first if f not in ids]
    if unknown or len(set(first)) != len(first):
        raise BadInput(f"--first {','.join(first)}: name each of this table's cells at most once "
                       f"({', '.join(unknown) or 'a repeat'} is not one of {', '.join(ids)})")
    rank = {cid: i for i, cid in enumerate(first)}
    return sorted(cards, key=lambda c: (rank.get(c.id, len(rank)), ids.index(c.id)))


def run_table(out: Path, cards: list[Any], make_ports: Callable[[], CellPorts], parent_dir: str,
              seeds: Sequence[int] | Mapping[str, Sequence[int]], features: dict[str, Any],
              decision_hashes: dict[str, str] | None = None, *,
              controls: dict[str, Any], parent: Any, executor: Executor | None = None,
              results: Path | None = None, say: Callable[[str], None] | None = None,
              first: Sequence[str] = ()) -> dict[str, Any]:
    """Every cell at every seed (finished steps are skipped) through the executor (default: one after
    another in this process), one job per (cell, seed); `seeds`: every cell's, or card id -> that
    cell's (the second stage, `_second_stage`); a cell with a failing seed is recorded as
    failed and the others go on. `make_ports`: builds a cell's CellPorts where it runs; `controls`:
    card id -> its matched control card; `parent`: the ModelRef of parent_dir; `results`: where
    each finished seed is also kept (retro_results); `say`: a progress line before the first job
    and one as each ends (default: on stderr); `first`: cell ids whose seeds run before the others
    (`run_order`)."""
    for mine in seeds.values() if isinstance(seeds, Mapping) else [seeds]:
        if not mine or len(set(mine)) != len(mine):
            raise BadInput(f"seeds {mine} must be one or more distinct integers: pass --seeds K >= 1")
    per_card = {c.id: list(seeds[c.id] if isinstance(seeds, Mapping) else seeds) for c in cards}
    pairs = [(c, s) for c in run_order(cards, first) for s in per_card[c.id]]
    jobs = [Job(cell_job, (make_ports, c, seed_dir(out, c.id, s), parent_dir, s, controls[c.id], parent,
                           out / "controls", results)) for c, s in pairs]
    finished = {i for i, (c, s) in enumerate(pairs) if (seed_dir(out, c.id, s) / "cell.json").is_file()}
    progress = Progress(str(out), "cell seeds", len(jobs), len(finished), say or say_on_stderr("retrospective"))
    progress.begin()

    def ended(i: int, o: Outcome) -> None:  # a seed finished before is counted in the plan, not again
        if i not in finished:
            progress.end(f"{pairs[i][0].id} seed {pairs[i][1]}", "done" if o.error is None else f"failed ({o.error[:120]})",
                         ran=True)

    outcomes = dict(zip([(c.id, s) for c, s in pairs], (executor or LocalExecutor()).run(jobs, ended)))
    done, failed = [], {}
    for c in cards:
        mine = [outcomes[(c.id, s)] for s in per_card[c.id]]
        errors = [o.error if len(mine) == 1 else f"seed {s}: {o.error}" for s, o in zip(per_card[c.id], mine)
                  if o.error is not None]
        if errors:
            failed[c.id] = "; ".join(errors)[:500]
            continue
        done.append(seeded_cell([o.value for o in mine]) | {"features": features[c.id].model_dump(mode="json"),
                                                             "pool_group": card_pool_group(c)})
    done = pool_classes(done)  # a cell's class reads its group's pooled spread: after every cell is in
    for cell in done:
        write_atomic(out / "cells" / cell["id"] / "cell.json",
                     canonical_json({k: v for k, v in cell.items() if k != "features"}))
    (out / "cells.jsonl").write_text("".join(canonical_json(c) + "\n" for c in done), encoding="utf-8")
    if decision_hashes:
        write_outcomes(out, done, decision_hashes)
    summary = (summarise_cells(done) | {"mix": mix(done), "precision": precision(done)}) if done else {}
    (out / "summary.json").write_text(json.dumps({"summary": summary, "failed": failed}, indent=1, sort_keys=True))
    return {"cells_done": len(done), "cells_failed": len(failed), "failed": failed, "summary": summary, "cells": done}


def retrospective(out: Path, *, size: str, world_seed: int = 0, n_cells: int | None = None, seed: int = 0,
                  seeds: int | None = None, extend_to: int | None = None,
                  make_ports: Callable[[], CellPorts] | None = None, world: Any = None,
                  executor: Executor | None = None, results: Path | None = None,
                  first: Sequence[str] = ()) -> dict[str, Any]:
    """Build (or resume) the table: freeze every cell's features, then run the cells through the
    executor (agent.experiments.executor; default: in this process, one after another). `world`:
    any agent.world.interface.WorldData (a local world, which then crosses to Ray workers pickled);
    None: the embedded world of `size`, which each worker builds its own ports for. Seeds `seed`..
    `seed + seeds - 1` train every cell (None: DEFAULT_SEEDS). `results`: a results directory
    (agent/experiments/retro_results.py) whose finished seeds are taken and which keeps every
    seed finished now. `first`: cell ids whose seeds run before the others (`run_order`).
    `extend_to`: a second stage after the first `seeds` (retro_mix.second_stage: the pool groups
    whose first-stage spread needs more seeds, at most this many, to decide a zero effect run them)."""
    seeds = DEFAULT_SEEDS if seeds is None else seeds
    if seeds < 1:
        raise BadInput(f"--seeds {seeds}: a cell needs at least one training seed; pass --seeds 1 or more")
    if extend_to is not None and (seeds < 2 or extend_to <= seeds):
        raise BadInput(f"--extend-to {extend_to} with --seeds {seeds}: a second stage reads the first stage's "
                       "between-seed spread and adds seeds to it; pass --seeds 2 or more and --extend-to above it")
    if n_cells is not None and n_cells < 1:  # [:0] would run nothing, [:-2] all but the last two
        raise BadInput(f"--cells {n_cells}: the table needs at least one cell; pass --cells 1 or more, "
                       "or leave it out for every cell")
    if results is not None:
        retro_results.writable_dir(results)  # before the world is built, not after hours of cells
    seed_list = list(range(seed, seed + seeds))
    for s in (seed_list[0], seed_list[-1]):
        check_seed(s)  # before the world is built: a cell's first run would refuse it
    make_ports = make_ports or (partial(WorldCellPorts, world) if world is not None
                                else partial(embedded_ports, size, world_seed))
    world = world if world is not None else ensure_world(size, world_seed=world_seed)
    cards = list(catalogue(world))[:n_cells]
    run_order(cards, first)  # a bad --first is refused before anything is written
    ledger = {
        "kind": "retrospective", "world": f"{world.size}-{world.recipe_sha256[:12]}", "world_seed": world.seed,
        "base_sha256": world.model.sha256, "seed": seed, "seeds": seed_list,
        "catalogue_sha256": catalogue_sha256(), "fractions": FRACTIONS, "min_effect_pp": MIN_EFFECT_PP,
        "ifeval_drop_pp": IFEVAL_DROP_PP, "eval_n": {split: eval_n(world.size, split) for split in ("validation", "adoption")},
        "control": "trained matched control (agent/world/controls.py) at the same fraction",
        "code": retro_results.code_version()} | ({"extend_to": extend_to} if extend_to is not None else {})
    retro_results.check_run_dir(out, ledger)
    if results is not None:
        taken = retro_results.take(results, out, ledger)
        print(f"took {taken} finished cell seeds from {results}", flush=True)
    features, hashes = frozen_or_compiled(out, world, cards)
    ledger["features_sha256"] = freeze_features(out, [(c.id, features[c.id]) for c in cards])
    (out / "ledger.json").write_text(json.dumps(ledger, indent=1))
    if results is not None:
        retro_results.publish_table(out, results)
    run = partial(run_table, out, cards, make_ports, world.base_dir, features=features, decision_hashes=hashes,
                  controls={c.id: control_card(c, world) for c in cards}, parent=world.model, executor=executor,
                  results=results, first=first)
    result = run(seed_list)
    if extend_to is not None:
        result = _second_stage(out, run, result, cards, seed, seeds, extend_to)

    write_summary(out)
    if results is not None:
        retro_results.publish_table(out, results)
    return result


def _second_stage(out: Path, run: Callable[..., dict[str, Any]], first: dict[str, Any], cards: list[Any], seed: int,
                  seeds: int, most: int) -> dict[str, Any]:
    """Stein's two-stage design: the first stage's table (every cell at `seeds`, recomputed from those
    seeds whatever a resumed run directory holds beyond them) decides which cells run more seeds,
    at most `most` (retro_mix.second_stage); the table is then written again over every seed, with
    the plan and the first stage's outcome mix in its summary."""
    plan = second_stage(first["cells"], most)
    result = run({c.id: list(range(seed, seed + plan.get(c.id, seeds))) for c in cards}) if plan else first
    path = out / "summary.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    stage = {"first_seeds": seeds, "most_seeds": most, "seeds": dict(sorted(plan.items())),
             "first_stage_mix": first["summary"].get("mix")}
    if doc["summary"]:  # an empty table (no cell done) has no summary to add the plan to
        doc["summary"] = doc["summary"] | {"second_stage": stage}
    write_atomic(path, json.dumps(doc, indent=1, sort_keys=True))
    return result


def frozen_or_compiled(out: Path, world: Any, cards: list[Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Every cell's outcome-blind features and BCIT decision hash: read from the table's frozen,
    verified files where they cover the cards (a resumed or taken table: no seed bank needed),
    else compiled from the world's seed bank and frozen now."""
    frozen = retro_results.frozen_inputs(out, [c.id for c in cards])
    if frozen is not None:
        return frozen
    with progress_lines("seed bank", lambda line: print(line, flush=True)) as progress:  # up to ~30 min on a new world
        records = {r.card.id: r for r in seed_records(world, progress, cards=[c.id for c in cards])}
    ctx = base_context(world)
    features = {c.id: compile_features(records[c.id], ctx) for c in cards}
    freeze_features(out, [(c.id, features[c.id]) for c in cards])
    return features, freeze_decisions(out, [(c, records[c.id]) for c in cards], ctx)
