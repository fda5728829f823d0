"""Raw objects in, the state machine's typed observations out.

Why this module exists: what counts as "GPU allocated", "running", "has an address", or a
*terminal* failure is FSM semantics, not adapter plumbing, and it depends on KubeSwift and
Cluster API details (kubeswift-facts.md §3, reference §4). Keeping the reading of a SwiftGuest,
a Machine + KubeSwiftMachine, a workload Node and its Lease pure and in one place means the
shell passes the dicts it got from its watch caches and never interprets them itself.

Judgements made here:

* a SwiftGuest ``Failed`` is NOT terminal by itself: ``Resolved=False`` clears when e.g. the
  image becomes Ready, and with ``runPolicy: Always`` KubeSwift restarts a failed launcher; it
  becomes terminal after ``guest_restart_limit`` restarts. Until then the cell waits (and its
  phase budget runs) with the condition message shown;
* ``Running`` needs ``GuestRunning`` not False; ``NetworkReady=False/DHCPTimeout`` on a running
  guest is a failed network for a node;
* the address is the ``nodeIPFrom`` interface's IP, else ``status.network.primaryIP`` (KubeSwift
  reports IPs only for the primary NIC);
* a Machine ``Failed`` is terminal (Cluster API's meaning);
* HAMi's third layer reads the ``hami.io/node-nvidia-register`` annotation (JSON from v2.8, the
  colon-separated records before), allocatable ``nvidia.com/gpu`` and the ``gpu=on`` gate; in
  DRA mode the devices of the Node's ResourceSlices instead (counted by the caller).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from provisioner.fsm.cell_state import GPUCapacity, NodeStatus, OuterStatus
from provisioner.fsm.identity import (
    GPU_PREFLIGHT_ANNOTATION,
    INSTANCE_LABEL,
    KubeletHeartbeat,
    PoolIdentity,
    kubelet_liveness,
    node_ownership,
)

HAMI_REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_GUEST_RESTART_LIMIT = 3
_MACHINE_INFRA_PHASES = frozenset({"Provisioned", "Running", "Updating"})
_LEGACY_HEALTH_FIELD = 6
_LEGACY_MIN_FIELDS = 7


def parse_time_s(value: Any) -> float | None:
    """RFC 3339 (``2026-08-08T10:00:00Z``) -> seconds since the epoch; None if absent/bad."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _get(obj: Mapping[str, Any] | None, *path: str) -> Any:
    node: Any = obj
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = _get(obj, "status", "conditions") or []
    return [c for c in raw if isinstance(c, Mapping)]


def _condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in _conditions(obj) if c.get("type") == type_), None)


def _is_false(cond: Mapping[str, Any] | None) -> bool:
    return cond is not None and cond.get("status") == "False"


def _first_not_true_message(obj: Mapping[str, Any]) -> str:
    for cond in _conditions(obj):
        if cond.get("status") != "True":
            return f"{cond.get('type')}: {cond.get('message') or cond.get('reason') or ''}"
    return ""


def _guest_address(guest: Mapping[str, Any], node_ip_from: str) -> str:
    network = _get(guest, "status", "network") or {}
    if node_ip_from:
        for iface in network.get("interfaces") or []:
            if isinstance(iface, Mapping) and iface.get("name") == node_ip_from and iface.get("ip"):
                return str(iface["ip"])
    return str(network.get("primaryIP") or "")


def _guest_waiting_message(guest: Mapping[str, Any]) -> str:
    for type_ in ("Resolved", "GPUAllocated", "PodScheduled", "GuestRunning"):
        cond = _condition(guest, type_)
        if _is_false(cond) and cond is not None:
            return f"{type_}={cond.get('reason', '')}: {cond.get('message', '')}".rstrip(": ")
    return ""


def observe_swift_guest(
    guest: Mapping[str, Any] | None,
    node_ip_from: str = "",
    guest_restart_limit: int = DEFAULT_GUEST_RESTART_LIMIT,
) -> OuterStatus:
    """A SwiftGuest object (None = not found) as the FSM's first layer."""
    if guest is None:
        return OuterStatus()
    phase = _get(guest, "status", "phase") or ""
    restarts = int(_get(guest, "status", "restartCount") or 0)
    resolution_failed = _is_false(_condition(guest, "Resolved"))
    terminal = phase == "Failed" and not resolution_failed and restarts >= guest_restart_limit
    running = phase == "Running" and not _is_false(_condition(guest, "GuestRunning"))
    network = _condition(guest, "NetworkReady")
    waiting = _guest_waiting_message(guest)
    if phase == "Failed" and not terminal:
        waiting = f"guest Failed, KubeSwift retries (restart {restarts}): {waiting}".rstrip(": ")
    return OuterStatus(
        exists=True,
        uid=str(_get(guest, "metadata", "uid") or ""),
        created_at_s=parse_time_s(_get(guest, "metadata", "creationTimestamp")),
        deleting=_get(guest, "metadata", "deletionTimestamp") is not None,
        gpu_devices=tuple(str(d) for d in (_get(guest, "status", "gpu", "devices") or [])),
        running=running,
        address=_guest_address(guest, node_ip_from),
        failed=terminal,
        failure_message=_first_not_true_message(guest) if terminal else "",
        network_failed=running and _is_false(network) and _get(network, "reason") == "DHCPTimeout",
        waiting_message=waiting,
    )


