"""HAMi's DRA mode on the twin: the kubelet plugin's ResourceSlice and kube-scheduler's DRA plugin.

Why this module exists: with ``capacity.hami.mode: DRA`` a cell's GPUs are published as
devices of a ResourceSlice, and pods wait on ResourceClaims that kube-scheduler allocates
(hami-facts §5). The harness runs no scheduler and no kubelet, so to exercise that path live:

* ``hami_slice``: the slice HAMi's kubelet plugin publishes for one Node (driver and pool named
  after it; devices ``hami-gpu-<minor>`` with attributes and consumable ``cores`` (100) and
  ``memory`` (bytes) capacities, ``allowMultipleAllocations``), owned by the Node so it goes
  with it; ``SimulatedNodeAgent`` publishes it instead of the register annotation in DRA mode;
* ``SimulatedDRAScheduler`` plays kube-scheduler's DRA plugin for the pods of one namespace
  that wait on claims: every claim of the pod must fit on one Ready Node (each HAMi request's
  ``count`` distinct devices with the memory and cores still free there, fullest device first);
  then each claim's ``status.allocation`` (results with ``consumedCapacity`` and a
  ``shareID``, a node selector) and ``reservedFor`` are written and the pod is bound. Otherwise
  the pod is left Pending with ``PodScheduled=False/Unschedulable`` and the default
  scheduler's "cannot allocate all claims" message. No CEL selectors are evaluated;
* ``release_claims`` plays kube-controller-manager's resourceclaim controller (the harness
  does not run it): a claim's ``reservedFor`` entries of pods that are gone are dropped, and a
  claim reserved by nobody is deallocated, so an evicted pod's device share is free again.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.policy.dra_demand import DEFAULT_SCHEDULER, claim_names
from autoscaler.policy.hami_dra import (
    DEVICE_CLASS,
    DEVICE_TYPE,
    DRIVER,
    DeviceAsk,
    claim_allocations,
    claim_asks,
    is_allocated,
    slice_devices,
)
from autoscaler.policy.types import GPUAsk
from gpucellpool.api.clock import Clock
from provisioner.inventory import RESOURCE_CLAIM, RESOURCE_SLICE
from provisioner.kube import JSON, KINDS, Conflict, KubeApi, NotFound
from simulations.simulator.traces.dra import webhook_claim
from simulations.twin.common import PollingController, mark_unschedulable

MIB = 2**20
MODEL = "NVIDIA GeForce GTX 1080"


def hami_slice(node: str, node_uid: str, gpus: int, memory_mib: int, serial: str) -> JSON:
    """The ResourceSlice HAMi's kubelet plugin publishes for ``node`` (``serial``: UUID stem)."""
    devices = [
        {
            "name": f"hami-gpu-{minor}",
            "attributes": {
                "type": {"string": DEVICE_TYPE},
                "uuid": {"string": f"GPU-{serial}-{minor}"},
                "minor": {"int": minor},
                "productName": {"string": MODEL},
            },
            "capacity": {
                "cores": {
                    "value": "100",
                    "requestPolicy": {
                        "default": "100",
                        "validRange": {"min": "0", "max": "100", "step": "1"},
                    },
                },
                "memory": {
                    "value": f"{memory_mib}Mi",
                    "requestPolicy": {
                        "default": f"{memory_mib}Mi",
                        "validRange": {"min": "1Mi", "step": "1Mi"},
                    },
                },
            },
            "allowMultipleAllocations": True,
        }
        for minor in range(gpus)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node}-hami-gpu",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device_class(name: str = DEVICE_CLASS) -> JSON:
    """HAMi's DeviceClass (its chart installs it): HAMi's driver, devices of type hami-gpu."""
    expression = (
        f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "{DEVICE_TYPE}"'
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


async def install_device_class(workload: KubeApi) -> None:
    """Create HAMi's DeviceClass in the workload cluster unless it is there."""
    if await workload.get(KINDS["DeviceClass"], None, DEVICE_CLASS) is None:
        with contextlib.suppress(Conflict):
            await workload.create(device_class())


def webhook_pod(
    namespace: str,
    name: str,
    memory_mib: int,
    cores: int = 30,
    gpus: int = 1,
    labels: Mapping[str, str] | None = None,
) -> tuple[JSON, JSON]:
    """(ResourceClaim, Pod) as HAMi-DRA's webhook leaves a one-container GPU pod: the claim
    ``<ns>-<pod>-<container>`` (request ``gpu``) and the pod referring to it, labelled
    ``hami.io/dra=true``, with its GPU resources removed."""
    claim_name = f"{namespace}-{name}-main"
    claim = webhook_claim(GPUAsk(gpus, memory_mib, None, cores), memory_mib, namespace, claim_name)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**(labels or {}), "hami.io/dra": "true"},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "gpu-main"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu-main", "resourceClaimName": claim_name}],
        },
    }
    return claim, pod


