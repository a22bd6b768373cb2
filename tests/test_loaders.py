"""Real-data loaders on small fixtures written by the tests, plus the shipped BFCL/IFEval data."""

import json
import sqlite3

import pytest

from evaluators import loaders
from evaluators.scoring.suites import score
from experience_bank.errors import BadInput

TATQA = [{"table": {"uid": "t1", "table": [["", "2019", "2018"], ["Revenue", "1,200", "1,000"]]},
          "paragraphs": [{"uid": "p1", "order": 1, "text": "Growth came from cloud services."}],
          "questions": [
              {"uid": "q1", "order": 1, "question": "What was the change in revenue?", "answer": 200,
               "derivation": "1,200-1,000", "answer_type": "arithmetic", "answer_from": "table", "scale": "million"},
              {"uid": "q2", "order": 2, "question": "Where did growth come from?", "answer": ["cloud services"],
               "answer_type": "span", "answer_from": "text", "scale": ""}]}]


def test_tatqa_loader_and_scoring(tmp_path):
    path = tmp_path / "tatqa_dataset_dev.json"
    path.write_text(json.dumps(TATQA))
    items = loaders.tatqa(path)
    assert [x["id"] for x in items] == ["tatqa:test:q1", "tatqa:test:q2"]
    res = score("finance/target", items, ["Answer: 200\nScale: million", "Answer: services\nScale: none"])
    # TAT-QA's F1 is rounded per question: "services" vs "cloud services" is 0.67
    assert res.metrics["em"] == 50.0 and res.metrics["f1"] == pytest.approx(100 * (1 + 0.67) / 2, abs=1e-9)
    gold = score("finance/target", items, [x["reference"]["completion"] for x in items])
    assert gold.metrics == {"em": 100.0, "f1": 100.0}


