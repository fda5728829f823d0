"""The SwiftGuest backend: a cell is a SwiftGuest, its SwiftSeedProfile and its bootstrap Secret.

Why this module exists: in the direct mode the operator itself creates the VM. Creation order
is Secret -> seed profile -> SwiftGuest, so a guest never exists without what it boots from,
and a crash part-way leaves only dependents, which ``sweep`` removes once no guest of that name
exists. Deletion is the reverse: the guest goes first (its ``cell-drain`` finalizer released by
the drain), then - once KubeSwift has let go of it - the seed profile and the Secret.
"""

from __future__ import annotations

from typing import Any

from gpucellpool.api.pool import GPUCellPool
from provisioner.backends.base import CellObjects, index_objects, pool_selector, remove_finalizer
from provisioner.fsm.bootstrap import seed_profile
from provisioner.fsm.cell_state import OuterStatus
from provisioner.fsm.identity import CELL_DRAIN_FINALIZER
from provisioner.fsm.manifests import owner_reference, pool_identity, swift_guest
from provisioner.fsm.observations import observe_swift_guest
from provisioner.kube import JSON, KINDS, KubeApi

SEED_SUFFIX = "-seed"
BOOTSTRAP_SUFFIX = "-bootstrap"


class SwiftGuestBackend:
    outer_kind = KINDS["SwiftGuest"]

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    async def list_cells(self, pool: GPUCellPool) -> dict[str, CellObjects]:
        guests = await self.api.list(
            self.outer_kind, pool.metadata.namespace, label_selector=pool_selector(pool)
        )
        return {
            name: CellObjects(name, index, obj)
            for name, (index, obj) in index_objects(pool, guests).items()
        }

    def observe(self, cell: CellObjects, node_ip_from: str) -> OuterStatus:
        return observe_swift_guest(cell.outer, node_ip_from)

    def placement(self, cell: CellObjects) -> tuple[str | None, list[str] | None]:
        return guest_placement(cell.outer)

    async def create(
        self, pool: GPUCellPool, index: int, template_hash: str, bootstrap: JSON | None
    ) -> None:
        if bootstrap is not None:
            await self.api.apply(bootstrap)
        hostname = pool.spec.bootstrap is None or pool.spec.bootstrap.hostname == "CellName"
        owners = [owner_reference(pool, controller=True)]
        await self.api.apply(seed_profile(pool_identity(pool), index, hostname, owners))
        await self.api.apply(swift_guest(pool, index, template_hash))

    async def release_finalizer(self, cell: CellObjects) -> None:
        updated = await remove_finalizer(
            self.api, self.outer_kind, cell.outer, CELL_DRAIN_FINALIZER
        )
        if updated is not None:
            cell.outer = updated

    async def delete_outer(self, cell: CellObjects) -> None:
        await self.api.delete(self.outer_kind, cell.outer["metadata"]["namespace"], cell.name)

    async def sweep(self, pool: GPUCellPool, live: set[str]) -> list[str]:
        ns, selector = pool.metadata.namespace, pool_selector(pool)
        deleted: list[str] = []
        for kind_name, suffix in (("SwiftSeedProfile", SEED_SUFFIX), ("Secret", BOOTSTRAP_SUFFIX)):
            kind = KINDS[kind_name]
            for obj in await self.api.list(kind, ns, label_selector=selector):
                name = str(obj["metadata"]["name"])
                cell = name.removesuffix(suffix)
                if (
                    cell != name
                    and cell not in live
                    and obj["metadata"].get("deletionTimestamp") is None
                ):
                    await self.api.delete(kind, ns, name)
                    deleted.append(f"{kind_name}/{name}")
        return deleted


def guest_placement(guest: JSON | None) -> tuple[str | None, list[str] | None]:
    status: dict[str, Any] = (guest or {}).get("status") or {}
    gpu = status.get("gpu") or {}
    devices = [str(d) for d in gpu.get("devices") or []]
    return status.get("nodeName") or gpu.get("nodeName"), devices or None
