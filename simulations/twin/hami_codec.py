"""HAMi's wire formats and the simulated HAMi's allocation table, as plain values (pure).

Why this module exists: the simulated HAMi (``twin.hami``), its metrics exporter and the tests
must read and write exactly the strings the real HAMi v2.10 reads and writes (hami-facts §2,
§3.1-3.2): the node's ``hami.io/node-nvidia-register`` JSON, the pod's device plan
``UUID,NVIDIA,<MiB>,<cores>:`` per device and ``;`` per container, the per-node ``GenReason``
(``1/4 CardInsufficientMemory, 3/4 CardTimeSlicingExhausted``) and kube-scheduler's
``0/N nodes are available: ...`` message. Keeping them here, without I/O, lets unit tests pin
every format and lets the controller stay about control.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.policy.types import CellShape, GPUUsage

REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
VGPU_NODE = "hami.io/vgpu-node"  # annotation and label
VGPU_TIME = "hami.io/vgpu-time"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
ALLOCATED = "hami.io/vgpu-devices-allocated"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
SCHEDULER_NAME = "hami-scheduler"
GPU_RESOURCE = "nvidia.com/gpu"
DEVICE_VENDOR = "NVIDIA"  # the second field of a plan entry
NODE_UNREGISTERED = "node unregistered"
NO_NODES = "no nodes available to schedule pods"
KUBE_FILTER_PREFIX = "node(s) "  # every kube-scheduler filter message the twin writes
NO_PREEMPTION_VICTIMS = "No preemption victims found for incoming pod"
PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"
_NATURAL = re.compile(r"(\d+)")
# The twin's stand-in for what a real GPU pod does with its allocation: unix seconds at which
# the pod stops launching kernels (absent: busy for its whole life, using what it was given),
# or seconds after its start (the trace player writes that from the trace's ``usage`` column).
# The twin's monitor series (``twin.hami_exporter``) follow it.
IDLE_SINCE_ANNOTATION = "sim.cells.kubeswift.io/idle-since"
BUSY_SECONDS_ANNOTATION = "sim.cells.kubeswift.io/busy-seconds"


def _finite(text: str | None) -> float | None:
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def idle_since(annotations: Mapping[str, str], started_at: float | None = None) -> float | None:
    """When the pod stops computing: ``idle-since``, else ``busy-seconds`` after
    ``started_at``; None (busy) when neither applies or a value is not a finite number."""
    absolute = _finite(annotations.get(IDLE_SINCE_ANNOTATION))
    if absolute is not None:
        return absolute
    busy = _finite(annotations.get(BUSY_SECONDS_ANNOTATION))
    return None if busy is None or started_at is None else started_at + max(0.0, busy)


@dataclass(frozen=True, slots=True)
class Device:
    """One GPU as the HAMi device plugin registered it (v2.8+ JSON; omitted keys are 0/false)."""

    uuid: str
    index: int = 0
    count: int = 10
    devmem: int = 0
    devcore: int = 100
    type: str = ""
    health: bool = False


@dataclass(frozen=True, slots=True)
class PlanEntry:
    """One container-device allocation of a pod's ``vgpu-devices-allocated`` plan."""

    container_index: int  # init containers first, then app containers (HAMi's order)
    uuid: str
    memory_mib: int
    cores: int


@dataclass(frozen=True, slots=True)
class ContainerAllocation:
    """One container-device allocation on a node: a ``hami_vgpu_*`` series."""

    namespace: str
    pod: str
    container_index: int
    container: str  # name (the monitor's ``container`` label)
    vdevice_index: int  # position of the device in the container's list
    uuid: str
    memory_mib: int
    cores: int
    idle_since: float | None = None  # unix seconds its GPU work stopped (IDLE_SINCE_ANNOTATION)

    def busy(self, now: float) -> bool:
        return self.idle_since is None or now < self.idle_since


@dataclass(frozen=True, slots=True)
class DeviceAllocation:
    """One registered GPU and what HAMi has allocated on it."""

    device: Device
    used_memory_mib: int = 0
    used_cores: int = 0
    used_slots: int = 0

    def usage(self) -> GPUUsage:
        return GPUUsage(self.used_memory_mib, self.used_cores, self.used_slots)


@dataclass(frozen=True, slots=True)
class NodeAllocation:
    """A node in the simulated HAMi's cache: its healthy GPUs, their usage and the containers.

    ``schedulable`` is False for a node HAMi knows but may not place on now (NotReady,
    cordoned); it still reports metrics, as the real scheduler's cache does.
    """

    node: str
    devices: tuple[DeviceAllocation, ...]
    containers: tuple[ContainerAllocation, ...] = ()
    schedulable: bool = True

    def usage(self) -> tuple[GPUUsage, ...]:
        return tuple(d.usage() for d in self.devices)

    def shape(self) -> CellShape:
        """The node as one uniform cell shape (the node agent registers identical GPUs)."""
        if not self.devices:
            return CellShape(gpus=0)
        first = self.devices[0].device
        return CellShape(len(self.devices), first.devmem, first.devcore, first.count)


