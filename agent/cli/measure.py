"""`agent compare`, `agent retrospective` and `agent extrapolate`: measuring the decision layer on the embedded world."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.files import write_atomic
from agent.config import build_config
from agent.experiments.executor import session, task_resources
from agent.experiments.fitted import gonogo_inputs, gonogo_rule, held_out_sources
from agent.inputs import check_out_dir, check_out_file
from agent.world.embedded import check_world_seed
from agent.world.factory import check_cached_world
from policies import POLICIES
from policies.authorize import NEEDS_GONOGO

DEFAULT_POLICIES = "bcit,flat_additive,additive_veto,validate_all,no_memory"
"""The five of the published comparison (docs/results/compare-default.md)."""


def _register_compare(sub) -> None:
    p = sub.add_parser("compare", help="paired episodes per (policy, seed) and their paired statistics",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  agent compare --policies bcit,flat_additive --seeds 2 "
                              "--episode-budget 4gpuh --config runs/test.yaml --out runs/compare-test --jobs 2\n"
                              "  agent compare --executor ray --address ray://head:10001 --config runs/qwen3-4b.yaml "
                              "--seeds 6 --out /shared/runs/compare")
    p.add_argument("--policies", default=DEFAULT_POLICIES, help=f"comma-separated (default {DEFAULT_POLICIES})")
    p.add_argument("--seeds", default="6", help="N: seeds 0..N-1 (default 6); A-B or A,B,C: those seeds only, e.g. "
                   "3-5 to run a measurement's later seeds on another machine")
    p.add_argument("--world-seeds", dest="world_seeds", default=None,
                   help="comma-separated world seeds, e.g. 0,1,2: the comparison on each world (DIR/world-N/) "
                        "and pooled over (world seed, seed) pairs (default: the config's world only)")
    p.add_argument("--episode-budget", default=None, help="budget of every episode (default: the config's)")
    p.add_argument("--config", default=None, help="run config YAML shared by every episode")
    p.add_argument("--out", default="runs/compare", help="output directory (default runs/compare)")
    p.add_argument("--jobs", type=int, default=1,
                   help="episodes at once on this machine (default 1; with --address the cluster's nodes bound them)")
    p.add_argument("--fit-from", dest="fit_from", nargs="+", default=None, metavar="RETRO_DIR",
                   help="executed retrospective (or `agent retrospective --results`) directories of several world seeds: each world's "
                        "go/no-go (bcit_predictive) and trial extrapolation (every policy) are fitted on the other "
                        "worlds' only, written to its comparison directory and passed to its episodes")
    p.add_argument("--gonogo-alpha", dest="gonogo_alpha", type=float, default=0.1,
                   help="with --fit-from: harmful among authorized the go/no-go bounds (default 0.1)")
    p.add_argument("--results", default=None, metavar="DIR",
                   help="a small results directory (one JSON digest per finished episode, the tables; no runs; with "
                        "--world-seeds, DIR/world-N/) that survives this machine: episodes found there are not run "
                        "again when measured with the same config, budget, models, world and code, and every "
                        "episode finished now is kept there (commit it to resume elsewhere)")
    p.add_argument("--report", action="store_true",
                   help="with --results: run nothing; write the tables over the seeds every policy has finished "
                        "there (a measurement still under way, per world and pooled)")
    _execution_flags(p)
    p.set_defaults(func=cmd_compare)


def _ids(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def register(sub) -> None:
    """Add this module's subcommands to the `agent` parser."""
    _register_gonogo(sub)
    _register_compare(sub)

    r = sub.add_parser("retrospective", help="the world's Retrospective-24 / ShortFull-24 with real runs",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  agent retrospective --execute --size test --cells 2 --out runs/retro-test")
    r.add_argument("--execute", action="store_true", help="run the training cells (required: this trains models)")
    r.add_argument("--size", choices=("test", "default"), default="default", help="world size")
    r.add_argument("--out", default="runs/retrospective", help="output directory (an audit ledger)")
    r.add_argument("--cells", type=int, default=None, help="only the first N catalogue candidates")
    r.add_argument("--first", type=_ids, default=(), metavar="IDS",
                   help="comma-separated cell ids whose seeds run before the others' (e.g. G01,G05): what a "
                        "measurement stopped part-way holds; the table does not depend on it")
    r.add_argument("--seed", type=int, default=0, help="first training seed (default 0)")
    r.add_argument("--seeds", type=int, default=None,
                   help="training seeds per cell, from --seed on (default 3; 1: one run per cell, as before)")
    r.add_argument("--extend-to", dest="extend_to", type=int, default=None, metavar="N",
                   help="a second stage (Stein's two-stage design): after --seeds, the cells of every pool group "
                        "whose spread needs more seeds, at most N, to decide a zero effect run them (default: none)")
    r.add_argument("--world-seed", dest="world_seed", type=int, default=0,
                   help="seed of the embedded world (default 0; agent world build --world-seed)")
    r.add_argument("--results", default=None, metavar="DIR",
                   help="a small results directory (ledger, frozen features and decisions, one cell.json per cell "
                        "and seed; no runs) that survives this machine: finished seeds found there are not run "
                        "again when it was measured on the same world, catalogue and code, and every seed "
                        "finished now is kept there (commit it to resume elsewhere)")
    _execution_flags(r)
    r.set_defaults(func=cmd_retrospective)

    x = sub.add_parser("extrapolate", help="forgetting extrapolated to full length, measured on held-out cells",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  agent extrapolate --retrospective docs/results/retrospective-default.json "
                              "--out runs/extrapolation.md\n  agent extrapolate --retrospective runs/retro-w0 "
                              "--retrospective runs/retro-w1 --out runs/extrapolation.md")
    x.add_argument("--retrospective", action="append", required=True, metavar="DIR_OR_JSON",
                   help="an executed retrospective directory or its published JSON; repeat for several worlds")
    x.add_argument("--out", default="runs/extrapolation.md", help="Markdown report; its JSON beside it")
    x.add_argument("--min-runs", dest="min_runs", type=int, default=None,
                   help="fewest runs a (method, adapter) group is fitted on (default policies.extrapolate.MIN_RUNS)")
    x.add_argument("--model", choices=("auto", "none", "offset", "power"), default="auto",
                   help="growth model: auto (per group, the smallest held-out mean absolute error; default), none "
                        "(the raw reading), offset or power")
    x.add_argument("--save", default=None, metavar="JSON",
                   help="also write the fit on every run to this file: `agent run --extrapolation-model JSON` "
                        "applies it to the trial's retention check")
    x.set_defaults(func=cmd_extrapolate)


# --- agent gonogo: the learned go/no-go of Validate, measured held out (issue 27) ----------------


def _register_gonogo(sub) -> None:
    g = sub.add_parser("gonogo", help="the learned go/no-go's held-out accuracy beside the loop's other Validate rules",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  agent gonogo docs/results/retrospective-default.json --alpha 0.1\n"
                              "  agent gonogo runs/retro-w0 runs/retro-w1 runs/retro-w2 --json")
    g.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="an executed retrospective directory (one per world) or a retrospective JSON with `cells`")
    g.add_argument("--alpha", type=float, default=0.1, help="harmful among authorized to bound (default 0.1)")
    g.add_argument("--delta", type=float, default=0.1, help="the bound holds with probability 1 - delta (default 0.1)")
    g.add_argument("--json", action="store_true", help="print the whole evaluation as JSON (default: Markdown tables)")
    g.add_argument("--model", default=None, help="also write the go/no-go fitted on every run to this JSON file")
    g.set_defaults(func=cmd_gonogo)


