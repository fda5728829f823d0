"""Drives the provisioner's ``reconcile_once`` per pool from watch events, like the loop does.

Why this module exists: ``gpucellpool run`` must not only decide but also act. The provisioner
shell (``provisioner.reconciler.Reconciler``) is stateless per pass; this driver gives each pool
one task that reconciles when something relevant changed - the pool's spec, deletion or
``status.desiredReplicas`` (the autoscaler's contract), its SwiftGuests/Machines, or one of its
cells' Nodes or a pod on one (routed by ``autoscaler.routing``: the drain waits for a Node to
empty) - after a short debounce, and otherwise when the reconciler asked to be requeued.
Failures back off exponentially and never touch other pools. Only the leader reconciles.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from provisioner.reconciler import PoolKey, ReconcileResult

JSON = dict[str, Any]
log = logging.getLogger(__name__)


class Reconcile(Protocol):
    async def reconcile_once(self, key: PoolKey) -> ReconcileResult: ...


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


@dataclass(slots=True)
class _Pool:
    fingerprint: tuple[Any, ...]
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    passes: int = 0
    errors: int = 0


def _fingerprint(raw: JSON) -> tuple[Any, ...]:
    meta, status = raw.get("metadata") or {}, raw.get("status") or {}
    return (meta.get("generation"), meta.get("deletionTimestamp"), status.get("desiredReplicas"))


def owner_pool(obj: JSON) -> tuple[str, str] | None:
    """The GPUCellPool controlling an outer object (SwiftGuest, Machine), if any."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "GPUCellPool":
            return str(meta.get("namespace", "")), str(ref.get("name", ""))
    return None


class ProvisionerDriver:
    def __init__(
        self,
        reconciler: Reconcile,
        clock: Clock,
        is_leader: Callable[[], bool],
        debounce_s: float = 0.2,
        idle_requeue_s: float = 30.0,
        max_backoff_s: float = 60.0,
    ) -> None:
        self.reconciler = reconciler
        self.clock = clock
        self.is_leader = is_leader
        self.debounce_s = debounce_s
        self.idle_requeue_s = idle_requeue_s
        self.max_backoff_s = max_backoff_s
        self.pools: dict[tuple[str, str], _Pool] = {}

    def pool_event(self, kind: str, raw: JSON) -> None:
        meta = raw.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if kind == "DELETED":
            entry = self.pools.pop(key, None)
            if entry is not None and entry.task is not None:
                entry.task.cancel()
            return
        entry = self.pools.get(key)
        if entry is None:
            entry = self.pools[key] = _Pool(_fingerprint(raw))
            entry.task = asyncio.create_task(self._run(key), name=f"provision:{key[0]}/{key[1]}")
            entry.wake.set()
        elif _fingerprint(raw) != entry.fingerprint:
            entry.fingerprint = _fingerprint(raw)
            entry.wake.set()

    def wake(self, key: tuple[str, str]) -> None:
        entry = self.pools.get(key)
        if entry is not None:
            entry.wake.set()

    def wake_all(self) -> None:
        for entry in self.pools.values():
            entry.wake.set()

    async def _wait(self, entry: _Pool, timeout_s: float) -> None:
        waiter = asyncio.ensure_future(entry.wake.wait())
        timer = asyncio.ensure_future(self.clock.sleep(timeout_s))
        try:
            await asyncio.wait({waiter, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            timer.cancel()
        if entry.wake.is_set():
            await self.clock.sleep(self.debounce_s)
        entry.wake.clear()

    async def _run(self, key: tuple[str, str]) -> None:
        delay, backoff = 0.0, 1.0
        while (entry := self.pools.get(key)) is not None:
            await self._wait(entry, delay)
            if not self.is_leader():
                delay = self.idle_requeue_s
                continue
            try:
                result = await self.reconciler.reconcile_once(PoolKey(*key))
            except asyncio.CancelledError:
                raise
            except Exception:  # one pool's failure never stops the others
                entry.errors += 1
                log.exception("reconcile failed", extra={"pool": "/".join(key)})
                delay, backoff = backoff, min(backoff * 2, self.max_backoff_s)
                continue
            entry.passes += 1
            backoff = 1.0
            if result.gone:
                return
            delay = result.requeue_after_s or self.idle_requeue_s

    async def close(self) -> None:
        tasks = [e.task for e in self.pools.values() if e.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.pools.clear()
