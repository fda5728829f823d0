"""Read HAMi GPU demand out of Kubernetes pod manifests (plain dicts, camelCase).

Why this module exists: the autoscaler's only scale-up signal is "a pod HAMi could not place",
and how much it asked for. Both must be read the way HAMi reads them (hami-facts §1.2, §3.3),
or the pool grows for pods a new cell cannot help, or too little for pods it can. Everything
here is pure: a dict in, a value out. Malformed manifests never raise; they come back as an
``AskError`` naming the field, which the loop logs before skipping the pod.

Modelling choices (each is a faithful reading of HAMi v2.10 unless said otherwise):

* Per resource, limits are read first, then requests.
* ``nvidia.com/gpumem`` must be a whole number of MiB that fits int32. A value such as ``3Gi``
  (bytes) overflows; HAMi then parses the container as "no device request", and so do we: the
  container contributes nothing (it is *not* an error; HAMi schedules such a pod without a GPU).
* ``gpumem-percentage``: ``<= 0`` is ignored, ``> 100`` is clamped; ``gpumem`` wins over it.
* ``gpucores`` above 100 is clamped to 100.
* The mutating webhook: the stored pod has normally been mutated already, so by default we read
  it as the scheduler does (``apply_webhook=False``): a container without ``nvidia.com/gpu``
  asks for no device. With ``apply_webhook=True`` (traces, or pods created while the webhook was
  down but that will be re-created through it) we first apply the webhook's rules: ``gpu`` is
  defaulted to 1 when only memory/cores/percentage is set, and ``gpucores: 100`` is added when
  ``gpu`` is set, ``gpucores`` is not, and memory is exclusive (no ``gpumem`` and no percentage,
  or percentage 100).
* Several GPU containers: HAMi gives each container its own ``gpu_count`` distinct GPUs on one
  node, and two containers may share a GPU. We keep the tuple of per-container asks
  (``PendingPod.container_asks``), which packing places one after another on the same cell.
  ``PendingPod.ask`` is a conservative single-ask summary (see ``summarise``).
* Init containers: the larger of the app containers and the biggest init container (the
  webhook's quota rule). "Larger" is judged by GPU count, then per-GPU memory and cores; see
  ``_with_init``. This is an approximation; GPU init containers are rare.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from autoscaler.policy.errors import AskError
from autoscaler.policy.pod_constraints import MATCH_FIELDS_KEY_PREFIX, constraints_from_pod
from autoscaler.policy.types import GPUAsk, PendingPod

__all__ = [
    "HAMI_RESOURCES",
    "MATCH_FIELDS_KEY_PREFIX",
    "AskError",
    "asks_hami_resource",
    "constraints_from_pod",
    "container_ask",
    "is_pending_hami_pod",
    "parse_int_quantity",
    "pending_pod_from_manifest",
    "pod_ask",
    "pod_asks",
    "pod_key",
    "summarise",
]

RES_GPU = "nvidia.com/gpu"
RES_MEM = "nvidia.com/gpumem"
RES_MEM_PCT = "nvidia.com/gpumem-percentage"
RES_CORES = "nvidia.com/gpucores"
HAMI_RESOURCES = (RES_GPU, RES_MEM, RES_MEM_PCT, RES_CORES)
INT32_MAX = 2**31 - 1

_QUANTITY = re.compile(r"^([+-]?\d+(?:\.\d*)?|[+-]?\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_SUFFIX: dict[str | None, Fraction] = {
    None: Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


class _NoDevice:
    """Marker: HAMi reads this container as asking for no device."""


NO_DEVICE = _NoDevice()


def _quantity(value: object) -> Fraction | None:
    """A Kubernetes quantity as an exact number, or None when it is not a quantity at all."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if not isinstance(value, str):
        return None
    m = _QUANTITY.match(value.strip())
    if m is None:
        return None
    return Fraction(m.group(1)) * _SUFFIX[m.group(2)]


def parse_int_quantity(value: object) -> int | None:
    """A Kubernetes quantity as an exact integer, or None (``1.5``, ``100m``, ``abc``)."""
    number = _quantity(value)
    if number is None or number.denominator != 1:
        return None
    return int(number)


