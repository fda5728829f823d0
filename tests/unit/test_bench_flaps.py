"""The flap count of tests/bench/policy_vs_ca.py: what GPUCellPoolScaleFlapping would see (a cut
that removed cells which served, then a rise within the window) apart from hedged spares given
up and bought again (reason SparesCancelled)."""

from __future__ import annotations

from tests.bench.policy_vs_ca import flaps

# up at 0; spares given up at 100, a wave at 200; a drain at 1000, a rise at 1700 (too late);
# a drain at 2000, a rise at 2500
CHANGES = [(0.0, 5), (100.0, -2), (200.0, 3), (1000.0, -1), (1700.0, 1), (2000.0, -1), (2500.0, 2)]
SPARES = frozenset({100.0})


def test_every_cut_then_a_rise_within_the_window() -> None:
    assert flaps(CHANGES) == 2  # 100 -> 200 and 2000 -> 2500; 1000 -> 1700 is 700 s later


def test_spares_given_up_are_counted_apart_from_the_flaps() -> None:
    assert flaps(CHANGES, but=SPARES) == 1
    assert flaps(CHANGES, only=SPARES) == 1
    assert flaps(CHANGES, window=800.0, but=SPARES) == 2
