"""Reading SwiftGuests, Machines, Nodes and Leases into the state machine's observations."""
# ruff: noqa: E501  (the tables below keep one case per line on purpose)

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.fsm.cell_state import Budgets, CellObservation, CellRow, decide_cell
from provisioner.fsm.identity import INSTANCE_LABEL, Liveness, PoolIdentity
from provisioner.fsm.observations import (
    healthy_hami_devices,
    observe_machine,
    observe_node,
    observe_swift_guest,
    parse_time_s,
)
from provisioner.fsm.vocabulary import CellPhase as P

T0 = datetime(2026, 8, 8, 10, tzinfo=UTC).timestamp()
POOL = PoolIdentity("ns", "gpu")


def cond(type_: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def guest(phase: str = "", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-0", "uid": "g-uid", "creationTimestamp": "2026-08-08T10:00:00Z"},
        "status": {"phase": phase, **status},
    }


GPU = {"gpu": {"devices": ["0000:01:00.0"], "nodeName": "host-a"}}
NET = {
    "network": {
        "primaryIP": "192.168.99.10",
        "interfaces": [{"name": "mgmt", "ip": "192.168.99.10"}, {"name": "node", "mac": "aa"}],
    }
}


def test_parse_time() -> None:
    assert parse_time_s("2026-08-08T10:00:30Z") == T0 + 30
    assert parse_time_s("2026-08-08T12:00:00+02:00") == T0
    assert parse_time_s("") is None and parse_time_s(None) is None and parse_time_s("soon") is None


def test_missing_guest() -> None:
    assert not observe_swift_guest(None).exists


# (id, guest, expected FSM phase from a fresh row)
GUEST_PHASES = [
    ("scheduling-no-gpu", guest("Scheduling"), P.ALLOCATING_GPU),
    ("gpu-allocated-not-running", guest("Scheduling", **GPU), P.GUEST_PROVISIONING),
    ("running-no-ip", guest("Running", **GPU), P.BOOTING),
    ("running-with-ip", guest("Running", **GPU, **NET), P.JOINING),
    ("running-but-vm-failed", guest("Running", **GPU, **NET, conditions=[cond("GuestRunning", "False", "VmFailed")]), P.GUEST_PROVISIONING),
    ("dhcp-timeout", guest("Running", **GPU, conditions=[cond("NetworkReady", "False", "DHCPTimeout")]), P.FAILED),
    ("resolution-failed-is-not-terminal", guest("Failed", restartCount=9, conditions=[cond("Resolved", "False", "ResolutionFailed", "SwiftImage not Ready")]), P.ALLOCATING_GPU),
    ("launcher-failed-retrying", guest("Failed", restartCount=1, **GPU), P.GUEST_PROVISIONING),
    ("launcher-failed-too-often", guest("Failed", restartCount=3, **GPU, conditions=[cond("PodScheduled", "False", "PodNotScheduled", "Error: exit 1")]), P.FAILED),
]  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "phase"), [c[1:] for c in GUEST_PHASES], ids=[c[0] for c in GUEST_PHASES]
)
def test_guest_phase_mapping(obj: dict[str, Any], phase: P) -> None:
    outer = observe_swift_guest(obj)
    d = decide_cell(
        CellRow(),
        CellObservation(outer, observe_node(None, None, False, POOL, frozenset(), 0), True),
        Budgets(),
        T0 + 1,
    )
    assert d.row.phase is phase


def test_guest_fields() -> None:
    outer = observe_swift_guest(guest("Running", **GPU, **NET))
    assert (outer.uid, outer.created_at_s, outer.gpu_devices, outer.address) == (
        "g-uid",
        T0,
        ("0000:01:00.0",),
        "192.168.99.10",
    )
    assert not outer.deleting and not outer.failed


def test_node_ip_from_interface_then_primary_fallback() -> None:
    obj = guest(
        "Running",
        network={"primaryIP": "10.0.0.1", "interfaces": [{"name": "node", "ip": "10.1.0.7"}]},
    )
    assert observe_swift_guest(obj, node_ip_from="node").address == "10.1.0.7"
    assert (
        observe_swift_guest(guest("Running", **NET), node_ip_from="node").address == "192.168.99.10"
    )


def test_unschedulable_launcher_is_in_the_waiting_message() -> None:
    obj = guest(
        "Pending",
        conditions=[cond("PodScheduled", "False", "PodNotScheduled", "Unschedulable: 0/3 nodes")],
    )
    assert "Unschedulable: 0/3 nodes" in observe_swift_guest(obj).waiting_message


def test_terminal_failure_message_is_first_non_true_condition() -> None:
    obj = guest(
        "Failed",
        restartCount=5,
        conditions=[
            cond("Resolved", "True"),
            cond("GuestRunning", "False", "VmFailed", "VmFailed"),
        ],
    )
    outer = observe_swift_guest(obj)
    assert outer.failed and outer.failure_message == "GuestRunning: VmFailed"


def test_deleting_guest() -> None:
    obj = guest("Running")
    obj["metadata"]["deletionTimestamp"] = "2026-08-08T10:05:00Z"
    assert observe_swift_guest(obj).deleting


