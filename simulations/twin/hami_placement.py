"""Where HAMi puts one pod on the twin's Nodes, or why it cannot (pure).

Why this module exists: the twin must place pods exactly where the offline simulator does, or
the simulator-vs-twin fidelity check compares two different worlds. So the GPU choice and the
node score are the simulator's own (``simulations.simulator.engine.hami``: ``choose_gpus``,
``node_score``, ``allocate``), and the per-GPU filter reasons are the policy's ``gpu_fit``
(HAMi v2.10 ``Fit`` order, hami-facts §3.1). What is added is what only a live scheduler has:
Nodes read from the API (labels, taints, cordon, Ready, the register annotation), the pod's
per-container asks placed one after another on one node, kube-scheduler's own node filters in
front of the extender, and the reason string each node gives when the pod does not fit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.policy.fit import (
    ALLOCATED_CARDS_INSUFFICIENT,
    NODE_INSUFFICIENT_DEVICE,
    constraints_fit,
    gpu_fit,
)
from autoscaler.policy.types import (
    CellShape,
    GPUAsk,
    GPUUsage,
    NodeTemplate,
    PlacementConstraints,
    Taint,
)
from simulations.simulator.engine import hami as engine
from simulations.twin.hami_codec import (
    GPU_RESOURCE,
    NODE_UNREGISTERED,
    REGISTER_ANNOTATION,
    ContainerAllocation,
    Device,
    DeviceAllocation,
    NodeAllocation,
    gen_reason,
    natural_key,
    parse_register,
)

BINPACK = engine.BINPACK
SPREAD = engine.SPREAD
# kube-scheduler's own filter messages (the plugins run before the HAMi extender).
NOT_READY = "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
CORDONED = "node(s) were unschedulable"
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
# The apiserver taints every new Node not-ready (TaintNodesByCondition); the node lifecycle
# controller removes it once the Node is Ready. The harness runs no such controller, so these
# taints are read from the Ready condition instead of from spec.taints.
_CONDITION_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


@dataclass
class NodeState:
    """One Node during a scheduling pass: what HAMi knows of it and what is booked on it.

    ``blocked`` is the reason kube-scheduler or HAMi rules the node out before any GPU is
    looked at (NotReady, cordoned, not registered); None means HAMi may place here.
    """

    name: str
    devices: tuple[Device, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    blocked: str | None = None
    usage: list[GPUUsage] = field(default_factory=list)
    containers: list[ContainerAllocation] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.usage:
            self.usage = [GPUUsage() for _ in self.devices]

    @property
    def registered(self) -> bool:
        return bool(self.devices)

    @property
    def shape(self) -> CellShape:
        if not self.devices:
            return CellShape(gpus=0)
        first = self.devices[0]
        return CellShape(len(self.devices), first.devmem, first.devcore, first.count)

    def snapshot(self) -> NodeAllocation:
        devices = tuple(
            DeviceAllocation(d, u.memory_mib, u.cores_percent, u.slots)
            for d, u in zip(self.devices, self.usage, strict=True)
        )
        return NodeAllocation(self.name, devices, tuple(self.containers), self.blocked is None)


@dataclass(frozen=True, slots=True)
class Placement:
    """The chosen node and, per container, the device indices (empty for no device)."""

    node: str
    gpus: tuple[tuple[int, ...], ...]


def node_state(node: Mapping[str, Any]) -> NodeState:
    """A Node manifest as HAMi sees it: registered devices (healthy ones), labels, taints."""
    meta, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    annotations = meta.get("annotations") or {}
    devices = parse_register(annotations.get(REGISTER_ANNOTATION)) or ()
    healthy = tuple(sorted((d for d in devices if d.health), key=lambda d: d.index))
    allocatable = str((status.get("allocatable") or {}).get(GPU_RESOURCE, "0"))
    registered = healthy if allocatable.isdigit() and int(allocatable) > 0 else ()
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
        for t in spec.get("taints") or []
        if t.get("key") not in _CONDITION_TAINTS
    )
    blocked = None
    if not _ready(status):
        blocked = NOT_READY
    elif spec.get("unschedulable"):
        blocked = CORDONED
    elif not registered:
        blocked = NODE_UNREGISTERED
    return NodeState(str(meta["name"]), registered, meta.get("labels") or {}, taints, blocked)


def _ready(status: Mapping[str, Any]) -> bool:
    conditions = status.get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def fit_on(
    asks: Sequence[GPUAsk | None],
    usage: Sequence[GPUUsage],
    shape: CellShape,
    gpu_policy: str = SPREAD,
) -> tuple[tuple[tuple[int, ...], ...], str | None]:
    """Place the containers' asks one after another on one node's GPUs.

    Returns the device indices per container and None, or ``()`` and the node's HAMi reason.
    """
    current = list(usage)
    chosen: list[tuple[int, ...]] = []
    for ask in asks:
        if ask is None:
            chosen.append(())
            continue
        if ask.gpu_count > len(current):
            return (), NODE_INSUFFICIENT_DEVICE
        picked = engine.choose_gpus(current, shape, ask, gpu_policy)
        if picked is None:
            return (), _card_reasons(ask, current, shape)
        engine.allocate(current, shape, ask, picked)
        chosen.append(picked)
    return tuple(chosen), None


def _card_reasons(ask: GPUAsk, usage: Sequence[GPUUsage], shape: CellShape) -> str:
    """GenReason over the GPUs: each card's first failing check, plus the cards that fit."""
    verdicts = [gpu_fit(ask, used, shape) for used in usage]
    reasons = Counter(v for v in verdicts if v is not None)
    fitting = sum(1 for v in verdicts if v is None)
    if fitting:
        reasons[ALLOCATED_CARDS_INSUFFICIENT] = fitting
    return gen_reason(reasons, len(usage))