def observe_machine(
    machine: Mapping[str, Any] | None,
    kubeswift_machine: Mapping[str, Any] | None,
    guest: Mapping[str, Any] | None,
    node_ip_from: str = "",
) -> OuterStatus:
    """A CAPI Machine (the cell's outer object) plus its KubeSwiftMachine and backing guest."""
    if machine is None:
        return OuterStatus()
    phase = _get(machine, "status", "phase") or ""
    provider_id = str(
        _get(machine, "spec", "providerID") or _get(kubeswift_machine, "spec", "providerID") or ""
    )

    def as_machine(status: OuterStatus) -> OuterStatus:
        """The Machine is the cell's outer object: its identity, the guest's progress."""
        return replace(
            status,
            exists=True,
            uid=str(_get(machine, "metadata", "uid") or ""),
            created_at_s=parse_time_s(_get(machine, "metadata", "creationTimestamp")),
            deleting=_get(machine, "metadata", "deletionTimestamp") is not None,
            provider_id=provider_id,
        )

    if phase == "Failed":
        msg = _first_not_true_message(machine) or "Machine phase Failed"
        return as_machine(OuterStatus(failed=True, failure_message=msg))
    inner = observe_swift_guest(guest, node_ip_from)
    if phase in _MACHINE_INFRA_PHASES or inner.exists:
        return as_machine(inner)
    ksm_ready = _condition(kubeswift_machine or {}, "Ready")
    detail = f"; KubeSwiftMachine {_get(ksm_ready, 'reason')}" if ksm_ready else ""
    return as_machine(OuterStatus(waiting_message=f"Machine phase {phase or 'unknown'}{detail}"))


def healthy_hami_devices(annotation: str | None) -> int | None:
    """Healthy GPUs in ``hami.io/node-nvidia-register``; None when absent or unparseable."""
    if not annotation:
        return None
    text = annotation.strip()
    if text.startswith("["):
        try:
            devices = json.loads(text)
        except ValueError:
            return None
        if not isinstance(devices, list):
            return None
        return sum(1 for d in devices if isinstance(d, Mapping) and d.get("health") is True)
    records = [r for r in text.split(":") if r.strip()]
    fields = [r.split(",") for r in records]
    if any(len(f) < _LEGACY_MIN_FIELDS for f in fields):
        return None
    return sum(1 for f in fields if f[_LEGACY_HEALTH_FIELD].strip() == "true")


def _allocatable_gpus(node: Mapping[str, Any]) -> int:
    raw = _get(node, "status", "allocatable", GPU_RESOURCE)
    try:
        return int(str(raw)) if raw is not None else 0
    except ValueError:
        return 0


def _gpu_capacity(
    node: Mapping[str, Any],
    gate: Mapping[str, str],
    device_plugin_mode: bool,
    dra_devices: int | None,
) -> GPUCapacity:
    """What the Node advertises of its GPUs: the register annotation, the gate labels and
    ``nvidia.com/gpu`` allocatable in DevicePlugin mode; the ResourceSlices' HAMi devices in
    DRA mode (no gate, no allocatable: HAMi-DRA writes neither)."""
    labels: Mapping[str, str] = _get(node, "metadata", "labels") or {}
    annotations: Mapping[str, str] = _get(node, "metadata", "annotations") or {}
    preflight = annotations.get(GPU_PREFLIGHT_ANNOTATION, "")
    if not device_plugin_mode:
        return GPUCapacity(
            gate_label_on=True,
            healthy_devices=dra_devices,
            allocatable_gpus=None,
            preflight=preflight,
        )
    return GPUCapacity(
        gate_label_on=all(labels.get(k) == v for k, v in gate.items()),
        healthy_devices=healthy_hami_devices(annotations.get(HAMI_REGISTER_ANNOTATION)),
        allocatable_gpus=_allocatable_gpus(node),
        preflight=preflight,
    )


def observe_node(
    node: Mapping[str, Any] | None,
    lease: Mapping[str, Any] | None,
    lease_read: bool,
    pool: PoolIdentity,
    known_instances: frozenset[str],
    now_s: float,
    *,
    gate_labels: Mapping[str, str] | None = None,
    device_plugin_mode: bool = True,
    expected_provider_id: str = "",
    dra_devices: int | None = None,
) -> NodeStatus:
    """The workload Node named after the cell (None = not found) and its kubelet Lease.

    ``gate_labels``: labels HAMi's device plugin needs (default ``gpu=on``);
    ``device_plugin_mode`` False (HAMi DRA) skips the allocatable check and the gate;
    ``expected_provider_id``: the cell's providerID (``OuterStatus.provider_id``), a second
    proof of ownership for a Node that registered without this pool's labels;
    ``dra_devices``: HAMi devices in the Node's ResourceSlices (``fsm.dra_capacity``), the
    advertised count in DRA mode, where the register annotation is not written.
    """
    if node is None:
        return NodeStatus()
    labels: Mapping[str, str] = _get(node, "metadata", "labels") or {}
    ready = _condition(node, "Ready")
    beat = KubeletHeartbeat(
        lease_read=lease_read,
        lease_exists=lease is not None,
        lease_renew_time_s=parse_time_s(_get(lease, "spec", "renewTime")),
        ready_heartbeat_s=parse_time_s(_get(ready, "lastHeartbeatTime")),
    )
    gate = {"gpu": "on"} if gate_labels is None else gate_labels
    capacity = _gpu_capacity(node, gate, device_plugin_mode, dra_devices)
    ownership = node_ownership(
        labels,
        str(_get(node, "spec", "providerID") or ""),
        pool,
        known_instances,
        expected_provider_id,
    )
    return NodeStatus(
        exists=True,
        ready=ready is not None and ready.get("status") == "True",
        owned=ownership.owned,
        foreign_detail=ownership.detail,
        instance_label=labels.get(INSTANCE_LABEL, ""),
        liveness=kubelet_liveness(beat, now_s),
        capacity=capacity,
    )
