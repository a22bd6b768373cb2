"""Scorers on hand-made cases, and gold answers scoring 100 on every suite."""

import pytest

from evaluators import tasks as T
from evaluators.scoring import bfcl, captrack, tatqa
from evaluators.scoring.suites import metric_specs, score


@pytest.fixture(autouse=True)
def _world(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("AGENT_WORLD_DIR", str(tmp_path_factory.getbasetemp() / "world"))


def test_tatqa_multi_span_partial_credit():
    # F1 over the joined answer's token set: {cloud} vs {cloud, retail} is P 1, R 1/2
    em, f1 = tatqa.em_f1("multi-span", ["Cloud", "Retail"], "", ["Cloud"], "none")
    assert (em, f1) == (0.0, 0.67)
    em, f1 = tatqa.em_f1("multi-span", ["Cloud", "Retail"], "", ["Retail", "Cloud"], "")
    assert (em, f1) == (1.0, 1.0)


def test_tatqa_span_token_f1():
    em, f1 = tatqa.em_f1("span", ["higher demand"], "", ["demand"], "")
    assert em == 0.0 and f1 == 0.67  # rounded to 2 decimals, as the official


def test_tatqa_scale_mismatch():
    # numbers are compared scaled: 12.5 million is not 12.5 thousand
    assert tatqa.em_f1("arithmetic", ["12.5"], "million", ["12.5"], "thousand") == (0.0, 0.0)
    # a text span carries its scale as a word: "cloud million" vs "cloud", partial F1
    assert tatqa.em_f1("span", ["Cloud"], "", ["Cloud"], "million") == (0.0, 0.67)


def test_tatqa_percent_and_number_normalisation():
    assert tatqa.em_f1("arithmetic", ["23.42"], "percent", ["23.42%"], "") == (1.0, 1.0)
    assert tatqa.em_f1("arithmetic", ["1234.5"], "", ["1,234.50"], "none") == (1.0, 1.0)
    assert tatqa.em_f1("arithmetic", ["-12"], "", ["(12)"], "") == (1.0, 1.0)


def test_tatqa_arithmetic_and_count_f1_equals_em():
    assert tatqa.em_f1("arithmetic", ["12.5"], "million", ["12.6"], "million") == (0.0, 0.0)
    assert tatqa.em_f1("count", ["3"], "", ["4"], "") == (0.0, 0.0)
    # a span that is one scaled number is one token: a near miss shares nothing
    assert tatqa.em_f1("span", ["12.5 million"], "", ["12.6 million"], "") == (0.0, 0.0)


def test_tatqa_protocol_parse():
    assert tatqa.parse("Answer: Cloud | Retail\nScale: none") == (["Cloud", "Retail"], "none")
    assert tatqa.parse("no answer here") is None


def test_finance_suite_scores_partial_f1():
    it = [x for x in T.items("finance/target", "test", 0, n=80) if x["reference"]["answer_type"] == "multi-span"][0]
    res = score("finance/target", [it], [f"Answer: {it['reference']['answer'][0]}\nScale: none"])
    gold = set(tatqa.normalize(" ".join(sorted(it["reference"]["answer"]))).split())
    mine = set(tatqa.normalize(it["reference"]["answer"][0]).split())
    f1 = 2 * len(mine) / (len(mine) + len(gold))  # mine is a subset of gold: P = 1
    assert res.metrics["em"] == 0.0 and res.metrics["f1"] == pytest.approx(100 * round(f1, 2), abs=1e-9)


def test_bfcl_ast_rejects_wrong_arguments_and_names():
    it = T.items("function/source", "test", 0, n=1)[0]["reference"]
    (name, args), = bfcl.decode(it["completion"])[0].items()
    wrong = [{name: {k: (v + 1 if isinstance(v, int) else v + "x") for k, v in args.items()}}]
    assert not bfcl.check(it["functions"], wrong, it["ground_truth"], it["category"])["valid"]
    assert bfcl.check(it["functions"], [{name: args}], it["ground_truth"], it["category"])["valid"]
    assert bfcl.decode("call get_weather please") is None


def test_bfcl_optional_parameter_may_be_omitted_or_given():
    it = next(x["reference"] for x in T.items("function/target", "test", 0, n=80)
              if "geometry.triangle_area" in x["reference"]["ground_truth"][0])
    args = {k: v[0] for k, v in it["ground_truth"][0]["geometry.triangle_area"].items() if v != [""]}
    ok = bfcl.check(it["functions"], [{"geometry.triangle_area": args}], it["ground_truth"], it["category"])
    assert ok["valid"]


def test_captrack_judges():
    assert captrack.judge("can_arith", "82", "82")["correct"]
    assert not captrack.judge("can_arith", "83", "82")["correct"]
    assert captrack.judge("will_format", "## Title\n- a", "x")["detail"]["markers"]
    assert captrack.judge("will_refusal", "I'm sorry, I can't help.", "x")["detail"]["refusal"]
    assert captrack.judge("how_json", '{"answer": 17}', '{"answer": 17}')["correct"]
    bad = captrack.judge("how_json", '{"answer": 17, "answer": 17}', '{"answer": 17}')
    assert not bad["correct"] and not bad["detail"]["json_valid"]
    wrong = captrack.judge("how_json", '{"answer": 18}', '{"answer": 17}')
    assert wrong["detail"]["json_valid"] and not wrong["correct"]


@pytest.mark.parametrize("task", T.TASKS)
def test_gold_answers_score_best_and_empty_scores_zero(task):
    items = T.items(task, "test", 0, n=40)
    gold = score(task, items, [x["reference"]["completion"] for x in items])
    lower = {"will_format_rate", "will_refusal", "timeout_rate", "refusal_rate", "limit_rate"}
    for name, value in gold.metrics.items():
        assert value == (0.0 if name in lower else 100.0), (name, value)
    assert gold.n_unknown == 0 and gold.n_unparseable == 0
    empty = score(task, items, [""] * len(items))
    assert all(v in (0.0, None) for v in empty.metrics.values())
    assert empty.metrics != gold.metrics and empty.generations_sha256 != gold.generations_sha256


def test_scorer_error_is_unknown_not_zero():
    it = T.items("sql/source", "test", 0, n=2)
    broken = [{**it[0], "reference": {**it[0]["reference"], "db": "no-such-db"}}, it[1]]
    res = score("sql/source", broken, [it[0]["reference"]["sql"], it[1]["reference"]["sql"]])
    assert res.items[0].correct is None and res.items[0].error and res.n_unknown == 1
    assert res.metrics["exec_acc"] == 100.0  # over the decided item only
    res_all = score("sql/source", broken[:1], [it[0]["reference"]["sql"]])
    assert res_all.metrics["exec_acc"] is None


def test_metric_specs_cover_captrack_and_ifeval():
    names = {s.name: s for s in metric_specs()}
    assert names["captrack.will_refusal"].direction == "lower" and names["captrack.will_refusal"].group == "WILL"
    assert names["ifeval.prompt_strict"].group == "HOW"
    assert {f"captrack.{m}" for m in ("can_arith", "can_recall", "can_paraphrase", "will_length", "will_format_rate",
                                      "how_json_valid", "how_json_correct")} <= set(names)


def test_scorer_version_names_the_checker():
    from evaluators.scoring.suites import scorer_version

    items = T.items("ifeval", "test", 0, n=1)
    res = score("ifeval", items, [""])
    assert res.identity.scorer_version == scorer_version("ifeval") and "google-ifeval" in scorer_version("ifeval")
    assert "bfcl-eval" in scorer_version("function/target") and "tatqa" in scorer_version("finance/source")
