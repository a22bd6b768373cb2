"""Pure scorers: each maps (items, generations) to per-item results, offline."""
