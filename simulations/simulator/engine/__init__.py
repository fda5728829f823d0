"""Discrete-event simulator: a virtual clock, a HAMi-faithful pool, and a policy in the loop.

``simulate(pods, policy, config)`` replays a trace through one ``ScalingPolicy`` and returns a
``SimResult``; the same seed always gives the same result.
"""

from simulations.simulator.engine.config import BootModel, DrainMode, SimConfig
from simulations.simulator.engine.metrics import Sample, SimResult
from simulations.simulator.engine.policy import ProductionPolicy, ScalingPolicy
from simulations.simulator.engine.sim import simulate

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
