"""Pools outside the served namespaces are ignored; a missing kubeconfig Secret is named missing.

What this proves, on a real apiserver with the whole operator in process (autoscaler and
provisioner): with every namespace watched (the chart's default ``watchNamespaces: []``) but
pools served only where the operator may read Secrets (``--serve-namespace``, the chart's pool
namespaces), a pool elsewhere gets nothing - no finalizer, no status, no Event - and one log
line; before, the provisioner reconciled it, failed on its Secrets and retried with "reconcile
failed" for ever. And a served pool whose kubeconfig Secret does not exist is told so, by name
("kubeconfig Secret ns/name not found" in the workload cluster's error, which readiness and the
autoscaler report), not "kubeconfig Secret not read yet".
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator

import pytest

from gpucellpool.kube.workload import ClusterKey
from simulations.harness import ClusterEndpoint, Harness
from tests.integration.test_loop_helpers import (
    autoscaled_pool,
    client_for,
    create_pool,
    shut_down,
    start_app,
    until,
    watch_pool,
)

POOLS = "/apis/cells.kubeswift.io/v1alpha1/namespaces/{ns}/gpucellpools"
ABSENT = "absent-kubeconfig"


@pytest.fixture
def unserved(harness: Harness) -> Iterator[str]:
    name = f"t-unserved-{secrets.token_hex(3)}"
    harness.infra.create_namespace(name, labels={"gpucellpool.test/namespace": "true"})
    try:
        yield name
    finally:
        harness.infra.delete_namespace(name)


def _messages(status: dict[str, object]) -> list[str]:
    conditions = status.get("conditions") or []
    assert isinstance(conditions, list)
    return [str(c.get("message") or "") for c in conditions]


async def test_a_pool_outside_the_served_namespaces_is_ignored(
    infra: ClusterEndpoint,
    workload: ClusterEndpoint,
    namespace: str,
    unserved: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gpucellpool.operator.app")
    infra_api = await client_for(infra)
    app = await start_app(
        infra,
        namespace,
        "served",
        pool_namespaces=(unserved,),  # watched ...
        served_namespaces=(namespace,),  # ... but not served
        provision=True,
    )
    watches = {ns: await watch_pool(infra_api, ns, "pool") for ns in (unserved, namespace)}
    try:
        await create_pool(infra_api, workload, autoscaled_pool("pool", unserved, "t-unserved"))
        missing = autoscaled_pool("pool", namespace, "t-served")
        missing["spec"]["workloadCluster"]["kubeconfigSecretRef"]["name"] = ABSENT
        await infra_api.create(POOLS.format(ns=namespace), missing)
        # The shared workload cluster (the autoscaler's caches, the readiness verdict) names
        # the Secret missing once it has listed it as absent; the provisioner's status says so.
        told = f"kubeconfig Secret {namespace}/{ABSENT} not found"

        def error() -> str | None:
            cluster = app.clusters.clusters.get(ClusterKey(namespace, ABSENT, "value"))
            return cluster.error if cluster is not None else None

        await until(lambda: error() == told, 60, "the missing Secret was never named")
        _, status = await watches[namespace][0].until(
            lambda s: any(f"{ABSENT} not found" in m for m in _messages(s)), 60
        )
        assert not any("not read yet" in m for m in _messages(status))
        # The served pool was created after the unserved one and is done: the unserved one,
        # watched all along, was never touched.
        raw = await infra_api.get(f"{POOLS.format(ns=unserved)}/pool")
        assert raw is not None
        assert raw["metadata"].get("finalizers") is None
        assert raw.get("status") in (None, {})
        assert all(not s for _, s in watches[unserved][0].seen)
        events = await infra_api.get(f"/api/v1/namespaces/{unserved}/events")
        assert events is not None and events["items"] == []
        ignored = [r for r in caplog.records if r.getMessage().startswith("pool ignored")]
        assert [getattr(r, "pool", None) for r in ignored] == [f"{unserved}/pool"]
        assert app.ready()[0], app.ready()[1]
    finally:
        await shut_down(app, (t for _, t in watches.values()), (infra_api,))
