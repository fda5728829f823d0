"""Rescaling knobs: window clipping, time compression, duration scale, seeded replication."""

from __future__ import annotations

import pytest

from autoscaler.policy.types import GPUAsk
from simulations.simulator.traces import RescaleSpec, TracePod, rescale

ASK = GPUAsk(memory_percent=50, cores_percent=50)
PODS = (
    TracePod("early", 0.0, 1000.0, ASK),  # running across the window start
    TracePod("gone", 0.0, 50.0, ASK),  # over before the window
    TracePod("inside", 200.0, 100.0, ASK),
    TracePod("late", 900.0, 10.0, ASK),  # after the window end
)


def test_window_clips_running_pods_and_shifts_time() -> None:
    out = rescale(PODS, RescaleSpec(start_seconds=100.0, end_seconds=500.0))
    assert [(p.key, p.arrival_seconds, p.duration_seconds) for p in out] == [
        ("early", 0.0, 900.0),
        ("inside", 100.0, 100.0),
    ]


def test_compression_and_duration_scale() -> None:
    out = rescale(PODS, RescaleSpec(time_compression=4.0, duration_scale=0.5))
    inside = next(p for p in out if p.key == "inside")
    assert inside.arrival_seconds == 50.0 and inside.duration_seconds == 50.0


def test_multiplier_is_seeded_and_sized() -> None:
    many = tuple(TracePod(f"p{i}", float(i * 10), 5.0, ASK) for i in range(1000))
    a = rescale(many, RescaleSpec(arrival_multiplier=2.5, seed=7))
    b = rescale(many, RescaleSpec(arrival_multiplier=2.5, seed=7))
    c = rescale(many, RescaleSpec(arrival_multiplier=2.5, seed=8))
    assert a == b and a != c
    assert 2400 < len(a) < 2600
    assert len({p.key for p in a}) == len(a)
    assert all(p.arrival_seconds >= 0 for p in a)
    assert [p.arrival_seconds for p in a] == sorted(p.arrival_seconds for p in a)
    assert 400 < len(rescale(many, RescaleSpec(arrival_multiplier=0.5))) < 600


def test_bad_knobs_raise() -> None:
    with pytest.raises(ValueError):
        rescale(PODS, RescaleSpec(time_compression=0.0))
