"""Live operator: a published 8-cell plan -> the wave's 8th SwiftGuest created.

Run with ``make bench`` (or ``pytest tests/bench/test_wave_bench.py -m bench -s``). The whole
``gpucellpool run`` graph (``App``, in-process) runs against the harness's real apiservers, as
in ``test_latency_bench``. Each trial makes eight pending 24 GiB HAMi pods (eight new
single-GPU cells) before their pool exists, then creates the pool: its first decision publishes
``status.desiredReplicas`` 8 at once, and the provisioner creates the wave. Times are taken in
watch callbacks: the plan on a GPUCellPool watch, each SwiftGuest's ADDED on a SwiftGuests
watch. Trials alternate between the provisioner creating a wave's cells together
(``provisioner.creator.CREATE_CONCURRENCY``) and one after another (concurrency 1, what it did
before), so both are measured side by side in one run at the same load. Results go to
docs/benchmarks.md between the ``live-wave`` markers.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

import provisioner.creator
from gpucellpool.kube.cache import Query, WatchCache
from gpucellpool.kube.rest import RestClient
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import join_secret
from tests.bench.bench_doc import load_note, percentile, summary, write_block
from tests.bench.test_latency_bench import Stamps
from tests.integration.test_loop_helpers import (
    autoscaled_pool,
    client_for,
    create_pool,
    desired_is,
    hami_pod,
    mark_unschedulable,
    start_app,
    watch_pool,
)

pytestmark = pytest.mark.bench

WAVE = 8
TRIALS = 16  # half of them each way, alternating
TOGETHER = provisioner.creator.CREATE_CONCURRENCY
MODES = {"together": TOGETHER, "one after another": 1}


async def _trial(
    infra_api: RestClient,
    workload_api: RestClient,
    workload: ClusterEndpoint,
    ns: str,
    pool: str,
    stamps: Stamps,
) -> tuple[float, float]:
    """Seconds from the published plan to the wave's first and to its last SwiftGuest."""
    for i in range(WAVE):
        pod = f"{pool}-pod-{i}"
        await workload_api.create(f"/api/v1/namespaces/{ns}/pods", hami_pod(ns, pod, pool, 24576))
        await mark_unschedulable(workload_api, ns, pod)
    watch, watch_task = await watch_pool(infra_api, ns, pool)
    try:
        await create_pool(infra_api, workload, autoscaled_pool(pool, ns, pool))
        at_plan, _ = await watch.until(desired_is(WAVE), 20)
        created = [await stamps.guest(f"{pool}-{i}", 20) for i in range(WAVE)]
    finally:
        watch_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch_task
    return min(created) - at_plan, max(created) - at_plan


@pytest.mark.timeout(900)
async def test_published_plan_to_a_waves_last_swiftguest(
    infra: ClusterEndpoint,
    workload: ClusterEndpoint,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    await infra_api.create(f"/api/v1/namespaces/{namespace}/secrets", join_secret(namespace))
    stamps = Stamps()
    guests = WatchCache(
        infra_api,
        Query(f"/apis/swift.kubeswift.io/v1alpha1/namespaces/{namespace}/swiftguests"),
        stamps.on_guest,
    )
    guests_task = asyncio.create_task(guests.run())
    await asyncio.wait_for(guests.synced.wait(), 10)
    app = await start_app(infra, namespace, "solo", provision=True)
    results: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    try:
        for k in range(TRIALS):
            mode = list(MODES)[k % 2]
            monkeypatch.setattr(provisioner.creator, "CREATE_CONCURRENCY", MODES[mode])
            times = await _trial(infra_api, workload_api, workload, namespace, f"wave{k}", stamps)
            results[mode].append(times)
    finally:
        guests_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await guests_task
        await app.stop()
        await infra_api.close()
        await workload_api.close()
    _report(results)
    together = percentile([x for _, x in results["together"]], 0.5)
    serial = percentile([x for _, x in results["one after another"]], 0.5)
    assert together < serial, results


def _report(results: dict[str, list[tuple[float, float]]]) -> None:
    rows = [
        "| cells of a wave created | plan -> 1st SwiftGuest | plan -> 8th SwiftGuest |",
        "|---|---|---|",
    ]
    for mode, times in results.items():
        label = f"{mode} ({MODES[mode]} at once)"
        firsts, lasts = [f for f, _ in times], [x for _, x in times]
        rows.append(f"| {label} | {summary(firsts)} | **{summary(lasts)}** |")
    together = percentile([x for _, x in results["together"]], 0.5)
    serial = percentile([x for _, x in results["one after another"]], 0.5)
    write_block(
        "live-wave",
        "## Live operator: a published plan -> its wave of guests\n\n"
        f"{TRIALS} trials, alternating the two ways, on the harness's real apiservers with the "
        "whole `gpucellpool run` graph in-process. Each trial makes eight pending pods of a "
        "whole 24 GiB GPU before their pool exists, then creates the pool: its first decision "
        f"publishes `status.desiredReplicas` {WAVE}, and the provisioner creates the wave (a "
        "bootstrap Secret, a seed profile and the SwiftGuest per cell, each cell's writes in "
        "that order). Times from the plan's watch event to the SwiftGuests' ADDED events, "
        "p50 / p95 / max in seconds. Regenerate with "
        "`pytest tests/bench/test_wave_bench.py -m bench -s`.\n\n"
        + "\n".join(rows)
        + f"\n\nMedian plan -> 8th SwiftGuest: {together:.3f} s together vs {serial:.3f} s one "
        f"after another ({together / serial:.2f}x). The VM is a shared 2-core machine; at the "
        f"end of the run: {load_note()}.\n",
    )
    for mode, times in results.items():
        print(f"\n{mode}: plan -> 8th guest {summary([x for _, x in times])} (p50/p95/max s)")
    print(load_note())
