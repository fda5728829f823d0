"""A scale-down of several cells drains them concurrently, on real apiservers with the twin.

What this proves: after a scale-down from 4 cells to 1, the first pass drives all three drains
at once with the shipped ``DRAIN_CONCURRENCY``: every drain has started before any has ended,
and each one's cordon was answered by the workload apiserver inside its own interval (the
intervals overlap). The order is program order, not time: ``drive_drains`` starts every drain
before the event loop polls any answer, so the check is deterministic, and with the drains one
after another (``DRAIN_CONCURRENCY`` 1, run in the same test as the contrast) each drain ends
before the next starts, which this check refuses. Each leaving cell's Node is cordoned in that
pass, its row no longer Ready, and the pool converges with exactly the highest-index cells gone.
The first pass's wall time and the time to converge are printed (``-s``) as a ratio for
docs/architecture.md: on a loaded machine only the ratio within one run means anything.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

import provisioner.drainer
from provisioner.drainer import drive_drain
from provisioner.fsm.drain import DrainStep
from provisioner.kube import KINDS, KubeApi, api_from_kubeconfig
from provisioner.kube_delegate import DelegatingKubeApi, Write
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

T = TypeVar("T")
SHIPPED = provisioner.drainer.DRAIN_CONCURRENCY


@dataclass
class Witness:
    """What happened, in program order: ("start"|"end", cell) around each ``drive_drain``, and
    ("cordoned", cell) when the workload apiserver answered a cordon."""

    seen: list[tuple[str, str]] = field(default_factory=list)

    def at(self, what: str, cell: str) -> int:
        return self.seen.index((what, cell))

    def overlapped(self, cells: list[str]) -> bool:
        """Every drain started before any ended, each cordon answered inside its interval."""
        starts = [self.at("start", c) for c in cells]
        ends = [self.at("end", c) for c in cells]
        inside = all(
            self.at("start", c) < self.at("cordoned", c) < self.at("end", c) for c in cells
        )
        return max(starts) < min(ends) and inside


@dataclass
class CordonWitness(DelegatingKubeApi):
    """The workload client: records each Node cordon the apiserver answered."""

    witness: Witness = field(default_factory=Witness)

    async def _write(self, write: Write, call: Callable[[], Awaitable[T]]) -> T:
        result = await call()
        if write.verb == "patch" and write.kind == "Node":
            self.witness.seen.append(("cordoned", write.name))
        return result


def witnessed(witness: Witness, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Wrap ``drive_drain`` to record each drain's interval; the workload client factory."""

    async def recorded(*args: Any, **kwargs: Any) -> DrainStep:
        cell = args[1].name
        witness.seen.append(("start", cell))
        try:
            return await drive_drain(*args, **kwargs)
        finally:
            witness.seen.append(("end", cell))

    monkeypatch.setattr(provisioner.drainer, "drive_drain", recorded)

    async def factory(kubeconfig: Mapping[str, Any]) -> KubeApi:
        return CordonWitness(await api_from_kubeconfig(kubeconfig), witness)

    return factory


async def _scale_down(
    run: RunningPool, workload_api: KubeApi, namespace: str, witness: Witness
) -> tuple[float, float, bool]:
    """From 4 Ready cells to 1: (the first pass's seconds, seconds to converge, whether the
    first pass's drains overlapped)."""
    await run.scale(4)
    await run.converge(ready_with(4), timeout_s=180)
    await run.scale(1)
    witness.seen.clear()
    started = time.monotonic()
    await run.reconciler.reconcile_once(run.key)
    first = time.monotonic() - started
    overlapped = witness.overlapped([f"{run.key.name}-{index}" for index in (1, 2, 3)])
    raw = await run.infra.get(KINDS["GPUCellPool"], namespace, run.key.name)
    for index in (1, 2, 3):  # every leaving cell progressed in that one pass
        cell = f"{run.key.name}-{index}"
        node = await workload_api.get(KINDS["Node"], None, cell)
        assert node is None or node["spec"].get("unschedulable") is True, cell
        assert row(raw, cell).get("phase") != "Ready", cell
    await run.converge(ready_with(1), timeout_s=180)
    assert await names(run.infra, "SwiftGuest", namespace) == {f"{run.key.name}-0"}
    return first, time.monotonic() - started, overlapped


async def test_a_scale_down_drains_its_cells_concurrently(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, workload_api = apis
    pool = swiftguest_pool(f"dc-{namespace[-6:]}", namespace, 4)
    witness = Witness()
    factory = witnessed(witness, monkeypatch)
    timings: dict[int, list[tuple[float, float]]] = {1: [], SHIPPED: []}
    overlaps: dict[int, list[bool]] = {1: [], SHIPPED: []}
    async with running_pool(apis, workload, pool, workload_factory=factory) as run:
        await run.converge(ready_with(4), timeout_s=180)
        for limit in (SHIPPED, 1, SHIPPED, 1):  # alternating: the machine's load hits both alike
            monkeypatch.setattr(provisioner.drainer, "DRAIN_CONCURRENCY", limit)
            first_s, converged_s, overlapped = await _scale_down(
                run, workload_api, namespace, witness
            )
            timings[limit].append((first_s, converged_s))
            overlaps[limit].append(overlapped)
    assert overlaps[SHIPPED] == [True, True], "the shipped concurrency drained one at a time"
    assert overlaps[1] == [False, False]  # the contrast: the check tells one-at-a-time apart
    for limit, runs in timings.items():
        shown = ", ".join(f"first pass {a:.2f} s, converged {b:.2f} s" for a, b in runs)
        print(f"\ndrain concurrency {limit}: {shown}")
    first = {k: sum(a for a, _ in v) / len(v) for k, v in timings.items()}
    print(f"first pass sequential / concurrent: {first[1] / first[SHIPPED]:.2f}")
