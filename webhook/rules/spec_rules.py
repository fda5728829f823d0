"""Cross-field rules on a parsed spec: provisioner, GPU backend, bootstrap, capacity, nodeIP.

Why this module exists: the original operator's webhook (reference §5 rules 2-4 and 6-9) made
sure a pool's parts agree with each other before any cell is built: a ClusterAPI pool has
clusterAPI settings, the GPU backend has its matching block, a shared DRA claim is only used by
one cell, the join credential is given exactly when the operator (not CAPI) bootstraps, and so
on. The CRD repeats some of these as CEL; the webhook keeps them all so that its messages (and
the pure tests) are the single complete statement of the contract.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpucellpool.api.spec import GPUBackend, GPUCellPoolSpec, Provisioner
from webhook.rules.verdict import Findings

CELL = "spec.cell"
GPU = "spec.cell.gpu"


def check_spec(spec: GPUCellPoolSpec, found: Findings) -> None:
    """All cross-field rules except autoscaling (``autoscaling_rules``) and the guestTemplate."""
    _provisioner(spec, found)
    _gpu(spec, found)
    _shared_claim(spec, found)
    _node_ip_from(spec, found)
    _bootstrap(spec, found)
    _capacity(spec, found)


def _provisioner(spec: GPUCellPoolSpec, found: Findings) -> None:
    cell = spec.cell
    if cell.provisioner is Provisioner.CLUSTER_API and cell.cluster_api is None:
        found.error(
            f"{CELL}.clusterAPI",
            "is required with provisioner ClusterAPI; set "
            "clusterAPI.clusterName (and bootstrapConfigTemplateRef if CAPI bootstraps)",
        )
    if cell.provisioner is not Provisioner.CLUSTER_API and cell.cluster_api is not None:
        found.error(
            f"{CELL}.clusterAPI",
            "is only allowed with provisioner ClusterAPI; remove "
            "it or set spec.cell.provisioner: ClusterAPI",
        )
    ref = cell.cluster_api.bootstrap_config_template_ref if cell.cluster_api else None
    if ref is not None and not ref.kind.endswith("Template"):
        found.error(
            f"{CELL}.clusterAPI.bootstrapConfigTemplateRef.kind",
            f"must name a template kind ending in Template, e.g. {ref.kind}Template; fix it",
        )


def _gpu(spec: GPUCellPoolSpec, found: Findings) -> None:
    gpu = spec.cell.gpu
    if gpu.backend is GPUBackend.DRA:
        if gpu.dra is None:
            found.error(
                f"{GPU}.dra", "is required with backend DRA; set dra.resourceClaimTemplateName"
            )
        if gpu.native is not None:
            found.error(
                f"{GPU}.native",
                "is only allowed with backend Native; remove it or set "
                "spec.cell.gpu.backend: Native",
            )
    else:
        if gpu.native is None:
            found.error(
                f"{GPU}.native.gpuProfileRef.name",
                "is required with backend Native; name the SwiftGPUProfile",
            )
        if gpu.dra is not None:
            found.error(
                f"{GPU}.dra",
                "is only allowed with backend DRA; remove it or set spec.cell.gpu.backend: DRA",
            )
    if gpu.dra is not None and gpu.backend is GPUBackend.DRA:
        template = bool(gpu.dra.resource_claim_template_name)
        claim = bool(gpu.dra.resource_claim_name)
        if template == claim:
            found.error(
                f"{GPU}.dra",
                "needs exactly one of resourceClaimTemplateName (one claim "
                "per cell, recommended) and resourceClaimName (one shared claim); "
                "set exactly one",
            )


def _shared_claim(spec: GPUCellPoolSpec, found: Findings) -> None:
    dra = spec.cell.gpu.dra
    if dra is None or not dra.resource_claim_name:
        return
    auto = spec.autoscaling
    too_many_auto = auto.enabled and (auto.max_replicas is None or auto.max_replicas > 1)
    if spec.replicas > 1 or too_many_auto:
        found.error(
            f"{GPU}.dra.resourceClaimName",
            "a shared claim holds one VFIO GPU, so only "
            "one cell can use it: keep spec.replicas <= 1 and (with autoscaling) "
            "maxReplicas <= 1, or use resourceClaimTemplateName",
        )


def _node_ip_from(spec: GPUCellPoolSpec, found: Findings) -> None:
    wanted = spec.cell.node_ip_from
    if not wanted:
        return
    raw = spec.cell.guest_template.get("interfaces")
    if raw is not None and not isinstance(raw, list):
        return  # the guestTemplate rules already refuse it
    names = [i.get("name") for i in raw or [] if isinstance(i, Mapping)]
    if not names:
        found.error(
            f"{CELL}.nodeIPFrom",
            f"names interface {wanted!r} but "
            "spec.cell.guestTemplate.interfaces is empty; add the interface or clear "
            "nodeIPFrom",
        )
    elif wanted not in names:
        listed = ", ".join(repr(n) for n in names if isinstance(n, str))
        found.error(
            f"{CELL}.nodeIPFrom",
            f"names interface {wanted!r}, which is not in "
            f"spec.cell.guestTemplate.interfaces ({listed}); use one of those names",
        )


def _bootstrap(spec: GPUCellPoolSpec, found: Findings) -> None:
    capi = spec.cell.cluster_api
    capi_bootstraps = (
        spec.cell.provisioner is Provisioner.CLUSTER_API
        and capi is not None
        and capi.bootstrap_config_template_ref is not None
    )
    join_ref = spec.bootstrap.join_secret_ref if spec.bootstrap else None
    if capi_bootstraps and join_ref is not None:
        found.error(
            "spec.bootstrap.joinSecretRef",
            "is not allowed when "
            "spec.cell.clusterAPI.bootstrapConfigTemplateRef is set (CAPI owns "
            "bootstrap); remove it",
        )
    if not capi_bootstraps and join_ref is None:
        found.error(
            "spec.bootstrap.joinSecretRef.name",
            "is required for bootstrap provider "
            "Opaque; name the Secret holding the cloud-init join template",
        )


def _capacity(spec: GPUCellPoolSpec, found: Findings) -> None:
    hami = spec.capacity.hami
    if hami is None:
        return
    if hami.mode == "DRA" and not hami.device_class_name:
        found.error(
            "spec.capacity.hami.deviceClassName",
            "is required with HAMi mode DRA; set it, e.g. hami-core-gpu.project-hami.io",
        )
    expected = hami.expected_devices_per_cell
    if expected is not None and expected > spec.cell.gpu.count:
        found.warn(
            "spec.capacity.hami.expectedDevicesPerCell",
            f"is {expected} but each cell "
            f"has {spec.cell.gpu.count} GPU; cells may never become Ready; check it",
        )
