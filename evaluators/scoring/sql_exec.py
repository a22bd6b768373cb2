"""Execution accuracy with each benchmark's own rule: BIRD's for the target, Spider's for the source.

Our own code, written from the facts of the official scorers, so that our numbers are the
published ones (cases in tests/test_official_semantics.py):
- BIRD (DAMO-ConvAI bird/llm/src/evaluation.py): correct when the SETS of result rows are
  equal (Python equality: no order, no duplicates, 1 == 1.0, columns in place); no
  rewriting of either query;
- Spider (taoyds/test-suite-sql-eval exec_eval.py with evaluation.py's defaults): the
  prediction's "value" is replaced by "1", `> =`, `< =`, `! =` are closed up, DISTINCT is
  removed from both queries (sqlparse tokens; only the first statement is kept),
  YEAR(CURDATE()) is 2020; then the results are equal as bags of rows, in order when the
  processed gold contains the text "order by", under SOME permutation of the predicted
  columns; before the permutations, rows whose values sorted by str(value)+str(type) differ
  reject (so `(1, 1.5)` vs `(1.0, 1.5)` is wrong there), and two empty results are equal.
  No float rounding in either.
What differs, and why:
- our sandbox (evaluators/scoring/sandbox.py) bounds each query at DEADLINE_S (BIRD runs
  30 s, Spider has no effective limit) and reads at most MAX_ROWS rows: a bound hit is a
  failed execution, counted in timeout_rate / limit_rate, so a reader can see it;
- a gold query that fails or is over a bound makes the item UNKNOWN (correct None), where
  BIRD scores 0 and Spider stops with an assertion;
- Spider's test suite compares on every database of the gold's folder; we run on the
  item's database only (Spider's original single-database evaluation);
- writes are refused by the sandbox (BIRD would run them on its copy);
- an empty prediction is wrong (BIRD would run "" and count it right on an empty gold
  result; Spider's DISTINCT removal fails on it);
- a prediction over sqlparse's token bound, or whose comparison needs over
  MAX_PERMUTATIONS column permutations, is a limit hit (failed) where Spider would raise or
  enumerate them all.
`strict` is a stricter variant reported beside the official verdict, never instead of it:
the official verdict AND the raw rows equal with columns in place, as bags, in order when
the gold query has ORDER BY.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from pathlib import Path

import sqlparse

from evaluators.scoring import sandbox
from experience_bank.errors import BadInput

VERSION = "sql-exec-v3-bird-set-spider-suite"
"""v3: a generation SQLite cannot read (a NUL, a lone surrogate) is wrong, where v2 raised (UNKNOWN)."""
DEADLINE_S = 2.0
MAX_ROWS = 100_000
MAX_PERMUTATIONS = 100_000
RULES = {"sql/target": "bird", "sql/source": "spider"}
_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)
_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)


def rule(suite: str) -> str:
    """The benchmark rule a SQL suite is scored by: BIRD-like targets by BIRD's, sources by Spider's."""
    if suite not in RULES:
        raise BadInput(f"SQL suite {suite!r} has no scoring rule: expected one of {', '.join(RULES)}")
    return RULES[suite]


def extract_sql(text: str) -> str:
    """The query from a completion: a ```sql fence if present, else the text; its first statement.

    Statements end at a `;` that SQLite's own tokenizer calls complete, so a `;` inside a
    string, a quoted name or a comment does not end one. This is the generation side, as
    BIRD's own generation stops at `;`: judge() then sees one statement (given two, BIRD's
    rule fails it, as sqlite3 does; Spider's keeps the first, as sqlparse does).
    """
    fence = re.search(r"```(?:sql)?\s*(.*?)```", text, re.S | re.I)
    sql = (fence.group(1) if fence else text).strip()
    start = 0
    for end in (i for i, ch in enumerate(sql) if ch == ";"):
        if _complete(sql[start:end + 1]):
            statement = sql[start:end].strip()
            if statement:
                return statement
            start = end + 1  # an empty statement (";;"): keep looking
    return sql[start:].strip()


def _complete(text: str) -> bool:
    """sqlite3.complete_statement, False for text its C tokenizer cannot take (a NUL, a lone surrogate:
    ValueError, UnicodeEncodeError among them). A generation holding one then runs as it is, and the
    execution fails it, as SQLite refuses such a query. Before (v2) it raised: the item was UNKNOWN in
    an evaluation and the GRPO reward stopped its run (a tiny model on world seed 99 wrote a NUL)."""
    try:
        return sqlite3.complete_statement(text)
    except ValueError:
        return False


def remove_distinct(sql: str) -> str:
    """Spider's default: DISTINCT tokens dropped; sqlparse's first statement only."""
    statements = sqlparse.parse(sql)
    if not statements:
        return sql
    return "".join(t.value for t in statements[0].flatten() if t.value.lower() != "distinct")


def spider_gold(sql: str) -> str:
    """The gold as Spider runs it."""
    closed = sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")
    return _CUR_YEAR.sub("2020", remove_distinct(closed))


def spider_pred(sql: str) -> str:
    """The prediction as Spider runs it: also every "value" becomes "1" (their placeholder)."""
    return spider_gold(sql.replace("value", "1"))


def spider_ordered(gold_sql: str) -> bool:
    """Spider's test: the processed gold contains the plain text "order by" (one space)."""
    return "order by" in spider_gold(gold_sql).lower()


def bird_equal(pred: list[tuple], gold: list[tuple]) -> bool:
    return set(pred) == set(gold)


def _unordered_row(row: tuple) -> tuple:
    return tuple(sorted(row, key=lambda v: str(v) + str(type(v))))


def _column_candidates(gold: list[tuple], pred: list[tuple], ordered: bool) -> list[list[int]]:
    # gold column i can only be predicted column j if the two columns hold the same values
    # (the same list when ordered, the same bag otherwise): a necessary condition, so the
    # search below decides exactly what Spider's enumeration of permutations decides
    def col(rows: list[tuple], i: int):
        values = [r[i] for r in rows]
        return values if ordered else Counter(values)
    width = len(gold[0])
    return [[j for j in range(width) if col(pred, j) == col(gold, i)] for i in range(width)]


def _permutations(candidates: list[list[int]], twin: list[int], taken: tuple[int, ...] = ()):
    """Injective column maps; twin[j] is the first column identical to j (interchangeable: try one)."""
    if len(taken) == len(candidates):
        yield taken
        return
    tried = set()
    for j in candidates[len(taken)]:
        if j not in taken and twin[j] not in tried:
            tried.add(twin[j])
            yield from _permutations(candidates, twin, (*taken, j))


def spider_equal(gold: list[tuple], pred: list[tuple], ordered: bool) -> bool | None:
    """Spider's denotation equality: bags (or lists when ordered) under some column permutation;
    None when deciding it would take over MAX_PERMUTATIONS permutations."""
    if not gold and not pred:
        return True
    if len(gold) != len(pred) or len(gold[0]) != len(pred[0]):
        return False
    g_rows, p_rows = [_unordered_row(r) for r in gold], [_unordered_row(r) for r in pred]
    if not (g_rows == p_rows if ordered else set(g_rows) == set(p_rows)):
        return False
    pred_cols = [tuple(r[j] for r in pred) for j in range(len(pred[0]))]
    twin = [pred_cols.index(col) for col in pred_cols]
    for n, perm in enumerate(_permutations(_column_candidates(gold, pred, ordered), twin)):
        if n == MAX_PERMUTATIONS:  # Spider would enumerate on for hours: a bound hit
            return None
        permuted = [tuple(row[j] for j in perm) for row in pred]
        if (gold == permuted) if ordered else Counter(gold) == Counter(permuted):
            return True
    return False


def strict_equal(pred: list[tuple], gold: list[tuple], gold_sql: str) -> bool:
    """The stricter variant: columns in place, bags of rows, in order when the gold has ORDER BY."""
    return pred == gold if _ORDER_BY.search(gold_sql) else Counter(pred) == Counter(gold)


def _run(db: str | Path, sql: str, deadline_s: float, prepare=None) -> sandbox.Outcome:
    """The query's rows under the sandbox, after `prepare` (Spider's rewrites); a bound hit is an outcome."""
    try:
        sql = prepare(sql) if prepare else sql
    except sqlparse.exceptions.SQLParseError as exc:  # over sqlparse's own token bound
        return sandbox.Outcome(None, "limit", f"sqlparse: {exc}")
    out = sandbox.run(db, sql, deadline_s, max_rows=MAX_ROWS + 1)
    if out.rows is not None and len(out.rows) > MAX_ROWS:
        return sandbox.Outcome(None, "limit", f"result over {MAX_ROWS} rows")
    return out


def judge(db: str | Path, pred_sql: str, gold_sql: str, rule: str = "spider", deadline_s: float = DEADLINE_S) -> dict:
    """{"correct": bool|None, "strict": bool|None, "status": ok|timeout|refused|limit|error|empty|gold_error,
    "error": str|None} under the named benchmark rule (bird | spider).

    correct is None only when the GOLD query cannot be run to the end (the item, not the model, is broken).
    Callers that know the suite pass rule(suite); the default (Spider's) serves those that do not.
    """
    if rule not in ("bird", "spider"):
        raise ValueError(f"unknown SQL rule {rule!r}: expected bird or spider")
    spider = rule == "spider"
    gold = _run(db, gold_sql, deadline_s, spider_gold if spider else None)
    if gold.rows is None:
        return {"correct": None, "strict": None, "status": "gold_error", "error": gold.message[:300]}
    if not pred_sql:
        return {"correct": False, "strict": False, "status": "empty", "error": None}
    pred = _run(db, pred_sql, deadline_s, spider_pred if spider else None)
    if pred.rows is None:
        return {"correct": False, "strict": False, "status": pred.status, "error": pred.message[:300]}
    correct = spider_equal(gold.rows, pred.rows, spider_ordered(gold_sql)) if spider else \
        bird_equal(pred.rows, gold.rows)
    if correct is None:
        return {"correct": False, "strict": False, "status": "limit",
                "error": f"over {MAX_PERMUTATIONS} column permutations to compare"}
    strict = correct and strict_equal(pred.rows, gold.rows, gold_sql)
    return {"correct": correct, "strict": strict, "status": "ok", "error": None}
