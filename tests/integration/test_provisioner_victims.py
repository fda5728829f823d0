"""The provisioner drains the autoscaler's victims, not the highest indexes.

The policy chooses scale-down victims cheapest to drain first and publishes them in
``status.lastDecision.victims``; the provisioner honours them when that decision is the one in
force (acted on, same target). Otherwise (a stale or Shadow decision) it falls back to removing
the highest index.
"""

from __future__ import annotations

from typing import Any

from provisioner.kube import KINDS, KubeApi
from provisioner.reconciler import PoolKey
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import swiftguest_pool
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    names,
    ready_with,
    running_pool,
)


def autoscaled(name: str, namespace: str) -> dict[str, Any]:
    pool = swiftguest_pool(name, namespace, replicas=0)
    pool["spec"]["autoscaling"] = {"enabled": True, "minReplicas": 0, "maxReplicas": 5}
    return pool


async def publish(api: KubeApi, key: PoolKey, desired: int, **decision: Any) -> None:
    last = {"reason": "ScaledDown", "act": True, "desiredReplicas": desired, **decision}
    body = {"status": {"desiredReplicas": desired, "lastDecision": last}}
    await api.patch(KINDS["GPUCellPool"], key.namespace, key.name, body, status=True)


async def test_scale_down_drains_the_published_victim(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api = apis[0]
    async with running_pool(apis, workload, autoscaled("vic", namespace)) as run:
        await publish(infra_api, run.key, 3, reason="ScaledUp")
        await run.converge(ready_with(3), timeout_s=60)
        await publish(infra_api, run.key, 2, victims=["vic-0"])
        await run.converge(ready_with(2), timeout_s=60)
        assert await names(infra_api, "SwiftGuest", namespace) == {"vic-1", "vic-2"}
        # A decision that is not in force (Shadow: act false) names no victim: highest goes.
        await publish(infra_api, run.key, 1, act=False, victims=["vic-1"])
        await run.converge(ready_with(1), timeout_s=60)
        assert await names(infra_api, "SwiftGuest", namespace) == {"vic-1"}
