"""`agent compare`: paired episodes, one per (policy, seed), and their paired statistics.

Pairing: every policy runs the same seeds, each episode with its own bank file built from
the world's seed bank (so every episode starts from the same frozen library version and no
episode's consolidation leaks into another's), the same config and the same budget; only
`--policy` differs. The pairing is checked after the fact from each episode's frozen
manifest (`pairing` in compare.json) rather than assumed.

Three layers, so the statistics are testable without running a model:
- `digest(run_dir)` (agent/experiments/episodes.py) reads what an episode recorded (its
  manifest, its bank's events, verdicts and evaluations, through RunDir) as small JSON, and
  `episode_result(digest)` turns it into an EpisodeResult; with `--results DIR` the digests are
  kept in DIR and taken from it instead of running again (agent/experiments/compare_results.py);
- `summarise(episodes)` (agent/experiments/compare_stats.py) is pure aggregation (per policy,
  per pair of policies);
- `run_jobs(...)` runs the episodes as `agent run` subprocesses through an executor
  (agent/experiments/executor.py: threads of this machine, or Ray tasks on a cluster), each
  resumable and isolated (its own run directory, bank file and log; a failed job is recorded
  and reported, never retried silently, and it cannot touch another job's files).

What "endpoint" means here: the final parent's scores on the held-out *test* split, which
`agent run` evaluates once at the end of every episode (agent.loop.nodes.endpoint; no gate or
policy read it). The adoption-split figure, which the gate selected on and so is optimistic,
is kept beside it (`endpoint_adoption`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.authorize import NEEDS_GONOGO
from agent.experiments.compare_output import write_outputs
from agent.config import build_config
from agent.experiments import compare_results as CR
from agent.experiments.compare_stats import summarise, unpaired_with
from agent.experiments.episodes import digest, episode_result
from agent.experiments.executor import Executor, Job, LocalExecutor, Outcome, Progress, say_on_stderr
from agent.experiments.fitted import Fitted, fit_for_world, fitted_summary, kept
from agent.run.rundir import RunDir
from experience_bank.errors import BadInput
from trainers.ledger import parse_budget


# --- running the episodes ----------------------------------------------------------------------


def job_name(policy: str, seed: int) -> str:
    return f"{policy}-s{seed}"


def policy_of(name: str) -> str:
    """The policy of a job_name (its progress group: each policy has its own pace)."""
    return name.rsplit("-s", 1)[0]


def seed_of(name: str) -> int | None:
    """The run seed of a job_name (None: not one)."""
    tail = name.rsplit("-s", 1)[-1]
    return int(tail) if "-s" in name and tail.isdigit() else None


def episode_argv(out: Path, policy: str, seed: int, *, budget: str | None, config: str | None,
                 world_seed: int | None = None, extra: list[str] | None = None) -> list[str]:
    """`agent run` for one (policy, seed), with its own run directory and bank file (`world_seed`:
    the world the episode runs on; None: the config's; `extra`: more flags, the fitted models')."""
    name = job_name(policy, seed)
    run_dir = out / "episodes" / name
    argv = [sys.executable, "-m", "agent", "run", "--policy", policy, "--seed", str(seed), "--quiet",
            "--bank", str(out / "banks" / f"{name}.sqlite")]
    argv += ["--world-seed", str(world_seed)] if world_seed is not None else []
    argv += ["--episode-budget", budget] if budget else []
    argv += ["--config", config] if config else []
    argv += extra or []
    # A started episode (its manifest is frozen) is resumed; otherwise `agent run --out` starts it.
    argv += ["--resume", str(run_dir)] if RunDir(run_dir).started() else ["--out", str(run_dir)]
    return argv


def _tail(path: Path, n: int = 2000) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[-n:] if path.exists() else ""


def run_one(out: Path, policy: str, seed: int, argv: list[str], keep: CR.Keep | None = None) -> dict[str, Any]:
    """Run (or resume, or skip) one episode; its status is written to DIR/jobs/<name>.json and a
    finished one's digest is returned with it (and kept in `keep`'s results directory)."""
    name = job_name(policy, seed)
    run_dir, log = out / "episodes" / name, out / "logs" / f"{name}.log"
    status: dict[str, Any] = {"policy": policy, "seed": seed, "run_dir": str(run_dir), "argv": argv}
    if RunDir(run_dir).finished():
        return _digested(status | {"status": "done", "skipped": True}, keep)
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(argv)}\n")
        f.flush()
        rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    status |= {"rc": rc, "wall_s": round(time.monotonic() - start, 3), "skipped": False}
    if rc == 0 and RunDir(run_dir).finished():
        status["status"] = "done"
    else:
        status |= {"status": "failed", "error": f"exit {rc}; log {log}: {_tail(log, 400)}"}
    (out / "jobs").mkdir(parents=True, exist_ok=True)
    (out / "jobs" / f"{name}.json").write_text(json.dumps(status, indent=1), encoding="utf-8")
    return _digested(status, keep) if status["status"] == "done" else status


def _digested(status: dict[str, Any], keep: CR.Keep | None) -> dict[str, Any]:
    """A finished job's status with its episode's digest, kept in the results directory when there
    is one; an unreadable episode is reported, not skipped."""
    try:
        d = digest(Path(status["run_dir"]))
    except (OSError, KeyError, ValueError) as exc:
        return status | {"status": "unreadable", "error": f"{type(exc).__name__}: {exc}"}
    if keep is not None:
        CR.publish(keep, job_name(status["policy"], status["seed"]), d)
    return status | {"digest": d}


def paired_seeds(policies: list[str], seeds: list[int], taken: dict[str, Any]) -> list[int]:
    """The seeds whose every policy's episode is finished (`taken`: by job_name): the pairs a report
    over a measurement still under way can rest on."""
    return [s for s in seeds if all(job_name(p, s) in taken for p in policies)]


def run_jobs(out: Path, policies: list[str], seeds: list[int], executor: Executor,
             argv_for: Callable[[Path, str, int], list[str]], stored: CR.Stored | None = None,
             say: Callable[[str], None] | None = None, report_only: bool = False) -> list[dict[str, Any]]:
    """Every (policy, seed) episode through the executor (agent.experiments.executor), but those a
    results directory (`stored`) holds, which are taken from it; a job that raises is recorded as
    failed, the others go on. Each episode finished now is kept in the results directory. `say`
    gets a line before the first episode runs and one as each ends (progress_line).
    `report_only`: run nothing; the seeds every policy has finished in `stored` (paired_seeds)."""
    taken, say = (stored.taken if stored else {}), say or (lambda line: None)
    if report_only:
        seeds = paired_seeds(policies, seeds, taken)
        say(f"{out}: report only, over the paired seeds finished: {seeds or 'none'}")
    grid = [(p, s) for s in seeds for p in policies]
    todo = [(p, s) for p, s in grid if job_name(p, s) not in taken]
    progress = Progress(str(out), "episodes", len(grid), len(grid) - len(todo), say,
                        names=[job_name(p, s) for p, s in todo], group=policy_of)
    progress.begin()

    every = CR.stored_all(stored.results) if stored and todo else {}  # read only when an episode will end here
    by_seed = {s: {name: d for name, d in every.items() if seed_of(name) == s} for s in seeds}

    def ended(i: int, outcome: Outcome) -> None:  # called in this thread, one job at a time
        status = outcome.value if outcome.error is None else {"status": "failed"}
        wall = "" if status.get("skipped") or "wall_s" not in status else f" in {status['wall_s'] / 60:.1f} min"
        progress.end(job_name(*todo[i]), status.get("status", "failed") + wall, ran=not status.get("skipped"),
                     wall_s=status.get("wall_s"))
        if "digest" in status:  # said as soon as one episode shows its seed will not pair, not after the rest ran
            seed, name = todo[i][1], job_name(*todo[i])
            differ = unpaired_with(status["digest"], by_seed[seed])
            by_seed[seed][name] = status["digest"]
            if differ:
                say(_unpaired_line(out, name, differ))

    outcomes = executor.run([Job(run_one, (out, p, s, argv_for(out, p, s), stored.keep(job_name(p, s)) if stored else None))
                             for p, s in todo], ended)
    ran = {(p, s): o.value if o.error is None else {"policy": p, "seed": s, "status": "failed", "error": o.error}
           for (p, s), o in zip(todo, outcomes)}
    return [ran[(p, s)] if (p, s) in ran else
            {"policy": p, "seed": s, "status": "done", "digest": taken[job_name(p, s)],
             "taken_from": str(CR.episode_file(stored.results, job_name(p, s)))} for p, s in grid]


def _unpaired_line(out: Path, name: str, differ: dict[str, list[str]]) -> str:
    keys = sorted({k for ks in differ.values() for k in ks})
    return (f"{out}: {name} is not properly paired with {', '.join(differ)} ({', '.join(keys)} differ; "
            "candidates_sha256: seed banks built on machines that round differently), so that seed's tables "
            "will say MISMATCH: run a seed's episodes where their banks agree (remove its stored episodes from "
            "the results directory to run them here)")


def collect(statuses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """EpisodeResults of the jobs, the finished ones' from their digests (run here or taken from a
    results directory: the same code); an unreadable episode is reported, not skipped."""
    scores = _initial_adoption([st["digest"] for st in statuses if st["status"] == "done"])
    episodes = []
    for st in statuses:
        base = {"policy": st["policy"], "seed": st["seed"], "status": st["status"]}
        if st["status"] != "done":
            episodes.append(base | {"error": st.get("error", "")})
            continue
        d, where = st["digest"], {k: st[k] for k in ("run_dir", "taken_from") if k in st}
        try:
            episodes.append(base | where | episode_result(d, scores.get(d["initial_sha256"])))
        except (KeyError, TypeError, ValueError) as exc:
            episodes.append(base | {"status": "unreadable", "error": f"{type(exc).__name__}: {exc}"})
    return episodes


def _initial_adoption(digests: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The initial parents' adoption scores, by weights sha, from the episodes that recorded them: an
    episode that never scored its initial parent on adoption reads those of a paired episode on the
    same weights (where several recorded them, they must agree)."""
    scores: dict[str, dict[str, float]] = {}
    for d in digests:
        flat = d.get("adoption", {}).get(d.get("initial_sha256"))
        if flat and scores.setdefault(d["initial_sha256"], flat) != flat:
            raise ValueError(f"two episodes scored the initial parent {d['initial_sha256'][:12]} differently on "
                             "adoption: their evaluators or items differ, so they are not paired")
    return scores


