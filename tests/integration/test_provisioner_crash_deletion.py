"""Crash safety of pool deletion: kill the finalizer flow at every write in turn, restart.

What these prove, for both backends: a deleted pool's flow - mark each cell draining, cordon
and delete its Node, release the cell finalizer, delete the guest (or Machine and
KubeSwiftMachine), sweep the seed profiles and bootstrap Secrets, release the pool finalizer -
aborted at any of its writes, before the write reached the apiserver or after it did (answer
lost), is finished by a brand-new Reconciler: the pool goes, and at the moment its finalizer is
released (the pool still exists, so the garbage collector cannot have cleaned up anything for
the operator) nothing of it is left - no guest or Machine, no seed, no bootstrap Secret, no
Node; the twin's own teardown (guests CAPKS made) finishes after.

The crash points are the flow's writes except the pool's status and Events: those are written
by every pass, waiting ones too, so their number depends on timing (recovering from a crash at
them is what test_provisioner_crash.py checks). Each crash point is its own pool; all of a
test's pools run at once (``crash_support``).
"""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.kube import JSON, KINDS, KubeApi
from provisioner.reconciler import PoolKey
from simulations.harness import ClusterEndpoint
from tests.integration.crash_support import (
    CLUSTERAPI,
    SWIFTGUEST,
    CountingCrashPlan,
    Flavour,
    calm_twin,
    cleanup_write,
    crash_in_flow,
    each,
    listing,
    new_pools,
    pool_names,
    pool_objects,
    recover,
    release_snapshot,
    report,
    settle,
    shape,
)
from tests.integration.provisioner_support import (
    FinalizerReleaseWitness,
    apis,  # noqa: F401  (fixture)
    ready_with,
)

CELLS = 1  # the per-cell writes are the same for every cell; more cells, more CPU


def _per_cell(flavour: Flavour) -> list[str]:
    if flavour is CLUSTERAPI:
        deletes = ["delete Machine", "delete KubeSwiftMachine"]
    else:
        deletes = ["delete SwiftGuest"]
    outer = f"patch {flavour.outer}"
    return [outer, "patch Node", "delete Node", outer, *deletes]  # mark ... release, delete


def expected_flow(flavour: Flavour) -> tuple[list[str], list[str]]:
    """(drain writes, sweep writes): every cell drained in one pass, cell after cell; once
    a cell's outer object is gone its parts are swept (cells may go in different passes, so
    the sweep's order is not fixed); then the pool finalizer is released."""
    drains = _per_cell(flavour) * CELLS
    sweep = (["delete SwiftSeedProfile"] if flavour is SWIFTGUEST else []) + ["delete Secret"]
    return drains, sweep * CELLS


def assert_flow(flavour: Flavour, log: list[str]) -> None:
    drains, sweeps = expected_flow(flavour)
    written = shape(log)
    assert written[: len(drains)] == drains, listing(log)
    assert sorted(written[len(drains) : -1]) == sorted(sweeps), listing(log)
    assert written[-1] == "patch GPUCellPool", log  # the pool finalizer, last


def _gone(pool: JSON | None) -> bool:
    return pool is None


@pytest.mark.parametrize("after", [False, True], ids=["before-write", "after-write"])
@pytest.mark.parametrize("flavour", [SWIFTGUEST, CLUSTERAPI], ids=lambda f: f.name)
async def test_crash_at_every_write_of_a_pool_deletion(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
    flavour: Flavour,
    after: bool,
    request: Any,
) -> None:
    infra_api, workload_api = apis
    drains, sweeps = expected_flow(flavour)
    points = len(drains) + len(sweeps) + 1
    names = pool_names("x", namespace, points + 1)
    plans = [
        CountingCrashPlan(crash_at=k, after=after, counts=cleanup_write) for k in range(points + 1)
    ]
    async with calm_twin(infra_api, workload_api, namespace):
        keys = await new_pools(flavour, infra_api, workload, namespace, names, CELLS)
        witnesses = [
            FinalizerReleaseWitness(
                infra_api, snapshot=release_snapshot(flavour, workload_api, key)
            )
            for key in keys
        ]
        await each(keys, lambda key: recover(infra_api, key, ready_with(CELLS)))
        for key in keys:
            await infra_api.delete(KINDS["GPUCellPool"], key.namespace, key.name)
        crashed = await each(
            range(points + 1),
            lambda k: crash_in_flow(witnesses[k], keys[k], plans[k], _gone),
        )
        assert crashed == [True] * points + [False], listing(plans[-1].log)
        await each(range(points + 1), lambda k: recover(witnesses[k], keys[k], _gone))
        for key, witness in zip(keys, witnesses, strict=True):
            assert await infra_api.get(KINDS["GPUCellPool"], key.namespace, key.name) is None
            nothing = {k: v for k, v in flavour.nothing().items() if k not in flavour.twin}
            assert witness.left == nothing, f"{key.name} released with {witness.left}"

        await each(keys, lambda key: _twin_done(flavour, infra_api, workload_api, key))
    log = plans[-1].log
    report(request, f"{flavour.name}, {'after' if after else 'before'}", points, log)
    assert_flow(flavour, log)


async def _twin_done(flavour: Flavour, infra: KubeApi, workload: KubeApi, key: PoolKey) -> None:
    """The twin's teardown (CAPKS deleting the guests it made) finishes: nothing at all left."""

    async def read() -> dict[str, set[str]]:
        return await pool_objects(flavour, infra, workload, key)

    async def empty() -> bool:
        return await read() == flavour.nothing()

    await settle(empty, read, flavour.nothing(), key)
