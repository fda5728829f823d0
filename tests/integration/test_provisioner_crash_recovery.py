"""Crash safety under a second crash: kill a creating pass at write k, restart, kill the
recovery's pass at its write j, restart again, converge.

What these prove, for both backends: whatever half-done state the first crash left (a finalizer
without cells, a Secret without its seed or KubeSwiftMachine, a guest or Machine without
status), a recovery that dies part-way through repairing it leaves nothing a third, brand-new
Reconciler cannot finish: exactly one cell, no duplicate, no orphaned seed / KubeSwiftMachine,
no leaked bootstrap Secret, status rows with the live outer object's UID. Every pair (k, j) is
its own pool, all run at once (``crash_support``); for each k the pool with j one past the
recovery's last write must not crash, which proves every recovery write was a crash point.

The crash points are a pass's state writes (Events are best effort and not counted): the pool
finalizer, Secret, seed profile or KubeSwiftMachine, SwiftGuest or Machine, status, and
status.desiredReplicas (a pool without autoscaling, written when it differs).
"""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.kube import KubeApi
from provisioner.reconciler import PoolKey
from simulations.harness import ClusterEndpoint
from tests.integration.crash_support import (
    CLUSTERAPI,
    SWIFTGUEST,
    CountingCrashPlan,
    Flavour,
    assert_exact_cells,
    calm_twin,
    crash_in_pass,
    each,
    new_pools,
    recover,
    report,
    state_write,
)
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    ready_with,
)

# pool finalizer, Secret, seed / KubeSwiftMachine, guest / Machine, status, desiredReplicas
# (the status apply, then desiredReplicas under its own field manager: provisioner.status)
FIRST_PASS_WRITES = 6
# State writes of the recovery's pass after the first crash at k (k = 0..5): before the write
# landed, k = 0 leaves nothing and k = 1..3 leave the cell unborn (created again in full: three
# writes, status and desiredReplicas); once the outer object exists only the status is left to
# write, with desiredReplicas until that write has landed.
RECOVERY_WRITES = {"before": [6, 5, 5, 5, 2, 2], "after": [5, 5, 5, 2, 2, 1]}


def _plan(crash_at: int, mode: str) -> CountingCrashPlan:
    return CountingCrashPlan(crash_at=crash_at, after=mode == "after", counts=state_write)


@pytest.mark.parametrize(
    ("flavour", "mode"),
    # One mode per backend keeps the suite's pools (and CPU) in bounds; the single-crash
    # suites run both modes on both backends.
    [(SWIFTGUEST, "before"), (CLUSTERAPI, "after")],
    ids=["SwiftGuest-before-write", "ClusterAPI-after-write"],
)
async def test_second_crash_during_recovery_of_a_creating_pass(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
    flavour: Flavour,
    mode: str,
    request: Any,
) -> None:
    infra_api, workload_api = apis
    recovery = RECOVERY_WRITES[mode]
    pairs = [(k, j) for k in range(FIRST_PASS_WRITES) for j in range(recovery[k] + 1)]
    first = {pair: _plan(pair[0], mode) for pair in pairs}
    second = {pair: _plan(pair[1], mode) for pair in pairs}
    async with calm_twin(infra_api, workload_api, namespace):
        names = [f"r{k}x{j}-{namespace[-6:]}" for k, j in pairs]  # unique Node names
        made = await new_pools(flavour, infra_api, workload, namespace, names, 1)
        keys = dict(zip(pairs, made, strict=True))

        async def twice(pair: tuple[int, int]) -> tuple[bool, bool]:
            crashed = await crash_in_pass(infra_api, keys[pair], first[pair])
            return crashed, await crash_in_pass(infra_api, keys[pair], second[pair])

        outcomes = dict(zip(pairs, await each(pairs, twice), strict=True))
        await each(keys.values(), lambda key: recover(infra_api, key, ready_with(1)))

        async def exact(key: PoolKey) -> None:
            await assert_exact_cells(flavour, infra_api, workload_api, key, {f"{key.name}-0"})

        await each(keys.values(), exact)
    assert all(crashed for crashed, _ in outcomes.values()), outcomes
    for (k, j), (_, again) in outcomes.items():
        assert again == (j < recovery[k]), (k, j, second[(k, j)].log)
    doubles = sum(1 for _, again in outcomes.values() if again)
    assert doubles == sum(recovery), outcomes
    pairs_by_k = ", ".join(f"k={k}: {n}" for k, n in enumerate(recovery))
    report(request, f"{flavour.name}, {mode}, (k, j) pairs; {pairs_by_k}", doubles)
