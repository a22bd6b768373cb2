"""Run untrusted SQL against a SQLite file without letting it change anything.

Layers, each enough on its own for what it covers:
- the file is opened read-only through a URI (`mode=ro`), so no write can reach it;
- an authorizer allows only reading actions (SELECT, READ, FUNCTION, RECURSIVE) and
  denies everything else: ATTACH/DETACH, INSERT/UPDATE/DELETE, DDL, PRAGMA (read-only
  pragmas too — queries do not need them), transactions, VACUUM (incl. VACUUM INTO);
- SQLITE_LIMIT_ATTACHED = 0, so ATTACH fails even if the authorizer were bypassed;
- extension loading stays disabled (the Python default; never enabled here) and the
  authorizer denies the load_extension() function as well;
- a progress handler aborts a statement after a wall-clock deadline (runaway recursive
  CTEs, cartesian joins), and at most `max_rows` rows are fetched.
Out of scope: memory exhaustion by a single huge row, and CPU time inside one SQLite
VM step between progress callbacks (bounded by the callback interval).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}


@dataclass(frozen=True)
class Outcome:
    rows: list[tuple] | None
    """Result rows; None when the query did not complete."""
    status: str
    """ok | timeout | refused | error."""
    message: str = ""


# functions with side effects outside the database; extension loading is also off at the C
# level (Python never enables it), this is the second lock
DENIED_FUNCTIONS = {"load_extension"}


def _authorizer(action, arg1, arg2, *_rest) -> int:
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK if action in ALLOWED else sqlite3.SQLITE_DENY


def connect(path: str | Path, deadline_s: float) -> tuple[sqlite3.Connection, list[float]]:
    """A locked-down read-only connection; the returned list holds the deadline to reset per query."""
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    con = sqlite3.connect(uri, uri=True, check_same_thread=False)
    con.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    con.set_authorizer(_authorizer)
    deadline = [time.monotonic() + deadline_s]
    con.set_progress_handler(lambda: int(time.monotonic() > deadline[0]), 1000)
    return con, deadline


def run(path: str | Path, sql: str, deadline_s: float = 2.0, max_rows: int = 10_000) -> Outcome:
    """Execute one statement under the sandbox."""
    if not Path(path).is_file():
        return Outcome(None, "error", f"no database at {path}")
    con, deadline = connect(path, deadline_s)
    try:
        deadline[0] = time.monotonic() + deadline_s
        rows = con.execute(sql).fetchmany(max_rows)
        return Outcome(rows, "ok")
    except sqlite3.DatabaseError as exc:
        text = str(exc)
        if "interrupted" in text:
            return Outcome(None, "timeout", text)
        if any(m in text for m in ("not authorized", "denied", "prohibited", "too many attached")):
            return Outcome(None, "refused", text)
        return Outcome(None, "error", text)
    except (sqlite3.Warning, ValueError, OverflowError) as exc:  # e.g. two statements at once
        return Outcome(None, "error", str(exc))
    finally:
        con.close()
