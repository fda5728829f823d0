"""The simulated HAMi's cache, rebuilt each pass, and what it reads and writes on a pod (pure).

Why this module exists: every pass of the simulated HAMi (``twin.hami``) starts from what the
workload apiserver holds, as the real scheduler does after a restart: the Nodes, and every
placed pod's ``hami.io/vgpu-devices-allocated`` plan booked on its node's usage (``rebuild``,
``book``). A pending pod's per-container asks are read from the stored pod as HAMi's scheduler
reads them (``pod_asks``), and a placement is written back as the plan string that ``book``
reads (``plan_for``). These are pure functions of the objects, kept apart from the
controller's I/O and timing, so the cache can be pinned without an apiserver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.policy.demand import constraints_from_pod, container_ask
from autoscaler.policy.errors import AskError
from autoscaler.policy.pool_demand import metadata as metadata_of
from autoscaler.policy.types import GPUAsk, PlacementConstraints
from provisioner.kube import JSON
from simulations.simulator.engine.hami import allocate
from simulations.twin.hami_codec import (
    ALLOCATED,
    VGPU_NODE,
    ContainerAllocation,
    format_plan,
    idle_since,
    parse_plan,
)
from simulations.twin.hami_placement import NodeState, Placement, node_state
from simulations.twin.pod_lifecycle import parse_rfc3339

_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class PodAsks:
    """A pod's containers in HAMi's order (init first), each with its ask or None."""

    names: tuple[str, ...]
    asks: tuple[GPUAsk | None, ...]
    constraints: PlacementConstraints


def pod_asks(pod: Mapping[str, Any]) -> PodAsks | AskError:
    """Per-container asks read as HAMi's scheduler reads the stored pod (no webhook)."""
    spec = pod.get("spec") or {}
    containers = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    asks: list[GPUAsk | None] = []
    for container in containers:
        ask = container_ask(container.get("resources") or {})
        if isinstance(ask, AskError):
            return ask
        asks.append(ask)
    constraints = constraints_from_pod(pod)
    if isinstance(constraints, AskError):
        return constraints
    names = tuple(str(c.get("name", i)) for i, c in enumerate(containers))
    return PodAsks(names, tuple(asks), constraints)


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """An object's annotations (empty when it has none)."""
    return metadata_of(obj).get("annotations") or {}


def _started_at(pod: Mapping[str, Any]) -> float | None:
    return parse_rfc3339((pod.get("status") or {}).get("startTime"))


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def book(node: NodeState, pod: Mapping[str, Any], plan: str) -> None:
    """Add a pod's allocation plan to a node's usage (unknown devices are ignored)."""
    position = {d.uuid: i for i, d in enumerate(node.devices)}
    spec = pod.get("spec") or {}
    names = [c.get("name", "") for c in (spec.get("initContainers") or [])]
    names += [c.get("name", "") for c in (spec.get("containers") or [])]
    meta = metadata_of(pod)
    seen: dict[int, int] = {}
    for entry in parse_plan(plan):
        i = position.get(entry.uuid)
        if i is None:
            continue
        ask = GPUAsk(1, entry.memory_mib, None, entry.cores)
        allocate(node.usage, node.shape, ask, (i,))
        vdevice = seen.get(entry.container_index, 0)
        seen[entry.container_index] = vdevice + 1
        name = names[entry.container_index] if entry.container_index < len(names) else ""
        node.containers.append(
            ContainerAllocation(
                str(meta.get("namespace", "")),
                str(meta.get("name", "")),
                entry.container_index,
                str(name),
                vdevice,
                entry.uuid,
                entry.memory_mib,
                entry.cores,
                idle_since(annotations_of(pod), _started_at(pod)),
            )
        )


def rebuild(nodes: Sequence[JSON], allocated_pods: Sequence[JSON]) -> dict[str, NodeState]:
    """HAMi's cache from Nodes and the pods' ``vgpu-devices-allocated`` annotations.

    A bound pod counts on its Node; an unbound pod annotated for a node that may take pods
    counts there too (its binding is about to be retried); terminal pods count nowhere.
    """
    states = {s.name: s for s in (node_state(n) for n in nodes)}
    for pod in allocated_pods:
        if _phase(pod) in _TERMINAL:
            continue
        target = (pod.get("spec") or {}).get("nodeName") or annotations_of(pod).get(VGPU_NODE)
        node = states.get(str(target or ""))
        if node is None or not node.registered:
            continue
        if not (pod.get("spec") or {}).get("nodeName") and node.blocked is not None:
            continue
        book(node, pod, annotations_of(pod).get(ALLOCATED, ""))
    return states


def plan_for(placement: Placement, node: NodeState, asks: Sequence[GPUAsk | None]) -> str:
    """The device plan string of a placement (memory resolved on the node's GPUs)."""
    containers = []
    for ask, gpus in zip(asks, placement.gpus, strict=True):
        devices = []
        for i in gpus:
            assert ask is not None
            memory = ask.memory_on(node.devices[i].devmem)
            devices.append((node.devices[i].uuid, memory, min(ask.cores_percent, 100)))
        containers.append(devices)
    return format_plan(containers)
