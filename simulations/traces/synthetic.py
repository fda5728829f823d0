"""A seeded synthetic trace: diurnal Poisson arrivals, lognormal durations, openb-like asks.

Why this module exists: benchmarks need a trace of any length and size (e.g. 30 days, 100,000
pods) with realistic shape, without shipping large files. Asks are drawn from the openb mix:
about half whole GPUs, the rest fractions from 10 % to 80 %, and ~1 % multi-GPU pods.
"""

from __future__ import annotations

import math
import random

from autoscaler.policy.types import GPUAsk
from simulations.traces.model import TracePod, sort_pods

DAY = 86400.0
FRACTIONS = (10, 20, 25, 30, 40, 50, 60, 80)


def _ask(rng: random.Random) -> GPUAsk:
    roll = rng.random()
    if roll < 0.01:
        return GPUAsk(gpu_count=rng.choice((2, 4)), memory_percent=100, cores_percent=100)
    if roll < 0.5:
        return GPUAsk(memory_percent=100, cores_percent=100)
    percent = rng.choice(FRACTIONS)
    return GPUAsk(memory_percent=percent, cores_percent=percent)


def synthetic(
    pods: int,
    days: float,
    median_duration_seconds: float = 1800.0,
    duration_sigma: float = 1.2,
    diurnal_amplitude: float = 0.6,
    seed: int = 0,
) -> tuple[TracePod, ...]:
    """``pods`` pods over ``days`` days; arrival rate follows a daily sine wave."""
    rng = random.Random(seed)
    span = days * DAY
    out: list[TracePod] = []
    while len(out) < pods:
        t = rng.uniform(0.0, span)
        rate = 1.0 + diurnal_amplitude * math.sin(2 * math.pi * t / DAY)
        if rng.uniform(0.0, 1.0 + diurnal_amplitude) > rate:
            continue  # thinning: keeps arrivals in proportion to the rate at t
        duration = median_duration_seconds * math.exp(rng.gauss(0.0, duration_sigma))
        out.append(TracePod(f"syn-{len(out)}", t, max(10.0, duration), _ask(rng)))
    return sort_pods(out)
