"""The twin's live controllers: simulated KubeSwift, Cluster API + CAPKS, kubelet and HAMi.

Why this package exists: the provisioner must be proven against real API servers, but no
hypervisor, GPU or kubelet exists in CI. These asyncio controllers play the missing parts on the
harness's two apiservers, stamping exactly the status fields the real ones write (per
``shared/reference/kubeswift-facts.md`` and ``hami-facts.md``), after configurable delays and
with per-cell failure knobs. They poll (every ``poll_s``) instead of watching: simpler, and the
reconciler under test must not depend on their timing anyway.
"""

from simulations.twin.capi import SimulatedClusterAPI
from simulations.twin.kubeswift import GuestFault, GuestTimings, SimulatedKubeSwift
from simulations.twin.node_agent import NodeFault, SimulatedNodeAgent

__all__ = [
    "GuestFault",
    "GuestTimings",
    "NodeFault",
    "SimulatedClusterAPI",
    "SimulatedKubeSwift",
    "SimulatedNodeAgent",
]
