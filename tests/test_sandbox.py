"""SQL sandbox: attacks are refused or time out, are counted, and never change the file."""

import pytest

from experience_bank.hashing import file_sha256
from evaluators import tasks as T
from evaluators.scoring import sandbox, sql_exec
from evaluators.scoring.suites import score
from evaluators.tasks import sql

ATTACKS = {
    "attach": ("ATTACH DATABASE '{tmp}/x.db' AS x", "refused"),
    "vacuum_into": ("VACUUM INTO '{tmp}/copy.db'", "refused"),
    "insert": ("INSERT INTO products VALUES (999, 'x', 'toys', 1)", "refused"),
    "delete": ("DELETE FROM products", "refused"),
    "drop": ("DROP TABLE products", "refused"),
    "update": ("UPDATE products SET price = 0", "refused"),
    "pragma_write": ("PRAGMA user_version = 7", "refused"),
    "pragma_journal": ("PRAGMA journal_mode = WAL", "refused"),
    "create": ("CREATE TABLE t (x)", "refused"),
    "load_extension": ("SELECT load_extension('/tmp/evil')", "refused"),
    "recursive_cte": ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c",
                      "timeout"),
}


@pytest.fixture
def db(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_WORLD_DIR", str(tmp_path / "world"))
    return sql.db_path("store", 0)


@pytest.mark.parametrize("name", ATTACKS)
def test_attack_is_refused_or_times_out(db, tmp_path, name):
    query, expected = ATTACKS[name]
    before = file_sha256(str(db))
    out = sandbox.run(db, query.format(tmp=tmp_path), deadline_s=0.3)
    assert (out.status, out.rows) == (expected, None), out
    assert file_sha256(str(db)) == before
    assert not (tmp_path / "x.db").exists() and not (tmp_path / "copy.db").exists()


def test_attacks_score_wrong_and_are_counted(db, tmp_path):
    items = [x for x in T.items("sql/source", "test", 0, n=100) if x["reference"]["db"] == "store"][:len(ATTACKS)]
    gens = [q.format(tmp=tmp_path) for q, _ in ATTACKS.values()]
    res = score("sql/source", items, gens)
    assert res.metrics["exec_acc"] == 0.0 and res.n_unknown == 0
    assert res.metrics["refusal_rate"] == pytest.approx(100 * 10 / 11, abs=1e-3)
    assert res.metrics["timeout_rate"] == pytest.approx(100 / 11, abs=1e-3)


def test_order_matters_only_with_order_by(db):
    g = "SELECT name FROM products WHERE price > 50"
    p = "SELECT name FROM products WHERE price > 50 ORDER BY name DESC"
    assert sql_exec.judge(db, p, g)["correct"]
    g2 = "SELECT name FROM products ORDER BY price DESC LIMIT 3"
    p2 = "SELECT name FROM (SELECT name, price FROM products ORDER BY price DESC LIMIT 3) ORDER BY price ASC"
    assert not sql_exec.judge(db, p2, g2)["correct"]
    assert sql_exec.judge(db, "select name from products order by price desc limit 3;", g2)["correct"]


def test_gold_failure_is_unknown(db):
    assert sql_exec.judge(db, "SELECT 1", "SELECT nope FROM missing")["correct"] is None
    assert sql_exec.extract_sql("```sql\nSELECT 1;\n```") == "SELECT 1"


def test_authorizer_denies_load_extension_but_allows_plain_functions(db):
    import sqlite3

    assert sandbox._authorizer(sqlite3.SQLITE_FUNCTION, None, "load_extension") == sqlite3.SQLITE_DENY
    assert sandbox._authorizer(sqlite3.SQLITE_FUNCTION, None, "abs") == sqlite3.SQLITE_OK
    assert sandbox.run(db, "SELECT ABS(-2), UPPER('a'), COUNT(*) FROM products").rows == [(2, "A", 40)]
