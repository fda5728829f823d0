"""The backend port, the per-cell object bundle and the helpers both backends share.

Why this module exists: the reconciler must not know which kinds make up a cell. It needs the
same handful of verbs on either provisioner - list the cells, create one, read its progress,
mark it for draining, release its finalizer, delete it, sweep what a crash left behind - so
they are declared once here as a ``typing.Protocol``.

The drain mark lives on the outer object itself (annotations ``cells.kubeswift.io/drain`` =
cause and ``.../drain-started`` = RFC 3339), not only in status: an operator that crashes after
marking and before writing status still finds every draining cell on restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from gpucellpool.api.pool import GPUCellPool
from provisioner.fsm.cell_state import OuterStatus
from provisioner.fsm.drain_backoff import (
    DRAIN_ABANDON_COUNT_ANNOTATION,
    DRAIN_ABANDONED_ANNOTATION,
    AbandonRecord,
    parse_record,
    record_abandon,
)
from provisioner.fsm.identity import POOL_ID_LABEL, PoolIdentity, parse_cell_index
from provisioner.kube import JSON, Kind, KubeApi

DRAIN_ANNOTATION = "cells.kubeswift.io/drain"
DRAIN_STARTED_ANNOTATION = "cells.kubeswift.io/drain-started"


@dataclass(slots=True)
class CellObjects:
    """One cell's live objects: ``outer`` is the SwiftGuest or the Machine."""

    name: str
    index: int
    outer: JSON
    parts: dict[str, JSON | None] = field(default_factory=dict)

    @property
    def uid(self) -> str:
        return str(self.outer["metadata"].get("uid", ""))

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.outer["metadata"].get("annotations") or {}

    @property
    def drain_cause(self) -> str:
        return self.annotations.get(DRAIN_ANNOTATION, "")

    @property
    def abandon_record(self) -> AbandonRecord:
        """Abandoned drains of this incarnation (``fsm.drain_backoff``)."""
        return parse_record(self.annotations)

    @property
    def finalizers(self) -> list[str]:
        return list(self.outer["metadata"].get("finalizers") or [])

    @property
    def deleting(self) -> bool:
        return self.outer["metadata"].get("deletionTimestamp") is not None


class CellBackend(Protocol):
    outer_kind: Kind
    api: KubeApi

    async def list_cells(self, pool: GPUCellPool) -> dict[str, CellObjects]: ...

    def observe(self, cell: CellObjects, node_ip_from: str) -> OuterStatus: ...

    def placement(self, cell: CellObjects) -> tuple[str | None, list[str] | None]:
        """(host node, PCI devices) for the status row."""
        ...

    async def create(
        self, pool: GPUCellPool, index: int, template_hash: str, bootstrap: JSON | None
    ) -> None: ...

    async def release_finalizer(self, cell: CellObjects) -> None: ...

    async def delete_outer(self, cell: CellObjects) -> None: ...

    async def sweep(self, pool: GPUCellPool, live: set[str]) -> list[str]:
        """Delete dependents of cells whose outer object is gone; names of objects deleted."""
        ...


def pool_selector(pool: GPUCellPool) -> str:
    ident = PoolIdentity(pool.metadata.namespace, pool.metadata.name)
    return f"{POOL_ID_LABEL}={ident.pool_id}"


def index_objects(pool: GPUCellPool, objects: list[JSON]) -> dict[str, tuple[int, JSON]]:
    """Objects named exactly ``<pool>-<index>`` by name; anything else is ignored."""
    found: dict[str, tuple[int, JSON]] = {}
    for obj in objects:
        name = str(obj["metadata"]["name"])
        index = parse_cell_index(pool.metadata.name, name)
        if index is not None:
            found[name] = (index, obj)
    return found


def rfc3339(seconds: float) -> str:
    """Whole-second RFC 3339, as Kubernetes writes metav1.Time."""
    return datetime.fromtimestamp(int(seconds), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(seconds: float) -> str:
    """RFC 3339 with microseconds, for our own timestamps that timeouts are measured from:
    truncating to whole seconds would end a drain up to a second before its drainTimeout."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def mark_draining(
    api: KubeApi, kind: Kind, cell: CellObjects, cause: str, now: float
) -> None:
    """Durable drain mark on the outer object (a no-op when already marked)."""
    if cell.drain_cause:
        return
    patch = {
        "metadata": {
            "annotations": {DRAIN_ANNOTATION: cause, DRAIN_STARTED_ANNOTATION: rfc3339_micro(now)}
        }
    }
    ns = cell.outer["metadata"].get("namespace")
    cell.outer = await api.patch(kind, ns, cell.name, patch)


async def abandon_draining(api: KubeApi, kind: Kind, cell: CellObjects, now: float) -> None:
    """Back in service after an abandoned drain: drop the drain mark and, in the same patch,
    record the abandon (count + time) that the drain back-off reads - one write, so no crash
    leaves the cell in service without the memory of why."""
    record = record_abandon(cell.abandon_record, now)
    patch = {
        "metadata": {
            "annotations": {
                DRAIN_ANNOTATION: None,
                DRAIN_STARTED_ANNOTATION: None,
                DRAIN_ABANDON_COUNT_ANNOTATION: str(record.count),
                DRAIN_ABANDONED_ANNOTATION: rfc3339_micro(now),
            }
        }
    }
    ns = cell.outer["metadata"].get("namespace")
    cell.outer = await api.patch(kind, ns, cell.name, patch)


async def remove_finalizer(api: KubeApi, kind: Kind, obj: JSON, finalizer: str) -> JSON | None:
    """Drop one finalizer with a resourceVersion precondition (never clobbers others')."""
    meta = obj["metadata"]
    finalizers: list[Any] = list(meta.get("finalizers") or [])
    if finalizer not in finalizers:
        return obj
    patch = {
        "metadata": {
            "resourceVersion": meta["resourceVersion"],
            "finalizers": [f for f in finalizers if f != finalizer],
        }
    }
    return await api.patch(kind, meta.get("namespace"), meta["name"], patch)
