"""The `agent` command line: a thin layer over library functions.

Each command group lives in its own `agent/cli/*.py` module with a `register(subparsers)`
function; every command returns an exit code. Heavy libraries (torch, transformers, TRL)
are imported inside the command functions so that `agent --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from experience_bank.errors import BadInput

COMMAND_MODULES = (
    "agent.cli.bank",      # bank init/import/export/list/show/verify/consolidate
    "agent.cli.decide",    # authorize, audit, replay
    "agent.cli.world",     # world build, world seed-bank
    "agent.cli.eval",      # eval
    "agent.cli.train",     # train
    "agent.cli.gate",      # gate, profile
    "agent.cli.run",       # run
    "agent.cli.measure",   # compare, retrospective
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent",
        description="Autonomous post-training control agent (BCIT authorizer, TRL runs, CapTrack gate).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


VALUE_FLAGS_THAT_TAKE_NEGATIVES = ("--episode-budget",)


def _join_negative_values(argv: list[str]) -> list[str]:
    """`--episode-budget -3h` -> `--episode-budget=-3h`.

    argparse reads a value that starts with '-' as the next option and prints its own
    two-line usage error; joined, the value reaches our parser, which names the problem.
    """
    out: list[str] = []
    for token in argv:
        if out and out[-1] in VALUE_FLAGS_THAT_TAKE_NEGATIVES and token.startswith("-"):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def _quiet_libraries() -> None:
    """Library progress bars (dataset maps, shard writes) would drown our own progress display
    and --quiet logs; our commands report progress themselves. A user's explicit setting wins."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # TRL 1.16 still reads `model.is_gradient_checkpointing`, which transformers 5.24 marks
    # deprecated: the warning is for TRL's maintainers and repeated once per training run.
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)


def main(argv: list[str] | None = None) -> int:
    _quiet_libraries()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(_join_negative_values(argv))
    try:
        return int(args.func(args))
    except BadInput as exc:
        print(f"agent: error: {exc}", file=sys.stderr)
        return 2


def entry() -> None:
    sys.exit(main())
