"""The chart's RBAC is exactly enough: the operator runs as the chart's ServiceAccount.

What this proves: ``helm install`` of the chart, then ``gpucellpool run`` with the Deployment's
own arguments and environment and ONLY a TokenRequest token of the chart's ServiceAccount, takes
a pool through its whole life with the twin playing KubeSwift, the kubelet and HAMi - created
(through the chart's validating webhook, whose certificate the operator issued and injected),
Ready, scaled up, scaled down through a drain, deleted (finalizer released) - while the
apiserver's audit log records every answer that identity got: not one 403. Twice: with default
values (pools in the release namespace) and with ``poolNamespaces`` (pools elsewhere). And the
same token is refused Secrets in a namespace the release does not serve.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpucellpool.runtime.clock import SystemClock
from provisioner.kube import KINDS, KubeApi
from simulations.harness import ClusterEndpoint, Harness
from simulations.twin.scenario import (
    Twin,
    api_for,
    join_secret,
    kubeconfig_secret,
    swiftguest_pool,
)
from tests.integration import chart_support
from tests.integration.chart_identity_support import (
    audit_events,
    forbidden,
    installed,
    operator,
    pool_namespaces,
    route_webhook_to_loopback,
    token_kubeconfig,
    used,
    wait,
)
from tests.integration.test_loop_helpers import JSON, PoolWatch, client_for, watch_pool

helm = chart_support.helm  # the fixture


async def lifecycle(infra: ClusterEndpoint, workload: ClusterEndpoint, pool_ns: str) -> None:
    """create -> Ready -> 2 cells -> 1 cell (drained) -> deleted, as the admin user + twin."""
    watcher = await client_for(infra)
    kube, twin_workload = (
        await api_for(infra.kubeconfig_path),
        await api_for(workload.kubeconfig_path),
    )
    name = f"id-{secrets.token_hex(3)}"  # Nodes are cluster-wide: unique per test
    await kube.create(join_secret(pool_ns))
    await kube.create(kubeconfig_secret(pool_ns, workload.kubeconfig_path.read_text()))
    try:
        async with Twin(kube, twin_workload, SystemClock(), pool_ns):
            drain = {"drain": {"mode": "Evict", "timeout": "2m"}}
            await kube.create(swiftguest_pool(name, pool_ns, replicas=1, autoscaling=drain))
            watch, task = await watch_pool(watcher, pool_ns, name)
            try:
                await steps(kube, twin_workload, watch, pool_ns, name)
            finally:
                task.cancel()
    finally:
        for client in (watcher, kube, twin_workload):
            await client.close()


def cells(status: JSON) -> list[JSON]:
    return list(status.get("cells") or ())


def ready(n: int) -> Callable[[JSON], bool]:
    return lambda s: s.get("readyCells") == n and len(cells(s)) == n


def after(mark: int, check: Callable[[JSON], bool]) -> Callable[[JSON], bool]:
    """``check``, but only on statuses seen after the first ``mark`` (``until`` starts at 0)."""
    calls = 0

    def later(status: JSON) -> bool:
        nonlocal calls
        calls += 1
        return calls > mark and check(status)

    return later


def tenant(namespace: str, node: str) -> JSON:
    """A pod already running on ``node`` (no kubelet here: bound by name, gone at once)."""
    spec = {"nodeName": node, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "cuda"}]}  # fmt: skip
    meta = {"name": "tenant", "namespace": namespace}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


async def steps(kube: KubeApi, workload: KubeApi, watch: PoolWatch, ns: str, name: str) -> None:
    started, pools = time.monotonic(), KINDS["GPUCellPool"]
    await watch.until(ready(1), 90)
    print(f"\n  Ready: {time.monotonic() - started:.1f}s", end="")
    await kube.patch(pools, ns, name, {"spec": {"replicas": 2}})
    await watch.until(ready(2), 90)
    await workload.create(tenant(ns, f"{name}-1"))  # the highest index leaves first
    mark = len(watch.seen)
    await kube.patch(pools, ns, name, {"spec": {"replicas": 1}})
    await watch.until(after(mark, ready(1)), 90)
    _, status = await watch.until(after(mark, ready(1)), 1)
    assert [c["name"] for c in cells(status)] == [f"{name}-0"], status
    assert await workload.get(KINDS["Pod"], ns, "tenant") is None, "the drain left its pod"
    print(f", scaled 1 -> 2 -> 1: {time.monotonic() - started:.1f}s", end="")
    await kube.delete(pools, ns, name)
    deadline = time.monotonic() + 90
    while await kube.get(pools, ns, name) is not None:
        assert time.monotonic() < deadline, "the operator never released its finalizer"
        await asyncio.sleep(0.2)  # polling the apiserver with a deadline
    print(f", deleted: {time.monotonic() - started:.1f}s", end="")


def secret_refused(infra: ClusterEndpoint, kubeconfig: Path, namespace: str) -> int:
    """With the chart's token, a Secret of ``namespace`` can be neither read nor listed."""
    data = {"k": base64.b64encode(b"not yours").decode()}
    infra.apply_objects({"apiVersion": "v1", "kind": "Secret", "data": data,
                         "metadata": {"name": "private", "namespace": namespace}})  # fmt: skip
    for args in (("get", "secret", "private"), ("get", "secrets")):
        proc = infra.kubectl("--kubeconfig", str(kubeconfig), "-n", namespace, *args, check=False)
        assert proc.returncode != 0 and "forbidden" in proc.stderr.lower(), (args, proc.stderr)
    return 2


