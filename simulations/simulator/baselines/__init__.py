"""Peer scaling policies written from their documented rules, and the oracle lower bound.

Each peer implements ``simulations.simulator.engine.ScalingPolicy`` so the engine drives it exactly
like the production policy; ``PEERS`` maps a short name to a factory (a fresh instance per run,
because some peers keep state between calls).
"""

from collections.abc import Callable

from simulations.simulator.baselines.cluster_autoscaler import ClusterAutoscalerStyle
from simulations.simulator.baselines.hpa import HPAStyle
from simulations.simulator.baselines.oracle import oracle
from simulations.simulator.baselines.original import OriginalGpucellpool
from simulations.simulator.engine.policy import ScalingPolicy

PEERS: dict[str, Callable[[], ScalingPolicy]] = {
    "cluster-autoscaler": ClusterAutoscalerStyle,
    "hpa-keda": HPAStyle,
    "original-gpucellpool": OriginalGpucellpool,
}

__all__ = ["PEERS", "ClusterAutoscalerStyle", "HPAStyle", "OriginalGpucellpool", "oracle"]
