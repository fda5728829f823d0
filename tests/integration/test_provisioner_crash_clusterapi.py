"""Crash safety of the Cluster API backend: kill a pass at every write in turn, restart, converge.

What these prove, as test_provisioner_crash.py does for the SwiftGuest backend: for every
mutating call of a creating pass and of a draining pass of a ``provisioner: ClusterAPI`` pool -
aborted before the write reached the apiserver and after it did (answer lost) - a brand-new
Reconciler converges to exactly the desired cells: one Machine, KubeSwiftMachine and bootstrap
Secret per cell and nothing else (no duplicate, no orphan, no leaked Secret), the Nodes and the
guests CAPKS made match, and the status rows carry the live Machines' UIDs. Each crash point is
its own pool; all of a test's pools run at once (``crash_support``). The last pool's plan lies
one past the expected number of writes: it must not crash, and its log is the flow's.

The crash points are the pass's state writes. Its Events are not counted: they are best
effort, how many a pass posts depends on timing (the SwiftGuest suite shows that a crash
while posting them loses only the rest of them).
"""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.kube import KubeApi
from simulations.harness import ClusterEndpoint
from tests.integration.crash_support import (
    CLUSTERAPI,
    CountingCrashPlan,
    assert_exact_cells,
    calm_twin,
    crash_in_pass,
    each,
    listing,
    new_pools,
    pool_names,
    recover,
    report,
    shape,
    state_write,
)
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    ready_with,
    set_replicas,
)

CELL_WRITES = ["apply Secret", "apply KubeSwiftMachine", "apply Machine"]  # Machine last
CREATE_STATE_WRITES = [
    "patch GPUCellPool",  # the pool finalizer
    *CELL_WRITES * 2,  # the two cells' writes overlap (provisioner.creator); each in this order
    "apply GPUCellPool/status",  # the provisioner's fields (field manager gpucellpool-provisioner)
    "apply GPUCellPool/status",  # desiredReplicas, new: its own manager (provisioner.status)
]


def _creating_pass_shape(log: list[str]) -> list[str]:
    """``shape(log)`` with the cells' writes (created concurrently) put one cell after the
    other, each cell's own writes in the order they were made."""
    state = [w for w in log if not w.startswith("create Event/")]
    cells = state[1:-2]
    by_cell = sorted(cells, key=lambda w: w.split("/", 1)[1].removesuffix("-bootstrap"))
    return shape([*state[:1], *by_cell, *state[-2:]])


DRAIN_WRITES = [
    "patch Machine",  # the drain mark
    "patch Node",  # cordon
    "delete Node",
    "patch Machine",  # release the cell-drain finalizer
    "delete Machine",
    "delete KubeSwiftMachine",
    "apply GPUCellPool/status",
    "apply GPUCellPool/status",  # desiredReplicas 2 -> 1
]


def _ids(after: bool) -> str:
    return "after-write" if after else "before-write"


@pytest.mark.parametrize("after", [False, True], ids=_ids)
async def test_clusterapi_crash_at_every_write_of_a_creating_pass(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
    after: bool,
    request: Any,
) -> None:
    infra_api, workload_api = apis
    points = len(CREATE_STATE_WRITES)
    names = pool_names("c", namespace, points + 1)
    plans = [
        CountingCrashPlan(crash_at=k, after=after, counts=state_write) for k in range(points + 1)
    ]
    async with calm_twin(infra_api, workload_api, namespace):
        keys = await new_pools(CLUSTERAPI, infra_api, workload, namespace, names, 2)
        crashed = await each(
            range(points + 1), lambda k: crash_in_pass(infra_api, keys[k], plans[k])
        )
        assert crashed == [True] * points + [False], listing(plans[-1].log)
        await each(keys, lambda key: recover(infra_api, key, ready_with(2)))
        cells = {key: {f"{key.name}-0", f"{key.name}-1"} for key in keys}
        await each(
            keys,
            lambda key: assert_exact_cells(CLUSTERAPI, infra_api, workload_api, key, cells[key]),
        )
    log = plans[-1].log
    report(request, _ids(after), points, log)
    assert _creating_pass_shape(log) == CREATE_STATE_WRITES, listing(log)
    assert plans[-1].passed, "the pass posted Events (not crash points: their number varies)"


@pytest.mark.parametrize("after", [False, True], ids=_ids)
async def test_clusterapi_crash_at_every_write_of_a_draining_pass(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
    after: bool,
    request: Any,
) -> None:
    infra_api, workload_api = apis
    points = len(DRAIN_WRITES)
    names = pool_names("d", namespace, points + 1)
    plans = [
        CountingCrashPlan(crash_at=k, after=after, counts=state_write) for k in range(points + 1)
    ]
    async with calm_twin(infra_api, workload_api, namespace):
        keys = await new_pools(CLUSTERAPI, infra_api, workload, namespace, names, 2)
        await each(keys, lambda key: recover(infra_api, key, ready_with(2)))
        await each(keys, lambda key: set_replicas(infra_api, key, 1))
        crashed = await each(
            range(points + 1), lambda k: crash_in_pass(infra_api, keys[k], plans[k])
        )
        assert crashed == [True] * points + [False], listing(plans[-1].log)
        await each(keys, lambda key: recover(infra_api, key, ready_with(1)))
        await each(
            keys,
            lambda key: assert_exact_cells(
                CLUSTERAPI, infra_api, workload_api, key, {f"{key.name}-0"}
            ),
        )
    log = plans[-1].log
    report(request, _ids(after), points, log)
    # The bootstrap Secret goes in the next pass (once the Machine is gone): swept, and
    # assert_exact_cells has seen it gone.
    assert shape(log) == DRAIN_WRITES, listing(log)
