"""A scale-down drain blocked by a PodDisruptionBudget backs off instead of retrying for ever.

What this proves, on the real apiservers (Eviction API, PDB enforced by kube-apiserver): with a
PDB that allows no disruption, the scale-down drain of the first victim is abandoned at
``drain.timeout`` and recorded on the cell (annotations, so an operator restart keeps it); after
its n-th abandon a cell is not marked (so not cordoned) again within ``drain.timeout x 2^n``,
and the other cell is tried instead meanwhile; once both are in back-off (the windows double,
the drains do not, so they soon overlap) the pool says why it does not shrink
(``Progressing=False/ScaleDownHeld`` and a Warning Event); a freshly started operator keeps the
hold, and retries only after the back-off.

The PDB verdict does not depend on who writes the PDB status: with a disruption controller two
pods under ``minAvailable: 2`` allow none; without one the apiserver refuses evictions of a PDB
it has never seen processed. Either way every eviction is 429.
"""

from __future__ import annotations

import itertools

from provisioner.backends.base import DRAIN_STARTED_ANNOTATION
from provisioner.events import EVENT
from provisioner.fsm.drain_backoff import (
    DRAIN_ABANDON_COUNT_ANNOTATION,
    DRAIN_ABANDONED_ANNOTATION,
)
from provisioner.fsm.observations import parse_time_s
from provisioner.kube import JSON, KINDS, KubeApi
from provisioner.reconciler import Reconciler
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import poll_until, swiftguest_pool
from tests.integration.provisioner_support import (
    RecordingKubeApi,
    apis,  # noqa: F401  (fixture)
    cond,
    gpu_pod,
    ready_with,
    recording_factory,
    row,
    running_pool,
)

APP = {"app": "trainer"}
TIMEOUT_S = 2.0
POLICY_V1_PDB = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget"}


def _pdb(namespace: str) -> JSON:
    return {
        **POLICY_V1_PDB,
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": APP}},
    }


async def _running(workload_api: KubeApi, namespace: str) -> int:
    pods = await workload_api.list(KINDS["Pod"], namespace, label_selector="app=trainer")
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")


class DrainHistory:
    """Every drain start and abandon of the cells, read from their outer objects after each pass
    (``drain-started`` is stamped when a cell is marked, the pass that cordons it; the abandon
    record when it is uncordoned). A drain lasts at least one timeout, i.e. at least one pass,
    so no drain start goes unseen."""

    def __init__(self, infra_api: KubeApi, namespace: str, cells: tuple[str, ...]) -> None:
        self.api, self.namespace, self.cells = infra_api, namespace, cells
        self.starts: dict[str, set[float]] = {c: set() for c in cells}
        self.abandons: dict[str, dict[int, float]] = {c: {} for c in cells}

    async def sample(self) -> None:
        for name in self.cells:
            guest = await self.api.get(KINDS["SwiftGuest"], self.namespace, name)
            ann = ((guest or {}).get("metadata") or {}).get("annotations") or {}
            started = parse_time_s(ann.get(DRAIN_STARTED_ANNOTATION))
            if started is not None:
                self.starts[name].add(started)
            count = int(ann.get(DRAIN_ABANDON_COUNT_ANNOTATION, "0"))
            at = parse_time_s(ann.get(DRAIN_ABANDONED_ANNOTATION))
            if count and at is not None:
                self.abandons[name][count] = at

    def count(self, name: str) -> int:
        return max(self.abandons[name], default=0)

    def held_windows(self, name: str) -> list[tuple[float, float]]:
        """(abandoned, abandoned + timeout x 2^n) for each recorded abandon n."""
        return [(at, at + TIMEOUT_S * 2**n) for n, at in sorted(self.abandons[name].items())]


async def test_pdb_blocked_scale_down_backs_off_and_says_why(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    drain = {"mode": "Evict", "timeout": f"{TIMEOUT_S:.0f}s"}
    pool_json = swiftguest_pool("dbo", namespace, replicas=2, autoscaling={"drain": drain})
    recorders: list[RecordingKubeApi] = []
    history = DrainHistory(infra_api, namespace, ("dbo-0", "dbo-1"))
    factory = recording_factory(recorders)
    async with running_pool(
        apis, workload, pool_json, run_pods=True, workload_factory=factory
    ) as run:
        await run.converge(ready_with(2), timeout_s=40)
        await workload_api.apply(_pdb(namespace))
        for name, node in (("trainer-a", "dbo-1"), ("trainer-b", "dbo-0")):
            await workload_api.create(gpu_pod(namespace, name, node, APP))

        async def both_running() -> bool:
            return await _running(workload_api, namespace) == 2

        await poll_until(both_running, timeout_s=20)
        await run.scale(1)

        async def held(p: JSON | None) -> bool:
            await history.sample()
            return cond(p, "Progressing").get("reason") == "ScaleDownHeld"

        # dbo-1 (highest index) drains and is abandoned at the timeout; dbo-0 stands in while
        # dbo-1 is in back-off, and is abandoned in turn; once the back-off windows overlap
        # (they double, the drains do not) the scale-down is held and says so.
        held_pool = await run.converge(held, timeout_s=60)
        count_at_hold = history.count("dbo-1")

        # An operator restart: a fresh Reconciler still holds (the record is on the cells),
        # and dbo-1 is tried again only after its (doubled) back-off.
        await run.reconciler.close()
        run.reconciler = Reconciler(infra_api, run.clock, workload_factory=factory)

        async def retried(p: JSON | None) -> bool:
            await history.sample()
            return history.count("dbo-1") > count_at_hold

        await run.converge(retried, timeout_s=60)
        events = await infra_api.list(EVENT, namespace)

    for cell in ("dbo-0", "dbo-1"):
        windows = history.held_windows(cell)
        assert [n for n in sorted(history.abandons[cell])] == list(range(1, len(windows) + 1))
        # Never marked (hence never cordoned) again inside one of its back-off windows...
        for start in history.starts[cell]:
            assert not any(a < start < until for a, until in windows), (cell, start, windows)
        # ... and each retry came only after the previous back-off: timeout x 2^n.
        for (a, until), nxt in itertools.pairwise(windows):
            assert any(until <= start < nxt[0] for start in history.starts[cell]), (cell, a)
    assert history.count("dbo-1") >= 2 and history.count("dbo-0") >= 1
    # Another cell stood in while dbo-1 was held (its drain began inside a dbo-1 window).
    assert any(
        a < start < until
        for a, until in history.held_windows("dbo-1")
        for start in history.starts["dbo-0"]
    )
    progressing = cond(held_pool, "Progressing")
    assert progressing["status"] == "False"
    assert "scale-down held" in progressing["message"]
    assert "PodDisruptionBudget" in progressing["message"]
    assert row(held_pool, "dbo-1")["phase"] == "Ready"
    assert row(held_pool, "dbo-0")["phase"] == "Ready"
    held_events = [e for e in events if e.get("reason") == "ScaleDownHeld"]
    assert held_events and held_events[0]["type"] == "Warning"
    assert "scale-down held" in held_events[0]["note"]
    evictions = [c for rec in recorders for c in rec.of("evict", "Pod")]
    assert evictions and all(c.outcome == "HTTP 429" for c in evictions)
    assert await _running(workload_api, namespace) == 2  # nobody was disrupted