def natural_key(name: str) -> tuple[object, ...]:
    """``pool-2`` before ``pool-10``: the simulator's "lowest cell index" tie-break."""
    return tuple(int(p) if p.isdigit() else p for p in _NATURAL.split(name))


def parse_register(annotation: str | None) -> tuple[Device, ...] | None:
    """The GPUs of ``hami.io/node-nvidia-register`` (v2.8+ JSON, else the <=v2.7 records)."""
    text = (annotation or "").strip()
    if not text:
        return None
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            return None
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            return None
        return tuple(_device_from_json(i) for i in items)
    return _parse_legacy_register(text)


def _device_from_json(item: Mapping[str, object]) -> Device:
    def num(key: str, default: int = 0) -> int:
        value = item.get(key, default)
        return int(value) if isinstance(value, int | float) else default

    return Device(
        uuid=str(item.get("id") or ""),
        index=num("index"),
        count=num("count"),
        devmem=num("devmem"),
        devcore=num("devcore"),
        type=str(item.get("type") or ""),
        health=item.get("health") is True,
    )


def _parse_legacy_register(text: str) -> tuple[Device, ...] | None:
    """``UUID,count,devmem,devcore,type,numa,health[,index,mode]:`` records (HAMi <= v2.7)."""
    devices = []
    for position, record in enumerate(r for r in text.split(":") if r.strip()):
        fields = record.strip().split(",")
        if len(fields) < 7:
            return None
        try:
            count, devmem, devcore = int(fields[1]), int(fields[2]), int(fields[3])
            index = int(fields[7]) if len(fields) > 7 else position
        except ValueError:
            return None
        health = fields[6].strip() == "true"
        devices.append(Device(fields[0], index, count, devmem, devcore, fields[4], health))
    return tuple(devices)


def format_plan(containers: Sequence[Sequence[tuple[str, int, int]]]) -> str:
    """A device plan: ``UUID,NVIDIA,<MiB>,<cores>:`` per device, ``;`` after each container."""
    return "".join(
        "".join(f"{uuid},{DEVICE_VENDOR},{mem},{cores}:" for uuid, mem, cores in devices) + ";"
        for devices in containers
    )


def parse_plan(plan: str | None) -> tuple[PlanEntry, ...]:
    """The entries of a device plan; malformed devices are skipped (never raises)."""
    entries = []
    for index, container in enumerate((plan or "").split(";")):
        for device in container.split(":"):
            fields = device.strip().split(",")
            if len(fields) < 4 or not fields[0]:
                continue
            try:
                entries.append(PlanEntry(index, fields[0], int(fields[2]), int(fields[3])))
            except ValueError:
                continue
    return tuple(entries)


def emptied_plan(containers: int) -> str:
    """What ``vgpu-devices-to-allocate`` becomes once the device plugin allocated everything."""
    return ";" * containers


def gen_reason(reasons: Mapping[str, int], gpus_on_node: int) -> str:
    """HAMi's per-node ``GenReason``: sorted ``<count>/<gpus> <Reason>``, comma-joined."""
    return ", ".join(
        sorted(f"{count}/{gpus_on_node} {reason}" for reason, count in reasons.items())
    )


def unschedulable_message(node_reasons: Iterable[str], fits_empty_somewhere: bool = True) -> str:
    """kube-scheduler's ``0/N nodes are available: <n> <reason>, ....`` over per-node reasons.

    Identical reason strings are counted together and the ``<n> <reason>`` strings sorted, as
    kube-scheduler's FitError does, then the preemption post-filter's verdict in the same shape
    (hami-facts §3.2). When the pod would not fit any of the nodes even empty, the twin says so
    in one more sentence (the real message has no such hint).
    """
    counts = Counter(node_reasons)
    total = sum(counts.values())
    if total == 0:
        return NO_NODES
    verdicts = Counter(_preemption_verdict(reason) for reason in node_reasons)
    message = f"0/{total} nodes are available: {_histogram(counts)}."
    message += f" preemption: 0/{total} nodes are available: {_histogram(verdicts)}."
    if not fits_empty_somewhere:
        message += " The pod does not fit any of these nodes even when empty."
    return message


def _histogram(counts: Mapping[str, int]) -> str:
    return ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))


def _preemption_verdict(node_reason: str) -> str:
    """kube-scheduler's own filters (``node(s) ...``: cordon, taints, selector) fail a node as
    UnschedulableAndUnresolvable; an extender's (HAMi's) failed nodes are only Unschedulable,
    so preemption looks there and, with no lower-priority pod to evict, finds no victims."""
    if node_reason.startswith(KUBE_FILTER_PREFIX):
        return PREEMPTION_NOT_HELPFUL
    return NO_PREEMPTION_VICTIMS


def monitor_device_type(registered_type: str) -> str:
    """The vGPU monitor's ``device_type``: ``NVIDIA-`` + the NVML name, always (hami-facts §4.2).

    The device plugin registered the NVML name with ``NVIDIA-`` added only when the name did
    not already start with ``NVIDIA``; undo that, then add the prefix unconditionally.
    """
    nvml = registered_type.removeprefix("NVIDIA-")
    return f"NVIDIA-{nvml}"
