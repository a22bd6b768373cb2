"""SQL sandbox: attacks are refused or time out, are counted, and never change the file; the worker's lifecycle."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experience_bank.hashing import file_sha256
from evaluators import tasks as T
from evaluators.scoring import sandbox, sql_exec, sql_worker
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
    assert res.metrics["timeout_rate"] == pytest.approx(100 / 11, abs=1e-3) and res.metrics["limit_rate"] == 0.0


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


@pytest.mark.parametrize("text,extracted", [
    ("SELECT 1\x00;SELECT 2;", "SELECT 1\x00;SELECT 2;"),  # the NUL hides every `;`: the text runs whole
    ("SELECT 1;\x00SELECT 2;", "SELECT 1"),  # a complete first statement before the NUL is the query
    ("```sql\nSELECT 1\x00;```", "SELECT 1\x00;"),
    ("SELECT '\ud800';", "SELECT '\ud800';")])  # a lone surrogate: no UTF-8 for SQLite's tokenizer
def test_a_generation_sqlite_cannot_read_is_wrong_not_a_crash(db, text, extracted):
    # A tiny model on world seed 99 wrote a NUL into its SQL: complete_statement raised ValueError and
    # took the scorer and the GRPO reward (TRL's training step) down with it.
    from evaluators import rewards
    assert sql_exec.extract_sql(text) == extracted
    verdict = sql_exec.judge(db, sql_exec.extract_sql(text), "SELECT 1", rule="bird")
    readable = "\x00" not in extracted and "\ud800" not in extracted
    assert verdict["correct"] is readable and verdict["status"] == ("ok" if readable else "error")
    ref = json.dumps({"db_path": str(db), "sql": "SELECT 1"})
    assert rewards.execution(["p"], [text], task=["sql/target"], reference=[ref]) == [float(readable)]


SQLISH = st.lists(st.sampled_from(list("SELECT 1;'\"`-/*\n") + ["```sql", "\x00", "\ud800"])).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), SQLISH))
def test_extract_sql_never_raises_and_returns_a_substring(text):
    out = sql_exec.extract_sql(text)
    assert out in text or out in text.strip()


def test_authorizer_denies_load_extension_but_allows_plain_functions(db):
    import sqlite3

    assert sandbox._authorizer(sqlite3.SQLITE_FUNCTION, None, "load_extension") == sqlite3.SQLITE_DENY
    assert sandbox._authorizer(sqlite3.SQLITE_FUNCTION, None, "abs") == sqlite3.SQLITE_OK
    assert sandbox.run(db, "SELECT ABS(-2), UPPER('a'), COUNT(*) FROM products").rows == [(2, "A", 40)]


def test_authorizer_denies_fts3_tokenizer_and_reindex(tmp_path):
    import sqlite3

    assert sandbox._authorizer(sqlite3.SQLITE_FUNCTION, None, "FTS3_TOKENIZER") == sqlite3.SQLITE_DENY
    path = tmp_path / "indexed.db"  # REINDEX asks the authorizer only when there is an index to rebuild
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t (x)")
        con.execute("CREATE INDEX i ON t(x)")
    con.close()
    before = file_sha256(str(path))
    assert sandbox.run(path, "REINDEX").status == "refused"
    assert file_sha256(str(path)) == before


values = st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False), st.text(), st.binary())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(values, max_size=5), max_size=10))
def test_wire_format_round_trips_every_sqlite_value(rows):
    line = sql_worker.encode({"status": "ok", "rows": rows, "message": ""})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert sql_worker.decode_rows(json.loads(line)["rows"]) == [tuple(r) for r in rows]


@pytest.mark.parametrize("exc,status", [
    (MemoryError(), "limit"), (ValueError("string or blob too big"), "limit"),
    (ValueError("query string is too large"), "limit"), (ValueError("parser stack overflow"), "limit"),
    (ValueError("interrupted"), "timeout"), (ValueError("not authorized"), "refused"),
    (ValueError("authorization denied"), "refused"), (ValueError("too many attached databases - max 0"), "refused"),
    (ValueError("no such table: x"), "error"), (ValueError('near "SELEC": syntax error'), "error")])
def test_failures_are_classified_once(exc, status):
    assert sql_worker.classify(exc) == status


def test_statement_over_the_sql_limit_is_not_even_sent(db):
    sent = sandbox.stats().queries
    out = sandbox.run(db, "SELECT '" + "x" * 200_000 + "'")
    assert (out.status, out.rows) == ("limit", None) and sandbox.stats().queries == sent


def test_result_over_the_reply_cap_is_a_limit_hit(db):
    out = sandbox.run(db, "SELECT zeroblob(900000) FROM products LIMIT 20")  # 18 MB of blobs
    assert (out.status, out.rows) == ("limit", None), out
    assert len(sandbox.run(db, "SELECT zeroblob(900000) FROM products LIMIT 2").rows[1][0]) == 900_000


def _zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"


def test_worker_dead_while_idle_is_replaced_without_blaming_the_query(db):
    sandbox.run(db, "SELECT 1")
    pid, before = sandbox._WORKER.proc.pid, sandbox.stats()
    os.kill(pid, signal.SIGKILL)
    while not _zombie(pid):
        time.sleep(0.01)
    assert sandbox.run(db, "SELECT COUNT(*) FROM products").rows == [(40,)]
    after = sandbox.stats()
    assert (after.starts - before.starts, after.deaths - before.deaths) == (1, 0)
    assert sandbox._WORKER.proc.pid != pid


@pytest.mark.parametrize("sig,status", [(signal.SIGKILL, "limit"), (signal.SIGXCPU, "timeout")])
def test_worker_dying_mid_query_fails_that_query_only(db, sig, status):
    sandbox.run(db, "SELECT 1")
    pid, before = sandbox._WORKER.proc.pid, sandbox.stats()
    threading.Timer(0.3, os.kill, (pid, sig)).start()
    out = sandbox.run(db, ATTACKS["recursive_cte"][0], deadline_s=5.0)
    assert (out.status, out.rows) == (status, None) and f"exit -{int(sig)}" in out.message
    assert sandbox.stats().deaths == before.deaths + 1
    assert sandbox.run(db, "SELECT COUNT(*) FROM products").rows == [(40,)]


def test_forked_child_gets_its_own_worker(db):
    sandbox.run(db, "SELECT 1")
    pid = sandbox._WORKER.proc.pid
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child must not talk over the parent's pipes
        rows = sandbox.run(db, "SELECT COUNT(*) FROM products").rows
        os.write(write, json.dumps([rows, sandbox._WORKER.proc.pid]).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    rows, child_worker = json.loads(os.read(read, 4096))
    assert status == 0 and rows == [[40]] and child_worker != pid
    assert sandbox.run(db, "SELECT COUNT(*) FROM products").rows == [(40,)] and sandbox._WORKER.proc.pid == pid


def test_worker_runs_under_its_rlimits(db):
    sandbox.run(db, "SELECT 1", deadline_s=1.0)
    text = Path(f"/proc/{sandbox._WORKER.proc.pid}/limits").read_text()
    soft = {line[:26].strip(): line[26:47].strip() for line in text.splitlines()[1:]}
    assert soft["Max address space"] == str(sql_worker.MEMORY_BYTES) and soft["Max file size"] == "0"
    # re-armed per query: the CPU used so far (well under a second here) + the deadline + the grace
    assert 1 + sql_worker.CPU_GRACE_S <= int(soft["Max cpu time"]) <= 2 + sql_worker.CPU_GRACE_S
