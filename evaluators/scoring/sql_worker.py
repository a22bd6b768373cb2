"""The SQLite side of the SQL sandbox: untrusted queries, one at a time, in a child process.

evaluators.scoring.sandbox starts this file as `python -I sql_worker.py` and keeps it for
many queries; it reads one JSON request per line on stdin and answers one JSON line on
stdout. Stdlib only: isolated mode puts neither our packages nor site-packages on the path.
Bounds set here, each independent of the others:
- the file is opened read-only (`mode=ro`), and an authorizer allows only reading actions:
  no ATTACH, writes, DDL, temp objects, PRAGMA, transactions or VACUUM (incl. VACUUM INTO);
  it denies load_extension() (extension loading also stays off at the C level) and
  fts3_tokenizer() (its one-argument form returns a process address);
- SQLite's own limits (LIMITS): no string or blob over 1 MB, no statement over 100 kB, few
  columns, compound terms, expression depth, function arguments; ATTACHED = 0;
- RLIMIT_AS caps the whole process at MEMORY_BYTES: an allocation past it fails inside
  SQLite (SQLITE_NOMEM) or Python (MemoryError) and the query scores as a limit hit;
- RLIMIT_FSIZE = 0 and temp_store = MEMORY: nothing can be written to any file, not even
  a sorter's spill (that memory is inside RLIMIT_AS instead);
- RLIMIT_CPU is re-armed before each query to the CPU used so far + deadline + CPU_GRACE_S,
  so a call that never returns dies by SIGXCPU even if the parent is gone;
- a progress handler ends a statement cleanly at the deadline between VM steps.
The parent kills this process at the deadline + a grace, for time spent inside one SQLite
call (where the progress handler does not fire), and starts a fresh one for the next query.
"""

from __future__ import annotations

import base64
import json
import resource
import signal
import sqlite3
import sys
import time
from pathlib import Path

MEMORY_BYTES = 256 * 2**20  # address space; the idle worker maps about 16 MB
MAX_REPLY_BYTES = 16 * 2**20  # a result set larger than this is a limit hit, not sent
CPU_GRACE_S = 2

LIMITS = {
    sqlite3.SQLITE_LIMIT_LENGTH: 1_000_000,  # bytes in any string, blob or row
    sqlite3.SQLITE_LIMIT_SQL_LENGTH: 100_000,
    sqlite3.SQLITE_LIMIT_COLUMN: 100,
    sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 100,
    sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 50,
    sqlite3.SQLITE_LIMIT_VDBE_OP: 100_000,
    sqlite3.SQLITE_LIMIT_FUNCTION_ARG: 32,
    sqlite3.SQLITE_LIMIT_ATTACHED: 0,
    sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH: 1_000,
    sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER: 10,
    sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 1,
    sqlite3.SQLITE_LIMIT_WORKER_THREADS: 0,
}
ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
DENIED_FUNCTIONS = {"load_extension", "fts3_tokenizer"}

_REFUSED = ("not authorized", "authorization denied", "prohibited", "too many attached")
_LIMIT = ("too big", "too large", "too many", "out of memory", "too complex", "stack overflow",
          "must be between")


def authorizer(action, arg1, arg2, *_rest) -> int:
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK if action in ALLOWED else sqlite3.SQLITE_DENY


def connect(path: str, deadline: list[float]) -> sqlite3.Connection:
    """A locked-down read-only connection; the progress handler reads deadline[0]."""
    con = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
    con.execute("PRAGMA temp_store = MEMORY")  # before the authorizer, which denies PRAGMA
    for limit, value in LIMITS.items():
        con.setlimit(limit, value)
    con.set_authorizer(authorizer)
    con.set_progress_handler(lambda: int(time.monotonic() > deadline[0]), 1000)
    return con


def classify(exc: BaseException) -> str:
    """The outcome class of a failed query: timeout | refused | limit | error."""
    if isinstance(exc, MemoryError):
        return "limit"
    text = str(exc).lower()
    if "interrupted" in text:
        return "timeout"
    if any(m in text for m in _REFUSED):
        return "refused"
    return "limit" if any(m in text for m in _LIMIT) else "error"


def execute(path: str, sql: str, deadline_s: float, max_rows: int) -> dict:
    """Run one statement in this process: {"status", "rows" (None unless ok), "message"}."""
    deadline = [time.monotonic() + deadline_s]
    try:
        con = connect(path, deadline)
    except sqlite3.Error as exc:
        return {"status": "error", "rows": None, "message": f"cannot open {path}: {exc}"}
    try:
        return {"status": "ok", "rows": con.execute(sql).fetchmany(max_rows), "message": ""}
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as exc:
        return {"status": classify(exc), "rows": None, "message": f"{type(exc).__name__}: {exc}"[:500]}
    finally:
        con.close()


def _value(v):
    return {"b": base64.b64encode(v).decode()} if isinstance(v, bytes) else v


def encode(reply: dict) -> bytes:
    """One reply line. Blobs become {"b": base64}; rows hold nothing else that is a dict."""
    if reply["rows"] is not None:
        reply = {**reply, "rows": [[_value(v) for v in row] for row in reply["rows"]]}
    return json.dumps(reply).encode() + b"\n"


def decode_rows(rows: list[list] | None) -> list[tuple] | None:
    if rows is None:
        return None
    return [tuple(base64.b64decode(v["b"]) if isinstance(v, dict) else v for v in row) for row in rows]


def _arm_cpu(deadline_s: float) -> None:
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(used.ru_utime + used.ru_stime + deadline_s) + CPU_GRACE_S
    resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))


def _confine() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past FSIZE fails (EFBIG), not the process
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent; it closes our stdin


def _answer(request: dict) -> bytes:
    _arm_cpu(request["deadline_s"])
    reply = execute(request["path"], request["sql"], request["deadline_s"], request["max_rows"])
    try:
        line = encode(reply)
    except (MemoryError, ValueError) as exc:
        line = encode({"status": "limit", "rows": None, "message": f"result not encodable: {type(exc).__name__}"})
    if len(line) > MAX_REPLY_BYTES:
        line = encode({"status": "limit", "rows": None, "message": f"result over {MAX_REPLY_BYTES} bytes"})
    # the peak is read after encoding so that it counts the reply's own memory; spliced into
    # the object's closing brace rather than encoding a large reply twice
    return line[:-2] + b', "peak_rss_kb": %d}\n' % _peak_rss_kb()


def _peak_rss_kb() -> int:
    # VmHWM is this address space's own high-water mark. ru_maxrss is not: Linux carries it
    # across exec, so a worker spawned from a 900 MB parent would report the parent's fork.
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def serve(stdin=sys.stdin.buffer, stdout=sys.stdout.buffer) -> None:
    """Answer requests until stdin closes (the parent went away or is done with us)."""
    _confine()
    stdout.write(b'{"ready": true}\n')
    stdout.flush()
    for line in stdin:
        stdout.write(_answer(json.loads(line)))
        stdout.flush()


if __name__ == "__main__":
    serve()
