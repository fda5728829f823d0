"""Pure builders of a cell's outer objects: SwiftGuest, or CAPI Machine + KubeSwiftMachine.

Why this module exists: the objects the operator creates are a contract with KubeSwift and
Cluster API (field names per kubeswift-facts.md and reference §4). Building them as plain dicts
in one pure place lets the shell apply them idempotently (server-side apply) and lets tests pin
every field. The user's ``guestTemplate`` is copied verbatim; the operator overlay owns:

* ``seedProfileRef`` (the seed the operator rendered), ``runPolicy: Always``,
  ``migration.enabled: false`` (a VFIO guest cannot migrate);
* the GPU: DRA ``gpuResourceClaim`` (template or shared claim, ``requestName``, ``tier``,
  ``hugepages``) or Native ``gpuProfileRef``;
* with ``spreadPolicy: Spread`` and no user constraint, one soft hostname topology spread;
* identity labels (incl. the namespace-unique pool id), the template-hash annotation, the
  ``cells.kubeswift.io/cell-drain`` finalizer and the owner reference to the pool (controller
  on SwiftGuest; plain on CAPI objects, because the Machine controller needs that slot).

User metadata is never copied onto a SwiftGuest (some KubeSwift annotations switch the
launcher into restore mode).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpucellpool.api.pool import API_VERSION, KIND, GPUCellPool
from gpucellpool.api.spec import GPUBackend, SpreadPolicy, TypedLocalReference
from provisioner.fsm.identity import (
    CAPI_CLUSTER_NAME_LABEL,
    CELL_DRAIN_FINALIZER,
    TEMPLATE_HASH_ANNOTATION,
    PoolIdentity,
    bootstrap_secret_name,
    cell_name,
    seed_profile_name,
)

SWIFT_GUEST_API_VERSION = "swift.kubeswift.io/v1alpha1"
CAPI_API_VERSION = "cluster.x-k8s.io/v1beta2"
KSM_API_GROUP = "infrastructure.cluster.x-k8s.io"
KSM_API_VERSION = f"{KSM_API_GROUP}/v1alpha1"
KSM_KIND = "KubeSwiftMachine"
HOSTNAME_TOPOLOGY_KEY = "kubernetes.io/hostname"


def as_pool(pool: GPUCellPool | Mapping[str, Any]) -> GPUCellPool:
    """Accept the API model or the raw object dict (validated and defaulted here)."""
    return pool if isinstance(pool, GPUCellPool) else GPUCellPool.model_validate(pool)


def pool_identity(pool: GPUCellPool) -> PoolIdentity:
    return PoolIdentity(namespace=pool.metadata.namespace, name=pool.metadata.name)


def owner_reference(pool: GPUCellPool, controller: bool) -> dict[str, Any]:
    """Controller ref (with blockOwnerDeletion) or a plain co-owner ref to the pool."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": pool.metadata.name,
        "uid": pool.metadata.uid,
        "controller": controller,
        "blockOwnerDeletion": controller,
    }


def _metadata(
    pool: GPUCellPool,
    index: int,
    template_hash: str,
    controller: bool,
    extra_labels: dict[str, str],
) -> dict[str, Any]:
    ident = pool_identity(pool)
    return {
        "name": cell_name(ident.name, index),
        "namespace": ident.namespace,
        "labels": {**ident.cell_labels(index), **extra_labels},
        "annotations": {TEMPLATE_HASH_ANNOTATION: template_hash},
        "ownerReferences": [owner_reference(pool, controller)],
    }


def gpu_overlay(pool: GPUCellPool) -> dict[str, Any]:
    """``gpuResourceClaim`` (DRA) or ``gpuProfileRef`` (Native) for the SwiftGuest spec."""
    gpu = pool.spec.cell.gpu
    if gpu.backend is GPUBackend.NATIVE:
        if gpu.native is None:
            raise ValueError("cell.gpu.native is required for backend Native")
        return {"gpuProfileRef": {"name": gpu.native.gpu_profile_ref.name}}
    if gpu.dra is None:
        raise ValueError("cell.gpu.dra is required for backend DRA")
    claim: dict[str, Any] = {"requestName": gpu.dra.request_name, "tier": gpu.dra.tier}
    if gpu.dra.resource_claim_template_name:
        claim["resourceClaimTemplateName"] = gpu.dra.resource_claim_template_name
    else:
        claim["resourceClaimName"] = gpu.dra.resource_claim_name
    if gpu.dra.hugepages:
        claim["hugepages"] = gpu.dra.hugepages
    return {"gpuResourceClaim": claim}


def spread_constraint(ident: PoolIdentity) -> dict[str, Any]:
    """One soft spread of this pool's guests over hosts (namespace-unique selector)."""
    return {
        "maxSkew": 1,
        "topologyKey": HOSTNAME_TOPOLOGY_KEY,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": ident.pool_labels()},
    }


