"""Two ``gpucellpool run`` graphs (in-process) against one real apiserver and one Lease.

What this proves: with two instances exactly one writes pool status (the other decides but
writes nothing); when the leader dies without releasing the Lease (a crash), the standby
takes over once the lease ran out, within the lease duration (plus a retry period or two),
and acts on new demand; after a clean shutdown the standby takes over at its next retry.
Hand-over times are read from the Lease records the electors wrote (renewTime, acquireTime),
not from when this test happened to notice, so a loaded machine cannot stretch them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import Any

from gpucellpool.operator.app import App
from provisioner.fsm.observations import parse_time_s
from simulations.harness import ClusterEndpoint
from tests.integration.test_loop_helpers import (
    autoscaled_pool,
    client_for,
    create_pending,
    create_pool,
    read_lease,
    start_app,
    until,
    watch_pool,
)

LEASE = {"lease_s": 4.0, "renew_deadline_s": 2.0, "retry_s": 0.5}
SCHEDULING_SLACK_S = 2.0
"""Event-loop and apiserver latency the standby's rounds may add on a loaded machine; the
takeover bound stays below two leases, so waiting a lease twice (or a default 15 s lease) fails."""


class LeaseWrites:
    """Wraps an elector's Lease API; keeps every Lease body it wrote successfully."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.written: list[dict[str, Any]] = []

    async def get(self) -> Any:
        return await self.inner.get()

    async def create(self, lease: dict[str, Any]) -> Any:
        out = await self.inner.create(lease)
        self.written.append(lease)
        return out

    async def replace(self, lease: dict[str, Any]) -> Any:
        out = await self.inner.replace(lease)
        self.written.append(lease)
        return out


def record_lease_writes(app: App) -> LeaseWrites:
    writes = LeaseWrites(app.elector.api)
    app.elector.api = writes
    return writes


def spec_time(lease: dict[str, Any] | None, field: str) -> float:
    seconds = parse_time_s(((lease or {}).get("spec") or {}).get(field))
    assert seconds is not None, (field, lease)
    return seconds


class CountingWriter:
    """Wraps an app's writer and counts its status writes."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.writes = inner, 0

    async def apply_status(self, body: dict[str, Any]) -> None:
        self.writes += 1
        await self.inner.apply_status(body)

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


def decided_target(app: App, key: tuple[str, str]) -> int | None:
    """The target of ``app``'s last decision for pool ``key`` (None: not decided yet)."""
    state = app.autoscaler.pools.get(key)
    last = state.last_decision if state is not None else None
    return last.desired_replicas if last is not None else None


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
        leader = await leader_of((one, two), 30)
        standby = two if leader is one else one
        renewals = record_lease_writes(leader)
        await create_pending(workload_api, namespace, "ha-1", "ha")
        await watch.until(lambda s: s.get("desiredReplicas") == 1, 30)
        assert counters[leader.settings.identity].writes >= 1
        # The standby decides too (warm caches), it just does not write. Both are woken by the
        # same pod events and debounced alike, so its decision runs beside the leader's: nothing
        # orders it before the leader's write lands. Wait for it, then check it wrote nothing.
        await until(lambda: decided_target(standby, (namespace, "ha")) == 1, 30,
                    "the standby decides the pool too")  # fmt: skip
        assert counters[standby.settings.identity].writes == 0
        assert not standby.elector.is_leader and standby.elector.known

        # Crash the leader: no Lease release.
        await leader.stop(release_lease=False)
        stopped.append(leader)
        # Its last renewal: the last it wrote, or one that landed as it was cancelled.
        last_renewals = [spec_time(body, "renewTime") for body in renewals.written]
        crashed = await read_lease(infra, namespace)
        assert crashed is not None
        if crashed["spec"].get("holderIdentity") == leader.settings.identity:
            last_renewals.append(spec_time(crashed, "renewTime"))
        assert last_renewals, "the leader renewed the Lease while it led"
        new_leader = await leader_of((standby,), LEASE["lease_s"] + 30)
        assert new_leader is standby
        taken = await read_lease(infra, namespace)
        assert taken is not None
        assert taken["spec"]["holderIdentity"] == standby.settings.identity
        takeover = spec_time(taken, "acquireTime") - max(last_renewals)
        print(f"\nfailover after crash: {takeover:.2f}s after the last renewal "
              f"(lease {LEASE['lease_s']}s)")  # fmt: skip
        # Not before the record stood still for the lease (less the standby's read latency),
        # and within the lease plus the standby's observation and takeover rounds.
        assert takeover >= LEASE["lease_s"] / 2, takeover
        assert takeover <= LEASE["lease_s"] + 2 * LEASE["retry_s"] + SCHEDULING_SLACK_S, takeover
        await create_pending(workload_api, namespace, "ha-2", "ha")
        await watch.until(lambda s: s.get("desiredReplicas") == 2, 30)
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
        leader = await leader_of((one, two), 30)
        standby = two if leader is one else one
        writes = record_lease_writes(leader)
        await leader.stop()
        stopped.append(leader)
        released = [body for body in writes.written if not body["spec"]["holderIdentity"]]
        assert released, "a clean stop releases the Lease"
        await leader_of((standby,), 30)
        taken = await read_lease(infra, namespace)
        assert taken is not None
        assert taken["spec"]["holderIdentity"] == standby.settings.identity
        handover = spec_time(taken, "acquireTime") - spec_time(released[-1], "renewTime")
        print(f"\nhandover after clean stop: {handover:.2f}s")
        # At the standby's next retry (plus a loaded machine's latency), well before the lease
        # (4 s) an unreleased Lease would make it wait.
        assert 0 <= handover <= LEASE["retry_s"] + 1.5, handover
    finally:
        for app in (one, two):
            if app not in stopped:
                await app.stop()


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
        leader = await leader_of((one, two), 30)
        standby = two if leader is one else one
        await standby.stop()  # nobody else may take over: only the intruder below
        stopped.append(standby)
        desired = leader.registry.get_sample_value
        await until(lambda: desired("gpucellpool_desired_cells", labels) is not None, 30,
                    "the leader exports the pool's series")  # fmt: skip
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/gpucellpool-autoscaler"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        await infra_api.merge_patch(path, {"spec": {"holderIdentity": "intruder",
                                                    "renewTime": now,
                                                    "leaseDurationSeconds": 3600}})  # fmt: skip
        # The round that read the intruder ended the term (is_leader alone may lapse earlier,
        # at the renew deadline, before that round ends and drops the series).
        await until(lambda: leader.elector.holder == "intruder" and not leader.elector.is_leader,
                    15, "the leader saw the intruder")  # fmt: skip
        assert desired("gpucellpool_desired_cells", labels) is None
        decided = leader.autoscaler.pools[(namespace, "dep")].decisions
        await create_pending(workload_api, namespace, "dep-1", "dep")
        await until(lambda: leader.autoscaler.pools[(namespace, "dep")].decisions > decided, 30,
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
