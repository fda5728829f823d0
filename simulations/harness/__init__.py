"""Live test harness: real etcd, two kube-apiservers with their controller-managers, binaries.

Import `Harness` and `ClusterEndpoint` from here; see docs/development.md. Names load lazily so
that `python -m simulations.harness.binaries` does not import itself twice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulations.harness.cluster import Harness, HarnessError, install_crds
    from simulations.harness.endpoint import ApiError, ClusterEndpoint

_LAZY = {
    "Harness": "cluster",
    "HarnessError": "cluster",
    "install_crds": "cluster",
    "ApiError": "endpoint",
    "ClusterEndpoint": "endpoint",
}

__all__ = ["ApiError", "ClusterEndpoint", "Harness", "HarnessError", "install_crds"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    if name in ("binaries", "versions", "certs", "procs", "cluster", "endpoint"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