def _model_summary(model) -> str:
    """What a fitted go/no-go will do in bcit_predictive: its thresholds and floor, or that it defers."""
    from policies import gonogo  # noqa: PLC0415 (scikit-learn)

    if gonogo.defers(model):
        own = (f"certifies no threshold on P(harmful) (none passed on {model.threshold.n_calibration} cross-fitted "
               "runs): bcit_predictive acts on each trial's own verdict, as bcit does")
    else:
        check = model.floor_check
        own = (f"threshold {model.threshold.threshold} on P(harmful) ({model.threshold.authorized} of "
               f"{model.n_train} cross-fitted runs authorized"
               + (f"; with the floor {model.beneficial_floor} on P(beneficial), {check.authorized}, {check.harmful} "
                  "of them harmful" if check is not None else "") + ")")
    prior = model.prior.threshold.threshold
    return (f"{own}; prior-only threshold {prior} ({model.prior.threshold.authorized} authorized: "
            f"{'bcit_predictive may skip trials' if prior is not None else 'it never skips a trial'}).")


def cmd_gonogo(args) -> int:
    from policies import gonogo, ltt  # noqa: PLC0415 (scikit-learn)
    from policies.gonogo_eval import evaluate, markdown  # noqa: PLC0415 (scikit-learn)
    from agent.experiments.gonogo_baselines import TRIAL, baselines  # noqa: PLC0415 (torch, through the trial's verdict)

    ltt.check_levels(args.alpha, args.delta)
    if args.model:  # before the evaluation's minute, not after it
        check_out_file(args.model, "--model", new_folders=True)
    runs, records = gonogo_inputs([Path(s) for s in args.sources])
    rule = gonogo_rule(args.alpha, args.delta)
    plain, per_fold = baselines(runs, records)
    result = evaluate(runs, records, baselines=plain, fold_baselines=per_fold, deferral=TRIAL, **rule)
    model = gonogo.fit(runs, records, **rule) if args.model else None
    if model is not None:
        write_atomic(Path(args.model), gonogo.dumps(model))
    if args.json:
        print(result.model_dump_json(indent=1))
    else:
        print(markdown(result), end="")
        if model is not None:  # the thresholds the written model freezes, fitted on every run
            print(f"\n{args.model}: {_model_summary(model)}")
    return 0


