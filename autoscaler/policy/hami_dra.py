"""Read HAMi-DRA objects: the devices a cell's ResourceSlices publish, what claims ask and hold.

Why this module exists: in HAMi's DRA mode (hami-facts §5) nothing is written to the Node or to
the pod's annotations. A cell's GPUs are the devices HAMi's kubelet plugin publishes in the
cell Node's ResourceSlice, a pod's ask is the ResourceClaim HAMi's webhook made for it, and an
allocation is that claim's ``status.allocation``. The provisioner (is the cell's GPU advertised,
``status.workloadCapacity``), the autoscaler (demand, room on Ready cells) and the twin all read
these objects; reading them in one pure place keeps them in agreement, and turns them into the
values the device-plugin path already uses (per-GPU MiB and core percent).

Readings (resource.k8s.io/v1, Consumable Capacity):

* a slice belongs to the Node ``spec.nodeName``; its driver must be HAMi's; of a pool published
  in several generations only the newest generation counts (older slices are being replaced);
* a device counts when its ``type`` attribute (if present) is ``hami-gpu`` and it has a
  ``memory`` capacity (bytes) and a ``cores`` capacity (percent); otherwise it is skipped with
  a reason;
* a claim request of the HAMi DeviceClass asks ``exactly.count`` devices (``ExactCount``; mode
  ``All`` cannot be sized and is refused), each with ``capacity.requests.memory`` bytes and
  ``capacity.requests.cores`` percent; an absent request takes the device's default: the whole
  card's memory, 100 cores;
* an allocation result names (driver, pool = the Node, device) and, with Consumable Capacity,
  its ``consumedCapacity``; without it the request's figures are taken.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.policy.demand import parse_int_quantity
from autoscaler.policy.errors import AskError
from autoscaler.policy.types import GPUUsage

DRIVER = "hami-core-gpu.project-hami.io"
"""HAMi's kubelet plugin: the driver of its ResourceSlices and allocation results."""
DEVICE_CLASS = "hami-core-gpu.project-hami.io"
"""The DeviceClass HAMi's chart installs and its webhook names in every claim."""
DEVICE_TYPE = "hami-gpu"
MIB = 2**20
FULL_CORES = 100


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One GPU a cell's slice publishes: its name (``hami-gpu-<minor>``), UUID and shape."""

    node: str
    name: str
    uuid: str
    model: str
    memory_mib: int
    cores: int


@dataclass(frozen=True, slots=True)
class DeviceAsk:
    """One claim request: ``count`` devices, each ``memory_mib`` (None: whole card) and cores."""

    count: int
    memory_mib: int | None
    cores: int


@dataclass(frozen=True, slots=True)
class DraAllocation:
    """One allocated device share: Node, device name, MiB and cores consumed."""

    node: str
    device: str
    memory_mib: int
    cores: int


def _map(obj: Any, *path: str) -> Mapping[str, Any]:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj if isinstance(obj, Mapping) else {}


def _attribute(attributes: Mapping[str, Any], name: str) -> str:
    """An attribute's value as text, whether its key is bare or qualified by the driver."""
    value = attributes.get(name, attributes.get(f"{DRIVER}/{name}"))
    if not isinstance(value, Mapping):
        return ""
    for kind in ("string", "int", "version", "bool"):
        if kind in value:
            return str(value[kind])
    return ""


