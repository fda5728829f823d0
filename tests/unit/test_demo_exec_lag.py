"""The twin's execution lag, measured from the outside and handed to the simulator: the demo
recorder pairs each decision with the guest it created or the drain it started
(``Recorder.lags``), keeps the guest-to-Ready boots apart (``twin_measures.guest_boots``), and
``WorldTimings.with_lag`` gives the simulator both (``SimConfig.exec_lag_seconds``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from simulations.demo.config import DemoSpec, WorldTimings, sim_config
from simulations.demo.recorder import Recorder
from simulations.demo.twin_measures import (
    binds_after_ready,
    boot_reaction,
    boots,
    first_reaction,
    guest_boots,
    reaction,
)
from tests.unit.test_twin_hami_placement import manifest

SPEC = replace(DemoSpec(), hours=0.5, multiplier=0.4, compression=20.0)


class At:
    """The recorder's clock, set by the test."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def recorder() -> tuple[Recorder, At]:
    rec = Recorder(None, None, "ns", "pool")  # type: ignore[arg-type]  # no watch is started
    clock = At()
    rec.now = clock  # type: ignore[method-assign]
    return rec, clock


def pool(desired: int, cells: dict[str, str]) -> dict[str, Any]:
    rows = [{"name": name, "phase": phase} for name, phase in cells.items()]
    return {"status": {"desiredReplicas": desired, "cells": rows}}


def guest(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}"}}


def test_each_decision_is_paired_with_the_guest_or_drain_that_carried_it_out() -> None:
    rec, clock = recorder()
    rec._pool("MODIFIED", pool(2, {}))  # two cells asked for at 0
    clock.t = 3.0
    rec._guest("ADDED", guest("c0"))
    clock.t = 5.0
    rec._guest("ADDED", guest("c1"))
    clock.t = 20.0
    rec._pool("MODIFIED", pool(2, {"c0": "Ready"}))
    clock.t = 22.0
    rec._pool("MODIFIED", pool(2, {"c0": "Ready", "c1": "Ready"}))
    assert boots(rec) == [20.0, 22.0]  # from the decision, as before
    assert guest_boots(rec) == [17.0, 17.0]  # from each guest's creation
    clock.t = 30.0
    rec._pool("MODIFIED", pool(1, {"c0": "Ready", "c1": "Ready"}))  # one cell to leave
    clock.t = 34.0
    rec._pool("MODIFIED", pool(1, {"c0": "Ready", "c1": "Draining"}))
    clock.t = 35.0
    rec._pool("MODIFIED", pool(1, {"c0": "Ready", "c1": "Draining"}))  # seen once
    assert rec.lags == [3.0, 5.0, 4.0]


def test_a_scale_up_cancels_a_scale_down_not_carried_out_yet() -> None:
    rec, clock = recorder()
    rec._pool("MODIFIED", pool(1, {}))
    clock.t = 1.0
    rec._guest("ADDED", guest("c0"))
    clock.t = 10.0
    rec._pool("MODIFIED", pool(0, {"c0": "Ready"}))
    clock.t = 11.0
    rec._pool("MODIFIED", pool(1, {"c0": "Ready"}))  # back up before any drain
    clock.t = 50.0
    rec._pool("MODIFIED", pool(1, {"c0": "Draining"}))  # another decision's drain, unpaired
    assert rec.lags == [1.0]


def test_the_simulator_gets_the_median_lag_and_boots_from_the_guest() -> None:
    measured = WorldTimings.measured(SPEC, [12.0, 20.0, 14.0], [2.0], 1.0)
    timings = measured.with_lag([10.0, 16.0, 11.0], [2.0, 4.0, 3.0, 9.0])
    assert (timings.exec_lag_seconds, timings.boot_seconds) == (3.5, 11.0)
    # each cell Ready when the twin's was, after the decision: its decision-timed boot less
    # the lag (the simulator creates a wave's cells together)
    assert timings.boots == (8.5, 16.5, 10.5) and timings.drain_seconds == 2.0
    assert sim_config(SPEC, timings).exec_lag_seconds == 3.5
    assert measured.with_lag([], []) is measured  # nothing measured: the decision-timed boots
    assert sim_config(SPEC, measured).exec_lag_seconds == 0.0


def pending_pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {}, "status": {"phase": "Pending"}}