def _execution_flags(p) -> None:
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: on this machine (default); ray: one Ray task per job (agent/experiments/executor.py)")
    p.add_argument("--address", default=None,
                   help="a running Ray cluster (ray://HEAD:10001, HEAD:6379 or auto); default: a new local instance")
    p.add_argument("--no-cache", dest="no_cache", action="store_true",
                   help="run every training and evaluation again: AGENT_NO_CACHE=1 for everything this starts")


def _no_cache(args) -> None:
    if args.no_cache:  # subprocesses inherit it; Ray tasks get it in their runtime_env (executor.task_env)
        os.environ["AGENT_NO_CACHE"] = "1"


def _policies(text: str) -> list[str]:
    """--policies: at least two known policies, each once (a policy named twice would run its
    episodes twice and be paired against itself)."""
    policies = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or len(policies) < 2:
        raise BadInput(f"--policies needs at least two of {', '.join(POLICIES)}; unknown: {unknown or 'none'}")
    twice = sorted({p for p in policies if policies.count(p) > 1})
    if twice:
        raise BadInput(f"--policies names {', '.join(twice)} more than once: name each policy once")
    return policies


def cmd_compare(args) -> int:
    from agent.experiments.compare import compare, compare_worlds  # noqa: PLC0415

    policies = _policies(args.policies)
    check_out_dir(args.out)  # before any episode: each would fail on it, and the tables after them
    if args.results and not args.report:
        check_out_dir(args.results, "--results")
    seeds = run_seeds(args.seeds)
    if args.jobs < 1:
        raise BadInput("--jobs must be at least 1")
    if args.config and not Path(args.config).is_file():
        raise BadInput(f"config file {args.config} not found: pass an existing --config path")
    if args.episode_budget:
        from trainers.ledger import parse_budget  # noqa: PLC0415
        parse_budget(args.episode_budget)  # BadInput before any episode starts

    if args.report and not args.results:
        raise BadInput("--report reads the finished episodes of a results directory: pass --results DIR")
    if args.report and not Path(args.results).is_dir():
        raise BadInput(f"--results {args.results} is no directory, so there are no finished episodes to report: "
                       "pass the --results DIR a comparison wrote")
    cfg = build_config(args.config)
    from agent.run import extrapolation_model  # noqa: PLC0415 (scipy)
    from agent.run.gonogo_model import LIBRARY, read_model  # noqa: PLC0415 (scikit-learn)
    if cfg.gonogo_model == LIBRARY and NEEDS_GONOGO & set(policies):
        raise BadInput(f"agent compare gives every episode a fresh bank, so --gonogo-model {LIBRARY} has no refit "
                       "to read there: pass a fitted model file (agent gonogo SOURCES --model OUT.json)")
    # bcit_predictive's go/no-go: --fit-from fits one; a report reads those its results directory keeps
    for policy in policies if not (args.fit_from or args.report) else ():
        read_model(cfg.model_copy(update={"policy": policy}))
    extrapolation_model.read_model(cfg)  # and the trials' extrapolation, where the config names one
    world_seeds = _world_seeds(args.world_seeds)
    for ws in world_seeds or [cfg.world_seed]:
        check_cached_world(cfg.model_copy(update={"world_seed": ws}))
    resources = task_resources(cfg)  # what one episode holds on a Ray worker
    _no_cache(args)
    fit = _fit(args, cfg, world_seeds)
    results = Path(args.results) if args.results else None
    with session(args.executor, address=args.address, jobs=args.jobs, resources=resources) as executor:
        if world_seeds:
            summary = compare_worlds(Path(args.out), policies, seeds, world_seeds,
                                     budget=args.episode_budget, config=args.config, n_jobs=args.jobs,
                                     executor=executor, fit=fit, results=results, report_only=args.report)
        else:
            summary = compare(Path(args.out), policies, seeds, budget=args.episode_budget,
                              config=args.config, n_jobs=args.jobs, executor=executor, fit=fit, results=results,
                              report_only=args.report)
    print(f"wrote {args.out}/compare.md, compare.json, endpoint.png, trajectories.png"
          + (f"; the episodes' digests and the tables in {args.results}" if args.results else ""))
    from agent.views.tracking import log_comparison  # noqa: PLC0415 (MLflow: the parent run of the episodes' runs)

    log_comparison(Path(args.out))
    for name, s in summary["policies"].items():
        print(f"  {name:16s} n={s['n']} endpoint={s['endpoint_mean']}")
    if summary["failed"]:
        print(f"  {len(summary['failed'])} episode(s) failed: see compare.md")
        return 1
    return 0


