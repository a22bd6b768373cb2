"""The `agent` command line: a thin layer over library functions.

Each command group lives in its own `agent/cli/*.py` module with a `register(subparsers)`
function; every command returns an exit code. Heavy libraries (torch, transformers, TRL)
are imported inside the command functions so that `agent --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sqlite3
import sys
import warnings

from experience_bank.errors import BadInput, path_fault, write_fault
from importlib.metadata import version

COMMAND_MODULES = (
    "agent.cli.bank",      # bank init/import/export/list/show/verify/consolidate
    "agent.cli.decide",    # authorize, audit, replay
    "agent.cli.world",     # world build, world seed-bank
    "agent.cli.eval",      # eval
    "agent.cli.train",     # train
    "agent.cli.gate",      # gate, profile
    "agent.cli.run",       # run
    "agent.cli.measure",   # compare, retrospective, extrapolate, gonogo
    "agent.cli.runs",      # runs ls
    "agent.cli.cache",     # cache ls, cache gc
    "agent.cli.cards",     # cards import
    "agent.cli.approve",   # approve
)

# The example shown by `--help` of a command whose module gives none of its own (every
# command shows at least one; tests/test_runs_cli.py checks all of them).
EXAMPLES = {
    "authorize": "agent authorize --bank runs/bank.sqlite --context context.json --json",
    "audit": "agent audit runs/ep-20261130-021003 --json",
    "replay": "agent replay retrospective-24 --json",
    "eval": "agent eval --model ~/.cache/posttrain-agent/worlds/test-<hash12>/base --suite sql/target --split validation --json",
    "world build": "agent world build --size test",
    "world seed-bank": "agent world seed-bank --size test --bank runs/bank-test.sqlite",
}


class Parser(argparse.ArgumentParser):
    """argparse, but a flag it refuses is one line like every other bad input (argparse prints the
    usage block first); the command's --help has the usage. Subcommands' parsers are of this class
    too (argparse makes them with the parent's type)."""

    def error(self, message: str):  # noqa: ANN201 (argparse's signature: it never returns)
        command = self.prog.removeprefix("agent").strip()
        self.exit(2, f"agent: error: {command + ': ' if command else ''}{message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="agent",
        description="Autonomous post-training control agent (BCIT authorizer, TRL runs, CapTrack gate).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    for path, command in commands(parser):
        if "example" not in command.format_help().lower():
            command.epilog = f"example:\n  {EXAMPLES[' '.join(path)]}"
            command.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def _version() -> str:
    return version("posttrain-agent")


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser) of every leaf command: ("bank", "init"), ("run",), ..."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001 (argparse has no public walk)
    if not subs:
        yield path, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from commands(child, path + (name,))


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
        return getattr(exc, "exit_code", 2)  # a WriteFault after decisions: 1 (resumable)
    except (OSError, sqlite3.Error) as exc:  # a refused write or a misshapen path no command translated: one line
        fault = write_fault(exc) or path_fault(exc)
        if fault is None:
            raise
        print(f"agent: error: {fault}", file=sys.stderr)
        return getattr(fault, "exit_code", 2)


def entry() -> None:
    try:
        try:
            code = main()
        except SystemExit as stop:  # argparse's --help, --version and usage errors: flushed below too
            code = stop.code
        sys.stdout.flush()  # a reader gone early fails here, inside the handler, not at exit
    except BrokenPipeError:
        # The reader stopped reading (`agent audit RUN --json | head`): what it took is what it wanted,
        # so no traceback and no error line. stdout goes to /dev/null so that the interpreter's own
        # flush at exit does not raise again; the exit code is a SIGPIPE death's, as a C tool's would be.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 128 + signal.SIGPIPE
    sys.exit(code)
