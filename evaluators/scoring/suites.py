"""`score(suite, items, generations) -> SuiteResult`: the one pure scoring entry point.

Each suite has an item judge (reference, generation) -> ItemResult fields and an aggregate
over the judged items. Metrics are on a 0-100 scale over the items the scorer could decide;
an item whose judge raises is UNKNOWN (correct=None, error kept), never wrong, and a metric
with no decided items is None. Unparseable outputs are wrong and counted.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Callable

from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json, sha256_text
from experience_bank.results import EvalIdentity, ItemResult, MetricSpec, SuiteResult
from evaluators.scoring import bfcl, captrack, ifeval_check, sql_exec, tatqa

SCORER_VERSION = "posttrain-evaluators-v1"
_SPLITS = ("train", "validation", "adoption", "test")


def _finance(ref: dict, text: str, seed: int) -> dict:
    parsed = tatqa.parse(text)
    if parsed is None:
        return {"correct": False, "score": 0.0, "parsed": False, "detail": {"em": 0.0}}
    spans, scale = parsed
    em, f1 = tatqa.em_f1(ref["answer_type"], ref["answer"], ref["scale"], spans, scale)
    return {"correct": em == 1.0, "score": f1, "parsed": True, "detail": {"em": em}}


def _sql(ref: dict, text: str, seed: int, rule: str = "spider") -> dict:
    from evaluators.tasks import sql as sql_task  # the world's databases, built on demand
    db = ref.get("db_path") or sql_task.db_path(ref["db"], ref["seed"])
    verdict = sql_exec.judge(db, sql_exec.extract_sql(text), ref["sql"], rule=rule)
    detail = {"status": verdict["status"], "rule": rule, "strict": verdict["strict"]}
    return {"correct": verdict["correct"], "parsed": verdict["status"] != "empty", "detail": detail,
            "error": verdict["error"]}


def _function(ref: dict, text: str, seed: int) -> dict:
    decoded = bfcl.decode(text)
    if decoded is None:
        return {"correct": False, "parsed": False, "detail": {"error_type": "unparseable"}}
    verdict = bfcl.check(ref["functions"], decoded, ref["ground_truth"], ref["category"])
    return {"correct": bool(verdict["valid"]), "detail": {"error_type": verdict.get("error_type", "")}}


def _ifeval(ref: dict, text: str, seed: int) -> dict:
    prompt = ref.get("prompt", "")
    out = ifeval_check.check(prompt, text, ref["instruction_id_list"], ref["kwargs"], seed)
    detail = {f"{mode}_{i}": ok for mode in ("strict", "loose") for i, ok in enumerate(out[mode])}
    detail |= {"prompt_loose": all(out["loose"]), "n_instructions": float(len(out["strict"]))}
    return {"correct": all(out["strict"]), "score": sum(out["strict"]) / len(out["strict"]), "detail": detail}


def _captrack(ref: dict, text: str, seed: int) -> dict:
    out = captrack.judge(ref["probe"], text, ref["answer"])
    out["detail"] = {**out["detail"], "probe": ref["probe"]}
    return out


JUDGES: dict[str, Callable[[dict, str, int], dict]] = {  # "sql": Spider's rule; score() picks each suite's
    "finance": _finance, "sql": _sql, "function": _function, "ifeval": _ifeval, "captrack": _captrack}


def judge_of(suite: str) -> Callable[[dict, str, int], dict]:
    """The judge of one suite's items, with that benchmark's own rule (the scorer and the GRPO rewards use it)."""
    family = suite.split("/")[0]
    if family == "sql":  # BIRD's rule for BIRD-like targets, Spider's for Spider-like sources
        return partial(_sql, rule=sql_exec.rule(suite))
    return JUDGES[family]


_COMPONENT = {"finance": tatqa.VERSION, "sql": sql_exec.VERSION, "function": bfcl.VERSION,
              "ifeval": ifeval_check.VERSION, "captrack": captrack.VERSION}


def scorer_version(suite: str) -> str:
    """The scorer identity stored with every result: this package's version + the suite's checker."""
    return f"{SCORER_VERSION}:{_COMPONENT[suite.split('/')[0]]}"  # Ident: no "+"


def _pct(values: list[float]) -> float | None:
    return round(100.0 * sum(values) / len(values), 4) if values else None


def _known(results: list[ItemResult]) -> list[ItemResult]:
    return [r for r in results if r.correct is not None]


def _aggregate(family: str, results: list[ItemResult]) -> dict[str, float | None]:
    known = _known(results)
    if family == "finance":
        return {"em": _pct([float(r.correct) for r in known]), "f1": _pct([r.score for r in known])}
    if family == "sql":
        status = [r.detail.get("status") for r in known]
        return {"exec_acc": _pct([float(r.correct) for r in known]),
                "exec_acc_strict": _pct([float(r.detail["strict"]) for r in known]),
                "timeout_rate": _pct([float(s == "timeout") for s in status]),
                "refusal_rate": _pct([float(s == "refused") for s in status]),
                "limit_rate": _pct([float(s == "limit") for s in status])}
    if family == "function":
        return {"ast_acc": _pct([float(r.correct) for r in known])}
    if family == "ifeval":
        return _ifeval_metrics(known)
    return _captrack_metrics(known)


def item_metrics(suite: str, item: ItemResult) -> dict[str, float | None]:
    """One item's own value of each suite metric: the suite's aggregate over that item alone
    (None where the metric does not cover it, e.g. another CapTrack probe)."""
    return _aggregate(suite.split("/")[0], [item])


def _ifeval_metrics(known: list[ItemResult]) -> dict[str, float | None]:
    # instruction level pools instructions over prompts (as IFEval's own report does)
    def inst(mode: str) -> list[float]:
        return [float(v) for r in known for k, v in r.detail.items() if k.startswith(f"{mode}_") and k[-1].isdigit()]
    return {"prompt_strict": _pct([float(r.correct) for r in known]), "inst_strict": _pct(inst("strict")),
            "prompt_loose": _pct([float(r.detail["prompt_loose"]) for r in known]), "inst_loose": _pct(inst("loose"))}


def _probe_rate(known: list[ItemResult], probe: str, key: str | None = None) -> float | None:
    """Share (%) of a probe's items that are correct, or whose detail[key] is true."""
    rows = [r for r in known if r.detail["probe"] == probe]
    return _pct([float(r.correct if key is None else r.detail[key]) for r in rows])