def compare(out: Path, policies: list[str], seeds: list[int], *, budget: str | None = None, config: str | None = None,
            n_jobs: int = 1, argv_for: Callable[[Path, str, int], list[str]] | None = None,
            executor: Executor | None = None, world_seed: int | None = None, fit: Fit | None = None,
            results: Path | None = None, report_only: bool = False) -> dict[str, Any]:
    """Run (or resume) every paired episode, then summarise and write DIR/compare.{md,json} and figures.
    `executor`: where the episodes run (default: n_jobs at once in subprocesses of this machine);
    `world_seed`: the embedded world every episode runs on (None: the config's); `fit`: fit the
    learned models on other worlds' retrospectives first (agent/experiments/fitted.py); `results`:
    a results directory the finished episodes are taken from and kept in (compare_results.py);
    `report_only`: run nothing, report the seeds `results` holds for every policy."""
    start = time.monotonic()
    code = _code(results, report_only)
    plan = _plan(out, policies, seeds, budget=budget, config=config, argv_for=argv_for, world_seed=world_seed,
                 fit=fit, results=results, code=code, report_only=report_only)
    CR.claim_out([plan.out], code)
    return _compare(plan, policies, seeds, budget=budget, config=config, n_jobs=n_jobs,
                    executor=executor or LocalExecutor(n_jobs), start=start, report_only=report_only)[0]


