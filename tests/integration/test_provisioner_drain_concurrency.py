"""A scale-down of several cells drains them concurrently, on real apiservers with the twin.

What this proves: after a scale-down from 4 cells to 1, the first pass drives all three drains
(each leaving cell's Node cordoned in that pass, its row no longer Ready) and the pool converges
with exactly the highest-index cells gone. The same scale-down is timed with the drains one
after another (``DRAIN_CONCURRENCY`` 1, as before) in the same test, alternating, and the
first pass's wall time and the time to converge are printed (``-s``) as a ratio for
docs/architecture.md: on a loaded machine only the ratio within one run means anything.
"""

from __future__ import annotations

import time

import pytest

import provisioner.drainer
from provisioner.kube import KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import swiftguest_pool
from tests.integration.provisioner_support import (
    RunningPool,
    apis,  # noqa: F401  (fixture)
    names,
    ready_with,
    row,
    running_pool,
)


async def _scale_down(
    run: RunningPool, workload_api: KubeApi, namespace: str
) -> tuple[float, float]:
    """From 4 Ready cells to 1: (the first pass's seconds, seconds to converge)."""
    await run.scale(4)
    await run.converge(ready_with(4), timeout_s=180)
    await run.scale(1)
    started = time.monotonic()
    await run.reconciler.reconcile_once(run.key)
    first = time.monotonic() - started
    raw = await run.infra.get(KINDS["GPUCellPool"], namespace, run.key.name)
    for index in (1, 2, 3):  # every leaving cell progressed in that one pass
        cell = f"{run.key.name}-{index}"
        node = await workload_api.get(KINDS["Node"], None, cell)
        assert node is None or node["spec"].get("unschedulable") is True, cell
        assert row(raw, cell).get("phase") != "Ready", cell
    await run.converge(ready_with(1), timeout_s=180)
    assert await names(run.infra, "SwiftGuest", namespace) == {f"{run.key.name}-0"}
    return first, time.monotonic() - started


async def test_a_scale_down_drains_its_cells_concurrently(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, workload_api = apis
    pool = swiftguest_pool(f"dc-{namespace[-6:]}", namespace, 4)
    timings: dict[int, list[tuple[float, float]]] = {1: [], 8: []}
    async with running_pool(apis, workload, pool) as run:
        await run.converge(ready_with(4), timeout_s=180)
        for limit in (8, 1, 8, 1):  # alternating: the machine's load hits both alike
            monkeypatch.setattr(provisioner.drainer, "DRAIN_CONCURRENCY", limit)
            timings[limit].append(await _scale_down(run, workload_api, namespace))
    for limit, runs in timings.items():
        shown = ", ".join(f"first pass {a:.2f} s, converged {b:.2f} s" for a, b in runs)
        print(f"\ndrain concurrency {limit}: {shown}")
    first = {k: sum(a for a, _ in v) / len(v) for k, v in timings.items()}
    print(f"first pass sequential / concurrent: {first[1] / first[8]:.2f}")
