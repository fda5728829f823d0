"""Where the twin and the simulator part (simulations.demo.divergence, fidelity_dump): the pure
parts on hand-made values, the recorder's decision log, and a dump replayed to the very numbers
``build_report`` gives for the same run."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from autoscaler.policy.types import GPUAsk
from gpucellpool.cli import main
from gpucellpool.runtime.errors import UserError
from simulations.demo.config import HOUR, DemoSpec, compressed_pods
from simulations.demo.divergence import (
    DecisionEntry,
    Interval,
    PodStart,
    cell_event_lines,
    changes,
    describe,
    largest_differences,
    out_of_tolerance,
    pod_starts,
    resimulate,
    side_by_side,
    twin_log,
    window,
)
from simulations.demo.fidelity_dump import (
    DUMP_ENV,
    PodSeen,
    dump_if_asked,
    dump_of,
    load_dump,
    write_dump,
)
from simulations.demo.recorder import Recorder
from simulations.demo.report import build_report
from simulations.demo.run_log import CellEvent, DecisionSeen
from simulations.demo.twin_records import PodTimes, Snapshot
from simulations.demo.twin_run import TwinResult
from simulations.simulator.fidelity import compare
from simulations.simulator.traces import TracePod
from tests.unit.test_demo_exec_lag import guest, pool, recorder
from tests.unit.test_twin_hami_placement import manifest

SPEC = replace(DemoSpec(), start_seconds=148 * 86400 + 15 * HOUR, hours=0.5, multiplier=0.4)


def entry(at: float, reason: str = "Idle", target: int = 0, message: str = "") -> DecisionEntry:
    return DecisionEntry(at, reason, target, message)


# -- intervals ----------------------------------------------------------------------------------


def test_intervals_are_the_stretches_more_than_one_cell_apart() -> None:
    twin = [(0.0, 0.0), (10.0, 5.0), (20.0, 6.0), (40.0, 2.0), (60.0, 4.0)]
    sim = [(0.0, 0.0), (10.0, 3.0), (30.0, 5.0), (50.0, 1.0)]
    got = out_of_tolerance(twin, sim, 0.0, 100.0)
    # [10, 20): 5 vs 3, [20, 30): 6 vs 3 (one stretch, two pieces); [30, 40): 6 vs 5 within;
    # [40, 50): 2 vs 5; [50, 60): 2 vs 1 within; [60, 100): 4 vs 1
    assert got == (
        Interval(10.0, 30.0, (5.0, 6.0), (3.0, 3.0)),
        Interval(40.0, 50.0, (2.0,), (5.0,)),
        Interval(60.0, 100.0, (4.0,), (1.0,)),
    )
    outside = sum(i.duration_seconds for i in got)
    assert outside == pytest.approx((1 - compare(twin, sim, 0.0, 100.0).within_fraction) * 100)


def test_one_cell_apart_is_no_interval_and_the_horizon_clips() -> None:
    assert out_of_tolerance([(0.0, 4.0)], [(0.0, 3.0)], 0.0, 50.0) == ()
    # unsorted, repeated points are normalised as the fidelity does; the end clips the last
    got = out_of_tolerance([(20.0, 9.0), (0.0, 1.0), (20.0, 3.0)], [(5.0, 0.0)], 5.0, 15.0)
    assert got == ()
    got = out_of_tolerance([(0.0, 1.0), (8.0, 3.0)], [(0.0, 0.0)], 0.0, 15.0)
    assert got == (Interval(8.0, 15.0, (3.0,), (0.0,)),)


# -- logs ---------------------------------------------------------------------------------------


def test_changes_keep_a_decision_once_until_it_changes() -> None:
    log = [entry(1), entry(2), entry(3, "ScaledUp", 2), entry(4, "ScaledUp", 2), entry(5)]
    assert [e.time_seconds for e in changes(log)] == [1, 3, 5]
    idle = replace(entry(6), idle_since=(("c0", 4.0),))
    assert changes([entry(5), idle]) == (entry(5), idle)  # a new idle cell is a change


def test_a_window_is_led_by_the_decision_in_force_at_its_start() -> None:
    log = [entry(1), entry(4, "ScaledUp", 3), entry(7, "Idle", 3), entry(12, "ScaledDown", 2)]
    got = window(log, 5.0, 12.0)
    assert [e.time_seconds for e in got] == [4, 7, 12]  # 4 was in force at 5; 12 is the end
    assert window(log, 0.0, 0.5) == ()
    assert [e.time_seconds for e in window(log, 20.0, 30.0)] == [12]


def test_side_by_side_rows_are_in_time_order_in_each_sides_column() -> None:
    twin = [entry(1.0, "ScaledUp", 3, "three pods"), entry(5.0, "Idle", 3)]
    sim = [entry(1.0, "ScaledUp", 2, "two pods " * 6), entry(3.0, "ScaledDown", 1)]
    lines = side_by_side(twin, sim, width=30)
    assert lines[0].split("|")[1].strip() == "twin"
    rows = [line.split(" | ") for line in lines[1:]]
    assert rows[0][0].strip() == "1.00" and rows[0][1].startswith("ScaledUp 3: three pods")
    assert rows[1][0].strip() == "1.00" and rows[1][2].startswith("ScaledUp 2: two pods")
    wrapped = [r for r in rows if not r[0].strip()]  # the simulator's long message, continued
    assert wrapped and all(r[1].strip() == "" and 0 < len(r[2]) <= 30 for r in wrapped)
    times = [r[0].strip() for r in rows if r[0].strip()]
    assert times == ["1.00", "1.00", "3.00", "5.00"]
    assert rows[-1][1].startswith("Idle 3") and len(rows[-1]) == 2  # nothing on the right


def test_an_entry_reads_reason_target_message_then_idle_cells() -> None:
    idle = (("c1", 4.25), ("c3", 10.0))
    got = describe(DecisionEntry(2.0, "ScaledDown", 2, "one\n  idle cell", idle))
    assert got == "ScaledDown 2: one idle cell (idle c1@4.2 c3@10.0)"
    assert describe(entry(0.0, "", 0)) == "- 0"  # the pool's status before its first decision


def test_the_twins_log_gives_idle_times_in_the_runs_seconds() -> None:
    zero = 1_700_000_000.0
    memory = json.dumps({"v": 1, "idle": {"demo-1": zero + 42.5}})
    decisions = [
        DecisionSeen(-2.0, "Idle", 0, "nothing"),
        DecisionSeen(3.0, "ScaledUp", 2, "2 pods", policy_memory='{"v":1,"rec":[[1,2]]}'),
        DecisionSeen(4.0, "ScaledUp", 2, "2 pods", policy_memory='{"v":1,"rec":[[2,2]]}'),
        DecisionSeen(50.0, "ScaledUp", 2, "2 pods", policy_memory=memory),
    ]
    got = twin_log(decisions, zero)
    assert [e.time_seconds for e in got] == [-2.0, 3.0, 50.0]  # 4.0 changed no idle cell
    assert got[-1].idle_since == (("demo-1", 42.5),)


# -- pods ---------------------------------------------------------------------------------------


def pod(key: str, arrival: float) -> TracePod:
    return TracePod(key, arrival, 10.0, GPUAsk())


def test_pod_starts_pair_the_twins_bind_with_the_simulators_arrival_plus_wait() -> None:
    pods = (pod("a", 0.0), pod("b", 5.0), pod("c", 2.0))  # the simulator's order: a, c, b
    waits = (1.0, 3.0, 0.5)  # a, c, b
    twin = {
        "trace-00000": PodSeen(0.0, 1.5, 11.5, "demo-0"),
        "trace-00001": PodSeen(5.0, None, None, ""),
    }
    got = pod_starts(pods, waits, twin)
    assert got == (
        PodStart("trace-00000", 0.0, 1.5, 1.0),
        PodStart("trace-00001", 5.0, None, 5.5),
        PodStart("trace-00002", 2.0, None, 5.0),
    )
    assert got[0].difference_seconds == pytest.approx(0.5)
    assert pod_starts(pods, waits[:2], twin) == ()  # the simulator left one out


def test_the_largest_differences_come_first_never_bound_before_all() -> None:
    starts = [
        PodStart("p0", 0.0, 2.0, 1.0),
        PodStart("p1", 0.0, 1.0, 4.0),
        PodStart("p2", 0.0, None, 1.0),
        PodStart("p3", 0.0, 1.0, 1.1),
    ]
    assert [s.name for s in largest_differences(starts, 3)] == ["p2", "p1", "p0"]


# -- the recorder -------------------------------------------------------------------------------


def status(reason: str, target: int, message: str, memory: str = "") -> dict[str, object]:
    last = {"reason": reason, "desiredReplicas": target, "message": message}
    return {"status": {"desiredReplicas": target, "lastDecision": last, "policyMemory": memory}}


def test_the_recorder_logs_each_change_of_decision_or_memory() -> None:
    rec, clock = recorder()
    rec._pool("MODIFIED", status("Idle", 0, "nothing"))
    clock.t = 1.0
    rec._pool("MODIFIED", status("Idle", 0, "nothing"))  # another status write: no change
    clock.t = 2.0
    rec._pool("MODIFIED", status("ScaledUp", 2, "2 pods"))
    clock.t = 3.0
    rec._pool("MODIFIED", status("ScaledUp", 2, "2 pods", '{"v":1}'))
    assert [(d.time_seconds, d.reason, d.policy_memory) for d in rec.decisions] == [
        (0.0, "Idle", ""),
        (2.0, "ScaledUp", ""),
        (3.0, "ScaledUp", '{"v":1}'),
    ]


def test_the_recorder_logs_each_cells_steps() -> None:
    # a boot cancelled as its Node joined: created, Node placeable, row Deleting, guest gone
    rec, clock = recorder()
    rec._guest("ADDED", guest("pool-1"))
    clock.t = 1.0
    rec._pool("MODIFIED", pool(1, {"pool-1": "Booting"}))
    rec._pool("MODIFIED", pool(1, {"pool-1": "Booting"}))  # no change: no step
    clock.t = 2.0
    rec._node("ADDED", manifest("pool-1"))
    clock.t = 2.5
    rec._pool("MODIFIED", pool(0, {"pool-1": "Deleting"}))
    clock.t = 3.0
    rec._guest("DELETED", guest("pool-1"))
    rec._node("DELETED", manifest("pool-1"))
    assert [(e.time_seconds, e.cell, e.event) for e in rec.cell_events] == [
        (0.0, "pool-1", "guest created"),
        (1.0, "pool-1", "row Booting"),
        (2.0, "pool-1", "Node placeable"),
        (2.5, "pool-1", "row Deleting"),
        (3.0, "pool-1", "guest gone"),
        (3.0, "pool-1", "Node gone"),
    ]


def test_cell_steps_print_one_line_per_cell_and_instant_within_the_window() -> None:
    events = [
        CellEvent(1.0, "c-1", "guest created"),
        CellEvent(5.0, "c-1", "row Deleting"),
        CellEvent(5.001, "c-1", "guest gone"),
        CellEvent(5.0, "c-2", "Node placeable"),
        CellEvent(9.0, "c-2", "row Ready"),
    ]
    assert cell_event_lines(events, 2.0, 6.0) == [
        "the twin's cells from 2.00 to 6.00 s:",
        "     5.00 c-1: row Deleting, guest gone",
        "     5.00 c-2: Node placeable",
    ]
    assert cell_event_lines(events, 10.0, 11.0) == []


def test_the_replay_restart_shifts_the_decisions_to_its_clock() -> None:
    rec = Recorder(None, None, "ns", "pool")  # type: ignore[arg-type]  # no watch is started
    rec.t0 = time.monotonic() - 10.0  # seen 10 s ago
    rec.decisions = [DecisionSeen(0.0, "Idle", 0, "")]
    rec.restart_clock()
    assert -11.0 < rec.decisions[0].time_seconds <= -10.0


# -- dump and replay ----------------------------------------------------------------------------


def snapshot(at: float, cells: int) -> Snapshot:
    return Snapshot(at, cells, cells, 0, cells, 0, 0, 0, 0)


def twin_run() -> TwinResult:
    """A made-up twin recording of the fidelity test's slice (no live world)."""
    rec = Recorder(None, None, "ns", "demo")  # type: ignore[arg-type]  # no watch is started
    rec.samples = [snapshot(t, n) for t, n in [(0, 0), (2, 4), (20, 9), (40, 6), (80, 1)]]
    rec.pods = {"trace-00000": PodTimes(0.0, 3.0, "demo-0", 20.0)}
    rec.decisions = [DecisionSeen(1.0, "ScaledUp", 4, "4 pods", "", '{"v":1,"idle":{}}')]
    rec.ready_after = [(0.0, 0.0, 4.0), (0.0, 1.0, 5.0)]  # measured boots
    rec.drains = [2.0]
    return TwinResult(SPEC, compressed_pods(SPEC), rec, 95.0, 95.0, {}, "demo-x", {})