def machine(phase: str) -> dict[str, Any]:
    return {
        "metadata": {"uid": "m-uid", "creationTimestamp": "2026-08-08T10:00:00Z"},
        "status": {"phase": phase},
    }


def test_machine_failed_is_terminal() -> None:
    m = machine("Failed")
    m["status"]["conditions"] = [cond("InfrastructureReady", "False", "VMFailed", "boom")]
    outer = observe_machine(m, None, None)
    assert outer.failed and outer.uid == "m-uid" and "boom" in outer.failure_message


def test_machine_without_infrastructure_waits() -> None:
    ksm = {"status": {"conditions": [cond("Ready", "False", "WaitingForBootstrapData")]}}
    outer = observe_machine(machine("Pending"), ksm, None)
    assert (
        outer.exists
        and not outer.gpu_devices
        and "WaitingForBootstrapData" in outer.waiting_message
    )


def test_machine_follows_its_guest_but_keeps_machine_identity() -> None:
    outer = observe_machine(machine("Provisioned"), None, guest("Running", **GPU, **NET))
    assert outer.uid == "m-uid" and outer.address == "192.168.99.10" and outer.running
    assert not observe_machine(None, None, None).exists


@pytest.mark.parametrize(
    ("annotation", "healthy"),
    [
        (None, None),
        ("", None),
        (
            '[{"id":"GPU-1","count":10,"devmem":8192,"type":"NVIDIA GeForce GTX 1080","health":true}]',
            1,
        ),
        ('[{"id":"GPU-1","health":true},{"id":"GPU-2"}]', 1),  # omitted health means false
        ("[]", 0),
        ("[not json", None),
        ('{"id":"x"}', None),
        ("GPU-1,10,15360,100,NVIDIA-Tesla T4,0,true:", 1),
        (
            "GPU-1,10,15360,100,NVIDIA-Tesla T4,0,true:GPU-2,10,15360,100,NVIDIA-Tesla T4,0,false:",
            1,
        ),
        ("GPU-1,10,15360,100,NVIDIA-Tesla T4,0,true,0,hami-core:", 1),
        ("garbage:", None),
    ],
)
def test_hami_register_annotation(annotation: str | None, healthy: int | None) -> None:
    assert healthy_hami_devices(annotation) == healthy


def node(
    ready: str = "True",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "gpu-0",
            "labels": labels if labels is not None else {**POOL.cell_labels(0), "gpu": "on"},
            "annotations": annotations or {},
        },
        "status": {
            "allocatable": {"nvidia.com/gpu": "10"},
            "conditions": [{**cond("Ready", ready), "lastHeartbeatTime": "2026-08-08T10:00:00Z"}],
        },
    }


REGISTER = {"hami.io/node-nvidia-register": '[{"id":"GPU-1","health":true}]'}


def test_node_three_layer_fields() -> None:
    lease = {"spec": {"renewTime": "2026-08-08T10:00:50Z"}}
    status = observe_node(node(annotations=REGISTER), lease, True, POOL, frozenset(), T0 + 60)
    assert status.exists and status.ready and status.owned and status.liveness is Liveness.LIVE
    cap = status.capacity
    assert (cap.gate_label_on, cap.healthy_devices, cap.allocatable_gpus) == (True, 1, 10)


def test_node_not_ready_foreign_and_dead() -> None:
    labels = {**PoolIdentity("other", "gpu").cell_labels(0), INSTANCE_LABEL: "x"}
    status = observe_node(node("Unknown", labels), {"spec": {}}, True, POOL, frozenset(), T0)
    assert not status.ready and not status.owned and status.liveness is Liveness.DEAD
    assert status.instance_label == "x" and not status.capacity.gate_label_on


def test_node_status_fallback_and_dra_mode() -> None:
    status = observe_node(
        node(), None, False, POOL, frozenset(), T0 + 100, device_plugin_mode=False
    )
    assert status.liveness is Liveness.LIVE
    assert status.capacity.gate_label_on and status.capacity.allocatable_gpus is None


def test_dra_mode_counts_slice_devices_not_the_register_annotation() -> None:
    """DRA mode: the advertised count is the ResourceSlices' (the annotation is ignored, the
    gate labels are not needed); DevicePlugin mode reads the annotation and the gate."""
    ungated = node(labels=POOL.cell_labels(0), annotations=REGISTER)
    dra = observe_node(
        ungated, None, False, POOL, frozenset(), T0, device_plugin_mode=False, dra_devices=2
    )
    assert (dra.capacity.healthy_devices, dra.capacity.gate_label_on) == (2, True)
    plugin = observe_node(ungated, None, False, POOL, frozenset(), T0, dra_devices=2)
    assert (plugin.capacity.healthy_devices, plugin.capacity.gate_label_on) == (1, False)
    assert plugin.capacity.allocatable_gpus == 10


def test_custom_gate_and_preflight() -> None:
    n = node(annotations={"cells.kubeswift.io/gpu-preflight": "ok"})
    status = observe_node(n, None, False, POOL, frozenset(), T0, gate_labels={"hami": "yes"})
    assert not status.capacity.gate_label_on and status.capacity.preflight == "ok"
