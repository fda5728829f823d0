"""Learned cell shape after a restart, and the demand fields, through the real apiservers.

What this proves, with ``gpucellpool run`` in process (autoscaler and provisioner) and the twin
(KubeSwift, kubelet and HAMi registration; its GPUs have 8192 MiB, a third of HAMi's default
24576 MiB):

* a brand-new pool at minReplicas 0 with no ``cellShape`` and no cell holds a pending pod at
  zero with reason ``CellShapeUnknown`` (``CellShapeKnown`` False), while ``status.demand``
  counts the pod;
* given a floor of one, its cell becomes Ready and the provisioner writes
  ``status.cellDeviceShape`` (8192 MiB, 100 % per GPU); ``CellShapeKnown`` says ``Learned``;
* with the floor back at 0 and no demand, ``demandFreeSince`` is set and the pool scales to
  zero cells; the shape stays;
* the operator restarted with the pool at zero cells decides with the remembered shape: two
  pending 6000 MiB pods need two cells (one per 8192 MiB GPU, where the default shape would
  pack both on one), ``CellShapeKnown`` says ``Remembered``, and ``demandFreeSince`` is cleared.
"""

from __future__ import annotations

from typing import Any

from gpucellpool.runtime.clock import SystemClock
from provisioner.kube import KINDS
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import Twin, api_for, join_secret
from tests.integration.test_loop_helpers import (
    autoscaled_pool,
    client_for,
    condition,
    create_pending,
    create_pool,
    decision,
    shut_down,
    start_app,
    watch_pool,
)

JSON = dict[str, Any]
POD_MIB = 6000


def _shape_reason(status: JSON) -> str:
    return str(condition(status, "CellShapeKnown").get("reason", ""))


def _learned(status: JSON) -> bool:
    shape = status.get("cellDeviceShape") or {}
    return shape.get("memoryMiB") == 8192 and _shape_reason(status) == "Learned"


async def _autoscaling(infra: Any, namespace: str, name: str, **fields: Any) -> None:
    path = f"/apis/cells.kubeswift.io/v1alpha1/namespaces/{namespace}/gpucellpools/{name}"
    await infra.merge_patch(path, {"spec": {"autoscaling": fields}})


async def test_learned_shape_after_scale_to_zero_and_a_restart(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    twin_infra = await api_for(infra.kubeconfig_path)
    twin_workload = await api_for(workload.kubeconfig_path)
    await twin_infra.apply(join_secret(namespace))
    pool = autoscaled_pool("shape", namespace, "shape")
    auto = pool["spec"]["autoscaling"]
    del auto["cellShape"]
    auto["scaleDownDelayAfterScaleUp"] = "0s"
    auto["behavior"]["scaleDown"] = {"stabilizationWindowSeconds": 0}
    app = await start_app(infra, namespace, "first", provision=True)
    watch, task = await watch_pool(infra_api, namespace, "shape")
    try:
        async with Twin(twin_infra, twin_workload, SystemClock(), namespace):
            await create_pool(infra_api, workload, pool)
            await create_pending(workload_api, namespace, "early", "shape", POD_MIB)
            _, held = await watch.until(
                lambda s: decision(s).get("reason") == "CellShapeUnknown", 60
            )
            assert condition(held, "CellShapeKnown")["status"] == "False"
            assert held.get("desiredReplicas", 0) == 0 and not held.get("cells")
            assert held["demand"]["pendingRequests"] == 1
            assert held["demand"]["satisfiableByOneCell"] == 1
            assert "demandFreeSince" not in held

            # A floor of one makes the first cell; its HAMi registration teaches the shape.
            await _autoscaling(infra_api, namespace, "shape", minReplicas=1)
            _, learned = await watch.until(
                lambda s: s.get("readyCells") == 1 and _learned(s), 180, len(watch.seen)
            )
            shape = learned["cellDeviceShape"]
            assert (shape["corePercent"], bool(shape.get("lastObserved"))) == (100, True)

            # No demand and no floor: demandFreeSince is set and the pool goes to zero cells.
            mark = len(watch.seen)
            await twin_workload.delete(KINDS["Pod"], namespace, "early")
            await _autoscaling(infra_api, namespace, "shape", minReplicas=0)
            _, free = await watch.until(lambda s: "demandFreeSince" in s, 60, mark)
            assert free["demand"]["pendingRequests"] == 0
            _, empty = await watch.until(
                lambda s: s.get("desiredReplicas") == 0 and not s.get("cells"), 240, mark
            )
            assert empty["cellDeviceShape"] == shape  # never cleared
            await app.stop()

            # Restart at zero cells: two pods that need one 8192 MiB GPU each.
            for name in ("late-1", "late-2"):
                await create_pending(workload_api, namespace, name, "shape", POD_MIB)
            app = await start_app(infra, namespace, "second", provision=True)
            _, after = await watch.until(
                lambda s: (
                    decision(s).get("reason") == "ScaledUp" and _shape_reason(s) == "Remembered"
                ),
                120,
            )
            assert decision(after)["cellsNeeded"] == 2, decision(after)
            assert after["desiredReplicas"] == 2
            assert after["demand"]["pendingRequests"] == 2
            assert "demandFreeSince" not in after
            assert condition(after, "CellShapeKnown")["status"] == "True"
    finally:
        await shut_down(app, [task], (infra_api, workload_api, twin_infra, twin_workload))
