"""A tick's decision: call the policy's ``decide`` only when it could answer something new.

Why this module exists: most ticks of a month-long replay look at a world that has not changed
since the last ``decide``; calling the policy again would return the same decision. Skipping
those calls is what makes long replays cheap, and keeping the rule apart from the event loop
keeps it reviewable: a tick whose observation is the very object the last ``decide`` saw,
before that decision's ``steady.until``, repeats the last decision (so does one the policy's
``holds_after`` says differs only in what that decision did not read, ``policy.same_facts``);
the skipped tick times are handed to the policy's ``advance`` before the next real call, so
its memory is what calling ``decide`` at every tick would have built. Results are identical
with and without skipping (``SimConfig.skip_idle_ticks``; tests/unit/test_sim_skip.py,
tests/unit/test_same_facts.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from autoscaler.policy.decision import Decision, Steady
from autoscaler.policy.next_change import advance
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import Observation, PolicyMemory
from simulations.simulator.engine.config import SimConfig
from simulations.simulator.engine.policy import ScalingPolicy
from simulations.simulator.engine.world import World

HoldsAfter = Callable[[Steady, Observation, Observation, PolicyConfig], bool]


class Decider:
    """The policy, its memory, and the last decision it made (to repeat on idle ticks)."""

    def __init__(self, policy: ScalingPolicy, config: SimConfig) -> None:
        self.policy = policy
        self.cfg = config
        self.advance = getattr(policy, "advance", advance)
        # whether a changed observation repeats the decision (``policy.same_facts``); a
        # policy without it decides again on every change
        self.holds: HoldsAfter | None = getattr(policy, "holds_after", None)
        self.memory = PolicyMemory()
        self.last_decision: Decision | None = None
        self.last_observation: Observation | None = None
        self.skipped: list[float] = []  # tick times whose decide was skipped since the last call
        self.calls = 0  # ticks that reached ``decide`` (the rest repeated a decision)
        self._idle_view: tuple[Observation, frozenset[str], Observation] | None = None

    def observe(self, world: World, free_physical: int | None, now: float) -> Observation:
        """What ``decide`` sees now; in usage mode with the cells measured idle now (the same
        object while neither the world nor the idle set changed, so skipping still applies)."""
        observation = world.observation(free_physical)
        if not self.cfg.policy_config.scale_down_on_usage:
            return observation
        idle = world.idle_cells(now, self.cfg.usage_idle_window_seconds)
        cached = self._idle_view
        if cached is not None and cached[0] is observation and cached[1] == idle:
            return cached[2]
        view = replace(observation, idle_cells=idle)
        self._idle_view = (observation, idle, view)
        return view

    def decide(self, observation: Observation, now: float) -> tuple[Decision, bool]:
        """The decision for this tick, and whether it repeats the last one (already applied
        to this very world, so applying it again would change nothing)."""
        repeated = self._repeat(observation, now)
        if repeated is not None:
            return repeated, True
        last = self.last_decision
        if self.skipped and last is not None and last.steady is not None:
            self.memory = self.advance(self.memory, last.steady, self.skipped)
        self.skipped = []
        decision = self.policy.decide(observation, self.memory, self.cfg.policy_config, now)
        self.calls += 1
        self.memory = decision.memory
        self.last_decision, self.last_observation = decision, observation
        return decision, False

    def _repeat(self, observation: Observation, now: float) -> Decision | None:
        """The last decision when calling ``decide`` now would only repeat it, else None."""
        last = self.last_decision
        if (
            last is None
            or last.steady is None
            or now >= last.steady.until
            or not self.cfg.skip_idle_ticks
        ):
            return None
        seen = self.last_observation
        if observation is not seen:
            if self.holds is None or seen is None:
                return None
            if not self.holds(last.steady, seen, observation, self.cfg.policy_config):
                return None
            self.last_observation = observation  # the next one is compared with this one
        self.skipped.append(now)
        return last
