"""Posting the provisioner's Events: an ``EventSink`` port and its adapter on the one sink.

Why this module exists: the reconciler announces what it did (``fsm.events`` decides what);
posting is I/O that may fail and must never fail a reconcile pass, and tests want to see or
silence it. ``KubeEventSink`` hands each ``PoolEvent`` to the operator's one Event sink
(``gpucellpool.kube.events``: ``events.k8s.io/v1``, ``reportingController: gpucellpool``,
``action`` and ``reason`` from the pure diff); ``NullEventSink`` posts nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from gpucellpool.api.clock import Clock
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import CellStatus
from gpucellpool.kube.events import EVENTS_API, EventNote, regarding
from gpucellpool.kube.events import EventSink as OneSink
from provisioner.fsm.events import PoolEvent, pass_events
from provisioner.kube import Kind, KubeApi
from provisioner.status import own_conditions

EVENT = Kind(EVENTS_API, "Event", "events")
REPORTING_CONTROLLER = "gpucellpool"


class EventSink(Protocol):
    async def emit(self, pool: GPUCellPool, event: PoolEvent) -> None:
        """Post one Event about ``pool``; never raises."""
        ...


class NullEventSink:
    async def emit(self, pool: GPUCellPool, event: PoolEvent) -> None:
        return None


class KubeEventSink:
    """Events about the pool, in its namespace of the infrastructure cluster, posted by the
    one sink (``gpucellpool.kube.events``) through ``api`` (so fault-injecting APIs see them)."""

    def __init__(self, api: KubeApi, clock: Clock, instance: str = REPORTING_CONTROLLER) -> None:
        self.sink = OneSink(api.create, clock.now, REPORTING_CONTROLLER, instance)

    async def emit(self, pool: GPUCellPool, event: PoolEvent) -> None:
        note = EventNote(event.reason, event.note, event.action, event.warning)
        await self.sink.post(regarding(pool), note)


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
