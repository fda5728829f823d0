"""Skipping idle ticks is exact: with and without it, every policy gives the same result.

The engine skips a call to ``decide`` when the observation is the very same object as at the
last call and the clock is before that decision's ``steady.until``
(``autoscaler.policy.next_change``). These tests replay real and synthetic traces both ways and
compare whole ``SimResult`` values: cost, every pod's wait, the cell timeline, every reason
count, event and decision counts. They also check that the skip happened (or it proves nothing).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from autoscaler.policy.decision import Decision
from autoscaler.policy.policy_config import PolicyConfig, RatePolicy, RatePolicyType, ScalingRules
from autoscaler.policy.types import CellShape, GPUAsk, Observation, PolicyMemory
from simulations.simulator.baselines import PEERS
from simulations.simulator.engine import (
    BootModel,
    DrainMode,
    ProductionPolicy,
    ScalingPolicy,
    SimConfig,
)
from simulations.simulator.engine.policy import legacy_windows_policy
from simulations.simulator.engine.sim import Simulation
from simulations.simulator.traces import RescaleSpec, TracePod, load_bundled, load_generic, rescale
from simulations.simulator.traces.synthetic import synthetic_fractional_bursts

HELIOS = Path(__file__).resolve().parents[3] / "shared" / "traces" / "helios-earth"
DAY = 86400.0


@dataclass
class Counting:
    """Forwards to ``inner`` and counts the calls that reach ``decide``."""

    inner: Any
    calls: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.name = self.inner.name
        self.tick_seconds = self.inner.tick_seconds
        self.react_on_arrival = self.inner.react_on_arrival
        if hasattr(self.inner, "advance"):
            self.advance = self.inner.advance

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision:
        self.calls.append(now)
        decision: Decision = self.inner.decide(observation, memory, config, now)
        return decision


def _openb(days: float) -> list[TracePod]:
    pods = load_bundled().pods
    last = max(p.arrival_seconds for p in pods)
    spec = RescaleSpec(start_seconds=last - 14 * DAY, end_seconds=last - (14 - days) * DAY)
    return _capped(rescale(pods, spec))


def _capped(pods: Sequence[TracePod], hours: float = 6.0) -> list[TracePod]:
    """Durations capped, so a short window does not replay weeks of a few long pods."""
    return [replace(p, duration_seconds=min(p.duration_seconds, hours * 3600.0)) for p in pods]


def _helios(name: str, days: float) -> list[TracePod]:
    path = HELIOS / f"{name}.csv.gz"
    if not path.exists():  # a missing trace is a failure, never a skip
        pytest.fail(f"development trace {path} is missing")
    pods = load_generic(path).pods
    return _capped([p for p in pods if p.arrival_seconds < days * DAY])


def _bursts(seed: int) -> list[TracePod]:
    """Bursts of 5-40 one-GPU (and some fractional) pods every few hours, for two days."""
    rng = random.Random(seed)
    out: list[TracePod] = []
    t = 0.0
    while t < 2 * DAY:
        t += rng.expovariate(1 / 7200.0)
        for _ in range(rng.randint(5, 40)):
            ask = GPUAsk() if rng.random() < 0.7 else GPUAsk(memory_percent=40, cores_percent=30)
            start = t + rng.uniform(0.0, 180.0)
            out.append(TracePod(f"b{len(out)}", start, rng.lognormvariate(7.5, 1.0), ask))
    return sorted(out, key=lambda p: (p.arrival_seconds, p.key))


def _policies() -> dict[str, Callable[[], ScalingPolicy]]:
    rate = ScalingRules(60.0, (RatePolicy(RatePolicyType.CELLS, 3, 120.0),))
    paced = {"scale_up": rate, "scale_down_cooldown_seconds": 900.0, "max_cells_in_flight": 2}
    hedged_warm = {
        "boot_hedge_fraction": 0.75,
        "boot_hedge_min_wave": 1,
        "warm_spare_cells": 1,
        "warm_spare_seconds": 900.0,
    }
    per_pod = {"boot_hedge_fraction": 0.75, "boot_hedge_min_wave": 1, "boot_hedge_per_pod": True}
    return {
        "gpucellpool": ProductionPolicy,
        "gpucellpool-legacy-windows": legacy_windows_policy,
        "gpucellpool-paced": lambda: ProductionPolicy("paced", paced),
        "gpucellpool-hedged-warm": lambda: ProductionPolicy("hedged-warm", hedged_warm),
        "gpucellpool-hedged-per-pod": lambda: ProductionPolicy("hedged-per-pod", per_pod),
        **PEERS,
    }


def _run(pods: Sequence[TracePod], make: Callable[[], ScalingPolicy], cfg: SimConfig) -> Any:
    policy = Counting(make())
    result = Simulation(pods, policy, cfg).run()
    return result, len(policy.calls)


def _assert_same(pods: Sequence[TracePod], cfg: SimConfig, names: Sequence[str]) -> None:
    skipped_somewhere = False
    for name in names:
        make = _policies()[name]
        fast, fast_calls = _run(pods, make, cfg)
        slow, slow_calls = _run(pods, make, replace(cfg, skip_idle_ticks=False))
        assert fast == slow, name
        assert fast.decisions == slow_calls, name  # every tick still counts as a decision
        assert fast_calls <= slow_calls, name
        skipped_somewhere |= fast_calls < slow_calls / 2
    assert skipped_somewhere


ALL = list(_policies())


@pytest.mark.parametrize("name", ALL)
def test_openb_window_same_with_and_without_skipping(name: str) -> None:
    config = SimConfig(policy_config=PolicyConfig(max_replicas=1000), samples=300)
    _assert_same(_openb(1.0), config, [name])


@pytest.mark.parametrize("name", ALL)
def test_helios_slice_same_with_and_without_skipping(name: str) -> None:
    shape = CellShape(gpus=8)
    config = SimConfig(policy_config=PolicyConfig(max_replicas=1000, shape=shape), samples=300)
    _assert_same(_helios("vc8Sj", 1.5), config, [name])


@pytest.mark.parametrize("seed", [1, 2])
def test_synthetic_bursts_same_with_and_without_skipping(seed: int) -> None:
    boot = BootModel(median_seconds=240.0, sigma=0.4, failure_probability=0.05)
    config = SimConfig(
        policy_config=PolicyConfig(max_replicas=60, shape=CellShape(gpus=4)),
        boot=boot,
        drain_mode=DrainMode.EVICT if seed == 2 else DrainMode.WAIT_FOR_IDLE,
        physical_gpus=200 if seed == 1 else None,
        samples=300,
        seed=seed,
    )
    _assert_same(_bursts(seed), config, ALL)


def test_fractional_bursts_same_with_and_without_skipping() -> None:
    """Bursts of quarter-to-half-GPU pods on one-GPU cells: where the per-pod hedge starts
    more spares than cells, and cancels them while booting."""
    config = SimConfig(policy_config=PolicyConfig(max_replicas=200), samples=300, seed=3)
    pods = synthetic_fractional_bursts(days=2.0, seed=18)
    _assert_same(pods, config, ["gpucellpool-hedged-warm", "gpucellpool-hedged-per-pod"])
