"""Live operator latency: a pending HAMi pod that fits a new cell -> a SwiftGuest is created.

Run with ``make bench`` (or ``pytest tests/bench/test_latency_bench.py -m bench -s``). The whole
graph of ``gpucellpool run`` (``App``, in-process, decisions and the provisioner) runs against
the harness's real apiservers; each trial creates one 24 GiB HAMi pod (one whole single-GPU
cell), marks it PodScheduled=False/Unschedulable through the status subresource as HAMi would,
and follows the causal chain on watches: the pod seen pending in the workload cluster, the
pool's ``status.desiredReplicas`` raised with ``lastDecision`` ScaledUp, and the SwiftGuest for
the new cell index ADDED in the infrastructure cluster. Every timestamp is taken in a watch
callback (``time.monotonic``), never by polling. Results go to docs/benchmarks.md between the
``live-latency`` markers; the target is p95 <= 2 s from pod creation to SwiftGuest creation.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import pytest

from gpucellpool.kube.cache import JSON, Query, WatchCache
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import join_secret
from tests.bench.bench_doc import load_note, percentile, summary, write_block
from tests.integration.test_loop_helpers import (
    PoolWatch,
    autoscaled_pool,
    client_for,
    create_pool,
    decision,
    desired_is,
    hami_pod,
    mark_unschedulable,
    start_app,
    watch_pool,
)

pytestmark = pytest.mark.bench

TRIALS = 20
TARGET_P95_S = 2.0
POOL = "lat"


@dataclass
class Stamps:
    """Watch-callback times of the chain's links, keyed by pod name / guest name."""

    pending: dict[str, float] = field(default_factory=dict)
    guests: dict[str, float] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def on_pod(self, kind: str, pod: JSON) -> None:
        name = str(pod["metadata"]["name"])
        conds = (pod.get("status") or {}).get("conditions") or []
        unschedulable = any(
            c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conds
        )
        if kind != "DELETED" and unschedulable and name not in self.pending:
            self.pending[name] = time.monotonic()

    def on_guest(self, kind: str, guest: JSON) -> None:
        name = str(guest["metadata"]["name"])
        if kind == "ADDED" and name not in self.guests:
            self.guests[name] = time.monotonic()
            self.changed.set()

    async def guest(self, name: str, timeout_s: float) -> float:
        async with asyncio.timeout(timeout_s):
            while name not in self.guests:
                self.changed.clear()
                await self.changed.wait()
        return self.guests[name]


