"""Discrete-event simulator: a virtual clock, a HAMi-faithful pool, and a policy in the loop.

``simulate(pods, policy, config)`` replays a trace through one ``ScalingPolicy`` and returns a
``SimResult``; the same seed always gives the same result.
"""

from simulations.engine.config import BootModel, DrainMode, SimConfig
from simulations.engine.metrics import Sample, SimResult
from simulations.engine.policy import ProductionPolicy, ScalingPolicy
from simulations.engine.sim import simulate

__all__ = [
    "BootModel",
    "DrainMode",
    "ProductionPolicy",
    "Sample",
    "ScalingPolicy",
    "SimConfig",
    "SimResult",
    "simulate",
]
