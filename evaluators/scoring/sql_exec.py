"""Execution accuracy: the predicted query's result set equals the gold one.

Order-insensitive (multiset of rows) unless the gold query has ORDER BY, as Spider/BIRD
compare. Values are compared as SQLite returns them, except floats, rounded to 6 places
so AVG computed in another order does not differ in the last bit.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from evaluators.scoring import sandbox

VERSION = "sql-exec-v1"


def extract_sql(text: str) -> str:
    """The query from a completion: a ```sql fence if present, else the text, first statement."""
    fence = re.search(r"```(?:sql)?\s*(.*?)```", text, re.S | re.I)
    sql = (fence.group(1) if fence else text).strip()
    return sql.split(";")[0].strip()


def _canon(rows: list[tuple]) -> list[tuple]:
    return [tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in rows]


def same_result(pred: list[tuple], gold: list[tuple], ordered: bool) -> bool:
    p, g = _canon(pred), _canon(gold)
    return p == g if ordered else Counter(p) == Counter(g)


def judge(db: str | Path, pred_sql: str, gold_sql: str, deadline_s: float = 2.0) -> dict:
    """{"correct": bool|None, "status": ok|timeout|refused|error|empty, "error": str|None}.

    correct is None only when the GOLD query fails (the item, not the model, is broken).
    """
    gold = sandbox.run(db, gold_sql, deadline_s)
    if gold.rows is None:
        return {"correct": None, "status": "gold_error", "error": gold.message[:300]}
    if not pred_sql:
        return {"correct": False, "status": "empty", "error": None}
    pred = sandbox.run(db, pred_sql, deadline_s)
    if pred.rows is None:
        return {"correct": False, "status": pred.status, "error": pred.message[:300]}
    ordered = re.search(r"\border\s+by\b", gold_sql, re.I) is not None
    return {"correct": same_result(pred.rows, gold.rows, ordered), "status": "ok", "error": None}