def test_the_reaction_is_the_median_from_a_new_pending_pod_to_its_scale_up() -> None:
    rec, clock = recorder()
    assert reaction(rec) is None  # nothing seen: the spec's nominal reaction applies
    clock.t = 1.0
    rec._pod("ADDED", pending_pod("a"))
    clock.t = 12.0  # the first decision also waited for the operator's caches
    rec._pool("MODIFIED", pool(1, {}))
    clock.t = 100.0
    rec._pod("ADDED", pending_pod("b"))
    clock.t = 102.0
    rec._pod("ADDED", pending_pod("c"))  # joins b's decision
    clock.t = 104.0
    rec._pool("MODIFIED", pool(3, {}))
    clock.t = 150.0
    rec._pool("MODIFIED", pool(4, {}))  # no new pending pod (a spare, a forecast): no reaction
    clock.t = 200.0
    rec._pod("ADDED", pending_pod("d"))
    clock.t = 206.0
    rec._pool("MODIFIED", pool(5, {}))
    assert rec.reactions == [11.0, 4.0, 6.0]
    assert rec.first_request == 12.0
    assert reaction(rec) == 6.0  # the median, not the first


def test_a_waves_boots_are_in_its_cells_order_not_by_length() -> None:
    rec, clock = recorder()
    rec._pool("MODIFIED", pool(3, {}))  # one wave of three cells asked for at 0
    for at, name in ((2.0, "c0"), (3.0, "c1"), (4.0, "c2")):
        clock.t = at
        rec._guest("ADDED", guest(name))
    clock.t = 30.0  # the last guest created is Ready first, the first one last
    rec._pool("MODIFIED", pool(3, {"c2": "Ready"}))
    clock.t = 35.0
    rec._pool("MODIFIED", pool(3, {"c2": "Ready", "c1": "Ready"}))
    clock.t = 40.0
    rec._pool("MODIFIED", pool(3, {"c2": "Ready", "c1": "Ready", "c0": "Ready"}))
    # the simulator gives its first cell of the wave the first boot: c0's, the longest
    assert boots(rec) == [40.0, 35.0, 30.0]
    assert guest_boots(rec) == [38.0, 32.0, 26.0]


def test_a_cancelled_boot_is_timed_from_its_decision_to_its_guest_gone() -> None:
    rec, clock = recorder()
    rec._pool("MODIFIED", pool(2, {}))
    clock.t = 2.0
    rec._guest("ADDED", guest("c0"))
    rec._guest("ADDED", guest("c1"))
    clock.t = 20.0
    rec._pool("MODIFIED", pool(2, {"c0": "Ready", "c1": "Booting"}))
    clock.t = 21.0
    rec._pool("MODIFIED", pool(1, {"c0": "Ready", "c1": "Booting"}))  # c1's boot cancelled
    clock.t = 24.0
    rec._pool("MODIFIED", pool(1, {"c0": "Ready", "c1": "Draining"}))
    clock.t = 33.0
    rec._guest("DELETED", guest("c1"))
    assert rec.cancels == [12.0]  # 21 -> 33
    assert rec.lags == [2.0, 2.0, 3.0]
    clock.t = 40.0
    rec._pool("MODIFIED", pool(0, {"c0": "Ready"}))  # a Ready cell's scale-down: no cancel
    clock.t = 41.0
    rec._pool("MODIFIED", pool(0, {"c0": "Draining"}))
    clock.t = 50.0
    rec._guest("DELETED", guest("c0"))
    assert rec.cancels == [12.0]
    timings = WorldTimings.nominal(SPEC).with_lag(guest_boots(rec), rec.lags, rec.cancels)
    assert timings.exec_lag_seconds == 2.0 and timings.cancel_seconds == 10.0  # 12 - 2
    assert sim_config(SPEC, timings).cancel_seconds == 10.0
    assert WorldTimings.nominal(SPEC).with_lag([17.0], [2.0]).cancel_seconds == 0.0  # none seen


def test_a_waves_cells_reported_ready_together_are_ready_together_in_the_simulator() -> None:
    rec, clock = recorder()
    rec._pool("MODIFIED", pool(3, {}))  # a wave of three at 0
    for i, at in enumerate((1.0, 2.0, 3.0)):  # the guests one after another
        clock.t = at
        rec._guest("ADDED", guest(f"c{i}"))
    clock.t = 20.0
    rec._pool("MODIFIED", pool(3, {"c0": "Ready", "c1": "Ready", "c2": "Ready"}))  # one update
    assert guest_boots(rec) == [19.0, 18.0, 17.0]  # the last guest's boot is the shortest
    timings = WorldTimings.measured(SPEC, boots(rec), [], None).with_lag(guest_boots(rec), rec.lags)
    assert timings.exec_lag_seconds == 2.0
    assert timings.boots == (18.0, 18.0, 18.0)  # created together at 2, Ready together at 20


