"""The KubeSwift and node-agent twins read the apiserver once, not at every pass per object.

Why this file exists: the twins poll a real kube-apiserver ten times a second, and their reads
per pass used to grow with every guest and every Node: KubeSwift looked up each guest's
SwiftSeedProfile and listed the SwiftGPUNode ledger (under the ledger lock) at every pass, and
each registered Node's kubelet read its Node and listed its own pods. On real apiservers,
driven pass by pass with a ``VirtualClock``, this proves the reads are now made once (the seed
profile once resolved, the ledger once a GPU is held; one Node list and one Pod list per
node-agent pass), and that behaviour is kept: a Native guest is allocated and keeps running
when its seed profile goes (KubeSwift renders the seed on create), its deletion frees its GPU
and its finalizer, a guest that finds the ledger full is retried each pass and gets the freed
GPU, a pod being deleted on a Node is finished off, and a deleted Node is noticed.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

from provisioner.kube import JSON, KINDS, Kind, KubeApi
from simulations.simulator.engine.clock import VirtualClock
from simulations.twin.gpu_ledger import SWIFT_GPU_NODE, ledger_node
from simulations.twin.kubeswift import GPU_FINALIZER, SimulatedKubeSwift
from simulations.twin.node_agent import LEASE_NAMESPACE, PLUGIN_NAMESPACE, SimulatedNodeAgent
from tests.integration.provisioner_support import (  # noqa: F401  (apis: a fixture)
    CountingKubeApi,
    apis,
)

TICK_S = 0.1  # the twins' poll interval


@dataclass
class Reads(CountingKubeApi):
    """Counts reads as ``verb Kind``. The SwiftGPUNode ledger is cluster-wide and the apiserver
    is shared by the session: lists of it show only this test's ``ledger`` objects."""

    ledger: frozenset[str] = frozenset()

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSON]:
        found = await super().list(kind, namespace, label_selector, field_selector)
        if kind.kind == SWIFT_GPU_NODE.kind:
            return [o for o in found if o["metadata"]["name"] in self.ledger]
        return found


@contextlib.asynccontextmanager
async def _native(
    infra: KubeApi, namespace: str, gpus: int
) -> AsyncIterator[tuple[Reads, VirtualClock, SimulatedKubeSwift, str]]:
    """A ledger host of ``gpus`` GPUs for this test (removed after it) and the KubeSwift twin
    on a clock of its own, reading through a counter."""
    host = f"host-{namespace[-6:]}"
    reads = Reads(infra, ledger=frozenset({host}))
    clock = VirtualClock()
    await _ledger(infra, host, gpus)
    try:
        yield reads, clock, SimulatedKubeSwift(reads, clock, namespace), host
    finally:
        await infra.delete(SWIFT_GPU_NODE, None, host)


async def _passes(
    clock: VirtualClock, n: int, *twins: SimulatedKubeSwift | SimulatedNodeAgent
) -> None:
    for _ in range(n):
        clock.move_to(clock.now() + TICK_S)
        for twin in twins:
            await twin.step()


def _guest(namespace: str, name: str, native: bool = False, seed: str | None = None) -> JSON:
    spec: JSON = {"guestClassRef": {"name": "gpu-small"}, "imageRef": {"name": "ubuntu"}}
    if native:
        spec["gpuProfileRef"] = {"name": "gtx1080"}
    if seed:
        spec["seedProfileRef"] = {"name": seed}
    meta = {"name": name, "namespace": namespace}
    return {
        "apiVersion": "swift.kubeswift.io/v1alpha1",
        "kind": "SwiftGuest",
        "metadata": meta,
        "spec": spec,
    }


async def _seed(api: KubeApi, namespace: str, name: str) -> None:
    spec = {"datasource": "NoCloud", "userData": "#cloud-config\n"}
    meta = {"name": name, "namespace": namespace}
    await api.create(
        {
            "apiVersion": "seed.kubeswift.io/v1alpha1",
            "kind": "SwiftSeedProfile",
            "metadata": meta,
            "spec": spec,
        }
    )


