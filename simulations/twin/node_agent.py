"""Simulated kubelet + HAMi device plugin: a booted guest becomes a workload Node with GPUs.

Why this module exists: the third and second layers of a Ready cell live in the workload
cluster. For every SwiftGuest that is Running with an address, this agent plays what happens
inside the VM:

* kubelet: reads the cloud-init the guest boots from (its SwiftSeedProfile, inline ``userData``
  or ``userDataFrom`` Secret) and registers the Node named by ``local-hostname`` (else the guest
  name) with the labels rendered into ``node-labels=...``; sets ``Ready=True`` with heartbeats
  and renews a Lease in ``kube-node-lease``. It registers once per guest incarnation (a deleted
  Node is not re-created, as a running kubelet does not re-register) and stops renewing when
  the guest goes away; a Node that was deleted also loses its Lease (the Lease has the Node as
  owner: the harness's garbage collector takes it, and the agent deletes it too, for a twin
  run without controller-manager);
* HAMi device plugin: after a delay sets ``gpu=on``, the ``hami.io/node-nvidia-register``
  annotation (v2.8+ JSON) and allocatable ``nvidia.com/gpu = gpus x split count``; with ``dra``
  HAMi's kubelet plugin instead: the Node's ResourceSlice (``twin.hami_dra``). The plugin is
  itself a DaemonSet pod on every Node labelled ``gpu=on`` (hami-facts): with
  ``plugin_pods`` the agent plays the DaemonSet controller and pod GC for it: one Running pod
  owned by the ``hami-device-plugin`` DaemonSet in ``kube-system`` is bound to each Node it
  registers, and deleted when that Node is. No Node of a real cell is ever without pods, so
  whatever judges a cell empty or busy must see past DaemonSet pods.

* kubelet, pods: a pod bound to one of its Nodes that carries a deletionTimestamp (an eviction
  or a graceful delete) is finished off (deleted with grace 0, as the kubelet does once the
  containers stopped); with ``run_pods`` a Pending pod bound to its Node is started
  (``Running``, ``Ready=True``), which the Eviction API and the disruption controller look at.

Failure knobs per cell: never registers, GPU never advertised, NotReady after a delay.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpucellpool.api.clock import Clock
from provisioner.kube import JSON, KINDS, Conflict, Kind, KubeApi
from simulations.twin.common import (
    PollingController,
    each_bounded,
    micro_time,
    raise_first,
    rfc3339,
)
from simulations.twin.hami_dra import hami_slice

LEASE_NAMESPACE = "kube-node-lease"
PLUGIN_NAMESPACE = "kube-system"
PLUGIN_DAEMONSET = "hami-device-plugin"
DAEMONSET = Kind("apps/v1", "DaemonSet", "daemonsets")
REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
_LABELS_RE = re.compile(r"node-labels[=:]\s*\"?([^\s\"']+)")


@dataclass(frozen=True, slots=True)
class NodeFault:
    never_register: bool = False
    never_advertise: bool = False
    not_ready_after_s: float | None = None


@dataclass
class _Registered:
    node: str
    guest_uid: str
    gpus: int
    at: float
    advertised: bool = False
    gone: bool = False  # nothing more to do for this incarnation
    vm_off: bool = False  # the guest went away: the kubelet no longer renews
    node_uid: str = ""
    last_renew: float = 0.0
    ready: bool = True
    plugin_pod: bool = False  # its device-plugin DaemonSet pod was created


def parse_user_data(user_data: str) -> dict[str, str]:
    """The labels the rendered join template asks the kubelet for (``node-labels=k=v,...``)."""
    match = _LABELS_RE.search(user_data)
    if match is None:
        return {}
    labels: dict[str, str] = {}
    for pair in match.group(1).split(","):
        key, sep, value = pair.partition("=")
        if sep:
            labels[key] = value
    return labels


def hostname_from_meta(meta_data: str) -> str | None:
    try:
        parsed = yaml.safe_load(meta_data or "")
    except yaml.YAMLError:
        return None
    if isinstance(parsed, dict) and parsed.get("local-hostname"):
        return str(parsed["local-hostname"])
    return None


@dataclass
class SimulatedNodeAgent(PollingController):
    infra: KubeApi
    workload: KubeApi
    clock: Clock
    namespace: str | None = None
    faults: dict[str, NodeFault] = field(default_factory=dict)
    join_s: float = 0.2
    advertise_s: float = 0.2
    lease_renew_s: float = 1.0
    split_count: int = 10
    device_memory_mib: int = 8192
    poll_s: float = 0.1
    concurrency: int = 16
    run_pods: bool = False
    dra: bool = False
    """HAMi DRA mode: publish a ResourceSlice per Node (``hami_dra.hami_slice``) instead of the
    register annotation, ``gpu=on`` and allocatable ``nvidia.com/gpu``."""
    plugin_pods: bool = True
    """Bind a device-plugin DaemonSet pod to each Node registered (see the module docstring)."""
    _booted_at: dict[str, float] = field(default_factory=dict)
    _nodes: dict[str, _Registered] = field(default_factory=dict)
    _daemonset_uid: str = ""

    async def step(self) -> None:
        """One pass of every simulated VM. Each VM's kubelet is independent, so they run
        concurrently (bounded): one slow Node never holds up another's heartbeat."""
        now = self.clock.now()
        live: set[str] = set()  # VMs still running: not deleted, not Failed
        joining: list[JSON] = []
        for guest in await self.infra.list(KINDS["SwiftGuest"], self.namespace):
            uid = str(guest["metadata"]["uid"])
            if guest["metadata"].get("deletionTimestamp") is not None or _failed(guest):
                continue
            live.add(uid)  # a momentary gap in the reported address does not stop the kubelet
            if not _booted(guest):
                continue
            booted = self._booted_at.setdefault(uid, now)
            if uid not in self._nodes and now - booted >= self.join_s:
                joining.append(guest)
        passes = [functools.partial(self._register, g, now) for g in joining]
        errors = await each_bounded(passes, self.concurrency)
        tending = [(uid, reg) for uid, reg in list(self._nodes.items()) if not reg.gone]
        for uid, reg in tending:
            reg.vm_off = reg.vm_off or uid not in live
        nodes, pods = await self._seen([reg for _, reg in tending])
        passes = [
            functools.partial(self._kubelet, reg, now, nodes.get(reg.node), pods.get(reg.node, []))
            for _, reg in tending
        ]
        raise_first([*errors, *await each_bounded(passes, self.concurrency)])

    async def _seen(
        self, tending: list[_Registered]
    ) -> tuple[dict[str, JSON], dict[str, list[JSON]]]:
        """The Nodes and the bound pods every kubelet of this pass works from, by Node: one list
        of each per pass, where each kubelet read its own Node and listed its own pods (two
        requests per Node ten times a second, most of the twin's CPU on a loaded machine)."""
        if not tending:
            return {}, {}
        nodes = {str(n["metadata"]["name"]): n for n in await self.workload.list(KINDS["Node"])}
        pods: dict[str, list[JSON]] = {}
        if any(not reg.vm_off for reg in tending):
            bound = await self.workload.list(
                KINDS["Pod"], self.namespace, field_selector="spec.nodeName!="
            )
            for pod in bound:
                pods.setdefault(str(pod["spec"]["nodeName"]), []).append(pod)
        return nodes, pods

    async def _kubelet(
        self, reg: _Registered, now: float, node: JSON | None, pods: list[JSON]
    ) -> None:
        await self._tend(reg, now, node)
        if not (reg.gone or reg.vm_off):
            await self._kubelet_pods(pods, now)

    async def _kubelet_pods(self, pods: list[JSON], now: float) -> None:
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") is not None:
                await self.workload.delete(
                    KINDS["Pod"], meta["namespace"], meta["name"], grace_period_s=0
                )
            elif self.run_pods and (pod.get("status") or {}).get("phase") in (None, "Pending"):
                ready = {"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(now)}
                status = {"phase": "Running", "conditions": [ready], "startTime": rfc3339(now)}
                await self.workload.patch(
                    KINDS["Pod"], meta["namespace"], meta["name"], {"status": status}, status=True
                )

    async def _register(self, guest: JSON, now: float) -> None:
        name = str(guest["metadata"]["name"])
        uid = str(guest["metadata"]["uid"])
        if self.faults.get(name, NodeFault()).never_register:
            return
        user_data, meta_data = await self._cloud_init(guest)
        node_name = hostname_from_meta(meta_data) or name
        gpus = len(((guest.get("status") or {}).get("gpu") or {}).get("devices") or []) or 1
        reg = _Registered(node_name, uid, gpus, now)
        self._nodes[uid] = reg
        existing = await self.workload.get(KINDS["Node"], None, node_name)
        if existing is not None:
            reg.gone = True  # name taken by another Node: registration fails
            return
        labels = {"kubernetes.io/hostname": node_name, **parse_user_data(user_data)}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node_name, "labels": labels},
        }
        created = await self.workload.create(node)
        reg.node_uid = str(created["metadata"]["uid"])
        ip = ((guest.get("status") or {}).get("network") or {}).get("primaryIP", "")
        await self._node_status(reg, now, ip)
        await self._renew(reg, now)
        if labels.get("gpu") == "on":  # the DaemonSet's nodeSelector
            await self._plugin_pod(reg, now)

    async def _cloud_init(self, guest: JSON) -> tuple[str, str]:
        ns = guest["metadata"]["namespace"]
        ref = ((guest.get("spec") or {}).get("seedProfileRef") or {}).get("name")
        seed = await self.infra.get(KINDS["SwiftSeedProfile"], ns, ref) if ref else None
        spec: dict[str, Any] = (seed or {}).get("spec") or {}
        user_data = str(spec.get("userData") or "")
        secret_ref = (spec.get("userDataFrom") or {}).get("secretKeyRef")
        if secret_ref:
            secret = await self.infra.get(KINDS["Secret"], ns, secret_ref["name"])
            raw = ((secret or {}).get("data") or {}).get(secret_ref.get("key", "user-data"))
            user_data = base64.b64decode(raw).decode() if raw else ""
        return user_data, str(spec.get("metaData") or "")

    async def _node_status(self, reg: _Registered, now: float, ip: str | None = None) -> None:
        ready = reg.ready
        cond = {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "message": "kubelet is posting ready status" if ready else "container runtime is down",
            "lastHeartbeatTime": rfc3339(now),
            "lastTransitionTime": rfc3339(reg.at),
        }
        status: dict[str, Any] = {"conditions": [cond]}
        base = {"cpu": "8", "memory": "32Gi", "pods": "110"}
        plugin = reg.advertised and not self.dra
        gpu = {"nvidia.com/gpu": str(reg.gpus * self.split_count)} if plugin else {}
        status["capacity"] = {**base, **gpu}
        status["allocatable"] = {**base, **gpu}
        if ip:
            status["addresses"] = [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": reg.node},
            ]
        await self.workload.patch(KINDS["Node"], None, reg.node, {"status": status}, status=True)

    async def _renew(self, reg: _Registered, now: float) -> None:
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": reg.node,
                "namespace": LEASE_NAMESPACE,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": reg.node, "uid": reg.node_uid}
                ],
            },
            "spec": {
                "holderIdentity": reg.node,
                "leaseDurationSeconds": 40,
                "renewTime": micro_time(now),
            },
        }
        await self.workload.apply(lease)
        reg.last_renew = now

    async def _tend(self, reg: _Registered, now: float, node: JSON | None) -> None:
        if node is None or node["metadata"]["uid"] != reg.node_uid:
            # Our Node was deleted: the garbage collector takes its Lease (owner reference).
            reg.gone = True
            lease = await self.workload.get(KINDS["Lease"], LEASE_NAMESPACE, reg.node)
            owners = ((lease or {}).get("metadata") or {}).get("ownerReferences") or []
            if any(o.get("uid") == reg.node_uid for o in owners):
                await self.workload.delete(KINDS["Lease"], LEASE_NAMESPACE, reg.node)
            if reg.plugin_pod:  # pod GC: a pod bound to a deleted Node goes, at once (no
                # kubelet is left to confirm a graceful deletion)
                await self.workload.delete(
                    KINDS["Pod"], PLUGIN_NAMESPACE, _plugin_pod_name(reg), grace_period_s=0
                )
            return
        if reg.vm_off:
            return  # the VM is gone: no more heartbeats
        fault = self.faults.get(reg.node, NodeFault())
        changed = False
        if (
            fault.not_ready_after_s is not None
            and reg.ready
            and now - reg.at >= fault.not_ready_after_s
        ):
            reg.ready, changed = False, True
        if not reg.advertised and not fault.never_advertise and now - reg.at >= self.advertise_s:
            await self._advertise(reg)
            changed = True
        if changed or now - reg.last_renew >= self.lease_renew_s:
            await self._node_status(reg, now)
            await self._renew(reg, now)

    async def _plugin_pod(self, reg: _Registered, now: float) -> None:
        """The device plugin's DaemonSet pod on ``reg``'s Node, Running (once per Node)."""
        if not self.plugin_pods or reg.plugin_pod:
            return
        owner = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": PLUGIN_DAEMONSET,
            "uid": await self._daemonset(),
            "controller": True,
            "blockOwnerDeletion": True,
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": _plugin_pod_name(reg),
                "namespace": PLUGIN_NAMESPACE,
                "labels": {"app": PLUGIN_DAEMONSET},
                "ownerReferences": [owner],
            },
            "spec": {"nodeName": reg.node, "containers": [_PLUGIN_CONTAINER]},
        }
        with contextlib.suppress(Conflict):  # created before this agent restarted
            await self.workload.create(pod)
        status = {"phase": "Running", "startTime": rfc3339(now)}
        name = _plugin_pod_name(reg)
        await self.workload.patch(
            KINDS["Pod"], PLUGIN_NAMESPACE, name, {"status": status}, status=True
        )
        reg.plugin_pod = True

    async def _daemonset(self) -> str:
        """The uid of the device plugin's DaemonSet (created on first use): the garbage
        collector deletes a pod whose owner does not exist."""
        if not self._daemonset_uid:
            found = await self.workload.get(DAEMONSET, PLUGIN_NAMESPACE, PLUGIN_DAEMONSET)
            if found is None:
                try:
                    found = await self.workload.create(_plugin_daemonset())
                except Conflict:  # another agent created it meanwhile
                    found = await self.workload.get(DAEMONSET, PLUGIN_NAMESPACE, PLUGIN_DAEMONSET)
            self._daemonset_uid = str(((found or {}).get("metadata") or {}).get("uid", ""))
        return self._daemonset_uid

    async def _advertise(self, reg: _Registered) -> None:
        await self._plugin_pod(reg, self.clock.now())
        if self.dra:
            body = hami_slice(
                reg.node, reg.node_uid, reg.gpus, self.device_memory_mib, reg.guest_uid[:8]
            )
            with contextlib.suppress(Conflict):  # published by this incarnation already
                await self.workload.create(body)
            reg.advertised = True
            return
        devices = [
            {
                "id": f"GPU-{reg.guest_uid[:8]}-{i}",
                "index": i,
                "count": self.split_count,
                "devmem": self.device_memory_mib,
                "devcore": 100,
                "type": "NVIDIA GeForce GTX 1080",
                "mode": "hami-core",
                "health": True,
            }
            for i in range(reg.gpus)
        ]
        for d in devices:
            if d["index"] == 0:
                del d["index"]  # omit-if-empty, as HAMi writes it
        patch = {
            "metadata": {
                "labels": {"gpu": "on"},
                "annotations": {REGISTER_ANNOTATION: json.dumps(devices)},
            }
        }
        await self.workload.patch(KINDS["Node"], None, reg.node, patch)
        reg.advertised = True


def _failed(guest: JSON) -> bool:
    return (guest.get("status") or {}).get("phase") == "Failed"


def _booted(guest: JSON) -> bool:
    status = guest.get("status") or {}
    return status.get("phase") == "Running" and bool((status.get("network") or {}).get("primaryIP"))


_PLUGIN_CONTAINER = {"name": "device-plugin", "image": "projecthami/hami:v2.8.0"}


def _plugin_pod_name(reg: _Registered) -> str:
    return f"{PLUGIN_DAEMONSET}-{reg.node}"[:253]


def _plugin_daemonset() -> JSON:
    labels = {"app": PLUGIN_DAEMONSET}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": PLUGIN_DAEMONSET, "namespace": PLUGIN_NAMESPACE},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"nodeSelector": {"gpu": "on"}, "containers": [_PLUGIN_CONTAINER]},
            },
        },
    }
