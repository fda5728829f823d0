"""The Cluster API backend: a cell is a Machine + KubeSwiftMachine (+ bootstrap config) + Secret.

Why this module exists: clusters managed by Cluster API must get their workers as Machines, so
CAPI owns the node lifecycle and CAPKS (the KubeSwift infrastructure provider) creates the
SwiftGuest. The operator creates one Machine + KubeSwiftMachine per cell with the cell's name
(cell name = guest name = Node name), plain owner references (the Machine controller needs the
controller slot) and the ``cell-drain`` finalizer on the Machine. Progress is read from the
Machine, the KubeSwiftMachine and the guest CAPKS made; deletion removes the Machine, the
KubeSwiftMachine and the bootstrap config together, and ``sweep`` removes what a crash or a
finished deletion left behind.
"""

from __future__ import annotations

from gpucellpool.api.pool import GPUCellPool
from provisioner.backends.base import CellObjects, index_objects, pool_selector, remove_finalizer
from provisioner.backends.swiftguest import BOOTSTRAP_SUFFIX, guest_placement
from provisioner.fsm.cell_state import OuterStatus
from provisioner.fsm.identity import CELL_DRAIN_FINALIZER
from provisioner.fsm.manifests import capi_objects
from provisioner.fsm.observations import observe_machine
from provisioner.kube import JSON, KINDS, KubeApi, kind_of

BOOTSTRAP_CONFIG_VERSION = "v1beta2"


class ClusterAPIBackend:
    outer_kind = KINDS["Machine"]

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    async def list_cells(self, pool: GPUCellPool) -> dict[str, CellObjects]:
        ns = pool.metadata.namespace
        machines = await self.api.list(self.outer_kind, ns, label_selector=pool_selector(pool))
        cells: dict[str, CellObjects] = {}
        for name, (index, machine) in index_objects(pool, machines).items():
            ksm = await self.api.get(KINDS["KubeSwiftMachine"], ns, name)
            guest = await self.api.get(KINDS["SwiftGuest"], ns, name)
            cells[name] = CellObjects(name, index, machine, {"ksm": ksm, "guest": guest})
        return cells

    def observe(self, cell: CellObjects, node_ip_from: str) -> OuterStatus:
        return observe_machine(
            cell.outer, cell.parts.get("ksm"), cell.parts.get("guest"), node_ip_from
        )

    def placement(self, cell: CellObjects) -> tuple[str | None, list[str] | None]:
        return guest_placement(cell.parts.get("guest"))

    async def _bootstrap_template(self, pool: GPUCellPool) -> JSON | None:
        capi = pool.spec.cell.cluster_api
        ref = capi.bootstrap_config_template_ref if capi is not None else None
        if ref is None:
            return None
        kind = kind_of(ref.kind, f"{ref.api_group}/{BOOTSTRAP_CONFIG_VERSION}")
        return await self.api.get(kind, pool.metadata.namespace, ref.name)

    async def create(
        self, pool: GPUCellPool, index: int, template_hash: str, bootstrap: JSON | None
    ) -> None:
        if bootstrap is not None:
            await self.api.apply(bootstrap)
        template = await self._bootstrap_template(pool)
        for obj in capi_objects(pool, index, template_hash, template):
            await self.api.apply(obj)  # config, KubeSwiftMachine, then the Machine last

    async def release_finalizer(self, cell: CellObjects) -> None:
        updated = await remove_finalizer(
            self.api, self.outer_kind, cell.outer, CELL_DRAIN_FINALIZER
        )
        if updated is not None:
            cell.outer = updated

    async def delete_outer(self, cell: CellObjects) -> None:
        ns = cell.outer["metadata"]["namespace"]
        await self.api.delete(self.outer_kind, ns, cell.name)
        await self.api.delete(KINDS["KubeSwiftMachine"], ns, cell.name)
        config = (cell.outer.get("spec") or {}).get("bootstrap", {}).get("configRef")
        if config:
            kind = kind_of(config["kind"], f"{config['apiGroup']}/{BOOTSTRAP_CONFIG_VERSION}")
            await self.api.delete(kind, ns, cell.name)

    async def sweep(self, pool: GPUCellPool, live: set[str]) -> list[str]:
        ns, selector = pool.metadata.namespace, pool_selector(pool)
        kinds = [KINDS["KubeSwiftMachine"], KINDS["Secret"]]
        template = await self._bootstrap_template(pool)
        if template is not None:
            config_kind = str(template["kind"]).removesuffix("Template")
            kinds.append(kind_of(config_kind, str(template["apiVersion"])))
        deleted: list[str] = []
        for kind in kinds:
            for obj in await self.api.list(kind, ns, label_selector=selector):
                name = str(obj["metadata"]["name"])
                cell = name.removesuffix(BOOTSTRAP_SUFFIX) if kind.kind == "Secret" else name
                if cell not in live and obj["metadata"].get("deletionTimestamp") is None:
                    await self.api.delete(kind, ns, name)
                    deleted.append(f"{kind.kind}/{name}")
        return deleted
