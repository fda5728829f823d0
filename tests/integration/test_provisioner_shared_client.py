"""Deleting one pool leaves the workload client its namespace's other pools share open.

What this proves: the driver reconciles every pool concurrently on one Reconciler, which caches
one workload client per kubeconfig Secret. A deleted pool's last pass used to close that client
even when another pool of the namespace named the same Secret, so that pool's pass in flight
failed on a closed client (a reconcile error, counted and retried). Now the client stays open
while another pool names the Secret, that pool keeps using it, and the last pool's deletion
closes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpucellpool.runtime.clock import SystemClock
from provisioner.kube import JSON, KINDS, KubeApi, api_from_kubeconfig
from provisioner.kube_delegate import DelegatingKubeApi
from provisioner.reconciler import PoolKey, Reconciler
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import converge, swiftguest_pool
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    setup_pool,
)


@dataclass
class CloseWitness(DelegatingKubeApi):
    """A workload client that remembers being closed."""

    closed: bool = False

    async def close(self) -> None:
        self.closed = True
        await super().close()


def _gone(pool: JSON | None) -> bool:
    return pool is None


async def _delete(reconciler: Reconciler, infra_api: KubeApi, key: PoolKey) -> None:
    await infra_api.delete(KINDS["GPUCellPool"], key.namespace, key.name)
    await converge(reconciler, key, _gone, timeout_s=30)


async def test_deleting_a_pool_keeps_the_workload_client_its_neighbour_shares(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, _ = apis
    made: list[CloseWitness] = []

    async def factory(kubeconfig: Mapping[str, Any]) -> KubeApi:
        made.append(CloseWitness(await api_from_kubeconfig(kubeconfig)))
        return made[-1]

    reconciler = Reconciler(infra_api, SystemClock(), workload_factory=factory)
    tag = namespace[-6:]
    first = await setup_pool(infra_api, workload, swiftguest_pool(f"sa-{tag}", namespace, 0))
    second = await setup_pool(infra_api, workload, swiftguest_pool(f"sb-{tag}", namespace, 0))
    try:
        await reconciler.reconcile_once(first)
        await reconciler.reconcile_once(second)
        assert len(made) == 1  # one client for the Secret both pools name
        await _delete(reconciler, infra_api, first)
        assert not made[0].closed  # the second pool still names the Secret
        await reconciler.reconcile_once(second)
        assert len(made) == 1  # and its pass used the same client
        await _delete(reconciler, infra_api, second)
        assert made[0].closed  # the last one gone: closed
    finally:
        await reconciler.close()
