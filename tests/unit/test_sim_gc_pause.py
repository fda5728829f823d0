"""``engine.gc_pause.relaxed``: a replay runs with the collector relaxed, and the process gets
its own thresholds and an empty permanent generation back afterwards, also when runs nest
or the body fails."""

from __future__ import annotations

import gc

import pytest

from simulations.simulator.engine import gc_pause


def test_thresholds_are_raised_for_the_run_and_restored_after_it() -> None:
    before = gc.get_threshold()
    with gc_pause.relaxed():
        assert gc.get_threshold()[0] >= gc_pause.RUN_GEN0_THRESHOLD
        assert gc.get_freeze_count() > 0  # what existed before the run is out of view
        with gc_pause.relaxed():  # a nested run leaves the outer one's setting alone
            pass
        assert gc.get_threshold()[0] >= gc_pause.RUN_GEN0_THRESHOLD
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_failing_run_restores_the_collector_too() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), gc_pause.relaxed():
        raise RuntimeError("boom")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
