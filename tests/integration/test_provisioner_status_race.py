"""Two status writers on the real apiserver: neither reverts the other's fields.

What this proves: the autoscaler server-side-applies ``ScalingActive`` (field manager
``gpucellpool-autoscaler``) between the provisioner's read of the pool and its status write -
here exactly then, by a wrapper that performs the competing apply right before the provisioner's
status apply. The provisioner's write (server-side apply as ``gpucellpool-provisioner``,
carrying only its own fields and conditions) goes through at once - no 409, no second write -
and the pool ends up with the autoscaler's ``ScalingActive`` next to the provisioner's own
conditions and this pass's new cell row. Then the autoscaler applies its fields again (a new
``ScalingActive`` and ``lastDecision``), interleaved with more provisioner passes: each keeps the
other's fields, and the managed fields name one owner for each.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import yaml

from gpucellpool.kube.rest import RestClient, client_from_kubeconfig
from gpucellpool.operator.adapters import pool_path
from provisioner.kube import JSON, KINDS, STATUS_FIELD_MANAGER, KubeApi
from provisioner.kube_delegate import Write
from provisioner.reconciler import PoolKey
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import swiftguest_pool
from tests.integration.provisioner_support import (
    RecordingKubeApi,
    apis,  # noqa: F401  (fixture)
    cond,
    ready_with,
    row,
    running_pool,
)

T = TypeVar("T")


@dataclass
class RacingKubeApi(RecordingKubeApi):
    """Runs ``race`` (once) right before the next status write of a GPUCellPool."""

    race: Callable[[], Awaitable[None]] | None = None

    async def _write(self, write: Write, call: Callable[[], Awaitable[T]]) -> T:
        racing = write.verb == "apply" and write.kind == "GPUCellPool" and write.status
        if racing and self.race is not None:
            race, self.race = self.race, None
            await race()
        return await super()._write(write, call)


def scaling_active(key: PoolKey, status: str, reason: str, at: str) -> JSON:
    """What the autoscaler applies (``autoscaler.explain.status_apply_body``'s shape)."""
    condition = {
        "type": "ScalingActive",
        "status": status,
        "reason": reason,
        "message": f"autoscaler says {reason}",
        "lastTransitionTime": at,
        "observedGeneration": 1,
    }
    return {
        "apiVersion": "cells.kubeswift.io/v1alpha1",
        "kind": "GPUCellPool",
        "metadata": {"name": key.name, "namespace": key.namespace},
        "status": {"conditions": [condition]},
    }


async def autoscaler_client(infra: ClusterEndpoint) -> RestClient:
    return await client_from_kubeconfig(yaml.safe_load(infra.kubeconfig_path.read_text()))


async def test_a_scaling_active_written_mid_pass_is_kept(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    infra: ClusterEndpoint,
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api = apis[0]
    key = PoolKey(namespace, "race")
    autoscaler = await autoscaler_client(infra)
    path = pool_path(key.namespace, key.name)
    racing = RacingKubeApi(infra_api)
    pool_obj = swiftguest_pool("race", namespace, replicas=1)
    try:
        async with running_pool(apis, workload, pool_obj, operator_api=racing) as run:
            initial = scaling_active(key, "False", "Initial", "2026-11-30T10:00:00Z")
            await autoscaler.apply_status(path, initial)  # before the first pass
            await run.converge(ready_with(1), timeout_s=30)
            await run.scale(2)
            won = scaling_active(key, "True", "RaceWinner", "2026-11-30T10:05:00Z")

            async def race() -> None:
                await autoscaler.apply_status(path, won)

            racing.race = race
            racing.calls.clear()
            await run.passes(1)

            assert racing.race is None  # the competing write did happen mid-pass
            outcomes = [c.outcome for c in racing.of("apply", "GPUCellPool")]
            assert outcomes and set(outcomes) == {"ok"}, outcomes  # never refused
            assert racing.of("patch", "GPUCellPool") == [], "no retry, no precondition"
            pool = await infra_api.get(KINDS["GPUCellPool"], namespace, key.name)
            assert cond(pool, "ScalingActive")["reason"] == "RaceWinner"
            assert cond(pool, "ScalingActive")["lastTransitionTime"] == "2026-11-30T10:05:00Z"
            assert cond(pool, "Progressing")["status"] == "True"  # this pass's own conditions
            assert cond(pool, "WorkloadClusterReachable")["status"] == "True"
            assert row(pool, "race-1")["reason"] == "GuestNotCreated"  # the created row kept

            later = scaling_active(key, "True", "Later", "2026-11-30T10:10:00Z")
            later["status"]["lastDecision"] = {"reason": "Later", "desiredReplicas": 2}
            await autoscaler.apply_status(path, later)  # the autoscaler again, between passes
            pool = await run.converge(ready_with(2), timeout_s=30)
            assert cond(pool, "ScalingActive")["reason"] == "Later"  # never reverted
            assert (pool or {})["status"]["lastDecision"]["reason"] == "Later"
            assert cond(pool, "Ready")["reason"] == "AllCellsReady"
            assert [r["name"] for r in (pool or {})["status"]["cells"]] == ["race-0", "race-1"]
            owners = owners_of(pool)
            assert owners['k:{"type":"ScalingActive"}'] == {"gpucellpool-autoscaler"}
            assert owners['k:{"type":"Ready"}'] == {STATUS_FIELD_MANAGER}
            assert owners["f:cells"] == {STATUS_FIELD_MANAGER}
            assert owners["f:lastDecision"] == {"gpucellpool-autoscaler"}
    finally:
        await autoscaler.close()


def owners_of(pool: JSON | None) -> dict[str, set[str]]:
    """Status fields (top-level keys, condition entries) -> the managers owning any of them."""
    owners: dict[str, set[str]] = {}
    for entry in ((pool or {}).get("metadata") or {}).get("managedFields") or []:
        status = (entry.get("fieldsV1") or {}).get("f:status") or {}
        for key, value in status.items():
            keys = list(value) if key == "f:conditions" else [key]
            for k in keys:
                if k != ".":
                    owners.setdefault(k, set()).add(entry["manager"])
    return owners
