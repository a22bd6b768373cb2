"""Progress for long one-time work (world build, seed bank): a rich bar, or log lines.

Both are `progress(phase, done, total)` callbacks, the form agent.world and agent.world.seed_bank
report through.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator

Progress = Callable[[str, int, int], None]
"""progress(phase, done, total): called as work advances."""


@contextmanager
def bar(description: str) -> Iterator[Progress]:
    """A live rich progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn  # noqa: PLC0415 (rich)
    from rich.progress import Progress as RichProgress  # noqa: PLC0415 (rich)

    with RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      transient=False) as live:
        task = live.add_task(description, total=None)

        def update(phase: str, done: int, total: int) -> None:
            live.update(task, description=f"{description}: {phase}", completed=done, total=total)

        yield update


@contextmanager
def lines(description: str, say: Callable[[str], None]) -> Iterator[Progress]:
    """Log lines for --quiet: each phase's start, every tenth of it, and its end."""
    seen: dict[str, int] = {}

    def update(phase: str, done: int, total: int) -> None:
        step = max(1, total // 10)
        if seen.get(phase) != done and (done in (0, total) or done % step == 0):
            seen[phase] = done
            say(f"{description}: {phase} {done}/{total}")

    yield update


def live_display(quiet: bool | None) -> bool:
    """A live display only on a terminal: redirected to a file or a CI log, a live bar leaves
    one final frame (without its newline), while log lines keep the history."""
    return not quiet and sys.stdout.isatty()


def reporter(description: str, quiet: bool, say: Callable[[str], None]):
    """The bar for a terminal, log lines under --quiet or when stdout is not a terminal."""
    return bar(description) if live_display(quiet) else lines(description, say)
