"""The `agent` command line: `main.py` builds the parser; each other module registers one command group."""
