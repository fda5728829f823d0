"""What may change on a live pool, and what a scale request may ask for.

Why this module exists: some fields decide what a pool's existing cells *are*: the provisioner
(SwiftGuest or CAPI Machine), the GPU backend (DRA claim or Native profile) and the workload
cluster the Nodes live in. Switching them under running cells would orphan outer objects or
Nodes in another cluster; the original operator allowed it, we refuse it while the pool has
cells and say how to get there safely (scale to zero first, or make a new pool). The scale
subresource (``kubectl scale``, HPA-style tools) bypassed the original webhook entirely; here
it gets the bounds the autoscaler lives by.
"""

from __future__ import annotations

from typing import Any

from gpucellpool.api.autoscaling import INT32_MAX
from webhook.rules.paths import get
from webhook.rules.state import has_cells, int_at, value_or
from webhook.rules.verdict import Findings

MAX_REPLICAS = INT32_MAX  # the API bounds counts by int32 only, as the original

IMMUTABLE_WHILE_LIVE: tuple[tuple[str, tuple[str, ...], Any], ...] = (
    ("spec.cell.provisioner", ("spec", "cell", "provisioner"), "SwiftGuest"),
    ("spec.cell.gpu.backend", ("spec", "cell", "gpu", "backend"), "DRA"),
    (
        "spec.workloadCluster.kubeconfigSecretRef.name",
        ("spec", "workloadCluster", "kubeconfigSecretRef", "name"),
        None,
    ),
    ("spec.workloadCluster.key", ("spec", "workloadCluster", "key"), "value"),
    ("spec.cell.clusterAPI.clusterName", ("spec", "cell", "clusterAPI", "clusterName"), None),
)

_HOW = (
    "scale the pool to 0 (spec.replicas: 0, autoscaling disabled), wait for status.replicas "
    "to reach 0, then change it; or create a new pool"
)


def check_immutable(old: Any, new: Any, found: Findings) -> None:
    """Provisioner, GPU backend and workload cluster cannot change while the pool has cells."""
    if not has_cells(old):
        return
    for path, keys, default in IMMUTABLE_WHILE_LIVE:
        before, after = value_or(old, default, *keys), value_or(new, default, *keys)
        if before != after:
            found.error(
                path,
                f"cannot change from {_show(before)} to {_show(after)} while the "
                f"pool has cells; {_HOW}",
            )
    if path_hint := _workload_secret_hint(old, new):
        found.warn(*path_hint)


def _workload_secret_hint(old: Any, new: Any) -> tuple[str, str] | None:
    keys = ("spec", "workloadCluster", "kubeconfigSecretRef", "name")
    if has_cells(old) and get(old, *keys) != get(new, *keys):
        return (
            "spec.workloadCluster.kubeconfigSecretRef",
            "to rotate credentials, update the data of the existing Secret in place",
        )
    return None


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**18:
        return str(value)
    return repr(value) if isinstance(value, str) and len(value) <= 64 else "<value>"


def check_scale_request(pool: Any, scale: Any, found: Findings) -> None:
    """Bounds of a Scale's spec.replicas against the stored pool's autoscaling and GPU claim."""
    replicas = int_at(scale, "spec", "replicas")
    if replicas is None:
        found.error(
            "spec.replicas", f"must be an integer from 0 to {MAX_REPLICAS}; set the number of cells"
        )
        return
    if not 0 <= replicas <= MAX_REPLICAS:
        found.error("spec.replicas", f"must be between 0 and {MAX_REPLICAS}; change it")
        return
    enabled = get(pool, "spec", "autoscaling", "enabled") is True
    ceiling = int_at(pool, "spec", "autoscaling", "maxReplicas")
    floor = int_at(pool, "spec", "autoscaling", "minReplicas")
    if enabled and ceiling is not None and replicas > ceiling:
        found.error(
            "spec.replicas",
            f"({replicas}) is above spec.autoscaling.maxReplicas "
            f"({ceiling}); raise maxReplicas on the pool or ask for at most {ceiling}",
        )
    if enabled and floor is not None and replicas < floor:
        found.error(
            "spec.replicas",
            f"({replicas}) is below spec.autoscaling.minReplicas "
            f"({floor}), which sets the floor; lower minReplicas on the pool instead",
        )
    if enabled and not found.errors:
        found.warn(
            "spec.replicas",
            "is the autoscaling floor while minReplicas is unset"
            if floor is None
            else "has no effect while autoscaling is enabled with "
            "minReplicas set; the autoscaler sizes the pool between min and max",
        )
    claim = get(pool, "spec", "cell", "gpu", "dra", "resourceClaimName")
    if isinstance(claim, str) and claim and replicas > 1:
        found.error(
            "spec.replicas",
            "must stay <= 1: the pool shares one pre-created "
            "ResourceClaim (spec.cell.gpu.dra.resourceClaimName); switch the pool to "
            "resourceClaimTemplateName to scale out",
        )