async def settle(watch: PoolWatch, quiet_s: float, timeout_s: float) -> None:
    """Until the pool's status has not changed for ``quiet_s`` (bounded by ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        last = watch.seen[-1][0] if watch.seen else 0.0
        wait = quiet_s - (time.monotonic() - last)
        if wait <= 0:
            return
        watch.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(watch.changed.wait(), min(wait, left))


@pytest.mark.timeout(600)
async def test_pending_pod_to_swiftguest_latency(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    await infra_api.create(f"/api/v1/namespaces/{namespace}/secrets", join_secret(namespace))
    stamps = Stamps()
    caches = [
        WatchCache(workload_api, Query(f"/api/v1/namespaces/{namespace}/pods"), stamps.on_pod),
        WatchCache(
            infra_api,
            Query(f"/apis/swift.kubeswift.io/v1alpha1/namespaces/{namespace}/swiftguests"),
            stamps.on_guest,
        ),
    ]
    tasks = [asyncio.create_task(c.run()) for c in caches]
    for cache in caches:
        await asyncio.wait_for(cache.synced.wait(), 10)
    app = await start_app(infra, namespace, "solo", provision=True)
    watch, pool_task = await watch_pool(infra_api, namespace, POOL)
    rows: list[tuple[float, float, float, float]] = []
    try:
        await create_pool(infra_api, workload, autoscaled_pool(POOL, namespace, POOL))
        await watch.until(lambda s: decision(s).get("reason") == "Idle", 15)
        for k in range(1, TRIALS + 1):
            pod = f"{POOL}-pod-{k}"
            created = time.monotonic()
            await workload_api.create(
                f"/api/v1/namespaces/{namespace}/pods", hami_pod(namespace, pod, POOL, 24576)
            )
            await mark_unschedulable(workload_api, namespace, pod)
            at_desired, status = await watch.until(desired_is(k), 10)
            assert decision(status)["reason"] == "ScaledUp", status
            at_guest = await stamps.guest(f"{POOL}-{k - 1}", 10)
            pending = stamps.pending[pod]
            rows.append((created, pending, at_desired, at_guest))
            await settle(watch, 1.0, 15)  # each trial starts from a quiet pool
    finally:
        pool_task.cancel()
        for task in tasks:
            task.cancel()
        for task in [pool_task, *tasks]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await app.stop()
        await infra_api.close()
        await workload_api.close()

    to_desired = [d - c for c, _, d, _ in rows]
    to_guest = [g - c for c, _, _, g in rows]
    pending_to_guest = [g - p for _, p, _, g in rows]
    desired_to_guest = [g - d for _, _, d, g in rows]
    table = [
        "| link | p50 / p95 / max (s) |",
        "|---|---|",
        f"| pod created -> `status.desiredReplicas` raised | {summary(to_desired)} |",
        f"| pod created -> SwiftGuest created | **{summary(to_guest)}** |",
        f"| pod seen pending (watch) -> SwiftGuest created | {summary(pending_to_guest)} |",
        f"| `desiredReplicas` raised -> SwiftGuest created | {summary(desired_to_guest)} |",
    ]
    per_trial = ", ".join(f"{v:.2f}" for v in to_guest)
    half = TRIALS // 2
    early, late = percentile(desired_to_guest[:half], 0.5), percentile(desired_to_guest[half:], 0.5)
    p95 = percentile(to_guest, 0.95)
    verdict = "meets" if p95 <= TARGET_P95_S else "**misses**"
    trend = "grows with" if late > 1.1 * early else "hardly moves with"
    write_block(
        "live-latency",
        "## Live operator: pending pod -> cell requested\n\n"
        f"{TRIALS} trials, one after another, on the harness's real apiservers with the whole "
        "`gpucellpool run` graph in-process (`App`: pool watch, shared workload caches, "
        "per-pool decision task, provisioner driver; leader of its own Lease; default debounce "
        "150 ms). Each trial creates one HAMi pod asking for a whole 24 GiB GPU (one new "
        "single-GPU cell), then sets PodScheduled=False/Unschedulable through the status "
        "subresource as HAMi would. Times are taken in watch callbacks in the benchmark "
        "process (not by polling): the pod's Unschedulable condition on a Pods watch, "
        "`status.desiredReplicas` on a GPUCellPool watch, the SwiftGuest's ADDED event on a "
        "SwiftGuests watch; *pod created* is just before the create call. Regenerate with "
        "`pytest tests/bench/test_latency_bench.py -m bench -s`. Each trial starts once the "
        "pool's status has been quiet for 1 s (the previous cell's provisioning writes done).\n\n"
        + "\n".join(table)
        + f"\n\nPod created -> SwiftGuest created, per trial (s): {per_trial}.\n\n"
        "Where the time goes: the decision link (pod -> `desiredReplicas`) is flat; the "
        f"provisioner link (`desiredReplicas` -> SwiftGuest) {trend} the cells the pool "
        f"already has: median {early:.2f} s over trials 1-{half} (0-{half - 1} earlier cells) "
        f"vs {late:.2f} s over trials {half + 1}-{TRIALS}. A reconcile pass reads every "
        "cell's Node with its own GET (`provisioner/cells.py` `_node_status`), one cell "
        "after another, and applies the bootstrap Secret, seed profile and guest in turn "
        "before the guest exists; a pass already running when `desiredReplicas` moves "
        "(the pod event wakes it too) must finish first.\n\n"
        f"Target p95 <= {TARGET_P95_S:.0f} s: {verdict} (p95 {p95:.3f} s). The VM is a "
        f"shared 2-core machine; at the end of the run: {load_note()}.\n",
    )
    print(f"\npod created -> SwiftGuest: {summary(to_guest)} (p50/p95/max s)")
    print(f"pod created -> desiredReplicas: {summary(to_desired)}")
    assert p95 <= TARGET_P95_S, to_guest
