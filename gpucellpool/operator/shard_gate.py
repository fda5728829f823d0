"""The per-pool write gate of a sharded operator, for callers that ask without naming the pool.

Why this module exists: a pool may be acted on (decided, provisioned, its status and metrics
exported) only by the process holding its shard (``gpucellpool.runtime.shards``), so the gate is a
predicate of the pool, ``owns(key) -> bool``. The loop, the provisioning driver and the status
metrics still take a predicate without arguments (``is_leader()``). This module bridges the
two: the composition root dispatches each pool's watch event inside ``for_pool(key)``, which
sets a context variable; asyncio copies the context into every task created meanwhile (each
pool's decision and provisioning task is created there), so ``acting()`` called from that
pool's code answers for that pool. Outside any pool (the ProvisioningRequest controller, which
works across pools) ``acting()`` answers for shard 0, so exactly one process does that too.
Unsharded, ``acting()`` is the one Lease's ``is_leader`` everywhere.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

PoolKey = tuple[str, str]

_POOL: contextvars.ContextVar[PoolKey | None] = contextvars.ContextVar("pool", default=None)


@contextlib.contextmanager
def for_pool(key: PoolKey) -> Iterator[None]:
    """Run the block (and every task it creates) as the code of pool ``key``."""
    token = _POOL.set(key)
    try:
        yield
    finally:
        _POOL.reset(token)


def key_of(raw: Mapping[str, Any]) -> PoolKey:
    """``(namespace, name)`` of a GPUCellPool as the watch delivers it."""
    meta = raw.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def current_pool() -> PoolKey | None:
    """The pool whose code is running, if any."""
    return _POOL.get()


class ShardGate:
    """``owns(key)`` for callers that name the pool, ``acting()`` for those that do not, and
    ``term_left()``: how long what ``acting()`` said stays true at the latest (seconds before
    another process could take the Lease over; ``inf`` when no term was given)."""

    def __init__(
        self,
        owns: Callable[[PoolKey], bool],
        cluster_wide: Callable[[], bool],
        term_left: Callable[[PoolKey], float] = lambda _key: math.inf,
        cluster_wide_left: Callable[[], float] = lambda: math.inf,
    ) -> None:
        self.owns = owns
        self._cluster_wide = cluster_wide
        self._term_left, self._cluster_wide_left = term_left, cluster_wide_left

    def acting(self) -> bool:
        key = _POOL.get()
        return self._cluster_wide() if key is None else self.owns(key)

    def term_left(self) -> float:
        key = _POOL.get()
        return self._cluster_wide_left() if key is None else self._term_left(key)
