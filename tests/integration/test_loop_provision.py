"""``gpucellpool run`` end to end: a pending HAMi pod becomes a Ready cell.

What this proves: the whole graph - the pool watch, the workload caches, the decision, the
status contract (``status.desiredReplicas``) and the provisioner driver reconciling from watch
events - turns one Unschedulable HAMi pod into a SwiftGuest that the twin boots, a Node that
joins the workload cluster with HAMi capacity, and a Ready cell, with no polling loop in the
operator; the decision then settles at that target instead of scaling again (the follow-up
"the pod fits the booting cell" is not written, the next written decision keeps the target).
"""

from __future__ import annotations

import time

from gpucellpool.runtime.clock import SystemClock
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import Twin
from tests.integration.test_loop_helpers import (
    autoscaled_pool,
    create_pending,
    create_pool,
    decision,
    shut_down,
    start_app,
    twin_clients,
    watch_pool,
)


async def test_pending_pod_becomes_a_ready_cell(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    infra_api, workload_api, twin_infra, twin_workload = await twin_clients(
        infra, workload, namespace
    )
    app = await start_app(infra, namespace, "solo", provision=True)
    watch, task = await watch_pool(infra_api, namespace, "e2e")
    try:
        async with Twin(twin_infra, twin_workload, SystemClock(), namespace):
            await create_pool(infra_api, workload, autoscaled_pool("e2e", namespace, "e2e"))
            await watch.until(lambda s: decision(s).get("reason") == "Idle", 30)
            started = time.monotonic()
            await create_pending(workload_api, namespace, "e2e-1", "e2e")
            await watch.until(lambda s: s.get("desiredReplicas") == 1, 30)
            at, status = await watch.until(lambda s: s.get("readyCells") == 1, 90)
            print(f"\npending pod -> Ready cell through the twin: {at - started:.2f}s")
            assert [c["name"] for c in status["cells"]] == ["e2e-0"]
            # Settled: the next written decision is no second scale-up and keeps the target
            # (the booting cell's follow-up, "the pod fits", is not written: follows_from).
            # Looked for after the scale-up only: on a loaded machine the pool's first
            # decision can hold at 0 before its workload caches synced.
            up = next(i for i, (_, s) in enumerate(watch.seen) if s.get("desiredReplicas") == 1)
            _, settled = await watch.until(
                lambda s: decision(s).get("reason") not in (None, "Idle", "ScaledUp"), 30, up + 1
            )
            assert settled["desiredReplicas"] == 1
            guest = await infra_api.get(
                f"/apis/swift.kubeswift.io/v1alpha1/namespaces/{namespace}/swiftguests/e2e-0"
            )
            assert guest is not None
            # the autoscaler's caches and the provisioner reached the workload cluster over
            # one connection (gpucellpool.kube.connections), one handle each
            assert (app.connections.open_count, app.connections.holders) == (1, 2)
            assert app.connections.opened == 1
    finally:
        await shut_down(app, [task], (infra_api, workload_api, twin_infra, twin_workload))
