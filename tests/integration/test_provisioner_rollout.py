"""Rolling update through the shell: a changed guestTemplate replaces cells one at a time.

What this proves: with ``updatePolicy: RollingUpdate`` a template edit marks cells stale
(``Updated=False``), stale cells are drained and replaced without ever dropping below
``desired - 1`` Ready cells, and the pool ends with every guest built from the new template and
``Updated=True/AllCellsCurrent``; with ``Manual`` the same edit only reports ``TemplateChanged``.
"""

from __future__ import annotations

from provisioner.kube import JSON, KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import swiftguest_pool
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    cond,
    ready_with,
    running_pool,
    status,
)

NEW_IMAGE = {"spec": {"cell": {"guestTemplate": {"imageRef": {"name": "gpu-worker-noble-590"}}}}}


async def test_rolling_update_replaces_every_cell_keeping_one_ready(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api = apis[0]
    pool_obj = swiftguest_pool(
        "roll", namespace, replicas=2, updatePolicy={"type": "RollingUpdate"}
    )
    seen_ready: list[int] = []
    reasons: set[str] = set()
    async with running_pool(apis, workload, pool_obj) as run:
        pool = await run.converge(ready_with(2), timeout_s=30)
        old_hashes = {r["templateHash"] for r in status(pool)["cells"]}
        await infra_api.patch(KINDS["GPUCellPool"], namespace, "roll", NEW_IMAGE)

        def rolled(p: JSON | None) -> bool:
            s = status(p)
            if s.get("observedGeneration") != (p or {})["metadata"]["generation"]:
                return False
            seen_ready.append(s.get("readyCells", 0))
            reasons.add(cond(p, "Updated").get("reason", ""))
            done = cond(p, "Updated").get("reason") == "AllCellsCurrent"
            return done and ready_with(2)(p)

        pool = await run.converge(rolled, timeout_s=60)
    assert min(seen_ready) >= 1  # maxUnavailable 1 of 2
    assert "RollingUpdate" in reasons
    new_hashes = {r["templateHash"] for r in status(pool)["cells"]}
    assert len(new_hashes) == 1 and not new_hashes & old_hashes
    guests = await infra_api.list(KINDS["SwiftGuest"], namespace)
    assert len(guests) == 2
    assert all(g["spec"]["imageRef"]["name"] == "gpu-worker-noble-590" for g in guests)


async def test_manual_update_policy_only_reports_drift(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api = apis[0]
    async with running_pool(apis, workload, swiftguest_pool("man", namespace, replicas=1)) as run:
        pool = await run.converge(ready_with(1), timeout_s=30)
        uid = status(pool)["cells"][0]["guestUID"]
        await infra_api.patch(KINDS["GPUCellPool"], namespace, "man", NEW_IMAGE)

        def drift(p: JSON | None) -> bool:
            return cond(p, "Updated").get("reason") == "TemplateChanged"

        await run.converge(drift, timeout_s=30)
        await run.passes(5)
        pool = await infra_api.get(KINDS["GPUCellPool"], namespace, "man")
    assert cond(pool, "Updated")["status"] == "False"
    assert status(pool)["cells"][0]["guestUID"] == uid  # not replaced
    assert status(pool)["readyCells"] == 1


async def test_rolling_update_with_surge_never_drops_below_desired(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api = apis[0]
    policy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pool_obj = swiftguest_pool("surge", namespace, replicas=2, updatePolicy=policy)
    seen_ready: list[int] = []
    seen_guests: list[int] = []
    async with running_pool(apis, workload, pool_obj) as run:
        pool = await run.converge(ready_with(2), timeout_s=30)
        old_hashes = {r["templateHash"] for r in status(pool)["cells"]}
        await infra_api.patch(KINDS["GPUCellPool"], namespace, "surge", NEW_IMAGE)

        async def rolled(p: JSON | None) -> bool:
            s = status(p)
            if s.get("observedGeneration") != (p or {})["metadata"]["generation"]:
                return False
            seen_ready.append(s.get("readyCells", 0))
            seen_guests.append(len(await infra_api.list(KINDS["SwiftGuest"], namespace)))
            done = cond(p, "Updated").get("reason") == "AllCellsCurrent"
            return done and ready_with(2)(p)

        pool = await run.converge(rolled, timeout_s=90)
    assert min(seen_ready) >= 2  # maxUnavailable 0: never below desired
    assert max(seen_guests) == 3  # maxSurge 1: one extra cell, never two
    new_hashes = {r["templateHash"] for r in status(pool)["cells"]}
    assert len(new_hashes) == 1 and not new_hashes & old_hashes
    guests = await infra_api.list(KINDS["SwiftGuest"], namespace)
    assert all(g["spec"]["imageRef"]["name"] == "gpu-worker-noble-590" for g in guests)
