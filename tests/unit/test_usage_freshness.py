"""A pod that ended is gone from its cell at once, though Prometheus still samples it for a
scrape (``autoscaler.usage_freshness``): a Node whose pods changed after the oldest sample of
the read is taken from its annotations alone; Prometheus raises it again from the first read
that sampled it after the change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from autoscaler.loop import Autoscaler
from autoscaler.policy.decision import Reason
from autoscaler.policy.types import GPUUsage, MetricsHealth
from autoscaler.usage_freshness import PodChanges
from gpucellpool.api.pool import GPUCellPool
from simulations.simulator.engine.clock import VirtualClock
from tests.unit.test_loop_fakes import FakeWorkload, FakeWriter, pending_pod
from tests.unit.test_loop_signals import SETTINGS, full_cell_pod, idle_ready_pool

FULL = (GPUUsage(24576, 100, 1),)


def _pod(name: str, phase: str = "Running") -> dict[str, object]:
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "status": {"phase": phase}}


def test_a_change_supersedes_the_samples_taken_before_it() -> None:
    changes = PodChanges()
    changes.see({"n": (_pod("a"),)}, ["n"], now=100.0)  # first sight: unchanged since ever
    assert changes.superseded(["n"], now=100.0, age_seconds=1e9) == frozenset()
    changes.see({"n": (_pod("a", "Succeeded"),)}, ["n"], now=110.0)  # the pod ended
    assert changes.superseded(["n"], now=112.0, age_seconds=5.0) == {"n"}  # sampled >= 107
    assert changes.superseded(["n"], now=120.0, age_seconds=5.0) == frozenset()  # >= 115


def test_a_new_tuple_of_the_same_pods_is_no_change() -> None:
    changes = PodChanges()
    changes.see({"n": (_pod("a"),)}, ["n"], now=100.0)
    changes.see({"n": (_pod("a"),)}, ["n"], now=110.0)
    assert changes.superseded(["n"], now=111.0, age_seconds=60.0) == frozenset()


def test_gone_nodes_are_forgotten() -> None:
    changes = PodChanges()
    changes.see({"n": (_pod("a"),)}, ["n"], now=100.0)
    changes.see({"n": ()}, ["n"], now=110.0)
    changes.forget_except([])
    changes.see({"n": ()}, ["n"], now=111.0)  # seen again: a first sight
    assert changes.superseded(["n"], now=111.0, age_seconds=60.0) == frozenset()


class StaleFull:
    """Prometheus still reports every Node's GPU fully allocated, sampled ``age_s`` ago."""

    def __init__(self, age_s: float) -> None:
        self.age_s = age_s

    async def usage(
        self, pool: GPUCellPool, nodes: Sequence[str]
    ) -> tuple[Mapping[str, tuple[GPUUsage, ...]] | None, MetricsHealth]:
        return {n: FULL for n in nodes}, MetricsHealth(True, self.age_s, "test")


@pytest.mark.parametrize(
    ("sample_age_s", "reason", "desired"),
    [
        (15.0, Reason.DEMAND_SATISFIED, 1),  # sampled before the pod ended: annotations
        (0.0, Reason.SCALED_UP, 2),  # sampled after it: an allocation the pods do not show
    ],
)
async def test_a_pending_pod_takes_the_gpu_a_pod_just_freed(
    sample_age_s: float, reason: Reason, desired: int
) -> None:
    clock, workload, writer = VirtualClock(), FakeWorkload(), FakeWriter()
    workload.nodes = [{"metadata": {"name": "a-0"}}]
    workload.pods = {"busy": full_cell_pod("a-0")}
    usage = StaleFull(sample_age_s)
    scaler = Autoscaler(workload, writer, clock, usage=usage, settings=SETTINGS)
    try:
        scaler.pool_event("ADDED", idle_ready_pool())
        await clock.advance(0.2)
        first = scaler.pools[("ns", "a")].last_decision
        assert first is not None and first.reason != Reason.SCALED_DOWN  # a-0 is busy
        await clock.advance(1.0)
        workload.pods = {"p": pending_pod("p", mem_mib=24576)}  # busy ended; p arrived
        scaler.wake([("ns", "a")])
        await clock.advance(0.5)
        decision = scaler.pools[("ns", "a")].last_decision
        assert decision is not None
        assert (decision.reason, decision.desired_replicas) == (reason, desired), decision.message
    finally:
        await scaler.close()
