"""``WorkloadClients``: when a pass probes its workload cluster's ``/version``.

What this proves: a client's first pass always probes; while the operator's watch of that
cluster, on the same kubeconfig, is live (``live``), a good probe stands for the next passes
for ``PROBE_EVERY_S`` and no more; a watch that no longer vouches, or a probe that failed, makes
the next pass probe again (so a cluster that went away is reported ``Unreachable`` at once);
without ``live`` every pass probes, as before.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from provisioner.kube import JSON, Kind, KubeApi, Unreachable
from provisioner.workload import PROBE_EVERY_S, WorkloadClients

KUBECONFIG = base64.b64encode(b"clusters: []\n").decode()


@dataclass
class Infra:
    """The infrastructure apiserver, holding the kubeconfig Secret ``kc``."""

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        meta = {"name": name, "namespace": namespace, "resourceVersion": "1"}
        return {"metadata": meta, "data": {"value": KUBECONFIG}}


@dataclass
class Workload:
    """A workload cluster's client: counts ``/version`` probes, refuses them when ``down``."""

    probes: int = 0
    down: bool = False

    async def version(self) -> JSON:
        self.probes += 1
        if self.down:
            raise Unreachable(0, "connection refused")
        return {"gitVersion": "v1.37.2"}

    async def close(self) -> None:
        pass


@dataclass
class Scene:
    workload: Workload = field(default_factory=Workload)
    vouched: list[tuple[str, str, str | None]] = field(default_factory=list)
    live: bool = True
    now_s: float = 1000.0

    def clients(self, with_live: bool = True) -> WorkloadClients:
        async def factory(kubeconfig: Mapping[str, Any]) -> KubeApi:
            return cast(KubeApi, self.workload)

        def live(namespace: str, secret: str, kubeconfig: str | None) -> bool:
            self.vouched.append((namespace, secret, kubeconfig))
            return self.live

        return WorkloadClients(
            cast(KubeApi, Infra()), factory, live=live if with_live else None, now=self.now
        )

    def now(self) -> float:
        return self.now_s

    async def reason(self, clients: WorkloadClients) -> str:
        return (await clients.connect("team", "kc", "value")).state.reason


async def test_a_live_watch_stands_in_for_the_probe_for_a_while() -> None:
    scene = Scene()
    clients = scene.clients()
    assert await scene.reason(clients) == "Connected"
    assert scene.workload.probes == 1  # the first pass probes
    scene.now_s += PROBE_EVERY_S - 1
    assert await scene.reason(clients) == "Connected"
    assert scene.workload.probes == 1  # the live watch vouched
    assert scene.vouched[-1] == ("team", "kc", KUBECONFIG)  # for that very kubeconfig
    scene.now_s += 1
    assert await scene.reason(clients) == "Connected"
    assert scene.workload.probes == 2  # the slow cadence: probe again


async def test_a_watch_that_stops_vouching_makes_the_next_pass_probe() -> None:
    scene = Scene()
    clients = scene.clients()
    await scene.reason(clients)
    scene.workload.down, scene.live = True, False  # the cluster went away; the watch broke
    assert await scene.reason(clients) == "Unreachable"
    assert scene.workload.probes == 2
    scene.live = True  # even were a watch to vouch again, a failed probe is no proof
    assert await scene.reason(clients) == "Unreachable"
    assert scene.workload.probes == 3


async def test_without_a_watch_every_pass_probes() -> None:
    scene = Scene()
    clients = scene.clients(with_live=False)
    for _ in range(3):
        assert await scene.reason(clients) == "Connected"
    assert scene.workload.probes == 3 and scene.vouched == []
