"""The hostile SQL corpus: every query is refused or bounded in time and memory, nothing changes.

Run with `-s` to see the report: worst wall clock and peak worker RSS over the corpus, and
the worker's cost over in-process execution on ordinary queries.
"""

import time

import pytest

from experience_bank.hashing import file_sha256
from evaluators import tasks as T
from evaluators.rewards import REWARDS
from evaluators.scoring import sandbox, sql_worker
from evaluators.scoring.suites import score
from evaluators.tasks import sql

DEADLINE_S = 0.5
SLACK_S = 0.75  # a fresh worker's start and a shared machine's jitter, past the hard deadline
BOUNDED = frozenset({"timeout", "limit"})
REFUSED = frozenset({"refused"})
INVALID = frozenset({"error", "limit"})  # not one valid statement within the connection's limits


def _grow(step: str, stop: str = "") -> str:
    """A recursive CTE s(x, n) from 'ab', applying `step` to x each round."""
    return f"WITH RECURSIVE s(x, n) AS (SELECT 'ab', 0 UNION ALL SELECT {step}, n + 1 FROM s {stop})"


def _count(n: int) -> str:
    return f"(WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c LIMIT {n}) SELECT i FROM c)"


# what the red-team pass found (12 of 82 ran past a 2 s deadline or took gigabytes) and its
# neighbours: values grown inside one SQLite call, where the progress handler does not fire
EXHAUSTING = {
    "string_doubling": _grow("x || x") + " SELECT max(length(x)) FROM s",
    "string_doubling_40": _grow("x || x", "WHERE n < 40") + " SELECT length(x) FROM s ORDER BY n DESC LIMIT 1",
    "replace_doubling": _grow("replace(x, 'a', 'aa')", "WHERE n < 40") + " SELECT max(length(x)) FROM s",
    "printf_precision_1e9": "SELECT printf('%.*c', 1000000000, 'x')",
    "printf_precision_2e31": "SELECT printf('%.*c', 2147483647, 'x')",
    "printf_per_row": "SELECT printf('%.*c', 300000000 + id, 'x') FROM products",  # not constant: once per row
    "randomblob_1e8_rows": "SELECT length(randomblob(100000000)) FROM orders",
    "hex_zeroblob_4e8": "SELECT hex(zeroblob(400000000))",
    "upper_5e8": "SELECT length(upper(substr(hex(zeroblob(250000000)), 1)))",
    "replace_5e8": "SELECT length(replace(zeroblob(500000000), x'00', 'ab'))",
    "lower_hex_2e8": "SELECT length(lower(hex(zeroblob(250000000))))",
    "group_concat_blobs": f"SELECT length(group_concat(hex(randomblob(100000)))) FROM {_count(100000)}",
    "json_array_1e6": f"SELECT length(json_group_array(i)) FROM {_count(1000000)}",
    "rows_of_megabytes": f"SELECT randomblob(900000) FROM {_count(1000)}",
    "sorter_in_memory": f"SELECT randomblob(100000) FROM {_count(100000)} ORDER BY 1",
    "distinct_blobs": f"SELECT count(DISTINCT hex(randomblob(400000))) FROM {_count(100000)}",
    "instr_quadratic": "SELECT instr(printf('%.*c', 999000, 'a'), printf('%.*c', 499000, 'a') || 'b')",
    "runaway_recursive_cte": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c",
    "cartesian_join": "SELECT count(*) FROM orders a, orders b, orders c, orders d",
    "sum_of_megabytes": f"SELECT total(length(zeroblob(1000000))) FROM {_count(10**9)}",
}

