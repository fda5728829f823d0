"""Gangs in the simulator: the trace column, when a gang starts, per-pod vs atomic scale-up."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from autoscaler.policy import gang as gang_policy
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellShape, GPUAsk
from gpucellpool.cli import main
from simulations.simulator.engine import (
    BootModel,
    DrainMode,
    ProductionPolicy,
    ScalingPolicy,
    SimConfig,
    simulate,
)
from simulations.simulator.engine.gangs import GangBook, GangScaleUp
from simulations.simulator.engine.policy import atomic_gang_policy
from simulations.simulator.engine.world import Running
from simulations.simulator.report import markdown
from simulations.simulator.report.summary import summarise
from simulations.simulator.traces import RescaleSpec, TracePod, load_generic, rescale, write_generic
from simulations.simulator.traces.detect import load_trace, require_well_formed
from simulations.simulator.traces.generic import parse_generic
from simulations.simulator.traces.model import TraceError
from simulations.simulator.traces.synthetic import synthetic_gangs

WHOLE = GPUAsk(memory_percent=100, cores_percent=100)
FIXED_BOOT = BootModel(median_seconds=300.0, sigma=0.0)


def _gang(gang: str, size: int, at: float, seconds: float = 600.0) -> list[TracePod]:
    return [TracePod(f"{gang}-{i}", at, seconds, WHOLE, gang=gang) for i in range(size)]


def _config(max_cells: int, min_cells: int = 0, **kw: object) -> SimConfig:
    policy = PolicyConfig(max_replicas=max_cells, min_replicas=min_cells)
    return SimConfig(policy_config=policy, boot=FIXED_BOOT, **kw)  # type: ignore[arg-type]


# ----- the trace column ----------------------------------------------------------------------


def test_gang_column_is_read_from_csv_and_jsonl_and_old_traces_have_none() -> None:
    csv_text = (
        "key,arrival_seconds,duration_seconds,gang\n"
        "j/a,0,60, job-1 \n"  # surrounding spaces are trimmed
        "j/b,0,60,job-1\n"
        "solo,5,60,\n"
    )
    pods = {p.key: p for p in parse_generic(io.StringIO(csv_text), jsonl=False).pods}
    assert (pods["j/a"].gang, pods["j/b"].gang, pods["solo"].gang) == ("job-1", "job-1", "")
    jsonl = '{"arrival_seconds": 0, "duration_seconds": 9, "gang": 7}\n'
    assert parse_generic(io.StringIO(jsonl), jsonl=True).pods[0].gang == "7"
    old = "arrival_seconds,duration_seconds\n0,10\n"
    assert parse_generic(io.StringIO(old), jsonl=False).pods[0].gang == ""


@pytest.mark.parametrize(
    ("text", "jsonl"),
    [
        ("arrival_seconds,duration_seconds,gang\n0,10,two words\n", False),
        ("arrival_seconds,duration_seconds,gang\n0,10," + "g" * 254 + "\n", False),
        ('{"arrival_seconds": 0, "duration_seconds": 9, "gang": ["a"]}\n', True),
        ('{"arrival_seconds": 0, "duration_seconds": 9, "gang": true}\n', True),
    ],
)
def test_a_bad_gang_id_is_a_malformed_row_naming_the_column(text: str, jsonl: bool) -> None:
    loaded = parse_generic(io.StringIO(text), jsonl=jsonl)
    assert loaded.pods == ()
    assert loaded.malformed[0].line == (1 if jsonl else 2)
    assert loaded.malformed[0].reason.startswith("gang=")


def test_a_bad_gang_row_fails_the_load_or_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "g.csv"
    path.write_text("arrival_seconds,duration_seconds,gang\n0,10,ok\n0,10,not ok\n")
    loaded = load_trace(path)
    with pytest.raises(TraceError, match=r"g\.csv:3: gang="):
        require_well_formed(loaded, path)
    assert [p.gang for p in loaded.pods] == ["ok"]  # what --skip-malformed keeps
    assert "1 malformed (line 3: gang=" in loaded.summary()


def test_the_generic_writer_round_trips_gangs(tmp_path: Path) -> None:
    pods = (*_gang("g", 2, 0.0), TracePod("solo", 1.5, 9.0, WHOLE))
    write_generic(pods, tmp_path / "t.csv")
    assert load_generic(tmp_path / "t.csv").pods == pods


def test_rescale_copies_a_gang_whole_with_one_jitter() -> None:
    pods = tuple(_gang("g", 4, 1000.0))
    out = rescale(pods, RescaleSpec(arrival_multiplier=2.0, jitter_seconds=300.0, seed=3))
    copies = [p for p in out if p.gang == "g#1"]
    assert len([p for p in out if p.gang == "g"]) == 4
    assert len(copies) == 4
    assert len({p.arrival_seconds for p in copies}) == 1  # arrive together
    assert copies[0].arrival_seconds != 1000.0


def test_synthetic_gangs_are_seeded_and_members_arrive_and_run_together() -> None:
    pods = synthetic_gangs(0.5, gangs_per_hour=2.0, seed=4)
    assert pods == synthetic_gangs(0.5, gangs_per_hour=2.0, seed=4)
    assert pods != synthetic_gangs(0.5, gangs_per_hour=2.0, seed=5)
    gangs: dict[str, list[TracePod]] = {}
    for pod in pods:
        if pod.gang:
            gangs.setdefault(pod.gang, []).append(pod)
    assert gangs and all(2 <= len(m) <= 16 for m in gangs.values())
    for members in gangs.values():
        assert len({(p.arrival_seconds, p.duration_seconds) for p in members}) == 1


# ----- engine semantics ----------------------------------------------------------------------


def test_a_gang_starts_only_when_its_last_member_is_placed() -> None:
    # one Ready cell (minReplicas 1); a gang of 2 arrives at 105 s: the first member is placed
    # at once and idles, the second waits for a new cell (react 1 s + boot 300 s)
    pods = tuple(_gang("g", 2, 105.0, seconds=600.0))
    result = simulate(pods, ProductionPolicy(), _config(max_cells=2, min_cells=1))
    start = 105.0 + 1.0 + 300.0
    assert result.gangs.waits_seconds == pytest.approx((start - 105.0,))
    assert result.gangs.partial_gpu_hours == pytest.approx((start - 105.0) / 3600.0)
    assert result.end_seconds == pytest.approx(start + 600.0)  # both end 600 s after the start
    assert result.gangs.unstarted == 0


def test_per_pod_scales_up_for_part_of_a_gang_atomic_adds_none() -> None:
    # a gang of 3 on a pool capped at 2 cells: per pod buys 2 cells that idle for ever
    pods = tuple(_gang("g", 3, 0.0))
    config = _config(max_cells=2, warm_start=False, tail_seconds=3600.0)
    per_pod = simulate(pods, ProductionPolicy(), config)
    atomic = simulate(pods, atomic_gang_policy(), config)
    assert per_pod.scale_up_cells == 2
    assert per_pod.gangs.unstarted == 1
    assert per_pod.gangs.partial_gpu_hours > 0.9  # two GPUs held, idle, for the tail
    assert atomic.scale_up_cells == 0
    assert atomic.cost_cell_hours == 0.0
    assert atomic.gangs.unstarted == 1
    assert atomic.unplaced == 3
    assert dict(atomic.gangs.admissions)[gang_policy.AT_MAX_REPLICAS] >= 1


def test_atomic_adds_every_cell_of_a_gang_in_one_decision() -> None:
    pods = (TracePod("solo", 10.0, 60.0, WHOLE), *_gang("g", 3, 55.0))  # in arrival order
    config = _config(max_cells=10, warm_start=False)
    # exact cells: spare boots (test_policy_hedge.py) would add 2 once the solo cell is Ready
    config = replace(config, policy_config=replace(config.policy_config, boot_hedge_fraction=0))
    result = simulate(pods, atomic_gang_policy(), config)
    reasons = dict(result.reasons)
    assert result.scale_up_cells == 4  # 1 for the single pod, then 3 for the gang at once
    assert reasons["ScaledUp"] == 2
    assert dict(result.gangs.admissions) == {gang_policy.SCALE_UP: 1}
    assert result.gangs.waits_seconds == pytest.approx((1.0 + 300.0,))
    assert result.gangs.partial_gpu_hours == 0.0  # all three land when their cells boot


def test_a_waiting_atomic_gang_does_not_block_a_later_one_that_fits() -> None:
    # 2 cells: "big" (3 members) never fits; "small" (2 members), arriving later, runs
    pods = (*_gang("big", 3, 0.0), *_gang("small", 2, 35.0, seconds=60.0))
    config = _config(max_cells=2, warm_start=False, tail_seconds=1800.0)
    result = simulate(pods, atomic_gang_policy(), config)
    assert result.gangs.unstarted == 1
    assert sorted(result.gangs.waits_seconds)[0] == pytest.approx(1.0 + 300.0)


def test_without_a_binding_bound_atomic_and_per_pod_are_the_same_run() -> None:
    pods = synthetic_gangs(0.25, gangs_per_hour=2.0, seed=2)
    # the hedge's delay counts from when a pod is pending: an atomic gang's members are pending
    # from their admission (a tick after arrival), so with a delay their spares start later
    policy = PolicyConfig(max_replicas=1000, boot_hedge_delay_boots=0.0)
    config = SimConfig(policy_config=policy, seed=1)
    per_pod = simulate(pods, ProductionPolicy(), config)
    atomic = simulate(pods, atomic_gang_policy(), config)
    assert atomic.cost_cell_hours == per_pod.cost_cell_hours
    assert atomic.gangs.waits_seconds == per_pod.gangs.waits_seconds


@pytest.mark.parametrize("factory", [ProductionPolicy, atomic_gang_policy])
def test_gang_runs_are_deterministic_per_seed(factory: Callable[[], ScalingPolicy]) -> None:
    pods = synthetic_gangs(0.1, gangs_per_hour=3.0, seed=6)
    make = factory
    config = PolicyConfig(max_replicas=16)
    runs = [
        simulate(pods, make(), SimConfig(policy_config=config, seed=s, tail_seconds=3600.0))
        for s in (3, 3, 4)
    ]
    assert runs[0] == runs[1]
    assert runs[0].gangs.waits_seconds != runs[2].gangs.waits_seconds


def test_evicting_a_member_of_a_started_gang_stops_the_whole_gang() -> None:
    a, b = _gang("g", 2, 0.0, seconds=100.0)
    book = GangBook((a, b), GangScaleUp.PER_POD)
    book.arrive(a, 0.0)
    book.arrive(b, 0.0)
    ra = Running(a, "cell-0", (0,), 0.0, 100.0, 1)
    rb = Running(b, "cell-1", (0,), 40.0, 140.0, 2)
    assert book.placed(ra, 0.0) == []  # a idles until b lands
    started = book.placed(rb, 40.0)
    assert {r.pod.key for r in started} == {"g-0", "g-1"}
    assert (ra.end_at, rb.end_at) == (140.0, 140.0)  # both run 100 s from the start at 40
    stopped = book.evict(ra, 90.0)
    assert sorted((r.pod.key, left) for r, left in stopped) == [("g-0", 50.0), ("g-1", 50.0)]
    book.advance(100.0)
    assert book.partial_gpus == 0
    assert book.partial_gpu_seconds == pytest.approx(40.0)  # a alone, from 0 to 40


def test_an_evicting_drain_stops_every_member_of_a_started_gang() -> None:
    # 4-GPU cells. A 3-GPU filler holds cell-0 until 1000 s; a gang of 2 arrives at 15 s: one
    # member lands on cell-0's free GPU, the other on a new cell-1, and the gang starts. Once
    # the filler ends both cells are a quarter used; the policy drains one (Evict): the member
    # on it is evicted, which stops the job, so its partner is evicted too and both restart.
    filler = TracePod("filler", 0.0, 1000.0, replace(WHOLE, gpu_count=3))
    pods = (filler, *_gang("g", 2, 15.0, seconds=4000.0))
    policy = PolicyConfig(max_replicas=4, min_replicas=1, shape=CellShape(gpus=4))
    config = SimConfig(policy_config=policy, boot=FIXED_BOOT, drain_mode=DrainMode.EVICT)
    result = simulate(pods, ProductionPolicy(), config)
    assert result.scale_down_cells >= 1
    assert result.evictions == 2
    assert result.unplaced == 0
    assert result.gangs.unstarted == 0
    assert result.gangs.waits_seconds == pytest.approx((1.0 + 300.0,))  # the first start


def test_the_report_shows_gang_columns_only_for_gang_traces() -> None:
    plain = simulate((TracePod("solo", 0.0, 60.0, WHOLE),), ProductionPolicy(), _config(4))
    gangs = simulate(tuple(_gang("g", 2, 0.0)), ProductionPolicy(), _config(4))
    assert "gang start" not in markdown([summarise(plain, 1.0, 300.0)])
    text = markdown([summarise(gangs, 1.0, 300.0)])
    assert "| gang start p50 |" in text
    assert "partial-gang GPU-h" in text


def test_atomic_runs_are_the_same_with_and_without_idle_tick_skipping() -> None:
    pods = synthetic_gangs(0.1, gangs_per_hour=3.0, seed=7)
    config = SimConfig(policy_config=PolicyConfig(max_replicas=16), seed=2, tail_seconds=3600.0)
    skipped = simulate(pods, atomic_gang_policy(), config)
    every = simulate(pods, atomic_gang_policy(), replace(config, skip_idle_ticks=False))
    assert skipped.cost_cell_hours == every.cost_cell_hours
    assert skipped.gangs.waits_seconds == every.gangs.waits_seconds
    assert skipped.waits_seconds == every.waits_seconds


def test_simulate_cli_compares_per_pod_and_atomic_on_a_gang_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "gangs.csv"
    write_generic((*_gang("g", 3, 0.0), *_gang("h", 3, 100.0)), trace)
    out = tmp_path / "o.json"
    args = ["simulate", "--trace", str(trace), "--max-cells", "4", "--format", "md"]
    policies = ["--policy", "gpucellpool", "--policy", "gpucellpool-atomic"]
    assert main([*args, *policies, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| policy | gangs | gang start p50 |" in printed
    rows = {p["policy"]: p for p in json.loads(out.read_text())["policies"]}
    assert rows["gpucellpool"]["partial_gang_gpu_hours"] > 0  # h's members seated one by one
    assert rows["gpucellpool-atomic"]["partial_gang_gpu_hours"] == 0
    assert rows["gpucellpool-atomic"]["gangs"] == 2