@dataclass(frozen=True, slots=True)
class Share:
    """One device share to allocate: which claim request, which device, how much."""

    claim: str
    request: str
    device: str
    memory_mib: int
    cores: int


def _free(slices: Sequence[JSON], claims: Sequence[JSON]) -> dict[str, dict[str, list[int]]]:
    """Per Node, per device: [free MiB, free cores]."""
    devices, _ = slice_devices(slices)
    held = claim_allocations(claims, devices, DEVICE_CLASS)
    free = {n: {d.name: [d.memory_mib, d.cores] for d in ds} for n, ds in devices.items()}
    for node, shares in held.items():
        for a in shares:
            if a.device in free.get(node, {}):
                free[node][a.device][0] -= a.memory_mib
                free[node][a.device][1] -= a.cores
    return free


def _whole(slices: Sequence[JSON], node: str) -> dict[str, int]:
    devices, _ = slice_devices(slices)
    return {d.name: d.memory_mib for d in devices.get(node, ())}


def fit_on_node(
    asks: Sequence[tuple[str, str, DeviceAsk]], free: dict[str, list[int]], whole: dict[str, int]
) -> list[Share] | None:
    """Shares for every (claim, request, ask) on one Node's devices, or None."""
    room = {name: list(v) for name, v in free.items()}
    shares: list[Share] = []
    for claim, request, ask in asks:
        used: set[str] = set()
        for _ in range(ask.count):
            fullest = sorted(room, key=lambda n: (room[n][0], n))
            pick = None
            for name in fullest:
                memory = ask.memory_mib if ask.memory_mib is not None else whole[name]
                if name not in used and room[name][0] >= memory and room[name][1] >= ask.cores:
                    pick = (name, memory)
                    break
            if pick is None:
                return None
            used.add(pick[0])
            room[pick[0]][0] -= pick[1]
            room[pick[0]][1] -= ask.cores
            shares.append(Share(claim, request, pick[0], pick[1], ask.cores))
    return shares


def _requests(claim: JSON) -> list[tuple[str, DeviceAsk]] | None:
    asks = claim_asks(claim, DEVICE_CLASS)
    if not isinstance(asks, tuple):
        return None
    names = [
        str(r.get("name"))
        for r in (claim.get("spec") or {}).get("devices", {}).get("requests") or []
        if (r.get("exactly") or {}).get("deviceClassName") == DEVICE_CLASS
    ]
    return list(zip(names, asks, strict=True))


def _ready(node: Mapping[str, Any]) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