CLASSIC = {  # name: (query, outcomes that count as held); {tmp} is a folder the test watches
    "attach": ("ATTACH DATABASE '{tmp}/x.db' AS x", REFUSED),
    "attach_memory": ("ATTACH ':memory:' AS m", REFUSED),
    "vacuum_into": ("VACUUM INTO '{tmp}/copy.db'", REFUSED),
    "vacuum": ("VACUUM", REFUSED),
    "insert": ("INSERT INTO products VALUES (999, 'x', 'toys', 1)", REFUSED),
    "replace": ("REPLACE INTO products VALUES (1, 'x', 'toys', 1)", REFUSED),
    "insert_via_cte": ("WITH x AS (SELECT 1) INSERT INTO products SELECT 999, 'x', 'y', 1 FROM x", REFUSED),
    "update": ("UPDATE products SET price = 0", REFUSED),
    "delete": ("DELETE FROM products", REFUSED),
    "drop": ("DROP TABLE products", REFUSED),
    "alter": ("ALTER TABLE products ADD COLUMN z", REFUSED),
    "create": ("CREATE TABLE t (x)", REFUSED),
    "create_index": ("CREATE INDEX i ON products(name)", REFUSED),
    "temp_table": ("CREATE TEMP TABLE t AS SELECT * FROM products", REFUSED),
    "temp_view": ("CREATE TEMP VIEW v AS SELECT 1", REFUSED),
    "temp_trigger": ("CREATE TEMP TRIGGER t AFTER INSERT ON products BEGIN SELECT 1; END", REFUSED),
    "virtual_table": ("CREATE VIRTUAL TABLE t USING fts5(x)", REFUSED),
    "writable_schema": ("PRAGMA writable_schema = ON", REFUSED),
    "pragma_user_version": ("PRAGMA user_version = 7", REFUSED),
    "pragma_journal": ("PRAGMA journal_mode = WAL", REFUSED),
    "pragma_function": ("SELECT * FROM pragma_writable_schema", REFUSED),
    "begin": ("BEGIN IMMEDIATE", REFUSED),
    "savepoint": ("SAVEPOINT a", REFUSED),
    "analyze": ("ANALYZE", REFUSED),
    "load_extension": ("SELECT load_extension('/tmp/evil')", REFUSED),
    "fts3_tokenizer_address": ("SELECT fts3_tokenizer('simple')", REFUSED),
    "fts3_tokenizer_register": ("SELECT fts3_tokenizer('evil', x'0000000000000000')", REFUSED),
    "two_statements": ("SELECT 1; DROP TABLE products", INVALID),
    "nul_byte": ("SELECT 1\x00; DROP TABLE products", INVALID),
    "lone_surrogate": ("SELECT '\ud800'", INVALID),
    "nested_parens": ("SELECT " + "(" * 5000 + "1" + ")" * 5000, INVALID),
    "deep_expression": ("SELECT " + "1 + " * 5000 + "1", INVALID),
    "wide_select": ("SELECT " + ", ".join(["1"] * 5000), INVALID),
    "compound_select": ("SELECT 1" + " UNION SELECT 1" * 600, INVALID),
    "many_arguments": ("SELECT max(" + ", ".join(["1"] * 120) + ")", INVALID),
    "huge_statement": ("SELECT '" + "x" * 1_000_000 + "'", INVALID),
    "like_pattern": ("SELECT 'a' LIKE '" + "%a" * 5000 + "'", INVALID),
    "high_variable": ("SELECT ?999", INVALID),
    "comment_hides_drop": ("SELECT 1 /*; DROP TABLE products */", frozenset({"ok"})),
    "line_comment_drop": ("SELECT 1 -- \n; DROP TABLE products", INVALID),
}

CORPUS = {**{k: (q, BOUNDED) for k, q in EXHAUSTING.items()}, **CLASSIC}


