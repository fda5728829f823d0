"""The synthetic traces' shapes: what each generator promises the benchmarks that use it."""

from __future__ import annotations

import itertools

from simulations.simulator.traces.synthetic import synthetic_fractional_bursts


def test_the_fractional_burst_trace_is_bursts_of_partial_asks_hours_apart() -> None:
    """Sharing pods that arrive in bursts, not as openb's lone pods (docs: session 18)."""
    pods = synthetic_fractional_bursts(days=2.0, seed=3)
    assert pods == synthetic_fractional_bursts(days=2.0, seed=3)
    # a quarter to a half of one GPU's memory and cores: room for another pod beside each
    assert all(p.ask.memory_percent == p.ask.cores_percent in (25, 30, 40, 50) for p in pods)
    assert all(600.0 <= p.duration_seconds <= 3600.0 for p in pods)
    bursts: dict[str, list[float]] = {}
    for pod in pods:
        bursts.setdefault(pod.key.split("-")[1], []).append(pod.arrival_seconds)
    assert all(10 <= len(times) <= 40 for times in bursts.values())
    assert all(max(times) - min(times) <= 180.0 for times in bursts.values())
    starts = sorted(min(times) for times in bursts.values())
    assert len(starts) >= 2 and all(b - a >= 3600.0 - 180.0 for a, b in itertools.pairwise(starts))
