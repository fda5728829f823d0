"""What the simulator can drive: anything with a ``name`` and the production ``decide`` signature.

Why this module exists: the production policy and every peer baseline must be interchangeable
in the engine, and the production one must be driven *unchanged*. ``ProductionPolicy`` is a
two-line adapter that calls ``autoscaler.policy.decide.decide`` exactly as the live loop does.
A policy may also carry ``tick_seconds`` (how often its loop runs) and ``react_on_arrival``
(whether a pending pod, or a cell that finished booting, triggers a decision within ~1 s, like
our watch-driven loop, which wakes on Pod and Node events); the engine reads them with defaults
from ``SimConfig``. ``gang_scale_up`` (``per-pod`` or ``atomic``) says how it scales for gangs
(``simulations.simulator.engine.gangs``); peers have none and scale per pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from autoscaler.policy import same_facts
from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Decision, Steady
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import Observation, PolicyMemory


@runtime_checkable
class ScalingPolicy(Protocol):
    """A scaling policy: pure ``decide`` plus a display name."""

    name: str

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision: ...


class ProductionPolicy:
    """gpucellpool's own policy: ``autoscaler.policy.decide.decide``, unchanged.

    ``overrides`` replace ``PolicyConfig`` fields before each call (e.g. the legacy cooldowns a
    spec without ``behavior`` maps to); the function itself is never altered.
    """

    tick_seconds = 10.0
    react_on_arrival = True

    def __init__(
        self,
        name: str = "gpucellpool",
        overrides: Mapping[str, Any] | None = None,
        gang_scale_up: str = "per-pod",
    ):
        self.name = name
        self.overrides = dict(overrides or {})
        self.gang_scale_up = gang_scale_up
        self._effective: tuple[PolicyConfig, PolicyConfig] | None = None

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision:
        return decide(observation, memory, self._config(config), now)

    def holds_after(
        self, steady: Steady, before: Observation, after: Observation, config: PolicyConfig
    ) -> bool:
        """Whether ``decide`` would repeat on ``after`` the decision it made on ``before``
        (``autoscaler.policy.same_facts``)."""
        return same_facts.holds_after(steady, before, after, self._config(config))

    def _config(self, config: PolicyConfig) -> PolicyConfig:
        """``config`` with the overrides (the same object for the same ``config``)."""
        if not self.overrides:
            return config
        cached = self._effective
        if cached is None or cached[0] is not config:
            cached = self._effective = (config, replace(config, **self.overrides))
        return cached[1]


def legacy_windows_policy() -> ProductionPolicy:
    """Our policy as an old GPUCellPool that sets the original's default windows
    (``stabilizationWindow: 10m``, ``scaleDownStabilizationWindow: 30m``) and no ``behavior``
    configures it: they become cooldowns (no scale-up within 10 min of the last, no scale-down
    within 30 min of any action), see ``autoscaler.policy.config.policy_config_from_spec``."""
    return ProductionPolicy(
        "gpucellpool-legacy-windows",
        {"scale_up_cooldown_seconds": 600.0, "scale_down_cooldown_seconds": 1800.0},
    )


def atomic_gang_policy() -> ProductionPolicy:
    """Our policy with gangs scaled atomically, as the live operator serves a
    ``best-effort-atomic-scale-up`` ProvisioningRequest (``autoscaler.policy.gang``): all the
    cells a gang needs or none. Pods outside gangs are served exactly as by ``gpucellpool``."""
    return ProductionPolicy("gpucellpool-atomic", gang_scale_up="atomic")
