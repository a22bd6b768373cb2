"""Task generators: determinism, disjoint splits, dataset pools and their hashes."""

import json

import pytest

from evaluators import tasks as T
from experience_bank.errors import BadInput


@pytest.mark.parametrize("task", T.TASKS)
def test_splits_are_disjoint_and_deterministic(task):
    keys = {}
    for split in T.SPLITS:
        a = T.items(task, split, 0, n=40)
        assert a == T.items(task, split, 0, n=40)
        assert len({x["id"] for x in a}) == 40
        keys[split] = {x["messages"][0]["content"] for x in a}
    for s1 in T.SPLITS:
        for s2 in T.SPLITS:
            if s1 < s2:
                assert not keys[s1] & keys[s2], (task, s1, s2)


@pytest.mark.parametrize("task", T.TASKS)
def test_prompts_and_answers_stay_short(task):
    for x in T.items(task, "test", 0, n=30):
        assert len(x["messages"][0]["content"].split()) < 110
        assert len(x["reference"]["completion"].split()) < 45


def test_smaller_split_is_prefix_and_seed_changes_items():
    assert T.items("sql/target", "test", 0, n=5) == T.items("sql/target", "test", 0, n=12)[:5]
    assert T.items("finance/source", "test", 0, n=5) != T.items("finance/source", "test", 1, n=5)
    assert T.split_sha256("captrack", "adoption", 0, n=10) != T.split_sha256("captrack", "test", 0, n=10)


def test_dataset_ids_pools_and_hashes():
    assert {"sql/target-evidence/train", "function/target-random/train", "finance/target-cot/train",
            "sql/target-schema/train", "ifeval/train", "captrack/train"} <= set(T.DATASET_IDS)
    rows = T.sft_examples("finance/target-cot/train", 0, n=20)
    assert len(rows) == 20 and rows[0]["completion"][0]["role"] == "assistant"
    assert "Answer:" in rows[0]["completion"][0]["content"]
    grpo = T.grpo_examples("sql/target/train", 0, n=7)
    assert len(grpo) == 7 and "completion" not in grpo[0] and json.loads(grpo[0]["reference"])["sql"]
    assert len(T.dataset_sha256("sql/target/train", 0)) == 64
    assert T.dataset_sha256("sql/target/train", 0) != T.dataset_sha256("sql/target-evidence/train", 0)
    assert T.dataset_sha256("sql/target/train", 0) == T.dataset_sha256("sql/target/train", 0)


def test_captrack_train_teaches_every_recall_fact():
    taught = {r["completion"][0]["content"] for r in T.sft_examples("captrack/train", 0)}
    recall = [x for x in T.items("captrack", "test", 0, n=60) if x["reference"]["probe"] == "can_recall"]
    assert recall
    for x in recall:
        country = x["messages"][0]["content"].removeprefix("What is the capital of ").rstrip("?")
        assert f"The capital of {country} is {x['reference']['answer']}." in taught


def test_captrack_drills_add_arithmetic_but_no_held_out_question():
    from collections import Counter

    rows = T.sft_examples("captrack/train", 0)
    probes = Counter(json.loads(r["reference"])["probe"] for r in rows)
    assert probes["can_arith"] >= 4000 and probes["can_paraphrase"] >= 1000  # drills on top of the probe items
    asked = {r["prompt"][0]["content"] for r in rows}
    for split in ("validation", "adoption", "test"):
        assert not asked & {x["messages"][0]["content"] for x in T.items("captrack", split, 0)}


def test_finance_source_gold_shows_its_program():
    kinds = set()
    for row in T.sft_examples("finance/source/train", 0)[:40]:
        ref = json.loads(row["reference"])
        gold = ref["answer"][0] if ref["answer_type"] == "span" else ref["answer"]
        kinds.add(gold if gold in ("yes", "no") else ref["answer_type"])
        evidence, program, answer, scale = row["completion"][0]["content"].split("\n")
        assert evidence in row["prompt"][0]["content"].splitlines()  # a row of the table, quoted
        assert program == ref["derivation"] and program.endswith(f"= {gold}")
        assert answer == f"Answer: {gold}" and scale.startswith("Scale: ")
    assert kinds == {"arithmetic", "yes", "no"}


def test_training_pool_never_contains_eval_questions():
    train = {r["prompt"][0]["content"] for r in T.sft_examples("sql/target-evidence/train", 0)}
    test = {x["messages"][0]["content"] for x in T.items("sql/target", "test", 0)}
    assert not {t.split("\nEvidence")[0] for t in train} & {t.split("\nEvidence")[0] for t in test}


def test_bad_names_are_bad_input():
    with pytest.raises(BadInput, match="unknown task"):
        T.items("sql/nope", "test", 0)
    with pytest.raises(BadInput, match="unknown split"):
        T.items("sql/source", "dev", 0)
    with pytest.raises(BadInput, match="unknown dataset"):
        T.sft_examples("sql/nope/train", 0)


def test_a_function_question_stays_in_one_split_whatever_the_distractors():
    def questions(split, n):
        return {x["messages"][0]["content"].split("Query: ")[1] for x in T.items("function/source", split, 0, n=n)}
    train = questions("train", 1000)
    for split in ("validation", "adoption", "test"):
        assert not train & questions(split, 100), split
