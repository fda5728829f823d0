"""Two real ``gpucellpool run --shards 2`` processes splitting the pools of one apiserver.

What this proves, with the binary a Deployment runs (issue 13): a process started alone takes
its own shard at once and stands in for the other's after a lease; the other shard's process,
once started, gets its shard back (the stand-in hands it over). Then every pool is decided by
exactly one process - its Events carry only that process's identity and only that process
exports its series on /metrics - and both shards' pools scale on new demand; ``kill -9`` of
one process hands its shard's Lease to the other within the lease duration plus a retry
(timed on the Lease's own renewTime and acquireTime), after which the survivor decides the
dead process's pools (new demand scales them, its /metrics shows them). Every Event of a pool
came from the process holding its shard at that time. Printed: the hand-back and takeover
times and the time from new demand to the taken-over pools' decisions.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from gpucellpool.kube.rest import RestClient
from gpucellpool.runtime.shards import lease_name, shard_of
from provisioner.fsm.observations import parse_time_s
from simulations.harness import ClusterEndpoint
from tests.integration.test_leader_processes import (
    LEASE_S,
    RETRY_S,
    SCHEDULING_SLACK_S,
    free_port,
    spawn,
    spec_time,
    wait_for,
)
from tests.integration.test_loop_helpers import (
    autoscaled_pool,
    client_for,
    create_pending,
    create_pool,
)

SHARDS = 2
POOLS_PER_SHARD = 2
LEASES = [lease_name("gpucellpool-autoscaler", SHARDS, k) for k in range(SHARDS)]
IDENTITIES = ["s0", "s1"]  # process i runs --shard-index i


def pools_by_shard(namespace: str) -> list[list[str]]:
    """Pool names of this test's namespace, ``POOLS_PER_SHARD`` for each shard."""
    by_shard: list[list[str]] = [[] for _ in range(SHARDS)]
    for i in range(1000):
        shard = by_shard[shard_of(namespace, f"sp{i}", SHARDS)]
        if len(shard) < POOLS_PER_SHARD:
            shard.append(f"sp{i}")
        if all(len(s) == POOLS_PER_SHARD for s in by_shard):
            return by_shard
    raise AssertionError("the hash put 1,000 names on one shard")


async def lease_spec(infra: RestClient, namespace: str, name: str) -> dict[str, Any]:
    lease = await infra.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
    return dict((lease or {}).get("spec") or {})


async def desired(infra: RestClient, namespace: str, pool: str) -> int:
    path = f"/apis/cells.kubeswift.io/v1alpha1/namespaces/{namespace}/gpucellpools/{pool}"
    raw = await infra.get(path)
    return int(((raw or {}).get("status") or {}).get("desiredReplicas") or 0)


async def events_by_pool(infra: RestClient, namespace: str) -> dict[str, list[tuple[float, str]]]:
    """(eventTime, reportingInstance) of every operator Event, per pool, oldest first."""
    listed = await infra.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    out: dict[str, list[tuple[float, str]]] = {}
    for event in (listed or {}).get("items") or []:
        at = parse_time_s(event.get("eventTime"))
        assert at is not None, event
        pool = (event.get("regarding") or {}).get("name", "")
        out.setdefault(pool, []).append((at, event.get("reportingInstance", "")))
    return {pool: sorted(seen) for pool, seen in out.items()}


async def exported_pools(http: httpx.AsyncClient, port: int, pools: list[str]) -> set[str]:
    text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    return {pool for pool in pools if f'pool="{pool}"' in text}


