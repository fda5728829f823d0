"""The provisioner drains the autoscaler's victims, not the highest indexes.

The policy chooses scale-down victims cheapest to drain first and publishes them in
``status.lastDecision.victims``; the provisioner honours them when that decision is the one in
force (acted on, same target). Otherwise (a stale or Shadow decision) it falls back to removing
the highest index. A victim it cannot drain now (in drain back-off) is rejected with its reason
in ``status.planRejections`` and kept, and no other cell stands in for it: the autoscaler's next
plan chooses again, and the refusal stands until the back-off ends. A cancelled spare
(``lastDecision.emptyVictims``: chosen while it ran no pod) that runs a GPU pod by
the time the provisioner acts is kept the same way (VictimInUse): draining it would strand the
pod the scheduler just bound to it.
"""

from __future__ import annotations

from typing import Any

from provisioner.backends.base import DRAIN_STARTED_ANNOTATION, rfc3339
from provisioner.fsm.drain_backoff import (
    DRAIN_ABANDON_COUNT_ANNOTATION,
    DRAIN_ABANDONED_ANNOTATION,
)
from provisioner.kube import JSON, KINDS, KubeApi
from provisioner.reconciler import PoolKey
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import swiftguest_pool
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    cond,
    gpu_pod,
    names,
    ready_with,
    running_pool,
    status,
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


async def test_a_victim_in_drain_backoff_is_rejected_not_replaced(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api = apis[0]
    async with running_pool(apis, workload, autoscaled("hld", namespace)) as run:
        await publish(infra_api, run.key, 3, reason="ScaledUp")
        await run.converge(ready_with(3), timeout_s=60)
        abandoned = {  # one drain of hld-0 abandoned just now: held for 2 x 300 s
            DRAIN_ABANDONED_ANNOTATION: rfc3339(run.clock.now()),
            DRAIN_ABANDON_COUNT_ANNOTATION: "1",
        }
        patch = {"metadata": {"annotations": abandoned}}
        await infra_api.patch(KINDS["SwiftGuest"], namespace, "hld-0", patch)
        await publish(infra_api, run.key, 2, victims=["hld-0"])

        def rejected(pool: JSON | None) -> bool:
            return bool(status(pool).get("planRejections"))

        held = await run.converge(rejected, timeout_s=60)
        await run.passes(2)  # and it stays so: nothing else is drained meanwhile
        (rejection,) = status(held)["planRejections"]
        assert rejection["step"] == "Remove" and rejection["cell"] == "hld-0"
        assert rejection["reason"] == "VictimInDrainBackoff" and rejection["retryAfter"]
        progressing = cond(held, "Progressing")
        assert progressing["reason"] == "ScaleDownHeld" and "hld-0" in progressing["message"]
        assert await names(infra_api, "SwiftGuest", namespace) == {"hld-0", "hld-1", "hld-2"}
        for guest in await infra_api.list(KINDS["SwiftGuest"], namespace):
            assert DRAIN_STARTED_ANNOTATION not in guest["metadata"].get("annotations", {})
        # The next plan names another victim: accepted and drained. hld-0's refusal stands
        # while its back-off lasts (so the plan after does not choose it again), no longer
        # holding a slot of this plan.
        await publish(infra_api, run.key, 2, victims=["hld-1"])
        done = await run.converge(ready_with(2), timeout_s=60)
        assert [r["cell"] for r in status(done)["planRejections"]] == ["hld-0"]
        assert cond(done, "Progressing")["reason"] != "ScaleDownHeld"
        assert await names(infra_api, "SwiftGuest", namespace) == {"hld-0", "hld-2"}


async def test_a_cancelled_spare_that_took_a_pod_is_kept_not_replaced(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    async with running_pool(apis, workload, autoscaled("spr", namespace)) as run:
        await publish(infra_api, run.key, 3, reason="ScaledUp")
        await run.converge(ready_with(3), timeout_s=60)
        # The scheduler bound a waiting pod to spr-2 between the cancel and this pass.
        await workload_api.create(gpu_pod(namespace, "waited", "spr-2"))
        cancel = {"reason": "SparesCancelled", "victims": ["spr-2"], "emptyVictims": ["spr-2"]}
        await publish(infra_api, run.key, 2, **cancel)

        def rejected(pool: JSON | None) -> bool:
            return bool(status(pool).get("planRejections"))

        held = await run.converge(rejected, timeout_s=60)
        await run.passes(2)  # and it stays so: no other cell is drained in its place
        (rejection,) = status(held)["planRejections"]
        assert (rejection["step"], rejection["cell"]) == ("Remove", "spr-2")
        assert rejection["reason"] == "VictimInUse" and "retryAfter" not in rejection
        assert cond(held, "Progressing")["reason"] == "ScaleDownHeld"
        assert await names(infra_api, "SwiftGuest", namespace) == {"spr-0", "spr-1", "spr-2"}
        for guest in await infra_api.list(KINDS["SwiftGuest"], namespace):
            assert DRAIN_STARTED_ANNOTATION not in guest["metadata"].get("annotations", {})
        # The next cancel names a spare that runs no pod: carried out as planned.
        await publish(infra_api, run.key, 2, victims=["spr-1"], emptyVictims=["spr-1"])
        done = await run.converge(ready_with(2), timeout_s=60)
        assert await names(infra_api, "SwiftGuest", namespace) == {"spr-0", "spr-2"}
        assert not status(done).get("planRejections")
