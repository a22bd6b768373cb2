"""The embedded world's tasks, splits and training datasets (names are contracts).

Public: TASKS, SPLITS, DATASET_IDS, items, split_sha256, sft_examples, grpo_examples,
dataset_sha256. Items are `{"id", "messages", "reference"}`; the gold completion is
`reference["completion"]`. Training pools are fixed by the world seed and hashed over their
canonical JSONL.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache, partial

from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json, sha256_text
from evaluators.tasks import captrack, finance, function, ifeval, sql
from evaluators.tasks.splits import DEFAULT_N, SPLITS, check_split, draw, interleave

# task -> maker(seed) -> (rng -> (key, prompt, reference))
_MAKERS = {
    "finance/source": lambda seed: finance.make_source,
    "finance/target": lambda seed: finance.make_target,
    "sql/source": lambda seed: partial(sql.make, schemas=sql.SOURCE, seed=seed, evidence="never"),
    "sql/target": lambda seed: partial(sql.make, schemas=sql.TARGET, seed=seed),
    "function/source": lambda seed: partial(function.make, variant="source"),
    "function/target": lambda seed: partial(function.make, variant="target"),
    "ifeval": lambda seed: ifeval.make,
}
TASKS = (*_MAKERS, "captrack")

# dataset id -> (task whose train split it draws from, maker override or None)
_VARIANTS = {
    "finance/target-cot": ("finance/target", lambda seed: partial(finance.make_target, cot=True)),
    "sql/target-evidence": ("sql/target", lambda seed: partial(sql.make, schemas=sql.TARGET, seed=seed,
                                                               evidence="always")),
    "sql/target-schema": ("sql/target", lambda seed: partial(sql.make, schemas=sql.TARGET, seed=seed, linked=True)),
    "function/target-random": ("function/target", lambda seed: partial(function.make, variant="target", noise=0.15)),
}
DATASET_IDS = tuple(f"{name}/train" for name in (*TASKS, *_VARIANTS))
POOL_N = 1000


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise BadInput(f"unknown task {task!r}: expected one of {', '.join(TASKS)}")


@lru_cache(maxsize=64)
def _items(task: str, split: str, seed: int, n: int) -> tuple[str, ...]:
    # cached as canonical JSON so callers can never mutate the cache
    if task == "captrack":  # stratified: every probe is present in every split
        per_probe = [draw(task, split, seed, n, partial(captrack.make, seed=seed, probe=p), stream=p, exact=False)
                     for p in captrack.PROBES]
        return tuple(canonical_json(x) for x in interleave(per_probe, n))
    # at most n: a split whose question space is smaller is read whole (sql/target holds about
    # 260-290 questions per split), as a local world's split is
    return tuple(canonical_json(x) for x in draw(task, split, seed, n, _MAKERS[task](seed), exact=False))


def items(task: str, split: str, seed: int, n: int | None = None) -> list[dict]:
    """The first n items of a task's split (default size per split in splits.DEFAULT_N), or all of
    them where the split holds fewer."""
    _check_task(task)
    check_split(split)
    return [json.loads(x) for x in _items(task, split, seed, n or DEFAULT_N[split])]


def split_sha256(task: str, split: str, seed: int, n: int | None = None) -> str:
    """Hash of a split's items (canonical JSONL) for the run manifest."""
    return sha256_text("\n".join(canonical_json(x) for x in items(task, split, seed, n)))


def _parse_dataset(dataset_id: str) -> tuple[str, object]:
    if dataset_id not in DATASET_IDS:
        raise BadInput(f"unknown dataset {dataset_id!r}: expected one of {', '.join(DATASET_IDS)}")
    name = dataset_id.removesuffix("/train")
    return _VARIANTS.get(name, (name, None))


@lru_cache(maxsize=32)
def _pool(dataset_id: str, seed: int) -> tuple[str, ...]:
    task, maker = _parse_dataset(dataset_id)
    if maker is None:  # the base pool is exactly the task's train split
        pool = [sft_row(json.loads(row)) for row in _items(task, "train", seed, POOL_N)]
    else:
        # a variant draws its own stream but keeps the base task's split partition
        pool = [sft_row(x) for x in draw(task, "train", seed, POOL_N, maker(seed), stream=dataset_id)]
    if task == "captrack" and maker is None:  # the facts CAN-recall probes ask about are taught here
        pool += [{"prompt": [{"role": "user", "content": p}], "completion": [{"role": "assistant", "content": c}],
                  "task": "captrack", "reference": canonical_json({"probe": "teach", "completion": c})}
                 for p, c in captrack.teaching_examples(seed)]
        pool += [sft_row(x) for probe, n in captrack.DRILLS.items()
                 for x in draw(task, "train", seed, n, partial(captrack.make, seed=seed, probe=probe),
                               stream=f"{probe}-drill", exact=False)]
    return tuple(canonical_json(x) for x in pool)


def sft_row(item: dict) -> dict:
    """An item as a TRL prompt/completion row (+ `task` from its id and its JSON `reference`);
    the one row format of every world's pools."""
    return {"prompt": item["messages"],
            "completion": [{"role": "assistant", "content": item["reference"]["completion"]}],
            "task": item["id"].split(":")[0], "reference": canonical_json(item["reference"])}


def _take(dataset_id: str, seed: int, n: int | None) -> list[dict]:
    rows = [json.loads(x) for x in _pool(dataset_id, seed)]
    if n is None or n <= len(rows):
        return rows[:n] if n else rows
    # more than the pool: repeat it in a seeded order (documented: a pool is fixed-size)
    rng = random.Random(f"{dataset_id}|{seed}|{n}")
    return rows + [rng.choice(rows) for _ in range(n - len(rows))]


def sft_examples(dataset_id: str, seed: int, n: int | None = None) -> list[dict]:
    """TRL conversational prompt-completion rows (+ `task` and JSON `reference` columns)."""
    return _take(dataset_id, seed, n)


def grpo_examples(dataset_id: str, seed: int, n: int | None = None) -> list[dict]:
    """`{"prompt", "task", "reference"}` rows; reward functions read task/reference from kwargs."""
    return [{k: v for k, v in row.items() if k != "completion"} for row in _take(dataset_id, seed, n)]


def dataset_sha256(dataset_id: str, seed: int) -> str:
    """sha256 of the pool's canonical JSONL (one canonical_json line per row; the whole fixed pool)."""
    return sha256_text("\n".join(_pool(dataset_id, seed)))


def pool_sha256(rows: list[dict]) -> str:
    """The same hash for a pool held as rows (a local world's pools)."""
    return sha256_text("\n".join(canonical_json(r) for r in rows))


__all__ = ["TASKS", "SPLITS", "DATASET_IDS", "items", "split_sha256", "sft_examples", "grpo_examples",
           "dataset_sha256", "pool_sha256", "sft_row"]
