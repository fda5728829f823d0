"""A cell's DaemonSet pods do not make it busy: ``headroomCells`` is met by a Ready cell.

What this proves, on the real apiservers with the whole operator graph and the twin: every
Node the twin registers runs HAMi's device-plugin DaemonSet pod (``kube-system``, owned by the
``hami-device-plugin`` DaemonSet), as every real cell does. A pool asking for one empty cell of
headroom gets that cell, and keeps exactly one once it is Ready with the DaemonSet pod on it,
also when a spec change makes it decide again. When DaemonSet pods counted as pods on the
cell (before ``autoscaler.observe.is_workload_pod``), no cell was ever empty: the headroom
was missing on every decision and the pool grew by a cell per decision toward maxReplicas.
"""

from __future__ import annotations

from gpucellpool.runtime.clock import SystemClock
from provisioner.kube import KINDS
from simulations.harness import ClusterEndpoint
from simulations.twin.node_agent import PLUGIN_DAEMONSET, PLUGIN_NAMESPACE
from simulations.twin.scenario import Twin
from tests.integration.test_loop_helpers import (
    autoscaled_pool,
    condition,
    create_pool,
    shut_down,
    start_app,
    twin_clients,
    watch_pool,
)

POOLS = "/apis/cells.kubeswift.io/v1alpha1/namespaces/{ns}/gpucellpools/{name}"


async def test_headroom_cell_with_daemonset_pod_counts_as_empty(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    infra_api, workload_api, twin_infra, twin_workload = await twin_clients(
        infra, workload, namespace
    )
    app = await start_app(infra, namespace, "solo", provision=True)
    watch, task = await watch_pool(infra_api, namespace, "hr")
    pool = autoscaled_pool("hr", namespace, "hr")
    pool["spec"]["autoscaling"].update({"maxReplicas": 4, "headroomCells": 1})
    try:
        async with Twin(twin_infra, twin_workload, SystemClock(), namespace):
            await create_pool(infra_api, workload, pool)
            _, status = await watch.until(lambda s: s.get("readyCells") == 1, 90)
            node = status["cells"][0].get("nodeName") or status["cells"][0]["name"]
            plugin = await twin_workload.get(
                KINDS["Pod"], PLUGIN_NAMESPACE, f"{PLUGIN_DAEMONSET}-{node}"
            )
            assert plugin is not None and plugin["spec"]["nodeName"] == node
            owners = plugin["metadata"]["ownerReferences"]
            assert [o["kind"] for o in owners] == ["DaemonSet"]
            # Decide again with the Ready cell and its DaemonSet pod in view: a new generation
            # is judged and published (ScalingActive's observedGeneration).
            path = POOLS.format(ns=namespace, name="hr")
            patch = {"spec": {"autoscaling": {"maxReplicas": 5}}}
            updated = await infra_api.merge_patch(path, patch)
            generation = updated["metadata"]["generation"]
            _, status = await watch.until(
                lambda s: condition(s, "ScalingActive").get("observedGeneration") == generation,
                30,
            )
            assert status["desiredReplicas"] == 1, status.get("lastDecision")
            assert max(s.get("desiredReplicas", 0) for _, s in watch.seen) == 1
    finally:
        await shut_down(app, [task], (infra_api, workload_api, twin_infra, twin_workload))
