"""`agent world build` and `agent world seed-bank`: the embedded world and its library L(0).

Examples:
    agent world build --size test
    agent world seed-bank --size default --bank runs/bank.sqlite
    agent world seed-bank --config runs/smol-local.yaml     (a local world: your model and data)
"""

from __future__ import annotations

import json
import os
import sys
import time

from agent.config import build_config, check_threads
from agent.inputs import check_bank_file
from agent.progress import reporter
from agent.world.embedded import ensure_world
from agent.world.factory import seed_cards, world_for
from experience_bank.errors import BadInput

SIZES = ("test", "default", "smol")


def register(sub) -> None:
    """Add `agent world {build,seed-bank}`."""
    world = sub.add_parser("world", help="build the embedded world or its initial experience library")
    wsub = world.add_subparsers(dest="world_command", required=True, metavar="WORLD_COMMAND")

    build = wsub.add_parser("build", help="build (or load from the cache) the base model; e.g. `agent world build --size test`")
    build.add_argument("--size", choices=SIZES, default="default", help="world size (default: default)")
    build.add_argument("--world-seed", dest="world_seed", type=int, default=0,
                       help="world seed (default 0): the same recipe with another pretraining order, task pools, "
                            "split draws and source-context assignment")
    build.add_argument("--json", action="store_true", help="print the World manifest as JSON")
    build.add_argument("--threads", type=int, default=None,
                       help="torch threads afterwards; the build itself runs on its recipe's pinned count "
                            "(1), so the weights never depend on this")
    build.set_defaults(func=cmd_build)

    seed = wsub.add_parser("seed-bank", help="build L(0) from real source-context runs; "
                                             "e.g. `agent world seed-bank --size default --bank runs/bank.sqlite`")
    seed.add_argument("--size", choices=SIZES, default="default", help="world size (default: default)")
    seed.add_argument("--world-seed", dest="world_seed", type=int, default=None,
                      help="world seed (default 0, or the config's world_seed)")
    seed.add_argument("--config", default=None, help="run config whose world to seed (a local world: base_model "
                                                     "and data_* keys; its bank and seed_cards are the defaults)")
    seed.add_argument("--bank", default=None, help="bank file to import the records into (created if missing; "
                                                   "default: the config's bank)")
    seed.add_argument("--cards", default=None, help="comma-separated card ids (default: the whole catalogue)")
    seed.add_argument("--threads", type=int, default=None, help="torch threads (use 1 when other jobs share the CPU)")
    seed.add_argument("--no-cache", dest="no_cache", action="store_true",
                      help="train and evaluate every run even when the run cache holds it")
    seed.set_defaults(func=cmd_seed_bank)


def _progress(what: str):
    """A live bar on a terminal; redirected (a log, nohup), a line per tenth of each phase on stderr."""
    return reporter(what, False, lambda line: print(line, file=sys.stderr, flush=True))


def cmd_build(args) -> int:
    check_threads(args.threads)
    t0 = time.monotonic()
    with _progress(f"world {args.size}") as progress:
        world = ensure_world(args.size, world_seed=args.world_seed, progress=progress, threads=args.threads)
    if args.json:
        print(world.to_json())
    else:
        print(f"world {world.size}-{world.recipe_sha256[:12]} (world seed {world.seed}) at {world.base_dir} "
              f"(built in {world.build_seconds:.0f} s; this call {time.monotonic() - t0:.1f} s)")
        print(f"base weights sha256 {world.model.sha256}")
    return 0


def cmd_seed_bank(args) -> int:
    from agent.world.seed_bank import build_seed_bank  # noqa: PLC0415 (sqlite_utils)

    check_threads(args.threads)
    if args.no_cache:  # the run cache reads it (experience_bank.runcache.from_env)
        os.environ["AGENT_NO_CACHE"] = "1"
    cards = tuple(c.strip() for c in args.cards.split(",")) if args.cards else None
    t0 = time.monotonic()
    if args.config:  # the world the config names (embedded or local: agent.world.interface)
        cfg = build_config(args.config, {"world_seed": args.world_seed})
        args.bank, cards = args.bank or cfg.bank, cards or seed_cards(cfg)
        check_bank_file(args.bank)  # before the world is built, not after it
        with _progress("world") as progress:
            world = world_for(cfg, progress)
    else:
        if args.bank is None:
            raise BadInput("agent world seed-bank needs --bank BANK (or --config CFG naming one)")
        check_bank_file(args.bank)
        with _progress(f"world {args.size}") as progress:
            world = ensure_world(args.size, world_seed=args.world_seed or 0, progress=progress, threads=args.threads)
    with _progress("seed bank") as progress:
        version = build_seed_bank(world, args.bank, progress, cards=cards, threads=args.threads)
    print(json.dumps({"bank": args.bank, "library_version": version, "world": world.recipe_sha256,
                      "world_seed": world.seed,
                      "base_sha256": world.model.sha256, "seconds": round(time.monotonic() - t0, 1)}))
    return 0
