"""Fewer cyclic garbage collections while a replay runs.

Why this module exists: a month-long replay allocates millions of short-lived tuples and
small objects (observations, decisions, memory snapshots) next to a few hundred thousand
long-lived ones (the trace, the waits, memos). With CPython's default thresholds the
collector runs every 700 net allocations and keeps re-scanning the long-lived objects: 5 to
12 % of a replay's CPU time. The engine makes almost no reference cycles, so collecting
rarely frees nothing later than it would have. ``relaxed`` moves what exists before the run
out of the collector's view (``gc.freeze``) and raises the first threshold for the run's
duration, then restores both; nothing the simulation computes depends on it (results are
identical, tests/unit/test_sim_speed_identity.py).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

RUN_GEN0_THRESHOLD = 50_000  # net allocations between young collections during a run


class _State:
    """Runs in progress in this process (nested, or in threads) and the thresholds to restore
    when the last one ends."""

    lock = threading.Lock()
    depth = 0
    saved: tuple[int, ...] = ()


@contextmanager
def relaxed() -> Iterator[None]:
    """Run the body with the collector frozen on older objects and a higher threshold."""
    with _State.lock:
        if _State.depth == 0:
            _State.saved = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(max(RUN_GEN0_THRESHOLD, _State.saved[0]), *_State.saved[1:])
        _State.depth += 1
    try:
        yield
    finally:
        with _State.lock:
            _State.depth -= 1
            if _State.depth == 0:
                gc.set_threshold(*_State.saved)
                gc.unfreeze()
