"""Cell backends: how a cell becomes outer objects in the infrastructure cluster.

Why this package exists: the reconciler speaks of cells; a backend turns that into a SwiftGuest
(+ seed profile + bootstrap Secret) or a Cluster API Machine (+ KubeSwiftMachine [+ bootstrap
config] + bootstrap Secret), lists them back, reads their progress into the state machine's
``OuterStatus`` and takes them apart again. Both implement ``base.CellBackend``.
"""

from provisioner.backends.base import CellBackend, CellObjects
from provisioner.backends.clusterapi import ClusterAPIBackend
from provisioner.backends.swiftguest import SwiftGuestBackend

__all__ = ["CellBackend", "CellObjects", "ClusterAPIBackend", "SwiftGuestBackend"]
