"""lm-eval-shaped files beside every evaluation, read back with lm-evaluation-harness's own code.

lm-eval is installed --no-deps (Makefile); its reader utilities are what the Zeno script, the
Hub's details cards and `make_table` use to find and read an output folder.
"""

import json
from pathlib import Path

import pytest

from evaluators import evaluate, lmeval

lm_utils = pytest.importorskip("lm_eval.utils", reason="lm-eval is installed by the Makefile (--no-deps)")

SUITES = ("sql/target", "ifeval", "captrack")


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    from test_generate import build_tiny_model

    base = tmp_path_factory.getbasetemp()
    mp = pytest.MonkeyPatch()
    mp.setenv("AGENT_WORLD_DIR", str(base / "world"))
    model = build_tiny_model(base / "tiny-lmeval")
    out = base / "eval-lmeval"
    results = evaluate(model, SUITES, "validation", out_dir=out, batch_size=8, n=5, seed=0)
    yield out, results
    mp.undo()


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """Non-zero numbers: the gold completion for every other item, scored by the project's scorer."""
    import time

    from evaluators import score, tasks

    base = tmp_path_factory.getbasetemp()
    mp = pytest.MonkeyPatch()
    mp.setenv("AGENT_WORLD_DIR", str(base / "world"))
    items = {s: tasks.items(s, "validation", 0, n=8) for s in ("sql/target", "finance/target", "ifeval")}
    gens = {s: [x["reference"]["completion"] if i % 2 == 0 else "no" for i, x in enumerate(its)]
            for s, its in items.items()}
    results = {s: score(s, items[s], gens[s]) for s in items}
    out = base / "scored-lmeval"
    lmeval.write(out, "gold-half", results, items, gens, started=time.time(), wall_seconds=1.5)
    yield out, results
    mp.undo()


def _table(doc: dict) -> dict[str, dict[str, float | None]]:
    """lm-eval's own results table, parsed back: task -> metric -> the value it shows."""
    rows, task = {}, None
    for line in lm_utils.make_table(doc).splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        task = cells[0] or task
        rows.setdefault(task, {})[cells[4]] = float(cells[6]) if cells[6] else None
    return rows


def _files(out: Path) -> list[str]:
    return [p.as_posix() for p in out.iterdir() if p.is_file()]


def test_lm_eval_finds_one_results_file_and_a_samples_file_per_suite(evaluated):
    out, results = evaluated
    found = lm_utils.get_results_filenames(_files(out))
    assert len(found) == 1
    latest = lm_utils.get_latest_filename(found)
    samples = lm_utils.get_sample_results_filenames(_files(out))
    assert sorted(lm_utils.get_file_task_name(Path(f).name) for f in samples) == sorted(
        lmeval.task_name(s) for s in SUITES)
    # every file of one call carries the same timestamp, as lm-eval's tracker writes them
    # (its get_file_datetime strips ".jsonl" only, so a results name keeps ".json")
    stamp = lm_utils.get_file_datetime(Path(latest).name).removesuffix(".json")
    assert {lm_utils.get_file_datetime(Path(f).name) for f in samples} == {stamp}
    assert all(lm_utils.sanitize_task_name(lmeval.task_name(s)) == lmeval.task_name(s) for s in SUITES)


def test_every_number_equals_the_projects(evaluated):
    out, results = evaluated
    doc = json.loads(Path(lm_utils.get_latest_filename(lm_utils.get_results_filenames(_files(out)))).read_text())
    for suite, res in results.items():
        task = lmeval.task_name(suite)
        got = {k.removesuffix(",none"): v for k, v in doc["results"][task].items()
               if k.endswith(",none") and "_stderr" not in k}
        assert got == res.metrics and doc["results"][task]["alias"] == suite
        assert doc["versions"][task] == res.identity.scorer_version  # the project's scorer, not an lm-eval version
        assert doc["n-samples"][task] == {"original": len(res.items), "effective": len(res.items)}
        assert doc["config"]["model_sha"] == res.identity.model_sha256
        rows = [json.loads(line) for line in
                Path(next(f for f in lm_utils.get_sample_results_filenames(_files(out)) if f"_{task}_" in f))
                .read_text().splitlines()]
        assert [r["item"] for r in rows] == [i.model_dump(mode="json") for i in res.items]
        assert [r["doc"]["id"] for r in rows] == [i.item_id for i in res.items]
        # lm-eval's hash definitions, recomputed with its own hash_string
        for r in rows:
            assert r["doc_hash"] == lm_utils.hash_string(json.dumps(r["doc"], indent=2, ensure_ascii=False))
            assert r["prompt_hash"] == lm_utils.hash_string(r["arguments"]["gen_args_0"]["arg_0"])
            assert r["target_hash"] == lm_utils.hash_string(r["target"])
        assert doc["task_hashes"][task] == lm_utils.hash_string(
            "".join(r["doc_hash"] + r["prompt_hash"] + r["target_hash"] for r in rows))


def test_lm_evals_table_shows_the_project_numbers(scored):
    out, results = scored
    assert any(v for r in results.values() for v in r.metrics.values())  # not all zeros
    doc = json.loads(Path(lm_utils.get_latest_filename(lm_utils.get_results_filenames(_files(out)))).read_text())
    shown = _table(doc)
    for suite, res in results.items():
        assert shown[suite] == {m: None if v is None else round(v, 4) for m, v in res.metrics.items()}
    assert doc["total_evaluation_time_seconds"] == "1.5"


def test_mean_metrics_are_the_mean_of_the_sample_columns(scored):
    out, results = scored
    for suite, column in (("sql/target", "exec_acc"), ("finance/target", "em"), ("ifeval", "prompt_strict")):
        task = lmeval.task_name(suite)
        path = next(f for f in lm_utils.get_sample_results_filenames(_files(out)) if f"_{task}_" in f)
        rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
        assert round(sum(r[column] for r in rows) / len(rows), 4) == results[suite].metrics[column] > 0
