"""CLI commands (see agent/cli.py). Filled in by the part of the project that owns them."""


def register(sub) -> None:
    """Add this module's subcommands to the `agent` parser."""
