"""A rich progress bar for long runs, silent when stdout is not a terminal.

Why this module exists: a month-long replay of five policies takes a while; a human at a
terminal should see it move, while CI logs and pipes must stay clean.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def progress_enabled(enabled: bool | None) -> bool:
    """``enabled``, or when None: whether stdout is a terminal."""
    return sys.stdout.isatty() if enabled is None else enabled


@contextmanager
def progress_bar(enabled: bool | None = None) -> Iterator[Callable[[str], Callable[[float], None]]]:
    """Yields ``task(name) -> update(fraction)``; a no-op when disabled or not a TTY."""
    if not progress_enabled(enabled):
        yield lambda _name: lambda _fraction: None
        return
    from rich.progress import Progress  # noqa: PLC0415 (terminal only)

    with Progress(transient=True) as bar:

        def task(name: str) -> Callable[[float], None]:
            task_id = bar.add_task(name, total=1.0)
            return lambda fraction: bar.update(task_id, completed=fraction)

        yield task