def _captrack_metrics(known: list[ItemResult]) -> dict[str, float | None]:
    # WILL rates count the behaviour itself (markers, refusals): lower is better there
    return {"can_arith": _probe_rate(known, "can_arith"), "can_recall": _probe_rate(known, "can_recall"),
            "can_paraphrase": _probe_rate(known, "can_paraphrase"), "will_length": _probe_rate(known, "will_length"),
            "will_format_rate": _probe_rate(known, "will_format", "markers"),
            "will_refusal": _probe_rate(known, "will_refusal", "refusal"),
            "how_json_valid": _probe_rate(known, "how_json", "json_valid"),
            "how_json_correct": _probe_rate(known, "how_json")}


def generations_jsonl(items: list[dict], generations: list[str]) -> str:
    """The stored form of raw generations; its sha256 is SuiteResult.generations_sha256."""
    return "".join(canonical_json({"id": it["id"], "messages": it["messages"], "generation": g}) + "\n"
                   for it, g in zip(items, generations, strict=True))


def data_sha256(items: list[dict]) -> str:
    return sha256_text("\n".join(canonical_json(x) for x in items))


def offline_identity(suite: str, items: list[dict]) -> EvalIdentity:
    """Identity for scoring outside evaluate(): model and template unknown (zeros)."""
    parts = items[0]["id"].split(":") if items else []
    split = parts[1] if len(parts) > 1 and parts[1] in _SPLITS else "test"
    return EvalIdentity(suite=suite, split=split, data_sha256=data_sha256(items), scorer_version=scorer_version(suite),
                        model_sha256="0" * 64, chat_template_sha256="0" * 64, backend="offline", batch_size=1,
                        max_new_tokens=1, seed=0)


def _judge_one(judge, item: dict, text: str, seed: int) -> ItemResult:
    ref = {**item["reference"], "prompt": item["messages"][-1]["content"]}
    try:
        out = judge(ref, text, seed)
    except Exception as exc:  # noqa: BLE001 - a scorer crash is UNKNOWN for this item, recorded
        return ItemResult(item_id=item["id"], correct=None, parsed=True, error=f"{type(exc).__name__}: {exc}"[:500])
    return ItemResult(item_id=item["id"], **out)


def score(suite: str, items: list[dict], generations: list[str], *, identity: EvalIdentity | None = None) -> SuiteResult:
    """Score stored generations of one suite (pure: same inputs, same result)."""
    family = suite.split("/")[0]
    if family not in JUDGES:
        raise BadInput(f"unknown suite {suite!r}: expected a suite of {', '.join(JUDGES)}")
    identity = identity or offline_identity(suite, items)
    judge = judge_of(suite)
    results = [_judge_one(judge, it, g, identity.seed) for it, g in zip(items, generations, strict=True)]
    return SuiteResult(identity=identity, generations_sha256=sha256_text(generations_jsonl(items, generations)),
                       metrics=_aggregate(family, results), items=tuple(results),
                       n_unparseable=sum(not r.parsed for r in results),
                       n_unknown=sum(r.correct is None for r in results))


_SPECS = (  # (name, group, sub, direction)
    ("captrack.can_arith", "CAN", "C1", "higher"), ("captrack.can_recall", "CAN", "C1", "higher"),
    ("captrack.can_paraphrase", "CAN", "C5a", "higher"), ("captrack.will_length", "WILL", "W3", "higher"),
    ("captrack.will_format_rate", "WILL", "W3", "lower"), ("captrack.will_refusal", "WILL", "W1", "lower"),
    ("captrack.how_json_valid", "HOW", "H2", "higher"), ("captrack.how_json_correct", "HOW", "H2", "higher"),
    ("ifeval.prompt_strict", "HOW", "H1", "higher"), ("ifeval.inst_strict", "HOW", "H1", "higher"),
    ("ifeval.prompt_loose", "HOW", "H1", "higher"), ("ifeval.inst_loose", "HOW", "H1", "higher"),
    ("finance/source.f1", "CAN", "C2", "higher"), ("sql/source.exec_acc", "CAN", "C1", "higher"),
    ("function/source.ast_acc", "HOW", "H3", "higher"),
)
FLOOR = 5.0  # pp: below this absolute baseline a relative drift is reported, not decisive


def metric_specs() -> tuple[MetricSpec, ...]:
    """How the CapTrack profile reads each retention metric (source tasks included as skills)."""
    return tuple(MetricSpec(name=n, group=g, sub=s, direction=d, floor=FLOOR) for n, g, s, d in _SPECS)


def parse_generations(text: str) -> tuple[list[str], list[str]]:
    """(item ids, generations) back from the stored jsonl."""
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [r["id"] for r in rows], [r["generation"] for r in rows]