@dataclass
class SimulatedDRAScheduler(PollingController):
    """kube-scheduler's DRA plugin for the claim-waiting pods of ``namespace``."""

    workload: KubeApi
    clock: Clock
    namespace: str | None = None
    node_label_selector: str = ""
    poll_s: float = 0.1

    async def step(self) -> None:
        await release_claims(self.workload, self.namespace)
        selector = f"spec.nodeName=,spec.schedulerName={DEFAULT_SCHEDULER}"
        pods = await self.workload.list(KINDS["Pod"], self.namespace, field_selector=selector)
        waiting = [p for p in pods if (p.get("spec") or {}).get("resourceClaims")]
        if not waiting:
            return
        nodes = await self.workload.list(KINDS["Node"], label_selector=self.node_label_selector)
        ready = sorted(n["metadata"]["name"] for n in nodes if _ready(n))
        slices = await self.workload.list(RESOURCE_SLICE)
        claims = await self.workload.list(RESOURCE_CLAIM)
        for pod in sorted(waiting, key=lambda p: p["metadata"].get("creationTimestamp", "")):
            if pod["metadata"].get("deletionTimestamp") is None:
                claims = await self._schedule(pod, ready, slices, claims, len(nodes))

    async def _schedule(
        self, pod: JSON, ready: list[str], slices: list[JSON], claims: list[JSON], total: int
    ) -> list[JSON]:
        """Allocate and bind, or mark Unschedulable; the claims as they now stand."""
        by_key = {f"{c['metadata']['namespace']}/{c['metadata']['name']}": c for c in claims}
        names = claim_names(pod)
        mine = [by_key.get(n) for n in names] if isinstance(names, list) else [None]
        if any(c is None for c in mine):
            return claims  # a claim not created yet: the scheduler waits for it
        asks: list[tuple[str, str, DeviceAsk]] = []
        for claim in (c for c in mine if c is not None and not is_allocated(c)):
            requests = _requests(claim)
            if requests is None:
                return claims
            asks += [(claim["metadata"]["name"], name, ask) for name, ask in requests]
        free = _free(slices, claims)
        for node in ready:
            if node in free:
                shares = fit_on_node(asks, free[node], _whole(slices, node))
                if shares is not None:
                    return await self._allocate(pod, node, shares, claims)
        message = f"0/{total} nodes are available: {total} cannot allocate all claims."
        await mark_unschedulable(self.workload, pod, message, self.clock.now())
        return claims

    async def _allocate(
        self, pod: JSON, node: str, shares: list[Share], claims: list[JSON]
    ) -> list[JSON]:
        meta = pod["metadata"]
        updated = list(claims)
        for claim_name in dict.fromkeys(s.claim for s in shares):
            results = [
                {
                    "request": s.request,
                    "driver": DRIVER,
                    "pool": node,
                    "device": s.device,
                    "shareID": str(uuid.uuid4()),
                    "consumedCapacity": {"memory": f"{s.memory_mib}Mi", "cores": str(s.cores)},
                }
                for s in shares
                if s.claim == claim_name
            ]
            selector = {"key": "metadata.name", "operator": "In", "values": [node]}
            status = {
                "allocation": {
                    "devices": {"results": results},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [selector]}]},
                },
                "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
            }
            done = await self.workload.patch(
                RESOURCE_CLAIM, meta["namespace"], claim_name, {"status": status}, status=True
            )
            updated = [c for c in updated if c["metadata"]["name"] != claim_name] + [done]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        with contextlib.suppress(Conflict, NotFound):  # bound or gone meanwhile
            await self.workload.create(binding)
        return updated


async def release_claims(workload: KubeApi, namespace: str | None) -> None:
    """Drop ``reservedFor`` pods that no longer exist (by UID); deallocate unreserved claims."""
    live = {str(p["metadata"].get("uid")) for p in await workload.list(KINDS["Pod"], namespace)}
    for claim in await workload.list(RESOURCE_CLAIM, namespace):
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        kept = [r for r in reserved if r.get("resource") != "pods" or r.get("uid") in live]
        if not status.get("allocation") or (kept == reserved and reserved):
            continue
        # JSON merge patch: null removes a field (a claim reserved by nobody is deallocated)
        patch = {"reservedFor": kept} if kept else {"reservedFor": None, "allocation": None}
        meta = claim["metadata"]
        with contextlib.suppress(NotFound, Conflict):
            await workload.patch(
                RESOURCE_CLAIM, meta["namespace"], meta["name"], {"status": patch}, status=True
            )