async def _ledger(api: KubeApi, name: str, gpus: int) -> None:
    node = ledger_node(name, gpus)
    await api.create({k: v for k, v in node.items() if k != "status"})
    await api.patch(SWIFT_GPU_NODE, None, name, node, status=True)


async def _gpus(api: KubeApi, name: str) -> list[JSON]:
    node = await api.get(SWIFT_GPU_NODE, None, name)
    assert node is not None
    return list(node["status"]["gpus"])


def _cond(guest: JSON | None, type_: str) -> JSON:
    conds = ((guest or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == type_), {})


async def test_native_guest_reads_its_seed_profile_and_the_ledger_once(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    namespace: str,
) -> None:
    infra = apis[0]
    async with _native(infra, namespace, gpus=2) as (reads, clock, twin, host):
        await _seed(infra, namespace, "seed")
        created = await infra.create(_guest(namespace, "g0", native=True, seed="seed"))
        uid = created["metadata"]["uid"]
        await twin.step()
        await _passes(clock, 11, twin)  # resolved, allocated, Running with an address
        assert reads.reads["get SwiftSeedProfile"] == 1 and reads.reads["list SwiftGPUNode"] == 1
        assert reads.reads["list SwiftGuest"] == 12  # the pass itself
        guest = await infra.get(KINDS["SwiftGuest"], namespace, "g0")
        assert _cond(guest, "GPUAllocated")["status"] == "True"
        assert [g.get("allocatedTo") for g in await _gpus(infra, host)] == [uid, None]
        # KubeSwift rendered the seed on create: the profile going away fails nothing.
        await infra.delete(KINDS["SwiftSeedProfile"], namespace, "seed")
        await _passes(clock, 3, twin)
        guest = await infra.get(KINDS["SwiftGuest"], namespace, "g0")
        assert (guest or {})["status"]["phase"] == "Running"
        assert _cond(guest, "Resolved")["status"] == "True"
        assert reads.reads["get SwiftSeedProfile"] == 1 and reads.reads["list SwiftGPUNode"] == 1
        # Deleted: the GPU goes back to the ledger and the finalizer goes.
        assert GPU_FINALIZER in (guest or {})["metadata"]["finalizers"]
        await infra.delete(KINDS["SwiftGuest"], namespace, "g0")
        await _passes(clock, 1, twin)
        assert await infra.get(KINDS["SwiftGuest"], namespace, "g0") is None
        assert [g["allocated"] for g in await _gpus(infra, host)] == [False, False]
        assert [g.get("allocatedTo") for g in await _gpus(infra, host)] == [None, None]


async def test_a_guest_finding_the_ledger_full_is_retried_until_a_gpu_is_freed(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    namespace: str,
) -> None:
    infra = apis[0]
    async with _native(infra, namespace, gpus=1) as (reads, clock, twin, host):
        try:
            first = await infra.create(_guest(namespace, "a", native=True))
            await twin.step()
            second = await infra.create(_guest(namespace, "b", native=True))
            await _passes(clock, 5, twin)
            reads.reads.clear()
            await _passes(clock, 4, twin)  # "a" holds the only GPU; "b" asks again at each pass
            assert reads.reads["list SwiftGPUNode"] == 4
            b = await infra.get(KINDS["SwiftGuest"], namespace, "b")
            assert (b or {})["status"]["phase"] == "Pending"
            assert _cond(b, "GPUAllocated")["reason"] == "NoCapacity"
            assert [g.get("allocatedTo") for g in await _gpus(infra, host)] == [
                first["metadata"]["uid"]
            ]
            await infra.delete(KINDS["SwiftGuest"], namespace, "a")
            await _passes(clock, 2, twin)  # the release, then (at the latest) "b"'s retry
            assert await infra.get(KINDS["SwiftGuest"], namespace, "a") is None
            assert [g.get("allocatedTo") for g in await _gpus(infra, host)] == [
                second["metadata"]["uid"]
            ]
            b = await infra.get(KINDS["SwiftGuest"], namespace, "b")
            assert _cond(b, "GPUAllocated")["status"] == "True"
        finally:
            for name in ("a", "b"):  # their finalizers go with the twin's next pass
                await infra.delete(KINDS["SwiftGuest"], namespace, name)
            await twin.step()


