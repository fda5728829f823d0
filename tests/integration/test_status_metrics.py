"""``gpucellpool run`` exports the cell lifecycle series and runs the CRD drift check at start.

What this proves, on the real apiservers with the twin's controllers: the App (provisioner on)
creates two cells that boot and reach Ready, and its own ``/metrics`` then shows two cells
created, two startup observations (both histogram families), the phase transitions into
Ready, the physical GPUs held and the HAMi devices and memory (from the provisioner's
``CapacityAvailable`` condition); after a scale-down to one cell the drained cell is counted
removed. And an App started against an apiserver serving this build's CRD sets every
``gpucellpool_crd_drift_findings`` kind to 0, while one started against an older CRD reports
the missing field and the narrowed enum.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gpucellpool.api import crdgen
from gpucellpool.operator.app import App
from gpucellpool.operator.crdcheck import FindingKind
from gpucellpool.runtime.clock import SystemClock
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import Twin, api_for, join_secret, swiftguest_pool
from tests.integration.test_crdcheck_real import _apply, older_crd, session_crd  # noqa: F401
from tests.integration.test_loop_helpers import client_for, create_pool, start_app, watch_pool

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(app: App) -> Samples:
    async with httpx.AsyncClient(timeout=5) as http:
        body = (await http.get(f"http://127.0.0.1:{app.health.port}/metrics")).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


async def until(app: App, check: Callable[[Samples], bool], timeout_s: float) -> Samples:
    deadline = time.monotonic() + timeout_s
    while True:
        samples = await scrape(app)
        if check(samples):
            return samples
        assert time.monotonic() < deadline, sorted(k for k in samples if "cell" in k[0])
        await asyncio.sleep(0.2)  # polling the exposition with a deadline


async def test_cell_lifecycle_series_from_the_status(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    infra_api = await client_for(infra)
    twin_infra, twin_workload = (
        await api_for(infra.kubeconfig_path),
        await api_for(workload.kubeconfig_path),
    )
    await twin_infra.apply(join_secret(namespace))
    app = await start_app(infra, namespace, "solo", provision=True)
    watch, task = await watch_pool(infra_api, namespace, "sm")
    pool = {"namespace": namespace, "pool": "sm"}
    try:
        async with Twin(twin_infra, twin_workload, SystemClock(), namespace):
            started = time.monotonic()
            await create_pool(infra_api, workload, swiftguest_pool("sm", namespace, replicas=2))
            await watch.until(lambda s: s.get("readyCells") == 2, 90)
            print(f"\ntwo cells Ready through the twin: {time.monotonic() - started:.1f}s")

            def booted(s: Samples) -> bool:
                # The gauges follow the latest status seen; its capacity may land a pass after
                # the rows turned Ready, so wait for them too (asserted again below).
                return (
                    total(s, "gpucellpool_cell_startup_seconds_count", **pool) == 2
                    and total(s, "gpucell_physical_gpus", state="held", **pool) == 2
                    and total(s, "gpucell_capacity_gpu_devices", **pool) == 2
                    and total(s, "gpucell_capacity_gpu_memory_bytes", state="total", **pool) > 0
                )

            samples = await until(app, booted, 30)
            assert total(samples, "gpucellpool_cells_created_total", **pool) == 2
            assert total(samples, "gpucell_cell_startup_seconds_count", **pool) == 2
            assert total(samples, "gpucellpool_cell_startup_seconds_sum", **pool) >= 0
            assert total(samples, "gpucell_cell_transitions_total", to="Ready", **pool) >= 2
            assert total(samples, "gpucell_physical_gpus", state="held", **pool) == 2
            assert total(samples, "gpucellpool_cells_removed_total", **pool) == 0
            assert total(samples, "gpucell_capacity_gpu_devices", **pool) == 2
            memory = {
                state: total(samples, "gpucell_capacity_gpu_memory_bytes", state=state, **pool)
                for state in ("total", "allocated", "available")
            }
            assert memory["total"] > 0, memory
            assert memory["allocated"] + memory["available"] == memory["total"], memory
            await infra_api.merge_patch(
                f"/apis/cells.kubeswift.io/v1alpha1/namespaces/{namespace}/gpucellpools/sm",
                {"spec": {"replicas": 1}},
            )
            await watch.until(lambda s: len(s.get("cells") or []) == 1, 60)

            def removed(s: Samples) -> bool:
                return total(s, "gpucellpool_cells_removed_total", **pool) == 1

            samples = await until(app, removed, 30)
            assert total(samples, "gpucellpool_cells_removed_total", reason="Drained", **pool) == 1
            leaving = [total(samples, "gpucell_cell_transitions_total", to=p, **pool)
                       for p in ("Draining", "Deleting")]  # fmt: skip
            assert sum(leaving) >= 1  # an idle cell goes straight to Deleting
            assert total(samples, "gpucellpool_cells_created_total", **pool) == 2
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await app.stop()
        for client in (infra_api, twin_infra, twin_workload):
            await client.close()


async def _findings_at_start(infra: ClusterEndpoint, namespace: str) -> dict[str, float]:
    app = await start_app(infra, namespace, "crd-check")
    try:
        kinds = [k.value for k in FindingKind]

        def checked(s: Samples) -> bool:
            names = {dict(ls).get("kind") for n, ls in s if n == "gpucellpool_crd_drift_findings"}
            return set(kinds) <= names

        samples = await until(app, checked, 30)
        return {k: total(samples, "gpucellpool_crd_drift_findings", kind=k) for k in kinds}
    finally:
        await app.stop()


async def test_crd_drift_check_runs_at_startup(
    infra: ClusterEndpoint,
    namespace: str,
    session_crd: dict[str, Any],  # noqa: F811  (the session's CRD, put back afterwards)
) -> None:
    await _apply(infra, crdgen.crd())
    assert set((await _findings_at_start(infra, namespace)).values()) == {0.0}
    await _apply(infra, older_crd())
    older = await _findings_at_start(infra, namespace)
    assert older["FieldMissing"] >= 1 and older["EnumNarrowed"] >= 1, older
