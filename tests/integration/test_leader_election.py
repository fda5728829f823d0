"""Two ``gpucellpool run`` graphs (in-process) against one real apiserver and one Lease.

What this proves: with two instances exactly one writes pool status (the other decides but
writes nothing); when the leader dies without releasing the Lease (a crash), the standby
takes over within the lease duration (plus one retry period) and acts on new demand; after a
clean shutdown the standby takes over at its next retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import Any

from gpucellpool.app import App
from simulations.harness import ClusterEndpoint
from tests.integration.test_loop_helpers import (
    autoscaled_pool,
    client_for,
    create_pending,
    create_pool,
    start_app,
    watch_pool,
)

LEASE = {"lease_s": 3.0, "renew_deadline_s": 2.0, "retry_s": 0.5}


class CountingWriter:
    """Wraps an app's writer and counts its status writes."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.writes = inner, 0

    async def apply_status(self, body: dict[str, Any]) -> None:
        self.writes += 1
        await self.inner.apply_status(body)

    async def annotate(self, pool: Any, key: str, value: str) -> None:
        await self.inner.annotate(pool, key, value)

    async def event(self, pool: Any, reason: str, note: str, warning: bool) -> None:
        await self.inner.event(pool, reason, note, warning)


async def two_apps(
    infra: ClusterEndpoint, namespace: str
) -> tuple[App, App, dict[str, CountingWriter]]:
    apps = [await start_app(infra, namespace, ident, **LEASE) for ident in ("one", "two")]
    counters = {}
    for app in apps:
        counters[app.settings.identity] = counter = CountingWriter(app.writer)
        app.autoscaler.writer = counter
    return apps[0], apps[1], counters


async def leader_of(apps: tuple[App, ...], timeout_s: float) -> App:
    deadline = time.monotonic() + timeout_s
    while True:
        leaders = [a for a in apps if a.elector.is_leader]
        assert len(leaders) <= 1, "two leaders at once"
        if leaders:
            return leaders[0]
        assert time.monotonic() < deadline, "no leader elected"
        await asyncio.sleep(0.02)  # polling with a deadline


async def test_exactly_one_writes_and_failover_within_lease(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    one, two, counters = await two_apps(infra, namespace)
    watch, task = await watch_pool(infra_api, namespace, "ha")
    stopped: list[App] = []
    try:
        await create_pool(infra_api, workload, autoscaled_pool("ha", namespace, "ha"))
        leader = await leader_of((one, two), 10)
        standby = two if leader is one else one
        await create_pending(workload_api, namespace, "ha-1", "ha")
        await watch.until(lambda s: s.get("desiredReplicas") == 1, 10)
        assert counters[leader.settings.identity].writes >= 1
        assert counters[standby.settings.identity].writes == 0
        # The standby decided too (warm caches), it just did not write.
        standby_state = standby.autoscaler.pools[(namespace, "ha")]
        assert standby_state.decisions >= 1
        assert not standby.elector.is_leader and standby.elector.known

        # Crash the leader: no Lease release.
        crashed_at = time.monotonic()
        await leader.stop(release_lease=False)
        stopped.append(leader)
        new_leader = await leader_of((standby,), LEASE["lease_s"] + 3 * LEASE["retry_s"])
        takeover = time.monotonic() - crashed_at
        print(f"\nfailover after crash: {takeover:.2f}s (lease {LEASE['lease_s']}s)")
        assert new_leader is standby
        assert takeover <= LEASE["lease_s"] + 2 * LEASE["retry_s"]
        await create_pending(workload_api, namespace, "ha-2", "ha")
        await watch.until(lambda s: s.get("desiredReplicas") == 2, 10)
        assert counters[standby.settings.identity].writes >= 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for app in (one, two):
            if app not in stopped:
                await app.stop()
        await infra_api.close()
        await workload_api.close()


async def test_clean_shutdown_hands_over_at_next_retry(
    infra: ClusterEndpoint, namespace: str
) -> None:
    one, two, _ = await two_apps(infra, namespace)
    stopped: list[App] = []
    try:
        leader = await leader_of((one, two), 10)
        standby = two if leader is one else one
        started = time.monotonic()
        await leader.stop()
        stopped.append(leader)
        await leader_of((standby,), 2 * LEASE["retry_s"] + 1.0)
        print(f"\nhandover after clean stop: {time.monotonic() - started:.2f}s")
    finally:
        for app in (one, two):
            if app not in stopped:
                await app.stop()


async def until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)  # polling with a deadline


async def test_a_deposed_leader_stops_exporting_pool_series(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    """Another holder takes the Lease: the old leader drops every per-pool series at once, and
    its decisions after that (it keeps deciding, as a standby does) bring none back."""
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    one, two, _ = await two_apps(infra, namespace)
    stopped: list[App] = []
    labels = {"namespace": namespace, "pool": "dep"}
    try:
        await create_pool(infra_api, workload, autoscaled_pool("dep", namespace, "dep"))
        leader = await leader_of((one, two), 10)
        standby = two if leader is one else one
        await standby.stop()  # nobody else may take over: only the intruder below
        stopped.append(standby)
        desired = leader.registry.get_sample_value
        await until(lambda: desired("gpucellpool_desired_cells", labels) is not None, 10,
                    "the leader exports the pool's series")  # fmt: skip
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/gpucellpool-autoscaler"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        await infra_api.merge_patch(path, {"spec": {"holderIdentity": "intruder",
                                                    "renewTime": now,
                                                    "leaseDurationSeconds": 3600}})  # fmt: skip
        await until(lambda: not leader.elector.is_leader, 5, "the leader saw the intruder")
        assert desired("gpucellpool_desired_cells", labels) is None
        decided = leader.autoscaler.pools[(namespace, "dep")].decisions
        await create_pending(workload_api, namespace, "dep-1", "dep")
        await until(lambda: leader.autoscaler.pools[(namespace, "dep")].decisions > decided, 10,
                    "the deposed replica keeps deciding")  # fmt: skip
        assert desired("gpucellpool_desired_cells", labels) is None
        assert (
            desired("gpucellpool_scale_decisions_total", {**labels, "reason": "ScaledUp"}) is None
        )
    finally:
        for app in (one, two):
            if app not in stopped:
                await app.stop()
        await infra_api.close()
        await workload_api.close()
