"""The twin's removal step, measured from the outside: the recorder logs a guest's deletion
(``guest deleting``, its ``deletionTimestamp`` first seen) and its end (``guest gone``);
``twin_measures.removal_step`` is the median time between two guests gone one after another
while the later one was already being deleted, and ``WorldTimings.with_removal_step`` hands
it to the simulator (``SimConfig.removal_step_seconds``)."""

from __future__ import annotations

from typing import Any

import pytest

from simulations.demo.config import WorldTimings, sim_config
from simulations.demo.run_log import CellEvent
from simulations.demo.twin_measures import removal_step
from tests.unit.test_demo_exec_lag import SPEC, guest, recorder


def deleting(name: str) -> dict[str, Any]:
    meta = {"name": name, "uid": f"uid-{name}", "deletionTimestamp": "2026-12-05T00:00:00Z"}
    return {"metadata": meta}


def test_the_recorder_logs_a_guests_deletion_once_and_only_while_it_lives() -> None:
    rec, clock = recorder()
    rec._guest("ADDED", guest("c0"))
    clock.t = 5.0
    rec._guest("MODIFIED", guest("c0"))  # a status change: not a deletion
    clock.t = 6.0
    rec._guest("MODIFIED", deleting("c0"))
    clock.t = 6.5
    rec._guest("MODIFIED", deleting("c0"))  # the finalizer's release: seen already
    clock.t = 7.0
    rec._guest("DELETED", deleting("c0"))
    rec._guest("MODIFIED", deleting("c9"))  # never seen created: not one of this run's cells
    steps = [(e.time_seconds, e.cell, e.event) for e in rec.cell_events]
    assert steps == [
        (0.0, "c0", "guest created"),
        (6.0, "c0", "guest deleting"),
        (7.0, "c0", "guest gone"),
    ]


def events(*steps: tuple[float, str, str]) -> list[CellEvent]:
    return [CellEvent(t, cell, event) for t, cell, event in steps]


def test_the_step_counts_only_removals_queued_behind_the_one_before() -> None:
    log = events(
        # a batch of three deleted together, gone one after another
        (10.0, "a", "guest deleting"),
        (10.0, "b", "guest deleting"),
        (10.1, "c", "guest deleting"),
        (10.3, "a", "guest gone"),
        (10.5, "b", "guest gone"),  # 0.2 after a
        (10.9, "c", "guest gone"),  # 0.4 after b
        # deleted after c was gone: queued behind nothing, however soon
        (11.0, "d", "guest deleting"),
        (11.2, "d", "guest gone"),
        # gone without a deletion seen (no finalizer): deleted at that instant
        (11.3, "e", "guest gone"),
    )
    assert removal_step(log) == pytest.approx(0.3)  # the median of 0.2 and 0.4


def test_no_queued_removal_leaves_the_timings_as_they_were() -> None:
    single = events((1.0, "a", "guest deleting"), (1.2, "a", "guest gone"))
    assert removal_step(single) is None and removal_step([]) is None
    nominal = WorldTimings.nominal(SPEC)
    assert nominal.with_removal_step(None) is nominal
    assert sim_config(SPEC, nominal).removal_step_seconds == 0.0
    stepped = nominal.with_removal_step(0.25)
    assert sim_config(SPEC, stepped).removal_step_seconds == 0.25