def _report_meta(stored: list[CR.Stored], every: list[CR.Stored] | None = None) -> dict[str, Any]:
    """What a report adds to its tables' meta: that it ran nothing, the code its episodes ran, and how
    far each world's measurement is (episodes finished of those asked for; `every`: also the worlds
    left out of the tables, none of whose seeds has every policy yet, flagged False)."""
    shown = {id(s) for s in stored}
    return {"report_only": True, "measured_code": CR.one_code(stored),
            "finished": [[s.results.name, len(s.taken), len(s.matches), id(s) in shown] for s in every or stored]}


def _code(results: Path | None, report_only: bool) -> dict[str, Any] | None:
    """The code version stored episodes must have been measured at to be taken: this checkout's when
    episodes may run; none for a report, which takes the episodes at the code they were measured
    at (one version per report: compare_results.one_code)."""
    return CR.code_version() if results and not report_only else None


@dataclass(frozen=True)
class Fit:
    """`agent compare --fit-from`: fit each world's models on the other worlds' sources."""

    sources: tuple[Path, ...]
    """Executed retrospective (or results) directories, any world seeds."""
    config_world_seed: int
    """The world a comparison without --world-seeds runs on (the config's)."""
    alpha: float = 0.1
    delta: float = 0.1


@dataclass(frozen=True)
class _Plan:
    """One world's comparison, ready to run: nothing has run yet."""

    out: Path
    world_seed: int | None
    argv_for: Callable[[Path, str, int], list[str]]
    stored: CR.Stored | None
    """Its results directory, with the episodes taken from it (None: no --results)."""


