"""The GPUCellPool object itself: identity constants, metadata, spec and status together.

Why this module exists: everything that reads a pool off the API (watch handlers, the webhook,
the simulator's fixtures) starts from a raw dict; ``GPUCellPool.model_validate(obj)`` turns it
into typed, defaulted values in one call, with no I/O. The group, version, kind and names the
CRD is published under live here so that the CRD generator and the clients agree.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from gpucellpool.api.base import KubeModel, Timestamp
from gpucellpool.api.spec import GPUCellPoolSpec
from gpucellpool.api.status import GPUCellPoolStatus

GROUP = "cells.kubeswift.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "GPUCellPool"
PLURAL = "gpucellpools"
SINGULAR = "gpucellpool"
SHORT_NAMES = ("cellpool",)
POOL_LABEL = "cells.kubeswift.io/pool"
MAX_POOL_NAME = 57  # <pool>-<5-digit index> must stay a 63-character DNS label


class ObjectMeta(KubeModel):
    """The parts of metav1.ObjectMeta the operator reads; the rest is kept as extra."""

    model_config = ConfigDict(extra="allow")

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    creation_timestamp: Timestamp | None = None
    deletion_timestamp: Timestamp | None = None


class GPUCellPool(KubeModel):
    """A pool of VM-isolated GPU worker nodes ("cells") that can size itself."""

    api_version: Literal["cells.kubeswift.io/v1alpha1"] = "cells.kubeswift.io/v1alpha1"
    kind: Literal["GPUCellPool"] = "GPUCellPool"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: GPUCellPoolSpec
    status: GPUCellPoolStatus = Field(default_factory=GPUCellPoolStatus)

    def selector(self) -> str:
        """The label selector of this pool's cells (published as status.selector)."""
        return f"{POOL_LABEL}={self.metadata.name}"

    def desired_floor(self) -> int:
        """Effective minimum replicas (spec.replicas when autoscaling is off)."""
        return self.spec.autoscaling.effective_min(self.spec.replicas)

    def desired_ceiling(self) -> int:
        """Effective maximum replicas (spec.replicas when autoscaling is off)."""
        return self.spec.autoscaling.effective_max(self.spec.replicas)