def _lookup(resources: Mapping[str, Any], name: str) -> object | None:
    """Limits first, then requests (HAMi's order, per resource)."""
    for part in ("limits", "requests"):
        section = resources.get(part)
        if isinstance(section, Mapping) and name in section:
            value: object = section[name]
            return value
    return None


def _read_ints(resources: Mapping[str, Any]) -> dict[str, int] | AskError | _NoDevice:
    values: dict[str, int] = {}
    for name in HAMI_RESOURCES:
        raw = _lookup(resources, name)
        if raw is None:
            continue
        number = parse_int_quantity(raw)
        if _quantity(raw) is None:
            return AskError(name, f"{name}: not a quantity: {raw!r}")
        if name == RES_MEM and (number is None or number > INT32_MAX):
            return NO_DEVICE  # e.g. "3Gi": HAMi parses the container as no device request
        if number is None:
            return AskError(name, f"{name}: not an integer quantity: {raw!r}")
        if number < 0:
            return AskError(name, f"{name}: negative value {number}")
        values[name] = number
    return values


def _apply_webhook(values: dict[str, int]) -> dict[str, int]:
    """HAMi's MutateAdmission rules (v2.7+), applied to one container's integer resources."""
    out = dict(values)
    if RES_GPU not in out and any(k in out for k in (RES_MEM, RES_CORES, RES_MEM_PCT)):
        out[RES_GPU] = 1  # defaultGPUNum
    pct = out.get(RES_MEM_PCT)
    exclusive_memory = (RES_MEM not in out and pct is None) or pct == 100
    if RES_GPU in out and RES_CORES not in out and exclusive_memory:
        out[RES_CORES] = 100
    return out


def container_ask(
    resources: Mapping[str, Any], *, apply_webhook: bool = False
) -> GPUAsk | AskError | None:
    """One container's HAMi ask from its ``resources`` dict, or None for "no device request"."""
    if not isinstance(resources, Mapping):
        return AskError("resources", f"resources: expected an object, got {type(resources)}")
    read = _read_ints(resources)
    if isinstance(read, AskError):
        return read
    if isinstance(read, _NoDevice):
        return None
    values = _apply_webhook(read) if apply_webhook else read
    count = values.get(RES_GPU, 0)
    if count <= 0:
        return None  # the scheduler only builds a request from nvidia.com/gpu
    memory_mib = values.get(RES_MEM) or None  # 0 means unset
    pct = values.get(RES_MEM_PCT)
    memory_percent = None if memory_mib is not None or pct is None or pct <= 0 else min(pct, 100)
    cores = min(values.get(RES_CORES, 0), 100)
    return GPUAsk(count, memory_mib, memory_percent, cores)


