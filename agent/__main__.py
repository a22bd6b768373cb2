"""`python -m agent ...` is the `agent` console script (used by `agent compare` to start episodes)."""

from agent.cli.main import entry

entry()
