"""Outer-node drain: which cells leave because the infrastructure Node hosting them is drained.

Why this module exists: a cell is a VM pinned to one infrastructure Node (KubeSwift guests run
with ``migration.enabled: false``; a GPU guest cannot live-migrate and its PodDisruptionBudget
``maxUnavailable: 0`` blocks ``kubectl drain``). When an administrator cordons or drains that
Node, nothing else will move the cell: the operator has to drain the cell's workload Node
(cordon, wait or evict per ``drain.mode``), delete the guest - which lets the administrator's
drain finish - and create a replacement that the placement puts elsewhere. This module decides,
from one observation, which cells are affected, which of them start draining now (never more
cells draining at once than the pool's disruption budget), and what the ``CellDrainRequested``
condition says. The shell reads the infrastructure Nodes and performs the marks.

A host counts as drained when ``spec.unschedulable`` is set (``kubectl cordon`` / ``drain``) or
when it carries the taint the cordon produces (``node.kubernetes.io/unschedulable``) or
Karpenter's disruption taint (``karpenter.sh/disrupted``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DRAIN_TAINTS = frozenset({"node.kubernetes.io/unschedulable", "karpenter.sh/disrupted"})

REASON_REQUESTED = "InfrastructureNodeDrained"
REASON_NONE = "NoDrainRequested"
REASON_UNKNOWN = "InfrastructureNodesUnreadable"


@dataclass(frozen=True, slots=True)
class HostNode:
    """What matters of one infrastructure Node: cordoned, and its taint keys."""

    name: str
    unschedulable: bool = False
    taint_keys: frozenset[str] = frozenset()

    @property
    def draining(self) -> bool:
        return self.unschedulable or bool(self.taint_keys & DRAIN_TAINTS)

    @property
    def why(self) -> str:
        if self.unschedulable:
            return "cordoned"
        return "tainted " + ",".join(sorted(self.taint_keys & DRAIN_TAINTS))


@dataclass(frozen=True, slots=True)
class OuterCell:
    """A cell as this decision sees it. ``host``: its infrastructure Node (None: not placed
    yet). ``draining``: already leaving (any drain cause), so it uses the disruption budget;
    ``outer_drain``: it is leaving because of its host."""

    name: str
    index: int
    host: str | None
    draining: bool = False
    outer_drain: bool = False


@dataclass(frozen=True, slots=True)
class OuterDrainPlan:
    """``drain``: cells to mark now; ``held``: affected cells waiting for the budget;
    ``condition``: (status, reason, message) of ``CellDrainRequested``."""

    drain: tuple[str, ...]
    held: tuple[str, ...]
    condition: tuple[str, str, str]


def _condition(
    hosts: Mapping[str, HostNode],
    affected: list[OuterCell],
    held: list[str],
    budget: int,
    reachable: bool,
) -> tuple[str, str, str]:
    if not affected:
        return ("False", REASON_NONE, "no cell's infrastructure Node is cordoned or drained")
    by_host: dict[str, list[str]] = {}
    for cell in affected:
        by_host.setdefault(str(cell.host), []).append(cell.name)
    parts = [
        f"{host} ({hosts[host].why}): {', '.join(names)}" for host, names in sorted(by_host.items())
    ]
    message = "cells on drained infrastructure Nodes: " + "; ".join(parts)
    if held:
        message += f"; held by the disruption budget ({budget} at once): {', '.join(held)}"
    if not reachable:
        message += "; no new drain starts while the workload cluster is unreachable"
    return ("True", REASON_REQUESTED, message)


def plan_outer_drain(
    cells: tuple[OuterCell, ...],
    hosts: Mapping[str, HostNode] | None,
    budget: int,
    workload_reachable: bool = True,
) -> OuterDrainPlan:
    """Cells on a drained host start draining, lowest index first, while fewer than
    ``budget`` cells of the pool are draining. ``hosts`` None: the infrastructure Nodes could
    not be read - nothing starts and the condition is Unknown. A host missing from ``hosts``
    (deleted) is not a drain request: the cell's own state machine sees its VM go."""
    if hosts is None:
        message = "the infrastructure Nodes hosting the cells could not be read"
        return OuterDrainPlan((), (), ("Unknown", REASON_UNKNOWN, message))
    affected = [
        c
        for c in sorted(cells, key=lambda c: c.index)
        if c.host is not None and c.host in hosts and hosts[c.host].draining
    ]
    waiting = [c for c in affected if not c.draining]
    busy = sum(1 for c in cells if c.draining)
    room = max(budget - busy, 0) if workload_reachable else 0
    drain = tuple(c.name for c in waiting[:room])
    held = [c.name for c in waiting[room:]]
    condition = _condition(hosts, affected, held, budget, workload_reachable)
    return OuterDrainPlan(drain, tuple(held), condition)
