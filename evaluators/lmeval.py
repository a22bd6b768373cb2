"""lm-evaluation-harness-shaped copies of one evaluate() call, written beside the project's files.

Tools that read lm-eval output (its `make_table`, the Zeno and W&B loggers, the Hub's details
datasets) find `results_<date>.json` (every suite of the call as one task) and one
`samples_<task>_<date>.jsonl` per suite, named and shaped as lm-eval's EvaluationTracker
writes them. What they hold is the project's: task names are the suites (`sql/target` ->
task `sql_target`, alias `sql/target`), versions are the project's scorer versions (never an
lm-eval task version), metrics are the SuiteResult's numbers on their 0-100 scale with no
stderr ("N/A": the project computes none), and each sample carries its ItemResult.

The per-item hashes follow lm-eval's definitions (sha256 of the doc as indented JSON, of the
prompt, of the target text; a task's hash over the concatenation), so a reader can check them
with lm-eval's own `hash_string`. The prompt is the item's chat messages as canonical JSON:
the rendered text depends on the chat template, whose hash the config carries.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from experience_bank.hashing import canonical_json, sha256_text
from experience_bank.results import SuiteResult
from evaluators.scoring.suites import item_metrics

FILTER = "none"
"""lm-eval's name for the unfiltered responses (the project applies no filter)."""


def task_name(suite: str) -> str:
    """The lm-eval task name of a suite: a file-name part without '/' (as the project's own stem)."""
    return suite.replace("/", "_")


def date_id(started: float) -> str:
    """lm-eval's file timestamp (`datetime.isoformat()` with ':' -> '-'), here in UTC."""
    return datetime.fromtimestamp(started, timezone.utc).replace(tzinfo=None).isoformat(timespec="microseconds") \
        .replace(":", "-")


def _gen_kwargs(result: SuiteResult) -> dict:
    return {"max_gen_toks": result.identity.max_new_tokens, "do_sample": False, "temperature": 0.0,
            "seed": result.identity.seed}


def samples(suite: str, items: list[dict], generations: list[str], result: SuiteResult) -> list[dict]:
    """One lm-eval sample row per item, in the form EvaluationTracker.save_results_samples writes."""
    rows = []
    for doc_id, (item, gen, scored) in enumerate(zip(items, generations, result.items, strict=True)):
        prompt, target = canonical_json(item["messages"]), canonical_json(item["reference"])
        values = {k: v for k, v in item_metrics(suite, scored).items() if v is not None}
        rows.append({"doc_id": doc_id, "doc": item, "target": target,
                     "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": _gen_kwargs(result)}},
                     "resps": [[gen]], "filtered_resps": [gen], "filter": FILTER, "metrics": sorted(values),
                     "doc_hash": sha256_text(json.dumps(item, indent=2, ensure_ascii=False)),
                     "prompt_hash": sha256_text(prompt), "target_hash": sha256_text(target),
                     **values, "item": scored.model_dump(mode="json")})
    return rows


def task_hash(rows: list[dict]) -> str:
    """lm-eval's cumulative hash of a task's samples."""
    return sha256_text("".join(r["doc_hash"] + r["prompt_hash"] + r["target_hash"] for r in rows))


def _config(suite: str, result: SuiteResult) -> dict:
    ident = result.identity
    return {"task": task_name(suite), "tag": ["posttrain-agent"], "dataset_path": f"posttrain-agent/{suite}",
            "test_split": ident.split, "output_type": "generate_until", "num_fewshot": 0,
            "metric_list": [{"metric": m, "aggregation": "posttrain-agent", "higher_is_better": None}
                            for m in result.metrics],
            "generation_kwargs": _gen_kwargs(result),
            "metadata": {"version": ident.scorer_version, "scale": "0-100", "suite": suite,
                         "data_sha256": ident.data_sha256, "generations_sha256": result.generations_sha256}}


def results_json(model: str, results: dict[str, SuiteResult], rows: dict[str, list[dict]], *, started: float,
                 wall_seconds: float) -> dict:
    """The aggregated results file (lm-eval's `results_<date>.json`) of one evaluate() call."""
    first = next(iter(results.values())).identity
    return {
        "results": {task_name(s): {"alias": s, **{f"{m},{FILTER}": v for m, v in r.metrics.items()},
                                   **{f"{m}_stderr,{FILTER}": "N/A" for m in r.metrics}}
                    for s, r in results.items()},
        "group_subtasks": {task_name(s): [] for s in results},
        "configs": {task_name(s): _config(s, r) for s, r in results.items()},
        "versions": {task_name(s): r.identity.scorer_version for s, r in results.items()},
        "n-shot": {task_name(s): 0 for s in results},
        "higher_is_better": {task_name(s): {m: None for m in r.metrics} for s, r in results.items()},
        "n-samples": {task_name(s): {"original": len(rows[s]), "effective": len(rows[s])} for s in results},
        "config": {"model": model, "model_args": {"pretrained": model, "backend": first.backend},
                   "model_sha": first.model_sha256, "batch_size": first.batch_size, "batch_sizes": [],
                   "device": None, "use_cache": None, "limit": None, "bootstrap_iters": 0,
                   "gen_kwargs": _gen_kwargs(next(iter(results.values()))), "random_seed": first.seed,
                   "numpy_seed": first.seed, "torch_seed": first.seed, "fewshot_seed": first.seed},
        "git_hash": None,
        "date": started,
        "chat_template_sha": first.chat_template_sha256,
        "task_hashes": {task_name(s): task_hash(rows[s]) for s in results},
        "total_evaluation_time_seconds": str(round(wall_seconds, 3)),
        "producer": "posttrain-agent evaluators (lm-eval-shaped; numbers on a 0-100 scale)",
    }


def write(out_dir, model: str, results: dict[str, SuiteResult], items: dict[str, list[dict]],
          generations: dict[str, list[str]], *, started: float, wall_seconds: float) -> list[Path]:
    """Write the results file and one samples file per suite; returns their paths."""
    out, stamp = Path(out_dir), date_id(started)
    out.mkdir(parents=True, exist_ok=True)
    rows = {s: samples(s, items[s], generations[s], r) for s, r in results.items()}
    paths = []
    for s in results:
        path = out / f"samples_{task_name(s)}_{stamp}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows[s]), encoding="utf-8")
        paths.append(path)
    path = out / f"results_{stamp}.json"
    path.write_text(json.dumps(results_json(model, results, rows, started=started, wall_seconds=wall_seconds),
                               indent=2, ensure_ascii=False), encoding="utf-8")
    return [*paths, path]