@pytest.mark.parametrize("scenario", ["default", "pool-namespaces"])
async def test_chart_identity_runs_a_pool_lifecycle_without_a_403(
    helm: Path,
    harness: Harness,
    infra: ClusterEndpoint,
    workload: ClusterEndpoint,
    namespace: str,
    tmp_path: Path,
    scenario: str,
) -> None:
    t0 = time.monotonic()
    pool_ns, outside = f"{namespace[:50]}-pools", f"{namespace[:50]}-outside"
    for ns in (pool_ns, outside):
        for endpoint in (infra, workload):
            await asyncio.to_thread(endpoint.create_namespace, ns)
    values = {"poolNamespaces": [pool_ns]} if scenario == "pool-namespaces" else {}
    serves = pool_ns if values else namespace
    release_name = f"id-{secrets.token_hex(2)}"  # cluster-scoped RBAC names stay unique
    others = await asyncio.to_thread(pool_namespaces, infra)  # left by other tests
    try:
        with installed(helm, infra, release_name, namespace, values, tmp_path) as release:
            kubeconfig = token_kubeconfig(infra, release, tmp_path / "chart-sa.kubeconfig")
            log = tmp_path / "operator.log"
            with operator(release, kubeconfig, log) as proc:
                await asyncio.to_thread(wait, proc.ready, 60, "/readyz", log)
                await asyncio.to_thread(route_webhook_to_loopback, infra, release,
                                        proc.webhook_port)  # fmt: skip
                await lifecycle(infra, workload, serves)
                assert proc.proc.poll() is None, "the operator exited"
            during = audit_events(harness.audit_log("infrastructure"), release.username)
            print(f"\n  {len(during)} requests as {release.username}: {used(during)}", end="")
            assert len(during) > 50, "the audit log does not record the chart identity"
            assert forbidden(during, others) == [], "the chart's RBAC refused the operator"
            probes = secret_refused(infra, kubeconfig, outside)
            if values:  # the release namespace is served by name only
                probes += secret_refused(infra, kubeconfig, namespace)
            after = audit_events(harness.audit_log("infrastructure"), release.username)
            refused = forbidden(after, others)
            assert len(refused) == probes and all("/secrets" in r for r in refused), refused
    finally:
        for ns in (pool_ns, outside):
            for endpoint in (infra, workload):
                endpoint.delete_namespace(ns)
    print(f"\n  {scenario}: {time.monotonic() - t0:.1f}s in all")
