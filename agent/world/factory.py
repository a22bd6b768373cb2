"""The world a run config names, and the seed cards it restricts the seed bank to."""

from __future__ import annotations

from experience_bank.errors import BadInput

from agent.config import RunConfig
from agent.progress import Progress
from agent.world.embedded import cached_world, ensure_world
from agent.world.interface import WorldData
from agent.world.local import local_world


def world_for(cfg: RunConfig, progress: Progress | None = None) -> WorldData:
    """The world a run config names: a local world when it sets `base_model`, else the embedded
    world of its size (built once and cached)."""
    if cfg.base_model is not None:
        if cfg.world_seed:
            raise BadInput("world_seed picks an embedded world; a local world (base_model) is your own data: "
                           "drop world_seed")
        return local_world(cfg)
    return ensure_world(cfg.world, world_seed=cfg.world_seed, progress=progress)


def check_cached_world(cfg: RunConfig) -> None:
    """Refuse (BadInput) the embedded world a config names when the copy cached here is not the
    world its id names; builds nothing. For commands that start many episodes (`agent compare`),
    which would otherwise each fail on it alone."""
    if cfg.base_model is None:
        cached_world(cfg.world, cfg.world_seed)


def seed_cards(cfg: RunConfig) -> tuple[str, ...] | None:
    """The card ids of the config's `seed_cards` (None: the whole catalogue)."""
    if cfg.seed_cards is None:
        return None
    return tuple(c.strip() for c in cfg.seed_cards.split(",") if c.strip())
