"""The status diff behind the cell lifecycle metrics, and its shell (leader only, forget)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gpucellpool.api.status import GPUCellPoolStatus
from gpucellpool.kube.access import Access
from gpucellpool.kube.rest import RestClient
from gpucellpool.kube.transport import Connection
from gpucellpool.operator.app import App
from gpucellpool.operator.metrics import OperatorMetrics
from gpucellpool.operator.settings import Settings
from gpucellpool.operator.status_metrics import (
    Capacity,
    Physical,
    StatusMetrics,
    capacity,
    physical,
    status_changes,
)

T0 = 1_800_000_000  # a whole second (status timestamps have second precision)


def _ts(s: int) -> str:
    return dt.datetime.fromtimestamp(T0 + s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def row(name: str, phase: str, at: int, **extra: Any) -> dict[str, Any]:
    index = int(name.rsplit("-", 1)[1])
    return {"name": name, "index": index, "phase": phase, "lastTransitionTime": _ts(at), **extra}


def status(*rows: dict[str, Any], **extra: Any) -> GPUCellPoolStatus:
    return GPUCellPoolStatus.model_validate({"cells": list(rows), **extra})


def cond(type_: str, st: str, reason: str, message: str) -> dict[str, str]:
    return {
        "type": type_,
        "status": st,
        "reason": reason,
        "message": message,
        "lastTransitionTime": _ts(0),
    }


# (case, [statuses in order], expected created, transitions, startups, removed) of the LAST diff
Case = tuple[str, list[GPUCellPoolStatus], int, list[tuple[str, str]], list[float], list[str]]
CASES: list[Case] = [
    ("first sight counts nothing",
     [status(row("p-0", "Ready", 50, readyOnce=True), row("p-1", "Booting", 40))],
     0, [], [], []),
    ("new row is created",
     [status(), status(row("p-0", "Pending", 10))], 1, [], [], []),
    ("phase change is a transition",
     [status(row("p-0", "Pending", 10)), status(row("p-0", "Booting", 20))],
     0, [("Pending", "Booting")], [], []),
    ("unchanged phase is nothing",
     [status(row("p-0", "Booting", 10)), status(row("p-0", "Booting", 10, message="x"))],
     0, [], [], []),
    ("row gone while draining",
     [status(row("p-0", "Deleting", 10)), status()], 0, [], [], ["Drained"]),
    ("row gone while Failed",
     [status(row("p-0", "Failed", 10)), status()], 0, [], [], ["Failed"]),
    ("row gone from any other phase",
     [status(row("p-0", "Ready", 10)), status()], 0, [], [], ["Other"]),
    ("Failed tombstone replaced: removed and created, not a transition",
     [status(row("p-0", "Failed", 10)), status(row("p-0", "Pending", 30))],
     1, [], [], ["Failed"]),
    ("another guestUID: a new cell",
     [status(row("p-0", "Booting", 10, guestUID="a")),
      status(row("p-0", "Booting", 10, guestUID="b"))], 1, [], [], ["Other"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("statuses", "created", "transitions", "startups", "removed"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_last_diff(
    statuses: list[GPUCellPoolStatus],
    created: int,
    transitions: list[tuple[str, str]],
    startups: list[float],
    removed: list[str],
) -> None:
    previous: GPUCellPoolStatus | None = None
    born: dict[str, float] = {}
    for current in statuses:
        changes = status_changes(previous, current, born)
        previous, born = current, dict(changes.born)
    assert changes.created == created
    assert list(changes.transitions) == transitions
    assert list(changes.startup_seconds) == startups
    assert list(changes.removed) == removed


def _run(
    statuses: list[GPUCellPoolStatus], born: dict[str, float] | None = None
) -> dict[str, list[Any]]:
    """Totals over a sequence, starting from a first sight."""
    previous, born = None, dict(born or {})
    total: dict[str, list[Any]] = {"created": [], "transitions": [], "startup": [], "removed": []}
    for current in statuses:
        c = status_changes(previous, current, born)
        previous, born = current, dict(c.born)
        total["created"].append(c.created)
        total["transitions"] += c.transitions
        total["startup"] += c.startup_seconds
        total["removed"] += c.removed
    return total


def test_startup_is_creation_to_first_ready_from_the_rows_own_timestamps() -> None:
    t = _run([
        status(),
        status(row("p-0", "Pending", 100)),
        status(row("p-0", "Booting", 105)),
        status(row("p-0", "Ready", 280, readyOnce=True)),
    ])  # fmt: skip
    assert t["startup"] == [180.0]
    assert t["created"] == [0, 1, 0, 0]
    assert t["transitions"] == [("Pending", "Booting"), ("Booting", "Ready")]


def test_flapping_counts_every_transition_but_startup_once() -> None:
    t = _run([
        status(),
        status(row("p-0", "Pending", 0)),
        status(row("p-0", "Ready", 60, readyOnce=True)),
        status(row("p-0", "Joining", 70, readyOnce=True)),
        status(row("p-0", "Ready", 80, readyOnce=True)),
        status(row("p-0", "AwaitingGPUCapacity", 90, readyOnce=True)),
        status(row("p-0", "Ready", 95, readyOnce=True)),
    ])  # fmt: skip
    assert t["startup"] == [60.0]
    assert len(t["transitions"]) == 5
    assert t["transitions"].count(("Ready", "Joining")) == 1


def test_creation_not_seen_means_no_startup_observation() -> None:
    # First sight (restart / takeover) finds the cell already booting: its creation is unknown.
    t = _run([
        status(row("p-0", "Booting", 100)),
        status(row("p-0", "Ready", 200, readyOnce=True)),
    ])  # fmt: skip
    assert t["startup"] == [] and t["transitions"] == [("Booting", "Ready")]


def test_first_sight_of_a_pending_row_knows_its_creation() -> None:
    t = _run([status(row("p-0", "Pending", 100)), status(row("p-0", "Ready", 130, readyOnce=True))])
    assert t["startup"] == [30.0] and t["created"] == [0, 0]


def test_restart_with_remembered_births_is_a_first_sight_again() -> None:
    # The shell forgets on a new term; only a Pending row's creation is re-learned.
    first = _run([status(), status(row("p-0", "Pending", 0), row("p-1", "Pending", 0))])
    assert first["created"] == [0, 2]
    after = _run([
        status(row("p-0", "Booting", 10), row("p-1", "Pending", 0)),
        status(row("p-0", "Ready", 40, readyOnce=True), row("p-1", "Ready", 50, readyOnce=True)),
    ])  # fmt: skip
    assert after["created"] == [0, 0]
    assert after["startup"] == [50.0]  # p-1 only: p-0 was past Pending at first sight


def test_ready_once_row_entering_ready_again_is_not_a_new_startup() -> None:
    t = _run([
        status(row("p-0", "Pending", 0)),
        status(row("p-0", "Joining", 10, readyOnce=True)),
        status(row("p-0", "Ready", 20, readyOnce=True)),
    ])  # fmt: skip
    assert t["startup"] == []


def test_replacement_has_its_own_startup() -> None:
    t = _run([
        status(),
        status(row("p-0", "Pending", 0)),
        status(row("p-0", "Failed", 900)),
        status(row("p-0", "Pending", 1000)),
        status(row("p-0", "Ready", 1100, readyOnce=True)),
    ])  # fmt: skip
    assert t["startup"] == [100.0]
    assert t["created"] == [0, 1, 0, 1, 0]
    assert t["removed"] == ["Failed"]
    assert t["transitions"] == [("Pending", "Failed"), ("Pending", "Ready")]


def test_born_is_kept_only_for_current_unready_rows() -> None:
    c = status_changes(
        status(row("p-0", "Pending", 0), row("p-1", "Pending", 5)),
        status(row("p-1", "Ready", 65, readyOnce=True), row("p-2", "Pending", 70)),
        {"p-0": float(T0), "p-1": float(T0 + 5)},
    )
    assert c.born == {"p-2": float(T0 + 70)}
    assert c.startup_seconds == (60.0,) and c.removed == ("Other",) and c.created == 1


PHYSICAL = [
    ("written fields win", {"physicalCapacity": {"gpus": 3, "freeGPUsInCluster": 5}},
     Physical(3, 5)),
    ("written, free unknown", {"physicalCapacity": {"gpus": 3}}, Physical(3, None)),
    ("condition: free devices", {"conditions": [cond(
        "PhysicalGPUsAvailable", "True", "FreeDevices", "7 free physical GPU(s)")]},
     Physical(2, 7)),
    ("condition: none free", {"conditions": [cond(
        "PhysicalGPUsAvailable", "False", "InsufficientPhysicalGPU", "no free physical GPU")]},
     Physical(2, 0)),
    ("condition: unknown", {"conditions": [cond(
        "PhysicalGPUsAvailable", "Unknown", "Unknown", "unreadable")]}, Physical(2, None)),
    ("no condition yet", {}, Physical(2, None)),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "want"), [p[1:] for p in PHYSICAL], ids=[p[0] for p in PHYSICAL])
def test_physical(extra: dict[str, Any], want: Physical) -> None:
    rows = (row("p-0", "Ready", 0, devices=["0000:01:00.0"]), row("p-1", "Booting", 0,
            devices=["0000:02:00.0"]), row("p-2", "Pending", 0))  # fmt: skip
    assert physical(status(*rows, **extra)) == want


GIB = 2**30
CAPACITY = [
    ("written workloadCapacity", {"workloadCapacity": {
        "gpuDevices": 2, "gpuMemory": {"total": "48Gi", "allocated": "24Gi", "available": "24Gi"},
        "gpuCompute": {"total": "200", "allocated": "50", "available": "150"}}},
     Capacity(2, {"total": 48 * GIB, "allocated": 24 * GIB, "available": 24 * GIB},
              {"total": 200, "allocated": 50, "available": 150})),
    ("condition: free", {"conditions": [cond("CapacityAvailable", "True", "CapacityFree",
        "1024/24576 MiB, 30/100% cores allocated")]},
     Capacity(1, {"total": 24 * GIB, "allocated": GIB, "available": 23 * GIB},
              {"total": 100, "allocated": 30, "available": 70})),
    ("condition: saturated", {"conditions": [cond("CapacityAvailable", "False", "Saturated",
        "24576/24576 MiB, 100/100% cores allocated")]},
     Capacity(1, {"total": 24 * GIB, "allocated": 24 * GIB, "available": 0},
              {"total": 100, "allocated": 100, "available": 0})),
    ("condition: heterogeneous has no compute", {"conditions": [cond(
        "CapacityAvailable", "True", "Heterogeneous", "0/2048 MiB, 0/200% cores allocated")]},
     Capacity(1, {"total": 2 * 1024 * 2**20, "allocated": 0, "available": 2 * 1024 * 2**20},
              None)),
    ("condition: scaled to zero", {"conditions": [cond(
        "CapacityAvailable", "False", "ScaledToZero", "the pool has no cell")]},
     Capacity(1, {"total": 0, "allocated": 0, "available": 0},
              {"total": 0, "allocated": 0, "available": 0})),
    ("condition: unknown", {"conditions": [cond("CapacityAvailable", "Unknown", "Unknown",
        "no Ready cell yet")]}, Capacity(1, None, None)),
    ("nothing", {}, Capacity(1, None, None)),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "want"), [c[1:] for c in CAPACITY], ids=[c[0] for c in CAPACITY])
def test_capacity(extra: dict[str, Any], want: Capacity) -> None:
    rows = (row("p-0", "Ready", 0, capacityDevices=1), row("p-1", "Booting", 0))
    assert capacity(status(*rows, **extra)) == want


ZERO_MEMORY = {"total": "0", "allocated": "0", "available": "0"}


def _written(observed_at: int, **extra: Any) -> dict[str, Any]:
    return {"gpuDevices": 1, "gpuMemory": {"total": "8Gi", "allocated": "0", "available": "8Gi"},
            "lastObserved": _ts(observed_at), **extra}  # fmt: skip


def _unknown_since(at: int) -> dict[str, Any]:
    return {**cond("CapacityAvailable", "Unknown", "Unknown", "any message"),
            "lastTransitionTime": _ts(at)}  # fmt: skip


def test_a_reading_kept_after_a_failed_read_is_unknown_not_stale() -> None:
    """The provisioner keeps workloadCapacity on a failed read; the metric does not."""
    rows = (row("p-0", "Ready", 0, capacityDevices=1),)
    kept = status(*rows, workloadCapacity=_written(10), conditions=[_unknown_since(20)])
    assert capacity(kept) == Capacity(None, None, None)
    # read in the same pass the condition went Unknown (no Ready cell yet, no healthy
    # device): a real reading, written with it
    fresh = status(*rows, workloadCapacity=_written(20, gpuDevices=0, gpuMemory=ZERO_MEMORY),
                   conditions=[_unknown_since(20)])  # fmt: skip
    assert capacity(fresh) == Capacity(0, {"total": 0, "allocated": 0, "available": 0}, None)
    # the condition is known: the object is this pass's reading, whatever its age
    known = [{**_unknown_since(20), "status": "True", "reason": "CapacityFree"}]
    assert capacity(status(*rows, workloadCapacity=_written(10), conditions=known)).devices == 1


def test_written_objects_win_over_condition_messages() -> None:
    """Once the provisioner writes the objects, the messages are never parsed."""
    msg = cond("CapacityAvailable", "True", "CapacityFree", "1/2 MiB, 3/4% cores allocated")
    phys = cond("PhysicalGPUsAvailable", "True", "FreeDevices", "9 free physical GPU(s)")
    st = status(row("p-0", "Ready", 0, capacityDevices=5), workloadCapacity=_written(0),
                physicalCapacity={"gpus": 1}, conditions=[msg, phys])  # fmt: skip
    assert capacity(st).memory_bytes == {"total": 8 * GIB, "allocated": 0, "available": 8 * GIB}
    assert capacity(st).devices == 1
    assert physical(st) == Physical(1, None)


def test_capacity_devices_unknown_when_a_ready_row_is_unknown() -> None:
    assert capacity(status(row("p-0", "Ready", 0))).devices is None


# -- the shell --------------------------------------------------------------------------------


def _pool(st: GPUCellPoolStatus | dict[str, Any]) -> dict[str, Any]:
    body = st if isinstance(st, dict) else st.model_dump(mode="json", by_alias=True)
    return {"metadata": {"namespace": "ns", "name": "p"}, "status": body}


def _v(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, {"namespace": "ns", "pool": "p", **labels})


def test_shell_records_only_while_leading_and_forgets_on_delete() -> None:
    reg = CollectorRegistry()
    leading = [False]
    shell = StatusMetrics(OperatorMetrics(reg), lambda: leading[0])
    shell.observe("ADDED", _pool(status(row("p-0", "Pending", 0))))
    assert _v(reg, "gpucell_physical_gpus", state="held") is None  # standby: nothing
    leading[0] = True
    shell.observe("MODIFIED", _pool(status(row("p-0", "Pending", 0))))  # first sight
    assert _v(reg, "gpucellpool_cells_created_total") == 0
    assert _v(reg, "gpucell_physical_gpus", state="held") == 0
    for reason in ("Drained", "Failed", "Other"):  # counters exist at 0 from the first sight
        assert _v(reg, "gpucellpool_cells_removed_total", reason=reason) == 0
    shell.observe("MODIFIED", _pool(status(row("p-0", "Ready", 90, readyOnce=True),
                                           row("p-1", "Pending", 95))))  # fmt: skip
    assert _v(reg, "gpucellpool_cells_created_total") == 1
    assert _v(reg, "gpucell_cell_transitions_total", **{"from": "Pending", "to": "Ready"}) == 1
    assert _v(reg, "gpucellpool_cell_startup_seconds_count") == 1
    assert _v(reg, "gpucellpool_cell_startup_seconds_sum") == 90
    assert _v(reg, "gpucell_cell_startup_seconds_count") == 1
    shell.observe("MODIFIED", _pool(status(row("p-0", "Ready", 90, readyOnce=True))))
    assert _v(reg, "gpucellpool_cells_removed_total", reason="Other") == 1
    shell.observe("DELETED", _pool(status()))
    assert _v(reg, "gpucellpool_cells_created_total") is None


def test_shell_reset_makes_the_next_event_a_first_sight() -> None:
    reg = CollectorRegistry()
    shell = StatusMetrics(OperatorMetrics(reg), lambda: True)
    shell.observe("ADDED", _pool(status()))
    shell.reset()
    shell.observe("MODIFIED", _pool(status(row("p-0", "Booting", 0))))
    assert _v(reg, "gpucellpool_cells_created_total") == 0


def test_shell_skips_an_unreadable_status() -> None:
    reg = CollectorRegistry()
    shell = StatusMetrics(OperatorMetrics(reg), lambda: True)
    shell.observe("ADDED", _pool({"cells": [{"name": "p-0"}]}))  # no index, no phase
    assert _v(reg, "gpucell_physical_gpus", state="held") is None


# -- the App's wiring -------------------------------------------------------------------------


async def test_app_takeover_is_a_first_sight_and_standby_records_nothing() -> None:
    reg = CollectorRegistry()
    app = App(Settings(identity="a", lease_namespace="ns", pool_namespace="ns"),
              RestClient(Connection(Access("http://127.0.0.1:9"))), registry=reg)  # fmt: skip
    try:
        cache = app.pool_caches[0]
        booting = _pool(status(row("p-0", "Booting", 0)))
        cache.objects["ns/p"] = booting
        app._pool_changed("ADDED", booting)  # standby
        assert _v(reg, "gpucell_physical_gpus", state="held") is None
        app.elector.is_leader = True
        app._leadership(True)  # takeover: replays the cache as a first sight
        assert _v(reg, "gpucellpool_cells_created_total") == 0
        assert _v(reg, "gpucell_physical_gpus", state="held") == 0
        ready = _pool(status(row("p-0", "Ready", 60, readyOnce=True)))
        app._pool_changed("MODIFIED", ready)
        assert _v(reg, "gpucell_cell_transitions_total", **{"from": "Booting", "to": "Ready"}) == 1
        assert _v(reg, "gpucellpool_cell_startup_seconds_count") is None  # creation not seen
        app._pool_changed("DELETED", ready)
        assert _v(reg, "gpucellpool_cells_created_total") is None
    finally:
        await app.autoscaler.close()
        await app.infra.close()