def _fit(args, cfg, world_seeds: list[int] | None):
    """--fit-from as a compare.Fit (None without it); BadInput before any episode starts where a world
    would be left with nothing to fit on, or a source is not a retrospective directory."""
    from agent.experiments.compare import Fit  # noqa: PLC0415
    from policies.ltt import check_levels  # noqa: PLC0415

    if not args.fit_from:
        return None
    check_levels(args.gonogo_alpha, 0.1)
    sources = tuple(Path(s) for s in args.fit_from)
    for ws in world_seeds or [cfg.world_seed]:
        held_out_sources(list(sources), ws)
    return Fit(sources, cfg.world_seed, alpha=args.gonogo_alpha)


def run_seeds(text: str) -> list[int]:
    """The --seeds of `agent compare`: N (seeds 0..N-1), A-B or A,B,C; BadInput on anything else, and on more
    than 20 seeds (the sign-flip test enumerates 2^n)."""
    hint = "e.g. --seeds 6 (seeds 0..5), --seeds 3-5 or --seeds 0,2,4"
    try:
        if text.strip().isdigit():
            seeds = list(range(int(text)))
        elif "-" in text and "," not in text:
            lo, hi = (int(x) for x in text.split("-"))
            seeds = list(range(lo, hi + 1))
        else:
            seeds = [int(x) for x in text.split(",")]
    except ValueError:
        raise BadInput(f"--seeds {text!r} is not a count, a range or a list of seeds: {hint}") from None
    if not 1 <= len(seeds) <= 20 or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise BadInput(f"--seeds {text!r} must name 1..20 distinct seeds, none negative (the sign-flip test "
                       f"enumerates 2^n): {hint}")
    return seeds