async def _registered(
    clients: tuple[KubeApi, KubeApi], namespace: str, n: int
) -> tuple[VirtualClock, SimulatedKubeSwift, SimulatedNodeAgent, Reads, list[str]]:
    """``n`` guests booted by the KubeSwift twin, each registered and advertised as a Node."""
    infra, workload = clients
    clock = VirtualClock()
    kubeswift = SimulatedKubeSwift(infra, clock, namespace)
    reads = Reads(workload)
    agent = SimulatedNodeAgent(infra, reads, clock, namespace)
    names = [f"n{i}-{namespace[-6:]}" for i in range(n)]
    for name in names:
        await infra.create(_guest(namespace, name))
    await kubeswift.step()
    await _passes(clock, 20, kubeswift, agent)
    for name in names:
        node = await workload.get(KINDS["Node"], None, name)
        assert node is not None and node["metadata"]["labels"].get("gpu") == "on", name
    return clock, kubeswift, agent, reads, names


async def _drop_nodes(workload: KubeApi, names: list[str]) -> None:
    """Nodes are cluster-wide; their plugin pods (no kubelet to finish them) go at once."""
    for name in names:
        await workload.delete(KINDS["Node"], None, name)
        await workload.delete(KINDS["Pod"], PLUGIN_NAMESPACE, _plugin(name), grace_period_s=0)


def _plugin(node: str) -> str:
    return f"hami-device-plugin-{node}"


async def test_node_agent_lists_nodes_and_pods_once_per_pass(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    namespace: str,
) -> None:
    clock, kubeswift, agent, reads, names = await _registered(apis, namespace, 3)
    try:
        reads.reads.clear()
        await _passes(clock, 5, kubeswift, agent)
        assert reads.reads == Counter({"list Node": 5, "list Pod": 5})
    finally:
        await _drop_nodes(apis[1], names)


async def test_node_agent_finishes_terminating_pods_and_notices_a_deleted_node(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    namespace: str,
) -> None:
    workload = apis[1]
    clock, kubeswift, agent, _, names = await _registered(apis, namespace, 3)
    try:
        spec = {
            "nodeName": names[1],
            "terminationGracePeriodSeconds": 300,
            "containers": [{"name": "main", "image": "cuda"}],
        }
        pods = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": p, "namespace": namespace},
                "spec": spec,
            }
            for p in ("going", "staying")
        ]
        for pod in pods:
            await workload.create(pod)
        await workload.delete(KINDS["Pod"], namespace, "going")  # graceful: it stays, terminating
        going = await workload.get(KINDS["Pod"], namespace, "going")
        assert going is not None and going["metadata"].get("deletionTimestamp")
        await _passes(clock, 1, kubeswift, agent)
        assert await workload.get(KINDS["Pod"], namespace, "going") is None
        assert await workload.get(KINDS["Pod"], namespace, "staying") is not None
        # A Node deleted from the API: its kubelet's Lease goes, and its plugin pod with it (pod
        # GC's part, at once: no kubelet is left to confirm a graceful deletion).
        gone = names[0]
        assert await workload.get(KINDS["Lease"], LEASE_NAMESPACE, gone) is not None
        plugin = _plugin(gone)
        assert await workload.get(KINDS["Pod"], PLUGIN_NAMESPACE, plugin) is not None
        await workload.delete(KINDS["Node"], None, gone)
        await _passes(clock, 1, kubeswift, agent)
        assert await workload.get(KINDS["Pod"], PLUGIN_NAMESPACE, plugin) is None
        assert await workload.get(KINDS["Lease"], LEASE_NAMESPACE, gone) is None
        for other in names[1:]:
            assert await workload.get(KINDS["Pod"], PLUGIN_NAMESPACE, _plugin(other))
        await _passes(clock, 12, kubeswift, agent)  # past a lease renewal: not re-created
        assert await workload.get(KINDS["Lease"], LEASE_NAMESPACE, gone) is None
        assert await workload.get(KINDS["Node"], None, gone) is None
    finally:
        await workload.delete(KINDS["Pod"], namespace, "staying", grace_period_s=0)
        await _drop_nodes(workload, names)