def test_a_dump_replays_to_the_reports_fidelity(tmp_path: Path) -> None:
    run = twin_run()
    report = build_report(run)
    written = dump_of(run)
    dump = load_dump(write_dump(written, tmp_path))
    assert dump == written  # JSON gives back every value exactly
    assert dump.timings == report.timings and dump.timings.boots == (4.0, 5.0)
    replayed = resimulate(dump, dump.timings)
    assert replayed.fidelity == report.fidelity  # the same numbers, not close ones
    assert replayed.log and replayed.log[0].time_seconds >= 0.0
    assert len({e.key() for e in replayed.log}) > 1


def test_the_command_prints_the_numbers_and_the_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = twin_run()
    path = write_dump(dump_of(run), tmp_path)
    assert main(["fidelity-diff", str(path), "--pods", "2"]) == 0
    out = capsys.readouterr().out
    within = f"{100 * build_report(run).fidelity.within_fraction:.1f} %"
    assert f"within +/-1 cell: **{within}**" in out
    assert "interval(s) out of tolerance" in out and "| simulator" in out
    assert "the 2 pods whose start differs most" in out


def test_the_dump_is_written_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DUMP_ENV, raising=False)
    assert dump_if_asked(twin_run()) is None
    monkeypatch.setenv(DUMP_ENV, str(tmp_path / "dumps"))
    path = dump_if_asked(twin_run())
    assert path is not None and path.parent == tmp_path / "dumps"
    assert json.loads(path.read_text())["version"] == 1


def test_a_file_that_is_no_dump_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("not json")
    with pytest.raises(UserError, match="not JSON"):
        load_dump(bad)
    bad.write_text('{"version": 2}')
    with pytest.raises(UserError, match="version 2"):
        load_dump(bad)
    bad.write_text('{"version": 1, "spec": {}}')
    with pytest.raises(UserError, match="not a fidelity dump"):
        load_dump(bad)