def _world_seeds(text: str | None) -> list[int] | None:
    """The --world-seeds list (None: not given); BadInput on anything but distinct world seeds."""
    if text is None:
        return None
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInput(f"--world-seeds {text!r} is not a comma-separated list of integers: e.g. --world-seeds 0,1,2") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise BadInput(f"--world-seeds {text!r} needs distinct world seeds: e.g. --world-seeds 0,1,2")
    for s in seeds:
        check_world_seed(s)
    return seeds


def cmd_retrospective(args) -> int:
    if not args.execute:
        raise BadInput("agent retrospective trains models: pass --execute to run it (see --help)")
    from agent.experiments.retrospective import cell_resources, retrospective  # noqa: PLC0415

    check_out_dir(args.out)  # before the world is built
    _no_cache(args)
    with session(args.executor, address=args.address, resources=cell_resources()) as executor:
        result = retrospective(Path(args.out), size=args.size, world_seed=args.world_seed, n_cells=args.cells,
                               seed=args.seed, seeds=args.seeds, extend_to=args.extend_to, executor=executor,
                               results=Path(args.results) if args.results else None, first=args.first)
    print(f"wrote {args.out}: {result['cells_done']} cells done, {result['cells_failed']} failed")
    return 0 if result["cells_failed"] == 0 else 1


def cmd_extrapolate(args) -> int:
    from agent.experiments.extrapolation import measure, write  # noqa: PLC0415
    from policies.extrapolate import MIN_RUNS  # noqa: PLC0415

    if Path(args.out).suffix != ".md":
        raise BadInput(f"--out {args.out}: the report is Markdown (its JSON goes beside it); pass a path ending in .md")
    if args.save and Path(args.save).suffix != ".json":
        raise BadInput(f"--save {args.save}: the model is JSON; pass a path ending in .json")
    for flag, path in (("--out", args.out), ("--save", args.save)):
        if path:  # both before the fit: a --save refused after it left the report written
            check_out_file(path, flag, new_folders=True)
    fitted, reports = measure(args.retrospective, min_runs=MIN_RUNS if args.min_runs is None else args.min_runs,
                              choice=args.model)
    command = "agent extrapolate " + " ".join(f"--retrospective {shlex.quote(s)}" for s in args.retrospective)
    command += f" --out {shlex.quote(args.out)}" + (f" --min-runs {args.min_runs}" if args.min_runs else "")
    command += f" --model {args.model}" if args.model != "auto" else ""
    path = write(Path(args.out), args.retrospective, fitted, reports, command)
    print(f"wrote {args.out} and {path}")
    if args.save:
        from policies.extrapolate import dumps  # noqa: PLC0415
        write_atomic(Path(args.save), dumps(fitted))
        print(f"wrote the extrapolation model {args.save} ({fitted.footing} footing"
              + (f": {fitted.footing_note})" if fitted.footing_note else ")"))
    for rep in reports:
        for metric, by in rep.errors.items():
            s, o = by["all"], rep.open_errors.get(metric, {}).get("all")
            print(f"  held out by {rep.holdout}, {metric}: |raw - full| {s.raw_mean_pp:.2f} pp, "
                  f"|extrapolated - full| {s.extrapolated_mean_pp:.2f} pp (n={s.n})"
                  + (f"; where the reading keeps within the guard {o.raw_mean_pp:.2f} / {o.extrapolated_mean_pp:.2f} "
                     f"pp (n={o.n})" if o else ""))
    return 0