async def test_two_shards_each_pool_decided_by_one_and_killed_shard_taken_over(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str, tmp_path: Path
) -> None:
    shard_pools = pools_by_shard(namespace)
    every = [p for pools in shard_pools for p in pools]
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    ports = [free_port() for _ in IDENTITIES]
    procs = []
    try:
        for pool in every:
            await create_pool(infra_api, workload, autoscaled_pool(pool, namespace, pool))

        def start(index: int) -> None:
            extra = ("--shards", str(SHARDS), "--shard-index", str(index), "--no-provision")
            log = tmp_path / f"{IDENTITIES[index]}.log"
            procs.append(spawn(infra, namespace, IDENTITIES[index], ports[index], log, extra))

        def holders_are(expected: list[str]) -> Callable[[], Awaitable[bool]]:
            async def check() -> bool:
                specs = [await lease_spec(infra_api, namespace, name) for name in LEASES]
                return [spec.get("holderIdentity") for spec in specs] == expected

            return check

        # s0 alone: its own shard at once, s1's once that (absent) Lease stood still a lease.
        start(0)
        await wait_for(holders_are([IDENTITIES[0]] * SHARDS), 90, "s0 standing in for shard 1")
        standing = await lease_spec(infra_api, namespace, LEASES[1])
        start(1)  # shard 1's own process asks for it back; s0 hands it over
        await wait_for(holders_are(IDENTITIES), 90, "each process holding its own shard's Lease")
        back = await lease_spec(infra_api, namespace, LEASES[1])
        back_s = spec_time(back, "acquireTime")
        handed = back_s - spec_time(standing, "acquireTime")
        print(f"\nshard 1 handed back to s1 {handed:.2f}s after s0 took it (s1 started meanwhile)")
        for pool in every:
            await create_pending(workload_api, namespace, f"{pool}-1", pool)

        async def all_scaled(n: int, pools: list[str]) -> bool:
            return all([await desired(infra_api, namespace, p) >= n for p in pools])

        await wait_for(lambda: all_scaled(1, every), 60, "every pool scaled to 1")
        async with httpx.AsyncClient(timeout=5) as http:
            for index, pools in enumerate(shard_pools):
                assert await exported_pools(http, ports[index], every) == set(pools), index
            events = await events_by_pool(infra_api, namespace)
            for index, pools in enumerate(shard_pools):
                for pool in pools:  # since s1 got its shard back, only the shard's process
                    since = [who for at, who in events.get(pool, []) if at >= back_s]
                    assert set(since) == {IDENTITIES[index]}, (pool, events.get(pool))

            before = await lease_spec(infra_api, namespace, LEASES[1])
            procs[1].send_signal(signal.SIGKILL)
            procs[1].wait(10)
            crashed = await lease_spec(infra_api, namespace, LEASES[1])
            assert crashed.get("holderIdentity") == IDENTITIES[1], (before, crashed)

            async def survivor_holds() -> bool:
                spec = await lease_spec(infra_api, namespace, LEASES[1])
                return spec.get("holderIdentity") == IDENTITIES[0]

            await wait_for(survivor_holds, LEASE_S + 30, "the killed shard taken over")
            taken = await lease_spec(infra_api, namespace, LEASES[1])
            takeover = spec_time(taken, "acquireTime") - spec_time(crashed, "renewTime")
            print(f"\nshard takeover after kill -9: {takeover:.2f}s after the last renewal "
                  f"(lease {LEASE_S}s)")  # fmt: skip
            assert takeover >= LEASE_S / 2, takeover  # the record had to stand still
            assert takeover <= LEASE_S + 2 * RETRY_S + SCHEDULING_SLACK_S, takeover

            created = time.monotonic()
            for pool in shard_pools[1]:
                await create_pending(workload_api, namespace, f"{pool}-2", pool)
            await wait_for(lambda: all_scaled(2, shard_pools[1]), 60, "the dead shard's pools")
            print(f"taken-over pools scaled in {time.monotonic() - created:.2f}s")
            assert await exported_pools(http, ports[0], every) == set(every)
        events = await events_by_pool(infra_api, namespace)
        taken_s = spec_time(taken, "acquireTime")
        for pool in shard_pools[1]:  # s0 standing in, s1 from the hand-back, s0 from the takeover
            for at, who in events[pool]:
                holder = IDENTITIES[1] if back_s <= at < taken_s else IDENTITIES[0]
                assert who == holder, (pool, at, events[pool], back_s, taken_s)
        for pool in shard_pools[0]:
            assert {who for _, who in events[pool]} == {IDENTITIES[0]}, pool
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        await infra_api.close()
        await workload_api.close()
