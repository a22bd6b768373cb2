"""A test hook: `AGENT_KILL_AT=<point>[:<nth>]` SIGKILLs this process the nth time (default: the
first) it reaches the named point, as `kill -9` would: no cleanup, no atexit, no flush.

It exists so that tests/test_kill_real.py can land kills at exact places of a real episode:
- after a graph node, by its name (`authorize`, `validate`, `train`, `gate`, `commit`, ...), from
  agent/loop/episode.py's drive loop, `commit:2` being the second commit of this process;
- `promote.replace`: inside a promotion, with the new parent.json written and fsync'd to its
  temporary file but not yet renamed over the old one (agent/run/promotion.py);
- `promote.done`: the pointer moved, the event not yet appended.
Kills inside training or evaluation need no hook: the test kills from outside when the trainer's
or evaluator's files appear. Nothing in the product sets the variable; unset, a call costs one
environment lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "AGENT_KILL_AT"
_visits: dict[str, int] = {}


def _target(value: str) -> tuple[str, int]:
    """(point, nth) of the variable's value."""
    point, sep, nth = value.rpartition(":")
    return (point, int(nth)) if sep and nth.isdigit() else (value, 1)


def kill_point(point: str) -> None:
    """SIGKILL this process here when AGENT_KILL_AT names `point` and this is its nth visit."""
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    name, nth = _target(wanted)
    if name != point:
        return
    _visits[point] = _visits.get(point, 0) + 1
    if _visits[point] == nth:
        os.kill(os.getpid(), signal.SIGKILL)
