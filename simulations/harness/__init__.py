"""Live test harness: real etcd + two kube-apiservers, and the pinned binaries they need.

Import `Harness` and `ClusterEndpoint` from here; see docs/development.md.
"""

from simulations.harness.cluster import Harness, HarnessError, install_crds
from simulations.harness.endpoint import ApiError, ClusterEndpoint

__all__ = ["ApiError", "ClusterEndpoint", "Harness", "HarnessError", "install_crds"]
