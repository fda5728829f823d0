"""What the simulator can drive: anything with a ``name`` and the production ``decide`` signature.

Why this module exists: the production policy and every peer baseline must be interchangeable
in the engine, and the production one must be driven *unchanged*. ``ProductionPolicy`` is a
two-line adapter that calls ``autoscaler.policy.decide.decide`` exactly as the live loop does.
A policy may also carry ``tick_seconds`` (how often its loop runs) and ``react_on_arrival``
(whether a pending pod triggers a decision within ~1 s, like our watch-driven loop); the engine
reads them with defaults from ``SimConfig``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from autoscaler.policy.decide import decide
from autoscaler.policy.types import Decision, Observation, PolicyConfig, PolicyMemory


@runtime_checkable
class ScalingPolicy(Protocol):
    """A scaling policy: pure ``decide`` plus a display name."""

    name: str

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision: ...


class ProductionPolicy:
    """gpucellpool's own policy: ``autoscaler.policy.decide.decide``, unchanged."""

    name = "gpucellpool"
    tick_seconds = 10.0
    react_on_arrival = True

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision:
        return decide(observation, memory, config, now)
