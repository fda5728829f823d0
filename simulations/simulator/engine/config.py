"""How one simulated run is set up: the world's timings, drain mode, placement and seed.

Why this module exists: the event loop (``engine.sim``) reads these values but does not own
them; the CLI, the sweep, the benchmarks and the tests build them. Keeping them apart keeps the
loop module about what happens when.
"""

from __future__ import annotations

import enum
import math
import random
from dataclasses import dataclass, field

from autoscaler.policy.policy_config import PolicyConfig
from simulations.simulator.engine import hami


class DrainMode(enum.StrEnum):
    WAIT_FOR_IDLE = "wait-for-idle"  # cordon; the cell goes when its pods end
    EVICT = "evict"  # cordon and evict now; evicted pods re-queue with their remaining time


@dataclass(frozen=True, slots=True)
class BootModel:
    """Boot time ~ lognormal with the given median; a boot fails with ``failure_probability``."""

    median_seconds: float = 300.0
    sigma: float = 0.25
    min_seconds: float = 30.0
    failure_probability: float = 0.0

    def sample(self, rng: random.Random) -> tuple[float, bool]:
        seconds = (
            self.median_seconds * math.exp(rng.gauss(0.0, self.sigma))
            if self.sigma
            else (self.median_seconds)
        )
        failed = self.failure_probability > 0 and rng.random() < self.failure_probability
        return max(self.min_seconds, seconds), failed


@dataclass(frozen=True, slots=True)
class SimConfig:
    policy_config: PolicyConfig = field(default_factory=PolicyConfig)
    tick_seconds: float = 10.0
    react_on_arrival: bool = False
    react_delay_seconds: float = 1.0
    # After a cell finishes booting (Ready or failed): the reacting policy's delay, when it
    # differs from the pending pod's (the live loop hears of a Ready cell through its Node and
    # the pool's status); None: react_delay_seconds.
    boot_react_delay_seconds: float | None = None
    # The first reaction of a run, when it differs (the live operator's first decision also
    # waits for its caches to fill); None: react_delay_seconds.
    first_react_delay_seconds: float | None = None
    boot: BootModel = field(default_factory=BootModel)
    drain_mode: DrainMode = DrainMode.WAIT_FOR_IDLE
    # WaitForIdle only: a drain not finished in time is abandoned, the cell uncordoned and kept
    # (spec.autoscaling.drain.timeout); None waits for ever (the API default).
    drain_timeout_seconds: float | None = None
    drain_seconds: float = 30.0  # cordon-to-gone once the cell is empty
    node_policy: str = hami.BINPACK
    gpu_policy: str = hami.SPREAD
    warm_start: bool = True  # pods present at t=0 start on Ready cells
    physical_gpus: int | None = None
    tail_seconds: float = 86400.0  # run at most this long after the last pod would end
    samples: int = 800  # timeline points
    seed: int = 0
    # Skip calls to ``decide`` that would repeat the last decision (same observation, before
    # its ``steady.until``); results are identical either way (tests/unit/test_sim_skip.py).
    skip_idle_ticks: bool = True
    # With policy_config.scale_down_on_usage: how long a cell's pods must compute nothing
    # (TracePod.usage) before the cell counts as idle (spec.autoscaling.usageIdleWindow).
    usage_idle_window_seconds: float = 1800.0
    # Decision to execution (a guest created, a drain started): each acted decision is carried
    # out this long after it was made (engine.exec_lag); 0 applies it at once.
    exec_lag_seconds: float = 0.0
    # A cancelled boot (a Booting victim) keeps its cell, Draining, this long after the cancel
    # is carried out (the guest deleted, then gone, its GPU released); 0 removes it at once.
    cancel_seconds: float = 0.0
    # A cell's boot end (Ready, the policy sees it) to HAMi placing pods on it: the scheduler's
    # next pass over the new node and the bind writes; 0 places waiting pods at the boot's end.
    bind_delay_seconds: float = 0.0
    # The infrastructure releases one removed cell's GPU at a time (KubeSwift's GPU ledger): a
    # cell leaves at least this long after the cell that left before it, so a batch of cancels
    # or retirements leaves one after another; 0 lets each removal end at its own time.
    removal_step_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.removal_step_seconds < 0:
            raise ValueError(f"removal_step_seconds must be >= 0, got {self.removal_step_seconds}")
        if self.cancel_seconds < 0:
            raise ValueError(f"cancel_seconds must be >= 0, got {self.cancel_seconds}")
        if self.bind_delay_seconds < 0:
            raise ValueError(f"bind_delay_seconds must be >= 0, got {self.bind_delay_seconds}")
