"""Run untrusted SQL against a SQLite file without letting it change, stall or exhaust anything.

Every query runs in one persistent worker process (evaluators/scoring/sql_worker.py, which
lists the SQLite-side locks: read-only file, authorizer allow-list, SQLite limits, address
space, no file writes, CPU). Here, in the caller's process, two bounds that hold whatever
SQLite does inside one call, where its progress handler does not fire:
- wall clock: the reply must come within deadline_s + KILL_GRACE_S, or the worker is killed
  (SIGKILL) and the query is a timeout; the next query starts a fresh worker;
- memory: the worker's address space is capped, and a worker that dies mid-query (the cap
  hit where nothing could catch it, a signal) makes that query a limit hit.
A bound hit is an outcome of the query (timeout | limit), scored as a failed execution,
never an evaluator error. The worker is reused, so a query costs one pipe round trip, not a
process start. Out of scope: a caller that runs queries from many threads waits in turn.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from evaluators.scoring import sql_worker

KILL_GRACE_S = 0.5
START_TIMEOUT_S = 30.0  # a worker that is not ready by then is an evaluator fault, not the query's
STATUSES = ("ok", "timeout", "refused", "limit", "error")
_authorizer = sql_worker.authorizer  # the allow-list, for tests that read it


@dataclass(frozen=True)
class Outcome:
    rows: list[tuple] | None
    """Result rows; None when the query did not complete."""
    status: str
    """ok | timeout | refused | limit | error (one of STATUSES)."""
    message: str = ""


@dataclass(frozen=True)
class Stats:
    """What the worker pool has done in this process, for reports and tests."""
    queries: int
    """Queries sent to a worker."""
    kills: int
    """Workers killed at the hard deadline."""
    deaths: int
    """Workers that died on their own mid-query (memory cap, signal)."""
    starts: int
    """Worker processes started."""
    peak_rss_kb: int
    """Largest resident set any worker reached (its own high-water mark, or the kernel's at reaping)."""


class _Worker:
    """One child process and its pipes; replaced after a kill or death, or after a fork."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.counts = {"queries": 0, "kills": 0, "deaths": 0, "starts": 0, "peak_rss_kb": 0}

    def _start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-I", sql_worker.__file__], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, cwd="/", start_new_session=True)
        self.counts["starts"] += 1
        if _read_line(self.proc.stdout.fileno(), START_TIMEOUT_S) != b'{"ready": true}\n':
            self._reap(kill=True)
            raise RuntimeError(f"the SQL sandbox worker did not start ({sys.executable} -I {sql_worker.__file__})")

    def _reap(self, kill: bool) -> int:
        """Kill (if asked) and wait for the worker; returns its exit status and records its peak RSS."""
        proc, self.proc = self.proc, None
        if kill:  # not proc.kill(): it polls first, and a poll would reap the worker before wait4 can
            os.kill(proc.pid, signal.SIGKILL)  # still our unreaped child, so the pid cannot be reused
        _, status, _ = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, so Popen must not wait again
        try:
            proc.stdin.close()
        except BrokenPipeError:  # unsent bytes of a request to a dead worker; the fd is closed anyway
            pass
        proc.stdout.close()
        # not usage.ru_maxrss: Linux carries it across exec, so it holds the parent's forked image;
        # the peak is what the worker itself reported from /proc (a killed worker's last reply)
        return proc.returncode

    def _send(self, data: bytes) -> None:
        """Write a request; a worker found dead while idle (not this query's doing) is replaced once."""
        for attempt in (0, 1):
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
                return
            except BrokenPipeError:
                self._reap(kill=True)
                if attempt:
                    raise
                self._start()

    def ask(self, request: dict, wait_s: float) -> dict:
        """The worker's reply, or a timeout / limit reply when it was killed or died."""
        if self.proc is None:
            self._start()
        self.counts["queries"] += 1
        self._send(json.dumps(request).encode() + b"\n")
        line = _read_line(self.proc.stdout.fileno(), wait_s)
        if line is None:
            self._reap(kill=True)
            self.counts["kills"] += 1
            return {"status": "timeout", "rows": None, "message": f"killed after {wait_s:.1f} s inside one SQLite call"}
        if not line:
            code = self._reap(kill=False)
            self.counts["deaths"] += 1
            status = "timeout" if code == -signal.SIGXCPU else "limit"
            return {"status": status, "rows": None, "message": f"the sandbox worker died (exit {code})"}
        reply = json.loads(line)
        self.counts["peak_rss_kb"] = max(self.counts["peak_rss_kb"], reply.pop("peak_rss_kb"))
        return reply

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()  # the worker exits at end of input
            self._reap(kill=False)

    def forget(self) -> None:
        """In a forked child: drop the parent's worker (its pipes closed here, the process left alone)."""
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.stdout.close()
            self.proc = None


def _read_line(fd: int, timeout_s: float) -> bytes | None:
    """One newline-terminated reply from fd; b"" at end of file, None if timeout_s passed first."""
    end, buf = time.monotonic() + timeout_s, bytearray()
    while not buf.endswith(b"\n"):
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b""
        buf += chunk
    return bytes(buf)


_WORKER = _Worker()
_LOCK = threading.Lock()
atexit.register(_WORKER.close)


def _after_fork_in_child() -> None:
    # a forked child (a data loader, a trainer helper) must not talk over its parent's pipes, nor
    # wait on a lock that a parent thread held at the fork
    global _LOCK
    _LOCK = threading.Lock()
    _WORKER.forget()


os.register_at_fork(after_in_child=_after_fork_in_child)


def run(path: str | Path, sql: str, deadline_s: float = 2.0, max_rows: int = 10_000) -> Outcome:
    """Execute one statement under the sandbox, in the shared worker."""
    if not Path(path).is_file():
        return Outcome(None, "error", f"no database at {path}")
    limit = sql_worker.LIMITS[sqlite3.SQLITE_LIMIT_SQL_LENGTH]
    if len(sql.encode("utf-8", "surrogatepass")) > limit:  # not even sent: the worker would refuse it too
        return Outcome(None, "limit", f"statement over {limit} bytes")
    request = {"path": str(Path(path).resolve()), "sql": sql, "deadline_s": deadline_s, "max_rows": max_rows}
    with _LOCK:
        reply = _WORKER.ask(request, deadline_s + KILL_GRACE_S)
    return Outcome(sql_worker.decode_rows(reply["rows"]), reply["status"], reply["message"])


def run_in_process(path: str | Path, sql: str, deadline_s: float = 2.0, max_rows: int = 10_000) -> Outcome:
    """The same locked connection in the caller's process, without the hard bounds (for benchmarks)."""
    reply = sql_worker.execute(str(path), sql, deadline_s, max_rows)
    return Outcome(reply["rows"], reply["status"], reply["message"])


def stats() -> Stats:
    with _LOCK:
        return Stats(**_WORKER.counts)