def swift_guest(
    pool_in: GPUCellPool | Mapping[str, Any], index: int, template_hash: str
) -> dict[str, Any]:
    """The SwiftGuest ``<pool>-<index>``: guestTemplate verbatim plus the operator overlay."""
    pool = as_pool(pool_in)
    ident = pool_identity(pool)
    name = cell_name(ident.name, index)
    spec: dict[str, Any] = copy.deepcopy(dict(pool.spec.cell.guest_template))
    spec.pop("gpuResourceClaim", None)
    spec.pop("gpuProfileRef", None)
    spec.update(gpu_overlay(pool))
    spec["seedProfileRef"] = {"name": seed_profile_name(name)}
    spec["runPolicy"] = "Always"
    spec["migration"] = {**dict(spec.get("migration") or {}), "enabled": False}
    if pool.spec.cell.spread_policy is SpreadPolicy.SPREAD and not spec.get(
        "topologySpreadConstraints"
    ):
        spec["topologySpreadConstraints"] = [spread_constraint(ident)]
    metadata = _metadata(pool, index, template_hash, controller=True, extra_labels={})
    metadata["finalizers"] = [CELL_DRAIN_FINALIZER]
    return {
        "apiVersion": SWIFT_GUEST_API_VERSION,
        "kind": "SwiftGuest",
        "metadata": metadata,
        "spec": spec,
    }


def _interfaces(template: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = template.get("interfaces") or []
    return [i for i in raw if isinstance(i, Mapping)]


def _ref_name(value: Any) -> str | None:
    if isinstance(value, Mapping):
        name = value.get("name")
        return str(name) if name else None
    return str(value) if value else None


def kubeswift_machine_backend(pool: GPUCellPool) -> dict[str, Any]:
    """``spec.backend`` of a KubeSwiftMachine: image, class, networks and the GPU block."""
    template = pool.spec.cell.guest_template
    guest: dict[str, Any] = {
        "imageRef": _ref_name(template.get("imageRef")),
        "guestClassRef": _ref_name(template.get("guestClassRef")),
    }
    interfaces = _interfaces(template)
    primary = next((i for i in interfaces if i.get("primary") and i.get("networkRef")), None)
    secondary = next((i for i in interfaces if not i.get("primary") and i.get("networkRef")), None)
    if primary is not None:
        guest["networkRef"] = _ref_name(primary.get("networkRef"))
    if secondary is not None:
        guest["nodeNetworkRef"] = _ref_name(secondary.get("networkRef"))
    overlay = gpu_overlay(pool)
    if "gpuProfileRef" in overlay:
        guest["gpu"] = {"gpuProfileRef": overlay["gpuProfileRef"]["name"]}
    else:
        guest["gpu"] = overlay["gpuResourceClaim"]
    return {"type": "SwiftGuest", "swiftGuest": {k: v for k, v in guest.items() if v is not None}}


def _capi_cluster(pool: GPUCellPool) -> tuple[str, str | None, TypedLocalReference | None]:
    capi = pool.spec.cell.cluster_api
    if capi is None:
        raise ValueError("cell.clusterAPI is required for provisioner ClusterAPI")
    return capi.cluster_name, capi.version, capi.bootstrap_config_template_ref


def _bootstrap_config(
    pool: GPUCellPool,
    index: int,
    template_hash: str,
    cluster_label: dict[str, str],
    template_ref: TypedLocalReference,
    bootstrap_template: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """``<Kind>`` named after the cell, from the referenced ``<Kind>Template``'s spec."""
    if bootstrap_template is None:
        raise ValueError("bootstrapConfigTemplateRef set but its template was not supplied")
    config_spec = ((bootstrap_template.get("spec") or {}).get("template") or {}).get("spec")
    return {
        "apiVersion": f"{template_ref.api_group}/v1beta2",
        "kind": template_ref.kind.removesuffix("Template"),
        "metadata": _metadata(pool, index, template_hash, False, cluster_label),
        "spec": copy.deepcopy(dict(config_spec or {})),
    }


def capi_objects(
    pool_in: GPUCellPool | Mapping[str, Any],
    index: int,
    template_hash: str,
    bootstrap_template: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Per cell, in creation order: [bootstrap config,] KubeSwiftMachine, Machine.

    ``bootstrap_template``: the referenced ``<Kind>Template`` object as read by the shell
    (required when ``bootstrapConfigTemplateRef`` is set); its ``spec.template.spec`` is copied
    into a ``<Kind>`` named after the cell.
    """
    pool = as_pool(pool_in)
    cluster, version, template_ref = _capi_cluster(pool)
    name = cell_name(pool.metadata.name, index)
    cluster_label = {CAPI_CLUSTER_NAME_LABEL: cluster}
    objects: list[dict[str, Any]] = []
    bootstrap: dict[str, Any] = {"dataSecretName": bootstrap_secret_name(name)}
    if template_ref is not None:
        config = _bootstrap_config(
            pool, index, template_hash, cluster_label, template_ref, bootstrap_template
        )
        objects.append(config)
        ref = {"apiGroup": template_ref.api_group, "kind": config["kind"], "name": name}
        bootstrap = {"configRef": ref}
    objects.append(
        {
            "apiVersion": KSM_API_VERSION,
            "kind": KSM_KIND,
            "metadata": _metadata(pool, index, template_hash, False, cluster_label),
            "spec": {"backend": kubeswift_machine_backend(pool)},
        }
    )
    machine_meta = _metadata(pool, index, template_hash, False, cluster_label)
    machine_meta["finalizers"] = [CELL_DRAIN_FINALIZER]
    machine_spec: dict[str, Any] = {
        "clusterName": cluster,
        "bootstrap": bootstrap,
        "infrastructureRef": {"apiGroup": KSM_API_GROUP, "kind": KSM_KIND, "name": name},
    }
    if version:
        machine_spec["version"] = version
    objects.append(
        {
            "apiVersion": CAPI_API_VERSION,
            "kind": "Machine",
            "metadata": machine_meta,
            "spec": machine_spec,
        }
    )
    return objects