def _constraint_reason(constraints: PlacementConstraints, node: NodeState) -> str | None:
    result = constraints_fit(constraints, NodeTemplate(node.labels, node.taints))
    if result.ok:
        return None
    if result.reason == "TaintNotTolerated":
        taint = next(t for t in node.taints if t.key in result.message)
        return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    return SELECTOR_MISMATCH


def place(
    asks: Sequence[GPUAsk | None],
    constraints: PlacementConstraints,
    nodes: Sequence[NodeState],
    policy: str = BINPACK,
    gpu_policy: str = SPREAD,
) -> Placement | list[str]:
    """HAMi's choice for one pod, or every node's reason (kube-scheduler's, else HAMi's).

    ``binpack`` takes the highest node score before the pod, ``spread`` the lowest; ties go to
    the node whose name sorts first naturally (the simulator's lowest cell index).
    """
    best: tuple[float, tuple[object, ...], Placement] | None = None
    reasons: list[str] = []
    sign = -1.0 if policy == BINPACK else 1.0
    for node in nodes:
        reason = node.blocked or _constraint_reason(constraints, node)
        if reason is None:
            gpus, reason = fit_on(asks, node.usage, node.shape, gpu_policy)
        if reason is not None:
            reasons.append(reason)
            continue
        key = (sign * engine.node_score(node.usage, node.shape), natural_key(node.name))
        if best is None or key < best[:2]:
            best = (key[0], key[1], Placement(node.name, gpus))
    return best[2] if best is not None else reasons


def fits_some_empty_node(asks: Sequence[GPUAsk | None], nodes: Sequence[NodeState]) -> bool:
    """Whether any registered node, with nothing allocated, could take the pod's asks.

    True when no node is registered at all: there is nothing to judge the pod by.
    """
    registered = [node for node in nodes if node.registered]
    for node in registered:
        empty = [GPUUsage() for _ in node.devices]
        if fit_on(asks, empty, node.shape)[1] is None:
            return True
    return not registered
