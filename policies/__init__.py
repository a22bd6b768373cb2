"""The decision layer: outcome-blind compiler, BCIT and comparison policies, audit, replay.

policies/ imports only experience_bank (and third-party libraries).
"""

from policies.authorize import (
    POLICIES, EpisodeState, PolicyConfig, after_trial, authorize, decide, decision_hash, next_state,
)
from policies.features import compile, features_from_row

__all__ = [
    "POLICIES", "EpisodeState", "PolicyConfig", "after_trial", "authorize", "compile", "decide",
    "decision_hash", "features_from_row", "next_state",
]
