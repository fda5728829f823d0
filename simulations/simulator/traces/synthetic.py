"""A seeded synthetic trace: diurnal Poisson arrivals, lognormal durations, openb-like asks.

Why this module exists: benchmarks need a trace of any length and size (e.g. 30 days, 100,000
pods) with realistic shape, without shipping large files. Asks are drawn from the openb mix:
about half whole GPUs, the rest fractions from 10 % to 80 %, and ~1 % multi-GPU pods.
"""

from __future__ import annotations

import math
import random

from autoscaler.policy.types import GPUAsk
from simulations.simulator.traces.model import TracePod, sort_pods

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


GANG_SIZES = (2, 2, 4, 4, 8, 16)  # members of one GPU each: small jobs are the common ones


def synthetic_gangs(
    days: float,
    gangs_per_hour: float = 1.0,
    singles_per_hour: float = 4.0,
    median_gang_seconds: float = 3600.0,
    median_single_seconds: float = 1800.0,
    duration_sigma: float = 0.8,
    seed: int = 0,
) -> tuple[TracePod, ...]:
    """Distributed jobs and single pods, for the gang benchmark (docs/benchmarks.md).

    Gangs (Poisson arrivals, ``gangs_per_hour``) have ``GANG_SIZES`` members asking one whole
    GPU each, arriving together and running one lognormal duration (median
    ``median_gang_seconds``); single pods (``singles_per_hour``) ask openb-like shares of one
    GPU. Members are keyed ``gang-<n>-<i>`` with gang id ``gang-<n>``; singles ``single-<n>``.
    """
    rng = random.Random(seed)
    span = days * DAY
    out: list[TracePod] = []
    t, n = rng.expovariate(gangs_per_hour / 3600.0), 0
    while t < span:
        size = rng.choice(GANG_SIZES)
        duration = max(60.0, median_gang_seconds * math.exp(rng.gauss(0.0, duration_sigma)))
        whole = GPUAsk(memory_percent=100, cores_percent=100)
        out += [
            TracePod(f"gang-{n}-{i}", t, duration, whole, gang=f"gang-{n}") for i in range(size)
        ]
        t, n = t + rng.expovariate(gangs_per_hour / 3600.0), n + 1
    t, n = rng.expovariate(singles_per_hour / 3600.0), 0
    while t < span:
        duration = max(10.0, median_single_seconds * math.exp(rng.gauss(0.0, duration_sigma)))
        percent = rng.choice((*FRACTIONS, 100))
        out.append(
            TracePod(
                f"single-{n}", t, duration, GPUAsk(memory_percent=percent, cores_percent=percent)
            )
        )
        t, n = t + rng.expovariate(singles_per_hour / 3600.0), n + 1
    return sort_pods(out)


BURST_FRACTIONS = (25, 30, 40, 50)  # percent of one GPU (memory and cores): a quarter to a half


def synthetic_fractional_bursts(
    days: float = 7.0,
    pods_per_burst: tuple[int, int] = (10, 40),
    spread_seconds: float = 180.0,
    min_gap_seconds: float = 3600.0,
    mean_extra_gap_seconds: float = 10800.0,
    duration_seconds: tuple[float, float] = (600.0, 3600.0),
    seed: int = 0,
) -> tuple[TracePod, ...]:
    """Bursts of fractional-GPU pods hours apart: the sharing workload that does not arrive as
    lone pods (docs/autoscaling.md, session 18: is "keep the warm spare while the pool shares
    GPUs" a rule, or a fit to openb?).

    Bursts start ``min_gap_seconds`` plus an exponential gap (mean ``mean_extra_gap_seconds``)
    apart; each has a uniform number of pods in ``pods_per_burst``, arriving uniformly within
    ``spread_seconds`` of its start, each asking one of ``BURST_FRACTIONS`` of a GPU's memory
    and cores and running a uniform time in ``duration_seconds``. Keys ``burst-<b>-<i>``.
    """
    rng = random.Random(seed)
    span = days * DAY
    out: list[TracePod] = []
    t, b = rng.uniform(0.0, min_gap_seconds), 0
    while t < span:
        for i in range(rng.randint(*pods_per_burst)):
            percent = rng.choice(BURST_FRACTIONS)
            ask = GPUAsk(memory_percent=percent, cores_percent=percent)
            arrival = t + rng.uniform(0.0, spread_seconds)
            out.append(TracePod(f"burst-{b}-{i}", arrival, rng.uniform(*duration_seconds), ask))
        t += min_gap_seconds + rng.expovariate(1.0 / mean_extra_gap_seconds)
        b += 1
    return sort_pods(out)
