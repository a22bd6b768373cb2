"""Deterministic, disjoint splits for generated tasks.

Every task is a generator `make(rng) -> (key, prompt, reference)`. One seeded stream of
draws serves all four splits; each draw goes to the split that the hash of its key picks,
so the same question can never appear in two splits (disjoint by construction), a split of
n items is a prefix of the same split with more items, and nothing depends on call order.
"""

from __future__ import annotations

import hashlib
import random
from typing import Callable

from experience_bank.errors import BadInput

SPLITS = ("train", "validation", "adoption", "test")
# Share of the key space per split (percent buckets): train gets most of it.
_BUCKETS = {"train": range(0, 70), "validation": range(70, 80), "adoption": range(80, 90), "test": range(90, 100)}
DEFAULT_N = {"train": 1000, "validation": 200, "adoption": 200, "test": 200}
_MAX_DRAWS_PER_ITEM = 300
"""Draws allowed per item asked for: a split holds ~10% of the key space, and a small question
space (sql/target: ~280 questions per split) needs many draws to collect 200 distinct ones. At
n = 400 to 3,000 the draws find the same 290 sql/target adoption questions of world seed 0: a
request for more than a split holds gets all of it. The first n distinct items never depend on it."""

Maker = Callable[[random.Random], tuple[str, str, dict]]


def split_of(task: str, key: str) -> str:
    """The split a question belongs to, from the hash of (family, key) alone.

    A key may read `question||variation` (e.g. the distractor tools offered): only the part
    before `||` picks the split, so one question never shows up in two splits in two guises.
    """
    family = task.split("/")[0]  # source and target of a family share one partition
    key = key.split("||")[0]
    bucket = int(hashlib.sha256(f"{family}\x00{key}".encode()).hexdigest()[:8], 16) % 100
    return next(name for name, rng in _BUCKETS.items() if bucket in rng)


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise BadInput(f"unknown split {split!r}: expected one of {', '.join(SPLITS)}")


def draw(task: str, split: str, seed: int, n: int, make: Maker, stream: str = "", exact: bool = True) -> list[dict]:
    """The first n distinct items of `split` in the task's seeded stream (exact=False: at most n,
    for a stream whose question space may be smaller than n)."""
    check_split(split)
    rng = random.Random(f"{task}|{stream}|{seed}")
    seen: set[str] = set()
    out: list[dict] = []
    for _ in range(n * _MAX_DRAWS_PER_ITEM):
        key, prompt, ref = make(rng)
        if key in seen or split_of(task, key) != split:
            continue
        seen.add(key)
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        out.append({"id": f"{task}:{split}:{seed}:{digest}",
                    "messages": [{"role": "user", "content": prompt}], "reference": ref})
        if len(out) == n:
            return out
    if not exact:
        return out
    raise BadInput(f"{task}/{split} has fewer than {n} distinct items for seed {seed}: ask for fewer")


def interleave(streams: list[list[dict]], n: int) -> list[dict]:
    """Round-robin over per-stratum lists (a short stratum drops out, the others fill in)."""
    out: list[dict] = []
    for row in range(max((len(s) for s in streams), default=0)):
        out += [s[row] for s in streams if row < len(s)]
    return out[:n]