@pytest.fixture
def db(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_WORLD_DIR", str(tmp_path / "world"))
    return sql.db_path("store", 0)


def _run_corpus(db, tmp) -> dict:
    """Every corpus query once: {name: (status, rows, seconds)}."""
    out = {}
    for name, (query, _) in CORPUS.items():
        t0 = time.monotonic()
        res = sandbox.run(db, query.format(tmp=tmp) if "{tmp}" in query else query, deadline_s=DEADLINE_S)
        out[name] = (res.status, res.rows, time.monotonic() - t0)
    return out


def test_corpus_is_refused_or_bounded_and_changes_nothing(db, tmp_path):
    before, files, start = file_sha256(str(db)), set(tmp_path.rglob("*")), sandbox.stats()
    ran = _run_corpus(db, tmp_path)
    held = {k: s for k, (s, rows, _) in ran.items() if s in CORPUS[k][1] and (rows is None) == (s != "ok")}
    assert set(held) == set(CORPUS), {k: ran[k][:1] + (CORPUS[k][1],) for k in set(CORPUS) - set(held)}
    worst = max(ran, key=lambda k: ran[k][2])
    assert ran[worst][2] < DEADLINE_S + sandbox.KILL_GRACE_S + SLACK_S, (worst, ran[worst][2])
    assert file_sha256(str(db)) == before and set(tmp_path.rglob("*")) == files
    end = sandbox.stats()
    assert end.peak_rss_kb * 1024 <= sql_worker.MEMORY_BYTES
    assert end.kills - start.kills >= 3  # printf and instr spin inside one call: only the kill ends them
    assert end.starts - start.starts <= end.kills - start.kills + end.deaths - start.deaths + 1  # reused
    assert sandbox.run(db, "SELECT COUNT(*) FROM products").rows == [(40,)]  # a fresh worker after the kills
    counts = {s: sum(v[0] == s for v in ran.values()) for s in sandbox.STATUSES}
    print(f"\nhostile corpus: {len(CORPUS)} queries at a {DEADLINE_S} s deadline, outcomes {counts}; "
          f"worst wall {ran[worst][2]:.2f} s ({worst}); peak worker RSS {end.peak_rss_kb / 1024:.0f} MB "
          f"(cap {sql_worker.MEMORY_BYTES >> 20} MB); {end.kills - start.kills} kills")


def test_bound_hits_score_as_failed_executions_and_are_counted(db):
    names = ("hex_zeroblob_4e8", "rows_of_megabytes", "printf_precision_2e31", "runaway_recursive_cte")
    items = [x for x in T.items("sql/source", "test", 0, n=100) if x["reference"]["db"] == "store"][:len(names)]
    gens = [EXHAUSTING[n] for n in names]
    t0 = time.monotonic()
    res = score("sql/source", items, gens)
    assert time.monotonic() - t0 < 4 * (2.0 + sandbox.KILL_GRACE_S + SLACK_S)  # judge's default 2 s deadline
    assert res.n_unknown == 0 and res.metrics["exec_acc"] == 0.0
    assert [r.detail["status"] for r in res.items] == ["limit", "limit", "timeout", "timeout"]
    assert res.metrics["limit_rate"] == 50.0 and res.metrics["timeout_rate"] == 50.0
    cols = {"task": ["sql/source"] * 2, "reference": [items[0]["reference"], items[1]["reference"]]}
    assert REWARDS["execution"]([None] * 2, gens[:2], **cols) == [0.0, 0.0]  # GRPO: 0, never None


def _ordinary(n: int) -> list[tuple[str, str]]:
    """(database, gold query) of n ordinary world items, source and target schemas."""
    items = T.items("sql/source", "test", 0, n=n // 2) + T.items("sql/target", "test", 0, n=n - n // 2)
    return [(str(sql.db_path(x["reference"]["db"], x["reference"]["seed"])), x["reference"]["sql"]) for x in items]


def _per_query_ms(runner, queries) -> tuple[float, list]:
    t0 = time.perf_counter()
    outs = [runner(d, q) for d, q in queries]
    return 1000 * (time.perf_counter() - t0) / len(queries), outs


def test_worker_costs_little_over_in_process_execution(db):
    queries = _ordinary(200)
    sandbox.run(*queries[0])  # a running worker, as in an evaluation loop
    starts = sandbox.stats().starts
    local_ms, local = _per_query_ms(sandbox.run_in_process, queries)
    worker_ms, remote = _per_query_ms(sandbox.run, queries)
    assert [(o.status, o.rows) for o in remote] == [(o.status, o.rows) for o in local]
    assert all(o.status == "ok" for o in remote) and sandbox.stats().starts == starts
    assert worker_ms - local_ms < 5.0, (worker_ms, local_ms)
    print(f"\n{len(queries)} ordinary queries: in-process {local_ms:.3f} ms/query, worker {worker_ms:.3f} ms/query "
          f"(+{worker_ms - local_ms:.3f} ms)")
