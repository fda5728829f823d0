"""The demo's scenario is the same in both worlds (simulations.demo.config, no cluster)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from autoscaler.policy.config import policy_config_from_spec
from gpucellpool.api.spec import GPUCellPoolSpec
from simulations.demo.cli import progress_line
from simulations.demo.config import (
    OFF_TICK,
    DemoSpec,
    ObservedBoots,
    WorldTimings,
    compressed_pods,
    pool_manifest,
    sim_config,
    sim_policy,
)
from simulations.demo.twin_records import Snapshot

SPEC = replace(DemoSpec(), hours=0.5, multiplier=0.4, compression=20.0)


def test_operator_and_simulator_read_the_same_pool_spec() -> None:
    pool = pool_manifest(SPEC, "demo", "ns", ("demo", "abc"), "http://127.0.0.1:9")
    live = policy_config_from_spec(GPUCellPoolSpec.model_validate(pool["spec"]))
    config = sim_config(SPEC)
    assert config.policy_config == live
    assert live.scale_down.stabilization_window_seconds == 30  # 600 s / 20
    assert live.scale_down_delay_after_scale_up_seconds == 30
    assert live.warm_spare_seconds == 270  # the warm spare's 90 min look-back / 20
    assert (live.warm_spare_cells, live.boot_seconds) == (1, 15)  # episodes a boot apart
    assert config.boot.median_seconds == 15 and config.tick_seconds == 1.5
    assert not config.warm_start and sim_policy(SPEC).tick_seconds == 1.5
    auto = pool["spec"]["autoscaling"]
    assert auto["demand"]["podSelector"] == {"matchLabels": {"demo": "abc"}}
    assert auto["prometheus"]["url"] == "http://127.0.0.1:9"


def test_slice_is_compressed_fitting_shifted_and_cut_at_its_end() -> None:
    pods = compressed_pods(SPEC)
    assert pods and min(p.arrival_seconds for p in pods) == pytest.approx(OFF_TICK)
    end = SPEC.hours * 3600 / SPEC.compression
    assert all(p.arrival_seconds + p.duration_seconds <= end + OFF_TICK + 1 for p in pods)
    assert all(p.ask.gpu_count == 1 for p in pods)  # multi-GPU pods never fit a 1-GPU cell


def test_measured_boots_replay_in_creation_order_then_the_median() -> None:
    timings = WorldTimings.measured(SPEC, [10.0, 20.0, 30.0], [2.0, 4.0], 1.5)
    assert (timings.boot_seconds, timings.drain_seconds, timings.react_seconds) == (20, 3, 1.5)
    model = timings.boot_model()
    assert isinstance(model, ObservedBoots)
    rng = random.Random(0)
    assert [model.sample(rng)[0] for _ in range(5)] == [10, 20, 30, 20, 20]
    assert WorldTimings.measured(SPEC, [], [], None) == replace(
        WorldTimings.nominal(SPEC), source="measured on the twin"
    )


def test_progress_line_reads_in_trace_time() -> None:
    snap = Snapshot(30.0, 7, 5, 1, 8, 6, 12, 2, 9)
    line = progress_line(snap, 40, 20.0)
    assert line.startswith("trace   10.0 min | pods 12/40 created, 2 pending, 9 running")
    assert "cells 5 ready, 1 booting, 1 draining | desired 8" in line
