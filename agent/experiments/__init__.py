"""Measurements over many episodes or cells: `agent compare` and `agent retrospective --execute`."""
