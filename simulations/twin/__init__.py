"""The twin's live controllers: simulated KubeSwift, Cluster API + CAPKS, kubelet and HAMi.

Why this package exists: the provisioner must be proven against real API servers, but no
hypervisor, GPU or kubelet exists in CI. These asyncio controllers play the missing parts on the
harness's two apiservers, stamping exactly the status fields the real ones write (per
``shared/reference/kubeswift-facts.md`` and ``hami-facts.md``), after configurable delays and
with per-cell failure knobs. They poll (every ``poll_s``) instead of watching: simpler, and the
reconciler under test must not depend on their timing anyway.
"""

from simulations.twin.capi import SimulatedClusterAPI
from simulations.twin.hami import SimulatedHAMi
from simulations.twin.hami_exporter import start_hami_exporter
from simulations.twin.kubeswift import GuestFault, GuestTimings, SimulatedKubeSwift
from simulations.twin.node_agent import NodeFault, SimulatedNodeAgent
from simulations.twin.player import PlayerProgress, TracePlayer
from simulations.twin.pod_lifecycle import PodLifecycle

__all__ = [
    "GuestFault",
    "GuestTimings",
    "NodeFault",
    "PlayerProgress",
    "PodLifecycle",
    "SimulatedClusterAPI",
    "SimulatedHAMi",
    "SimulatedKubeSwift",
    "SimulatedNodeAgent",
    "TracePlayer",
    "start_hami_exporter",
]