def test_tatqa_loader_bad_input(tmp_path):
    with pytest.raises(BadInput, match="not found: expected a TAT-QA json"):
        loaders.tatqa(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text(json.dumps([{"table": {}}]))
    with pytest.raises(BadInput, match="missing field"):
        loaders.tatqa(tmp_path / "bad.json")


def _bird(tmp_path):
    db_dir = tmp_path / "dev_databases" / "shop"
    db_dir.mkdir(parents=True)
    con = sqlite3.connect(db_dir / "shop.sqlite")
    con.executescript("CREATE TABLE item(id INTEGER, name TEXT, price REAL); "
                      "INSERT INTO item VALUES (1,'pen',1.5),(2,'cup',4.0),(3,'hat',9.0);")
    con.commit()
    con.close()
    rows = [{"question_id": 7, "db_id": "shop", "question": "How many items cost more than 2?",
             "evidence": "cost refers to price", "SQL": "SELECT COUNT(*) FROM item WHERE price > 2"}]
    (tmp_path / "dev.json").write_text(json.dumps(rows))


def test_bird_loader_and_execution(tmp_path):
    _bird(tmp_path)
    items = loaders.bird(tmp_path)
    assert "item(id, name, price)" in items[0]["messages"][0]["content"]
    assert "Evidence: cost refers to price" in items[0]["messages"][0]["content"]
    res = score("sql/target", items * 2, ["SELECT count(id) FROM item WHERE price >= 4", "SELECT 3"])
    assert res.metrics["exec_acc"] == 50.0
    gold = score("sql/target", items, [x["reference"]["completion"] for x in items])
    assert gold.metrics["exec_acc"] == 100.0 and gold.items[0].detail["rule"] == "bird"


def test_bird_loader_bad_input(tmp_path):
    with pytest.raises(BadInput, match="dev.json not found"):
        loaders.bird(tmp_path)
    _bird(tmp_path)
    (tmp_path / "dev_databases" / "shop" / "shop.sqlite").unlink()
    with pytest.raises(BadInput, match=r"dev_databases/<db_id>/<db_id>.sqlite"):
        loaders.bird(tmp_path)


def test_bfcl_shipped_data_gold_scores_100():
    for category in loaders.BFCL_CATEGORIES:
        items = loaders.bfcl(category, n=25)
        assert len(items) == 25
        res = score("function/target", items, [x["reference"]["completion"] for x in items])
        assert res.metrics["ast_acc"] >= 90.0, category  # a naive gold-to-call conversion (nested options) may miss
    with pytest.raises(BadInput, match="not AST-scored"):
        loaders.bfcl("irrelevance")


def test_bfcl_fixture_dir_and_missing(tmp_path):
    (tmp_path / "possible_answer").mkdir()
    q = {"id": "simple_python_0", "question": [[{"role": "user", "content": "Area of base 10 height 5"}]],
         "function": [{"name": "area", "description": "d", "parameters": {"type": "dict", "properties": {
             "base": {"type": "integer", "description": "b"}, "height": {"type": "integer", "description": "h"}},
             "required": ["base", "height"]}}]}
    (tmp_path / "BFCL_v4_simple_python.json").write_text(json.dumps(q) + "\n")
    (tmp_path / "possible_answer" / "BFCL_v4_simple_python.json").write_text(
        json.dumps({"id": "simple_python_0", "ground_truth": [{"area": {"base": [10], "height": [5]}}]}) + "\n")
    items = loaders.bfcl("simple_python", data_dir=tmp_path)
    assert score("function/target", items, ['[{"name": "area", "arguments": {"base": 10, "height": 5}}]']).metrics == \
        {"ast_acc": 100.0}
    with pytest.raises(BadInput, match="BFCL_v4_multiple.json not found"):
        loaders.bfcl("multiple", data_dir=tmp_path)


def test_ifeval_shipped_file_and_user_path(tmp_path):
    items = loaders.ifeval(n=10)
    assert len(items) == 10 and items[0]["id"] == "ifeval:test:1000"
    row = {"key": 5, "prompt": "Say hi in lowercase.", "instruction_id_list": ["change_case:english_lowercase"],
           "kwargs": [{"unused": None}]}
    (tmp_path / "input_data.jsonl").write_text(json.dumps(row) + "\n")
    mine = loaders.ifeval(tmp_path / "input_data.jsonl")
    res = score("ifeval", mine * 2, ["hello there my friend, this is a lowercase reply in english.", "HELLO THERE"])
    assert res.metrics["prompt_strict"] == 50.0 and res.metrics["inst_loose"] == 50.0
    with pytest.raises(BadInput, match="input_data.jsonl not found"):
        loaders.ifeval(tmp_path / "nope" / "input_data.jsonl")


def test_real_splits_are_disjoint_and_cover_everything():
    items = loaders.for_suite("function/target", "simple_python", "test") + \
        loaders.for_suite("function/target", "simple_python", "validation") + \
        loaders.for_suite("function/target", "simple_python", "adoption")
    ids = [x["id"] for x in items]
    assert len(ids) == len(set(ids)) == 400
    assert len(loaders.for_suite("ifeval", "shipped", "test", n=5)) == 5
    with pytest.raises(BadInput, match="no 'train' role"):
        loaders.for_suite("ifeval", "shipped", "train")
    with pytest.raises(BadInput, match="no real-data loader"):
        loaders.for_suite("captrack", "x", "test")


FIX = __import__("pathlib").Path(__file__).resolve().parent / "fixtures" / "local"


def test_source_side_loaders_read_the_fixtures_and_their_gold_scores_100():
    for suite, items in (("finance/source", loaders.finqa(FIX / "finqa" / "train.json")),
                         ("sql/source", loaders.spider(FIX / "spider" / "train_spider.json")),
                         ("function/source", loaders.xlam(FIX / "xlam" / "xlam_function_calling.jsonl"))):
        assert len(items) == 120, suite
        res = score(suite, items, [x["reference"]["completion"] for x in items])
        primary = {"finance/source": "em", "sql/source": "exec_acc", "function/source": "ast_acc"}[suite]
        assert res.metrics[primary] == 100.0, (suite, res.metrics)


def test_finqa_answers_and_xlam_types():
    rows = json.loads((FIX / "finqa" / "train.json").read_text())
    items = loaders.finqa(FIX / "finqa" / "train.json")
    yes_no = [x for x, r in zip(items, rows) if isinstance(r["qa"]["exe_ans"], str)]
    assert yes_no and all(x["reference"]["answer_type"] == "span" for x in yes_no)
    tool = loaders._xlam_tool({"name": "f", "parameters": {"a": {"type": "List[int]", "description": ""},
                                                           "b": {"type": "str, optional", "description": ""},
                                                           "c": {"type": "float", "default": 1.0}}})
    assert tool["parameters"]["properties"]["a"]["type"] == "array" and tool["parameters"]["required"] == ["a"]


def test_source_loaders_bad_input(tmp_path):
    (tmp_path / "train_spider.json").write_text(json.dumps([{"db_id": "gone", "question": "q", "query": "SELECT 1"}]))
    with pytest.raises(BadInput, match=r"asks database 'gone' but .*gone.sqlite is missing.*database/<db_id>"):
        loaders.spider(tmp_path / "train_spider.json")
    (tmp_path / "finqa.json").write_text(json.dumps([{"id": "x", "table": [], "pre_text": [], "post_text": [],
                                                      "qa": {"question": "q", "program": "p", "exe_ans": [1]}}]))
    with pytest.raises(BadInput, match="neither a number nor yes/no.*FinQA json"):
        loaders.finqa(tmp_path / "finqa.json")
    (tmp_path / "x.jsonl").write_text(json.dumps({"id": 0, "query": "q", "tools": "[]", "answers": "[]"}) + "\n")
    with pytest.raises(BadInput, match="line 1: cannot be scored"):
        loaders.xlam(tmp_path / "x.jsonl")
    with pytest.raises(BadInput, match="not found: expected xLAM-style JSON lines"):
        loaders.xlam(tmp_path / "none.jsonl")
