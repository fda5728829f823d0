"""The simulated HAMi writes a pass's Unschedulable verdicts together, not one by one.

What this proves, on a real apiserver: with three pending pods that fit nowhere, one pass of
``SimulatedHAMi`` has asked to write every verdict before any write was answered - a rendezvous
only concurrent writes meet - and each pod then reads PodScheduled=False/Unschedulable. Why it
matters: the autoscaler sees a pending pod when HAMi has marked it, so verdicts written one
after another spread a burst's arrival at the operator over as many writes (1-2 s wall at
load ~15, 20-40 trace s at x20), and its scale-up with them; the simulator sees the burst at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import pytest

from provisioner.kube import KINDS, KubeApi
from provisioner.kube_delegate import DelegatingKubeApi, Write
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import api_for
from tests.integration.twin_support import hami_pod, new_hami, scheduled

T = TypeVar("T")
PODS = ("v0", "v1", "v2")
RENDEZVOUS_S = 20.0


@dataclass
class VerdictRendezvous(DelegatingKubeApi):
    """Pod status writes of ``PODS`` are answered only once all were asked (or the deadline
    passed, which ``met`` then says)."""

    asked: set[str] = field(default_factory=set)
    everyone: asyncio.Event = field(default_factory=asyncio.Event)
    met: bool | None = None

    async def _write(self, write: Write, call: Callable[[], Awaitable[T]]) -> T:
        if write.verb == "patch" and write.kind == "Pod" and write.status and write.name in PODS:
            self.asked.add(write.name)
            if self.asked == set(PODS):
                self.everyone.set()
            try:
                await asyncio.wait_for(self.everyone.wait(), RENDEZVOUS_S)
            except TimeoutError:
                self.met = False
                self.everyone.set()
            self.met = self.met is not False
        return await call()


@pytest.fixture
async def api(workload: ClusterEndpoint, namespace: str) -> AsyncIterator[KubeApi]:
    client = await api_for(workload.kubeconfig_path)
    yield client
    await client.close()


async def test_a_pass_writes_its_unschedulable_verdicts_together(
    api: KubeApi, namespace: str
) -> None:
    for name in PODS:  # no Node at all: nothing fits
        await api.create(hami_pod(namespace, name))
    witness = VerdictRendezvous(api)
    hami = new_hami(witness, namespace)
    await hami.step()
    assert witness.met is True
    for name in PODS:
        pod = await api.get(KINDS["Pod"], namespace, name)
        cond = scheduled(pod or {})
        assert (cond.get("status"), cond.get("reason")) == ("False", "Unschedulable"), name