def _plan(out: Path, policies: list[str], seeds: list[int], *, budget: str | None, config: str | None,
          argv_for: Callable[[Path, str, int], list[str]] | None, world_seed: int | None, fit: Fit | None,
          results: Path | None, code: dict[str, Any] | None, report_only: bool = False) -> _Plan:
    """Fit the world's models (when asked; those kept in `results` are taken first), then take from
    `results` the episodes it holds: BadInput, before any episode runs, when one was measured in
    other conditions. The caller then stamps `out` with the code (compare_results.claim_out)."""
    if results is not None and fit is not None:
        CR.take_models(results, out)
    fitted = _models(out, results if report_only else None, world_seed, fit,
                     gonogo=any(p in NEEDS_GONOGO for p in policies))
    argv_for = argv_for or (lambda o, p, s: episode_argv(o, p, s, budget=budget, config=config, world_seed=world_seed,
                                                         extra=fitted.flags(p) if fitted else None))
    return _Plan(out, world_seed, argv_for, None if results is None else CR.stored(
        results, _matches(policies, seeds, budget=budget, config=config, world_seed=world_seed, fitted=fitted, code=code)))


def _models_dir(plan: _Plan, report_only: bool) -> Path:
    """Where a world's fitted models are: its results directory for a report (which reads them there and
    copies nothing into --out), else its --out."""
    return plan.stored.results if report_only and plan.stored is not None else plan.out


def _models(out: Path, report: Path | None, world_seed: int | None, fit: Fit | None, *, gonogo: bool) -> Fitted | None:
    """The models a world's episodes run with: fitted on the other worlds' sources (`fit`), or, for a
    report, those its results directory `report` keeps (the ones its episodes ran with, read where
    they are: a report needs no --fit-from and copies nothing); None: none."""
    if fit is not None:
        return fit_for_world(out, fit.config_world_seed if world_seed is None else world_seed, list(fit.sources),
                             gonogo=gonogo, alpha=fit.alpha, delta=fit.delta)
    return kept(report, gonogo=gonogo) if report is not None else None


