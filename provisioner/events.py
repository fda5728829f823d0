"""Posting the provisioner's Events: an ``EventSink`` port and its events.k8s.io/v1 adapter.

Why this module exists: the reconciler announces what it did (``fsm.events`` decides what);
posting is I/O that may fail and must never fail a reconcile pass, and tests want to see or
silence it. ``KubeEventSink`` writes ``events.k8s.io/v1`` Events about the pool
(``reportingController: gpucellpool``, ``action`` and ``reason`` from the pure diff);
``NullEventSink`` posts nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from gpucellpool.api.clock import Clock
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import CellStatus
from provisioner.fsm.events import PoolEvent, pass_events
from provisioner.kube import JSON, Kind, KubeApi, KubeError
from provisioner.status import own_conditions

EVENT = Kind("events.k8s.io/v1", "Event", "events")
REPORTING_CONTROLLER = "gpucellpool"
log = logging.getLogger(__name__)


class EventSink(Protocol):
    async def emit(self, pool: GPUCellPool, event: PoolEvent) -> None:
        """Post one Event about ``pool``; never raises."""
        ...


class NullEventSink:
    async def emit(self, pool: GPUCellPool, event: PoolEvent) -> None:
        return None


def _micro_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_body(pool: GPUCellPool, event: PoolEvent, now: float, instance: str) -> JSON:
    meta = pool.metadata
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{meta.name}.{int(now * 1e9):x}", "namespace": meta.namespace},
        "eventTime": _micro_time(now),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance[:128],
        "action": event.action,
        "reason": event.reason,
        "type": "Warning" if event.warning else "Normal",
        "note": event.note,
        "regarding": {
            "apiVersion": pool.api_version,
            "kind": pool.kind,
            "name": meta.name,
            "namespace": meta.namespace,
            "uid": meta.uid,
        },
    }


@dataclass
class KubeEventSink:
    """events.k8s.io/v1 Events in the pool's namespace of the infrastructure cluster."""

    api: KubeApi
    clock: Clock
    instance: str = "gpucellpool"
    _last: float = 0.0

    async def emit(self, pool: GPUCellPool, event: PoolEvent) -> None:
        now = max(self.clock.now(), self._last + 1e-6)  # unique names within a pass
        self._last = now
        try:
            await self.api.create(event_body(pool, event, now, self.instance))
        except KubeError as exc:
            log.warning("event %s not posted: %s", event.reason, exc)


async def emit_all(sink: EventSink, pool: GPUCellPool, events: Iterable[PoolEvent]) -> None:
    for event in events:
        await sink.emit(pool, event)


async def announce_pass(
    sink: EventSink,
    pool: GPUCellPool,
    prev: Mapping[str, CellStatus],
    final: Sequence[CellStatus],
    conds: list[dict[str, Any]],
) -> None:
    """Events for what a (successfully published) pass changed: its cells and its own
    conditions (another writer's condition that moved meanwhile is that writer's news)."""
    before = own_conditions(c.to_api() for c in pool.status.conditions or [])
    await emit_all(sink, pool, pass_events(prev, final, before, own_conditions(conds)))
