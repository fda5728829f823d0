"""Where a decision's time goes: ``gpucellpool_decision_stage_seconds``, stage by stage.

What this proves, on the virtual clock with status applies that take 0.3 s: a quiet pool's
wake-up waits nothing (the runner's leading edge) and a burst's trailing decision waits its
debounce; a decision takes no clock time of its own here; with one write slot, the second
pool's apply waits for the first one's slot (``write_slot``) and each apply's 0.3 s is its
``write``. The histogram is operator-wide (no pool label) and written only by the leader.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.loop import Autoscaler, LoopSettings
from gpucellpool.operator.metrics import OperatorMetrics
from simulations.simulator.engine.clock import VirtualClock
from tests.unit.test_loop_fakes import JSON, FakeWorkload, FakeWriter, pending_pod, pool_manifest

SETTINGS = LoopSettings(debounce_s=0.15, tick_s=10.0, resync_s=60.0, writes_in_flight=1)
NAME = "gpucellpool_decision_stage_seconds"


class SlowApplies(FakeWriter):
    """Every status apply takes 0.3 s of the clock."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self.clock = clock

    async def apply_status(self, body: JSON) -> None:
        await self.clock.sleep(0.3)
        await super().apply_status(body)


def stage(registry: CollectorRegistry, name: str) -> tuple[float, float]:
    """(observations, seconds) of one stage."""
    count = registry.get_sample_value(f"{NAME}_count", {"stage": name}) or 0.0
    total = registry.get_sample_value(f"{NAME}_sum", {"stage": name}) or 0.0
    return count, round(total, 6)


@pytest.mark.parametrize("leader", [True, False])
async def test_each_stage_of_a_decision_is_observed(leader: bool) -> None:
    clock, workload = VirtualClock(), FakeWorkload()
    writer, registry = SlowApplies(clock), CollectorRegistry()
    metrics = OperatorMetrics(registry)
    scaler = Autoscaler(
        workload, writer, clock, metrics, settings=SETTINGS, is_leader=lambda: leader
    )
    try:
        scaler.pool_event("ADDED", pool_manifest("a"))
        scaler.pool_event("ADDED", pool_manifest("b", secret="other"))
        await clock.advance(1.0)
        if not leader:  # a standby decides but writes nothing, and exports no stage either
            assert [stage(registry, s)[0] for s in ("wait", "decide", "write")] == [0, 0, 0]
            return
        # Both new pools waited out the debounce (0.15 s each; a new pool does not lead: its
        # workload connection may still be opening); b's apply waited for a's slot (0.3 s).
        assert stage(registry, "wait") == (2, 0.3)
        assert stage(registry, "decide") == (2, 0.0)
        assert stage(registry, "write_slot") == (2, 0.3)
        assert stage(registry, "write") == (2, 0.6)
        workload.pods["p"] = pending_pod("p")
        scaler.cluster_event("wl")  # a, quiet since its write ended at 0.45: at once
        await clock.advance(0.4)  # its decision written by 1.3
        scaler.cluster_event("wl")  # 0.1 s after that step: debounced
        await clock.advance(1.0)
        assert stage(registry, "wait") == (4, 0.45)
        assert stage(registry, "write") == (3, 0.9)  # the last wake-up changed nothing
    finally:
        await scaler.close()