def asks_hami_resource(container: Mapping[str, Any]) -> bool:
    """Whether a container's limits or requests name any HAMi resource (predicate §3.3.4)."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return False
    return any(_lookup(resources, name) is not None for name in HAMI_RESOURCES)


def _containers(spec: Mapping[str, Any], key: str) -> Sequence[Mapping[str, Any]] | AskError:
    items = spec.get(key) or []
    if not isinstance(items, list) or not all(isinstance(c, Mapping) for c in items):
        return AskError(f"spec.{key}", f"spec.{key}: expected a list of objects")
    return items


def unschedulable(status: Mapping[str, Any]) -> bool:
    """The pod's ``PodScheduled`` condition is False/Unschedulable (the scheduler tried and
    found no node), in either HAMi mode."""
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled":
            return cond.get("status") == "False" and cond.get("reason") == "Unschedulable"
    return False


def is_pending_hami_pod(pod: Mapping[str, Any], scheduler_name: str = "hami-scheduler") -> bool:
    """hami-facts §3.3 predicate: Pending, unbound, ours, Unschedulable, asks a HAMi resource.

    ``SchedulerError`` pods (bind failures, node lock) are excluded: a new cell does not help.
    """
    if not isinstance(pod, Mapping):
        return False
    spec, status = pod.get("spec"), pod.get("status")
    if not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        return False
    if status.get("phase") != "Pending" or spec.get("nodeName"):
        return False
    if spec.get("schedulerName") != scheduler_name or not unschedulable(status):
        return False
    for key in ("containers", "initContainers"):
        items = _containers(spec, key)
        if not isinstance(items, AskError) and any(asks_hami_resource(c) for c in items):
            return True
    return False


def _container_asks(
    items: Sequence[Mapping[str, Any]], key: str, apply_webhook: bool
) -> tuple[GPUAsk, ...] | AskError:
    asks: list[GPUAsk] = []
    for i, container in enumerate(items):
        ask = container_ask(container.get("resources") or {}, apply_webhook=apply_webhook)
        if isinstance(ask, AskError):
            return AskError(f"spec.{key}[{i}].{ask.field}", f"spec.{key}[{i}]: {ask.message}")
        if ask is not None:
            asks.append(ask)
    return tuple(asks)


def _mem_rank(ask: GPUAsk) -> tuple[int, int]:
    """Order per-GPU memory: whole GPU > any percentage > any MiB figure (conservative)."""
    if ask.memory_mib is not None:
        return (0, ask.memory_mib)
    if ask.memory_percent is not None:
        return (1, ask.memory_percent)
    return (2, 100)


def _with_init(app: tuple[GPUAsk, ...], init: tuple[GPUAsk, ...]) -> tuple[GPUAsk, ...]:
    """max(app containers, biggest init container): init wins only if it needs more."""
    if not init:
        return app
    biggest = max(init, key=lambda a: (a.gpu_count, _mem_rank(a), a.cores_percent))
    if not app:
        return (biggest,)
    app_gpus = sum(a.gpu_count for a in app)
    if biggest.gpu_count > app_gpus:
        return (biggest,)
    per_gpu_bigger = all(
        _mem_rank(biggest) >= _mem_rank(a) and biggest.cores_percent >= a.cores_percent for a in app
    )
    if biggest.gpu_count == app_gpus and per_gpu_bigger and len(app) == 1:
        return (biggest,)
    return app


def summarise(asks: Sequence[GPUAsk]) -> GPUAsk:
    """One conservative ask for a pod: sum of GPU counts, each with the largest per-GPU ask.

    Memory mixes (MiB in one container, a percentage in another) resolve to the whole GPU.
    """
    if len(asks) == 1:
        return asks[0]
    count = sum(a.gpu_count for a in asks)
    cores = max(a.cores_percent for a in asks)
    kinds = {_mem_rank(a)[0] for a in asks}
    if kinds == {0}:
        return GPUAsk(count, max(a.memory_mib or 0 for a in asks), None, cores)
    if kinds == {1}:
        return GPUAsk(count, None, max(a.memory_percent or 0 for a in asks), cores)
    return GPUAsk(count, None, None, cores)


def pod_asks(
    pod: Mapping[str, Any], *, apply_webhook: bool = False
) -> tuple[GPUAsk, ...] | AskError:
    """The per-container asks HAMi places for this pod, in allocation order."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    if not isinstance(spec, Mapping):
        return AskError("spec", "spec: missing or not an object")
    parts: list[tuple[GPUAsk, ...]] = []
    for key in ("containers", "initContainers"):
        items = _containers(spec, key)
        if isinstance(items, AskError):
            return items
        asks = _container_asks(items, key, apply_webhook)
        if isinstance(asks, AskError):
            return asks
        parts.append(asks)
    combined = _with_init(parts[0], parts[1])
    if not combined:
        return AskError("spec.containers", "no container asks for a HAMi device")
    return combined


def pod_ask(pod: Mapping[str, Any], *, apply_webhook: bool = False) -> GPUAsk | AskError:
    """The whole-pod ask as one value (``summarise`` of ``pod_asks``)."""
    asks = pod_asks(pod, apply_webhook=apply_webhook)
    return asks if isinstance(asks, AskError) else summarise(asks)


def pod_key(pod: Mapping[str, Any]) -> str:
    """``namespace/name`` of a manifest (namespace ``default`` when unset)."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    if not isinstance(meta, Mapping):
        return "/"
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def pending_pod_from_manifest(
    pod: Mapping[str, Any], first_seen: float, *, apply_webhook: bool = False
) -> PendingPod | AskError:
    """A ``PendingPod`` (asks and constraints) from a manifest; the caller checked pendingness."""
    asks = pod_asks(pod, apply_webhook=apply_webhook)
    if isinstance(asks, AskError):
        return asks
    constraints = constraints_from_pod(pod)
    if isinstance(constraints, AskError):
        return constraints
    container_asks = asks if len(asks) > 1 else ()
    return PendingPod(pod_key(pod), summarise(asks), first_seen, constraints, container_asks)
