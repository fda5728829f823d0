"""Status applies and Events have separate write slots.

What this proves: with one slot each, a pool whose Event is still being posted (a slow
apiserver) does not hold another pool's status apply: the second pool's decision is written
while the first pool's Event hangs; the Event is posted once it is let through.
"""

from __future__ import annotations

import asyncio

from autoscaler.loop import Autoscaler, LoopSettings
from gpucellpool.api.pool import GPUCellPool
from simulations.simulator.engine.clock import VirtualClock
from tests.unit.test_loop_fakes import FakeWorkload, FakeWriter, pending_pod, pool_manifest

SETTINGS = LoopSettings(debounce_s=0.15, tick_s=10.0, resync_s=10.0, writes_in_flight=1)


class SlowEvents(FakeWriter):
    """Every Event waits until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def event(self, pool: GPUCellPool, reason: str, note: str, warning: bool) -> None:
        await self.release.wait()
        await super().event(pool, reason, note, warning)


async def test_a_hanging_event_does_not_hold_another_pools_status() -> None:
    clock, workload, writer = VirtualClock(), FakeWorkload(), SlowEvents()
    scaler = Autoscaler(workload, writer, clock, settings=SETTINGS)
    try:
        workload.pods["p"] = pending_pod("p")
        scaler.pool_event("ADDED", pool_manifest("a"))
        await clock.advance(0.2)  # a's status written; its Event hangs in the one Event slot
        assert len(writer.for_pool("a")) == 1 and writer.events == []
        scaler.pool_event("ADDED", pool_manifest("b", secret="other"))
        await clock.advance(0.2)
        assert len(writer.for_pool("b")) == 1, "b's status waited behind a's Event"
        writer.release.set()
        await clock.advance(0.2)
        assert sorted(name for name, _, _ in writer.events) == ["a", "b"]
    finally:
        writer.release.set()
        await scaler.close()