def test_the_reaction_to_a_ready_cell_is_timed_from_it_to_the_change_it_prompted() -> None:
    rec, clock = recorder()
    rec._pod("ADDED", pending_pod("p0"))
    clock.t = 2.0
    rec._pool("MODIFIED", pool(1, {}))  # a reaction to p0: not a boot reaction
    clock.t = 3.0
    rec._guest("ADDED", guest("c0"))
    clock.t = 20.0
    rec._pool("MODIFIED", pool(1, {"c0": "Ready"}))
    clock.t = 31.0
    rec._pool("MODIFIED", pool(3, {"c0": "Ready"}))  # the next wave, no new pod: 20 -> 31
    assert rec.boot_reactions == [11.0] and rec.reactions == [2.0]
    clock.t = 40.0
    rec._pool("MODIFIED", pool(2, {"c0": "Ready"}))  # no cell Ready since the last change
    assert boot_reaction(rec) == 11.0
    timings = WorldTimings.measured(SPEC, [17.0], [], reaction(rec), boot_reaction(rec))
    assert sim_config(SPEC, timings).boot_react_delay_seconds == 11.0
    assert sim_config(SPEC, timings).react_delay_seconds == 2.0


def test_with_the_node_watch_a_boot_ends_when_hami_could_place_on_the_node() -> None:
    rec, clock = recorder()
    rec.node_selector = "pool=x"
    rec._pool("MODIFIED", pool(2, {}))
    clock.t = 2.0
    rec._guest("ADDED", guest("c0"))
    rec._guest("ADDED", guest("c1"))
    clock.t = 10.0
    rec._node("ADDED", manifest("c0", allocatable="0"))  # joined, not registered with HAMi yet
    clock.t = 14.0
    rec._node("MODIFIED", manifest("c0"))  # placeable
    clock.t = 20.0
    rec._pool("MODIFIED", pool(2, {"c0": "Ready", "c1": "Ready"}))  # c1's Node not yet
    assert boots(rec) == [14.0]
    clock.t = 23.0
    rec._node("MODIFIED", manifest("c1"))  # after the status said Ready
    assert boots(rec) == [14.0, 23.0] and guest_boots(rec) == [12.0, 21.0]


def test_a_waves_boots_follow_its_cells_names_not_which_create_finished_first() -> None:
    rec, clock = recorder()
    rec._pool("MODIFIED", pool(3, {}))
    for at, name in ((2.0, "pool-2"), (2.1, "pool-0"), (2.2, "pool-1")):  # concurrent creates
        clock.t = at
        rec._guest("ADDED", guest(name))
    for at, name in ((30.0, "pool-0"), (31.0, "pool-1"), (32.0, "pool-2")):
        clock.t = at
        rec._pool("MODIFIED", pool(3, {name: "Ready"}))
    # the simulator's lowest cell of the wave stands for the twin's lowest name
    assert boots(rec) == [30.0, 31.0, 32.0]


def test_the_first_reaction_is_from_the_runs_first_pod_to_its_first_scale_up() -> None:
    rec, clock = recorder()
    clock.t = 0.5
    rec._pod("ADDED", pending_pod("p0"))
    clock.t = 7.0
    rec._pool("MODIFIED", pool(1, {}))
    assert first_reaction(rec) == 6.5
    timings = WorldTimings.measured(SPEC, [17.0], [], 3.0, None, first_reaction(rec))
    assert sim_config(SPEC, timings).first_react_delay_seconds == 6.5
    assert first_reaction(recorder()[0]) is None  # no scale-up yet


def test_a_change_long_after_a_ready_cell_is_not_a_reaction_to_it() -> None:
    rec, clock = recorder()
    rec.boot_reaction_max_s = 20.0
    rec._pool("MODIFIED", pool(1, {}))
    clock.t = 3.0
    rec._guest("ADDED", guest("c0"))
    clock.t = 20.0
    rec._pool("MODIFIED", pool(1, {"c0": "Ready"}))
    clock.t = 550.0
    rec._pool("MODIFIED", pool(0, {"c0": "Ready"}))  # a scale-down after its window
    assert rec.boot_reactions == [] and boot_reaction(rec) is None


def pod(name: str, node: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeName": node} if node else {}}


def test_a_pod_that_waited_for_a_boot_is_timed_from_the_boot_to_its_bind() -> None:
    """The twin's HAMi binds a pod that waited for a cell some time after the cell's boot
    ended. The recorder measures that gap (its median is the simulator's bind delay,
    ``WorldTimings.with_binds``); a pod created after the boot does not count."""
    rec, clock = recorder()
    rec._pool("MODIFIED", pool(1, {}))
    clock.t = 1.0
    rec._guest("ADDED", guest("c0"))
    rec._pod("ADDED", pod("waiting"))
    clock.t = 20.0
    rec._pool("MODIFIED", pool(1, {"c0": "Ready"}))
    clock.t = 20.5
    rec._pod("ADDED", pod("later"))
    clock.t = 23.0
    rec._pod("MODIFIED", pod("waiting", "c0"))
    rec._pod("MODIFIED", pod("later", "c0"))
    assert binds_after_ready(rec) == [3.0]