def _mib(raw: object) -> int | None:
    """Bytes (a quantity) rounded up to MiB; None when not a non-negative whole quantity."""
    n = parse_int_quantity(raw)
    return None if n is None or n < 0 else -(-n // MIB)


def _device(node: str, raw: Mapping[str, Any]) -> DraDevice | str:
    name = str(raw.get("name") or "")
    attributes = _map(raw, "attributes")
    kind = _attribute(attributes, "type")
    if kind and kind != DEVICE_TYPE:
        return f"device {name!r}: type {kind!r} is not {DEVICE_TYPE}"
    capacity = _map(raw, "capacity")
    memory = _mib(_map(capacity, "memory").get("value"))
    cores = parse_int_quantity(_map(capacity, "cores").get("value"))
    if not name or memory is None or cores is None or cores < 0:
        return f"device {name!r}: needs a name and capacity memory (bytes) and cores"
    uuid = _attribute(attributes, "uuid") or name
    return DraDevice(node, name, uuid, _attribute(attributes, "productName"), memory, cores)


def _newest_slices(slices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """HAMi's slices of the newest generation of each pool."""
    ours = [s for s in slices if _map(s, "spec").get("driver") == DRIVER]
    newest: dict[str, int] = {}
    for s in ours:
        name, gen = _pool_generation(s)
        newest[name] = max(newest.get(name, 0), gen)
    return [s for s in ours if _pool_generation(s)[1] == newest[_pool_generation(s)[0]]]


def _pool_generation(slice_: Mapping[str, Any]) -> tuple[str, int]:
    pool = _map(slice_, "spec", "pool")
    gen = pool.get("generation")
    return str(pool.get("name")), gen if isinstance(gen, int) else 0


def slice_devices(
    slices: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, tuple[DraDevice, ...]], tuple[str, ...]]:
    """HAMi devices per Node, and why each skipped device or slice was skipped.

    A Node with a HAMi slice but no usable device maps to an empty tuple."""
    found: dict[str, list[DraDevice]] = {}
    skipped: list[str] = []
    for s in _newest_slices(slices):
        name = str(_map(s, "metadata").get("name") or "")
        node = _map(s, "spec").get("nodeName")
        devices = _map(s, "spec").get("devices")
        if not isinstance(node, str) or not node or not isinstance(devices, list):
            skipped.append(f"ResourceSlice {name}: needs spec.nodeName and spec.devices")
            continue
        mine = found.setdefault(node, [])
        for raw in devices:
            device = _device(node, raw) if isinstance(raw, Mapping) else "device: not an object"
            if isinstance(device, str):
                skipped.append(f"ResourceSlice {name}: {device}")
            else:
                mine.append(device)
    return {k: tuple(v) for k, v in found.items()}, tuple(skipped)


def _request_ask(i: int, request: Mapping[str, Any]) -> DeviceAsk | AskError:
    exactly = _map(request, "exactly")
    where = f"spec.devices.requests[{i}].exactly"
    mode = exactly.get("allocationMode") or "ExactCount"
    count = exactly.get("count", 1)
    if mode != "ExactCount":
        return AskError(f"{where}.allocationMode", f"{where}: mode {mode} cannot be sized")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return AskError(f"{where}.count", f"{where}.count: not a positive integer: {count!r}")
    asked = _map(exactly, "capacity", "requests")
    memory = _mib(asked["memory"]) if "memory" in asked else None
    cores = parse_int_quantity(asked["cores"]) if "cores" in asked else FULL_CORES
    if "memory" in asked and memory is None:
        return AskError(f"{where}.capacity.requests.memory", f"{where}: memory not a quantity")
    if cores is None or not 0 <= cores <= FULL_CORES:
        return AskError(f"{where}.capacity.requests.cores", f"{where}: cores not in 0..100")
    return DeviceAsk(count, memory, cores)


def _asks_for_class(subrequests: object, device_class: str) -> bool:
    """A prioritised list (``firstAvailable``) names ``device_class`` in one of its
    alternatives (or cannot be read: then it may, and is refused rather than ignored)."""
    if not isinstance(subrequests, list):
        return True
    return any(
        not isinstance(sub, Mapping) or sub.get("deviceClassName") == device_class
        for sub in subrequests
    )


def claim_asks(claim: Mapping[str, Any], device_class: str) -> tuple[DeviceAsk, ...] | AskError:
    """The requests of ``device_class`` in a ResourceClaim (empty: none asks for HAMi GPUs)."""
    requests = _map(claim, "spec", "devices").get("requests") or []
    if not isinstance(requests, list):
        return AskError("spec.devices.requests", "spec.devices.requests: expected a list")
    asks: list[DeviceAsk] = []
    for i, request in enumerate(requests):
        if not isinstance(request, Mapping):
            return AskError(f"spec.devices.requests[{i}]", "request: expected an object")
        if "firstAvailable" in request:
            if _asks_for_class(request.get("firstAvailable"), device_class):
                return AskError(
                    f"spec.devices.requests[{i}].firstAvailable", "prioritised lists are not sized"
                )
            continue  # another driver's prioritised list: not a HAMi GPU ask
        if _map(request, "exactly").get("deviceClassName") != device_class:
            continue
        ask = _request_ask(i, request)
        if isinstance(ask, AskError):
            return ask
        asks.append(ask)
    return tuple(asks)


def _asks_by_request(claim: Mapping[str, Any], device_class: str) -> dict[str, DeviceAsk]:
    """The readable HAMi requests of a claim by request name (for allocation defaults)."""
    out: dict[str, DeviceAsk] = {}
    requests = _map(claim, "spec", "devices").get("requests")
    for i, request in enumerate(requests if isinstance(requests, list) else []):
        exactly = _map(request, "exactly")
        if exactly.get("deviceClassName") == device_class:
            ask = _request_ask(i, request)
            if isinstance(ask, DeviceAsk):
                out[str(request.get("name"))] = ask
    return out


def is_allocated(claim: Mapping[str, Any]) -> bool:
    return bool(_map(claim, "status", "allocation"))


def _consumed(
    result: Mapping[str, Any], ask: DeviceAsk | None, device: DraDevice | None
) -> tuple[int, int]:
    consumed = _map(result, "consumedCapacity")
    whole_mib = device.memory_mib if device is not None else 0
    default_mib = ask.memory_mib if ask is not None and ask.memory_mib is not None else whole_mib
    memory = _mib(consumed["memory"]) if "memory" in consumed else default_mib
    cores = parse_int_quantity(consumed.get("cores")) if "cores" in consumed else None
    if cores is None:
        cores = ask.cores if ask is not None else FULL_CORES
    return memory or 0, cores


def claim_allocations(
    claims: Iterable[Mapping[str, Any]],
    devices: Mapping[str, tuple[DraDevice, ...]],
    device_class: str,
) -> dict[str, tuple[DraAllocation, ...]]:
    """Per Node, the HAMi device shares its allocated claims hold."""
    found: dict[str, list[DraAllocation]] = {}
    for claim in claims:
        results = _map(claim, "status", "allocation", "devices").get("results") or []
        asks = _asks_by_request(claim, device_class)
        for result in results if isinstance(results, list) else []:
            if not isinstance(result, Mapping) or result.get("driver") != DRIVER:
                continue
            node, name = str(result.get("pool") or ""), str(result.get("device") or "")
            device = next((d for d in devices.get(node, ()) if d.name == name), None)
            memory, cores = _consumed(result, asks.get(str(result.get("request"))), device)
            found.setdefault(node, []).append(DraAllocation(node, name, memory, cores))
    return {k: tuple(v) for k, v in found.items()}


def claim_usage(
    slices: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    device_class: str,
    gpus: int,
) -> dict[str, tuple[GPUUsage, ...]]:
    """Per Node with a HAMi slice: each GPU's allocated MiB, cores and shares (one slot per
    allocation, as HAMi counts containers), busiest first, padded to ``gpus`` GPUs."""
    devices, _ = slice_devices(slices)
    held = claim_allocations(claims, devices, device_class)
    out: dict[str, tuple[GPUUsage, ...]] = {}
    for node, mine in devices.items():
        per: dict[str, list[int]] = {d.name: [0, 0, 0] for d in mine}
        for a in held.get(node, ()):
            entry = per.setdefault(a.device, [0, 0, 0])
            entry[0], entry[1], entry[2] = entry[0] + a.memory_mib, entry[1] + a.cores, entry[2] + 1
        used = sorted((GPUUsage(m, c, n) for m, c, n in per.values()), key=_busiest)
        out[node] = tuple(used[:gpus] + [GPUUsage()] * (gpus - len(used)))
    return out


def _busiest(g: GPUUsage) -> tuple[int, int, int]:
    return -g.memory_mib, -g.cores_percent, -g.slots
