"""The simulated HAMi on cells the provisioner really made (KubeSwift + node agent twin).

What this proves: the Nodes the node agent registers for a pool's cells (labels, register
annotation, allocatable) are what the simulated HAMi places on; a replayed trace's pods run
their duration there and end, freeing the GPU for the next one.
"""

from __future__ import annotations

from autoscaler.policy.types import GPUAsk
from gpucellpool.runtime.clock import SystemClock
from provisioner.fsm.identity import PoolIdentity
from provisioner.kube import KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.simulator.traces.model import TracePod
from simulations.twin import PodLifecycle, SimulatedHAMi, TracePlayer
from simulations.twin.scenario import swiftguest_pool
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    ready_with,
    running_pool,
)
from tests.integration.twin_support import running, scheduled, until

PREEMPTION = "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."


async def test_trace_pods_run_on_the_node_agents_cells_one_after_another(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    workload_api = apis[1]
    clock = SystemClock()
    selector = f"cells.kubeswift.io/pool-id={PoolIdentity(namespace, 'cells').pool_id}"
    hami = SimulatedHAMi(workload_api, clock, namespace, node_label_selector=selector)
    lifecycle = PodLifecycle(workload_api, clock, namespace)
    whole = GPUAsk(1, None, None, 100)  # the whole (8 GiB) GPU: two pods must take turns
    # Each runs 4 s: long enough that the second is surely seen waiting while the first runs.
    pods = [TracePod("first", 0.0, 4.0, whole), TracePod("second", 0.0, 4.0, whole)]
    async with running_pool(apis, workload, swiftguest_pool("cells", namespace, replicas=1)) as run:
        await run.converge(ready_with(1), timeout_s=60)
        async with running(hami, lifecycle):
            await TracePlayer(workload_api, pods, clock, namespace).run()

            async def second_waits() -> bool:
                first = await workload_api.get(KINDS["Pod"], namespace, "trace-00000")
                second = await workload_api.get(KINDS["Pod"], namespace, "trace-00001")
                waiting = scheduled(second or {}).get("message")
                bound = (first or {}).get("spec", {}).get("nodeName") == "cells-0"
                return (
                    bound
                    and waiting
                    == "0/1 nodes are available: 1 1/1 CardInsufficientMemory. " + PREEMPTION
                )

            await until(second_waits)

            async def both_done_and_freed() -> bool:
                pods_left = await workload_api.list(KINDS["Pod"], namespace)
                usage = [g for n in hami.allocations().values() for g in n.usage()]
                return not pods_left and bool(usage) and all(g.slots == 0 for g in usage)

            await until(both_done_and_freed, timeout_s=40)
    (node,) = hami.allocations().values()
    assert node.node == "cells-0"
    assert node.shape().memory_mib == 8192 and node.shape().slots == 10
    assert node.usage()[0].memory_mib == 0  # both ran, ended and freed the GPU
