"""Reward functions on gold, wrong and off-task completions, in TRL's calling form."""

import json

import pytest

from evaluators import tasks
from evaluators.rewards import REWARDS


@pytest.fixture(autouse=True)
def _world(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("AGENT_WORLD_DIR", str(tmp_path_factory.getbasetemp() / "world"))


def _batch(dataset_id, n=4):
    rows = tasks.grpo_examples(dataset_id, 0, n=n)
    gold = [r["completion"] for r in tasks.sft_examples(dataset_id, 0, n=n)]
    cols = {"task": [r["task"] for r in rows], "reference": [r["reference"] for r in rows]}
    return [r["prompt"] for r in rows], gold, cols


@pytest.mark.parametrize("name,dataset", [("execution", "sql/target/train"), ("ast_match", "function/target/train"),
                                          ("numeric_match", "finance/target/train"), ("format", "sql/source/train"),
                                          ("format", "function/source/train"), ("format", "finance/source/train")])
def test_gold_gets_full_reward_and_garbage_none(name, dataset):
    prompts, gold, cols = _batch(dataset)
    assert REWARDS[name](prompts, gold, **cols) == [1.0] * 4
    garbage = [[{"role": "assistant", "content": "banana"}]] * 4
    assert REWARDS[name](prompts, garbage, **cols) == [0.0] * 4


def test_off_task_rows_are_none_and_strings_work():
    prompts, gold, cols = _batch("ifeval/train", n=2)
    assert REWARDS["execution"](prompts, gold, **cols) == [None, None]
    assert REWARDS["format"](prompts, gold, **cols) == [None, None]
    prompts, gold, cols = _batch("sql/source/train", n=2)
    assert REWARDS["execution"](prompts, [g[0]["content"] for g in gold], **cols) == [1.0, 1.0]
    assert REWARDS["execution"](prompts, ["DELETE FROM x", "SELECT 1"], **cols) == [0.0, 0.0]


def test_numeric_match_gives_partial_credit_only_to_spans():
    rows = [r for r in tasks.sft_examples("finance/target/train", 0) if '"multi-span"' in r["reference"]][:1]
    import json
    ref = json.loads(rows[0]["reference"])
    out = REWARDS["numeric_match"]([rows[0]["prompt"]], [f"Answer: {ref['answer'][0]}\nScale: none"],
                                   task=["finance/target"], reference=[rows[0]["reference"]])
    # TAT-QA's F1: token sets of the joined answers (segment names are one word each), 2 decimals
    assert out[0] == round(2 / (len(ref["answer"]) + 1), 2)


def test_execution_reward_judges_each_row_by_its_suites_rule():
    """BIRD's rule (sets of rows) for sql/target, Spider's (bags) for sql/source: the same
    prediction, a duplicate row more than the gold, is rewarded on the target and not on the source."""
    from evaluators.rewards import execution
    from evaluators.tasks import grpo_examples

    for task, expected in (("sql/target", 1.0), ("sql/source", 0.0)):
        row = next(r for r in grpo_examples(f"{task}/train", 0) if "DISTINCT" not in r["reference"]
                   and "ORDER BY" not in r["reference"].upper())
        ref = json.loads(row["reference"])
        gold = ref["sql"].rstrip("; ")
        doubled = f"SELECT * FROM ({gold}) UNION ALL SELECT * FROM ({gold})"
        [reward] = execution(None, [doubled], task=[task], reference=[row["reference"]])
        assert reward == expected, (task, gold)