def _matches(policies: list[str], seeds: list[int], *, budget: str | None, config: str | None, world_seed: int | None,
             fitted: Fitted | None, code: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Every job's match fields known before it runs (compare_results.KNOWN, and WORLD where built here)."""
    cfg = build_config(config)
    shared = CR.conditions(cfg, cfg.world_seed if world_seed is None else world_seed,
                           parse_budget(budget or cfg.episode_budget), code)
    return {job_name(p, s): shared | {"policy": p, "seed": s, "models": fitted.sha256s(p) if fitted else {}}
            for s in seeds for p in policies}


def _compare(plan: _Plan, policies: list[str], seeds: list[int], *, budget: str | None, config: str | None,
             n_jobs: int, executor: Executor, start: float,
             report_only: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    if report_only and plan.stored is None:
        raise BadInput("a report only reads a results directory: pass --results DIR")
    if plan.stored and not report_only:  # the models every episode kept from now on ran with (none without --fit-from)
        CR.publish_models(plan.out, plan.stored.results)
    statuses = run_jobs(plan.out, policies, seeds, executor, plan.argv_for, plan.stored, say=say_on_stderr("compare"),
                        report_only=report_only)
    if not statuses:
        raise BadInput(f"{plan.stored.results if plan.stored else plan.out}: no seed has all {len(policies)} policies "
                       "finished yet, so there is no pair to report: run the comparison without --report first")
    seeds = sorted({st["seed"] for st in statuses})
    episodes = [e | {"world_seed": plan.world_seed or 0} for e in collect(statuses)]
    summary = summarise(episodes)
    meta = {"policies": policies, "seeds": seeds, "budget": budget, "config": config, "jobs": n_jobs,
            "executor": executor.name, "wall_s": time.monotonic() - start, "world_seed": plan.world_seed,
            "fitted": fitted_summary(_models_dir(plan, report_only))} | (
                _report_meta([plan.stored]) if report_only else {})
    write_outputs(plan.out, summary, episodes, meta)
    if plan.stored:
        CR.publish_table(plan.out, plan.stored.results)
    return summary, episodes


def _pairs_so_far(policies: list[str], seeds: list[int], world_seeds: list[int],
                  plans: list[_Plan]) -> dict[str, Any]:
    """Each pair of policies over every (world seed, run seed) both have finished in the results
    directories, every world's included: while a measurement is under way, the pairs the cheap
    policies have already run, which the tables over the seeds every policy finished leave out.
    The same statistics (summarise), only over more units; read nothing else from it. `pairs`: over
    every such unit; `strict`: over those where the pair's manifest values agree; `mismatches`: per
    unit, the values that differ (pairing_check)."""
    pooled = []
    for ws, plan in zip(world_seeds, plans):
        taken = plan.stored.taken if plan.stored is not None else {}
        done = [{"policy": p, "seed": s, "status": "done", "digest": taken[job_name(p, s)]}
                for s in seeds for p in policies if job_name(p, s) in taken]
        pooled += [e | {"world_seed": ws, "unit": pooled_unit(ws, e["seed"])} for e in collect(done)]
    if not pooled:
        return {}
    every = summarise(pooled)
    return {"pairs": every["pairs"], "strict": summarise(pooled, strict=True)["pairs"],
            "mismatches": every["pairing"]["mismatches"]}


def pooled_unit(world_seed: int, seed: int) -> str:
    """The pairing unit of an episode when worlds are pooled: (world seed, run seed)."""
    return f"w{world_seed}-s{seed}"


def world_dir(out: Path, world_seed: int) -> Path:
    """Where `compare_worlds` keeps one world's comparison (a whole `agent compare` output; the same
    under a results directory)."""
    return out / f"world-{world_seed}"


def compare_worlds(out: Path, policies: list[str], seeds: list[int], world_seeds: list[int], *,
                   budget: str | None = None, config: str | None = None, n_jobs: int = 1,
                   executor: Executor | None = None,
                   argv_for: Callable[[Path, str, int, int], list[str]] | None = None,
                   fit: Fit | None = None, results: Path | None = None, report_only: bool = False) -> dict[str, Any]:
    """The paired comparison on each world (DIR/world-<N>/, each resumable as one `agent compare`),
    then pooled: a pair is (world seed, run seed), so every policy is compared on the same worlds
    and seeds. DIR/compare.{md,json} hold the pooled statistics and, under `per_world`, each
    world's own. `argv_for(out, policy, seed, world_seed)`: the episode command (default: `agent run`);
    `fit`: each world's learned models fitted on the other worlds' sources (leave-one-world-out);
    `results`: a results directory (each world's under world-<N>/), every world's checked before any runs;
    `report_only`: run nothing, each world's report over the seeds its results hold for every policy,
    and the pooled report's `pairs_so_far` over every seed each pair of policies has (_pairs_so_far)."""
    start = time.monotonic()
    executor = executor or LocalExecutor(n_jobs)  # one for every world
    code = _code(results, report_only)
    plans = [_plan(world_dir(out, ws), policies, seeds, budget=budget, config=config,
                   argv_for=None if argv_for is None else (lambda o, p, s, ws=ws: argv_for(o, p, s, ws)),
                   world_seed=ws, fit=fit, results=None if results is None else world_dir(results, ws), code=code,
                   report_only=report_only)
             for ws in world_seeds]
    CR.claim_out([plan.out for plan in plans], code)
    so_far = None
    if report_only:  # the worlds with at least one seed every policy has finished
        every = [plan.stored for plan in plans if plan.stored is not None]
        CR.one_code(every)  # one code for every episode the report reads, the pairs so far's too
        so_far = _pairs_so_far(policies, seeds, world_seeds, plans)
        kept = [(ws, plan) for ws, plan in zip(world_seeds, plans)
                if plan.stored is not None and paired_seeds(policies, seeds, plan.stored.taken)]
        if not kept:
            raise BadInput(f"{results}: no world has a seed with all {len(policies)} policies finished yet, so there is "
                           "no pair to report: run the comparison without --report first")
        world_seeds, plans = [ws for ws, _ in kept], [plan for _, plan in kept]
    per_world, pooled = {}, []
    for ws, plan in zip(world_seeds, plans):
        summary, episodes = _compare(plan, policies, seeds, budget=budget, config=config, n_jobs=n_jobs,
                                     executor=executor, start=time.monotonic(), report_only=report_only)
        per_world[str(ws)] = summary
        pooled += [e | {"unit": pooled_unit(ws, e["seed"])} for e in episodes]
    summary = summarise(pooled) | {"per_world": per_world} | ({"pairs_so_far": so_far} if so_far else {})
    seeds = sorted({e["seed"] for e in pooled}) if report_only else seeds
    meta = {"policies": policies, "seeds": seeds, "world_seeds": world_seeds, "budget": budget, "config": config,
            "jobs": n_jobs, "executor": executor.name, "wall_s": time.monotonic() - start,
            "fitted": {str(ws): fitted_summary(_models_dir(plan, report_only)) for ws, plan in zip(world_seeds, plans)}} | (
                _report_meta([plan.stored for plan in plans], every) if report_only else {})
    write_outputs(out, summary, pooled, meta)
    if results:
        CR.publish_table(out, results)
    return summary
