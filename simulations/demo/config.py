"""One demo scenario, expressed identically for the twin and for the simulator.

Why this module exists: fidelity means "the same inputs in both worlds". The demo compresses a
slice of the bundled openb trace from hours to minutes, so every duration that shapes the cell
timeline is compressed by the same factor in both: pod arrivals and durations (pre-compressed
here, the player replays at speed 1), the boot time (the twin's KubeSwift delay and the
simulator's boot model), the scale-down stabilisation window and the delay after a scale-up
(written into the pool's ``spec.autoscaling``; the simulator's ``PolicyConfig`` is derived from
that very spec by ``policy_config_from_spec``), the control tick and the drain time. Nothing
else differs between the worlds: the pool manifest below is the one the operator is given.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autoscaler.policy.config import policy_config_from_spec
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellShape
from gpucellpool.api.spares import WarmSpare
from gpucellpool.api.spec import GPUCellPoolSpec
from simulations.simulator.engine import BootModel, ProductionPolicy, SimConfig
from simulations.simulator.engine import hami as sim_hami
from simulations.simulator.traces import RescaleSpec, TracePod, rescale
from simulations.simulator.traces.detect import load_trace, require_well_formed

HOUR = 3600.0
SHAPE = CellShape(gpus=1, memory_mib=24576, cores_percent=100, slots=10)
# A slice of the bundled trace (seconds from its start) with a ramp, a plateau with short
# bursts and dips, and (cut at its end) a fall back to zero: ~15 cells peak in its first hour
# at the default thinning, ~20 over three hours (the benchmark's slice).
DEFAULT_START = 148.0 * 86400 + 15 * HOUR
DEFAULT_HOURS = 1.0
DEFAULT_MULTIPLIER = 0.5
# The simulator ticks at t = 0; the live loop's ticks have no phase relation to the replay, and
# the first pods reach it as an event after its last (Idle) decision. Arriving just after the
# simulator's first tick gives the simulator the same order: arrival, reaction, decision.
OFF_TICK = 1e-3


@dataclass(frozen=True, slots=True)
class DemoSpec:
    """A demo run in trace time; ``compression`` maps it to wall time (trace s per wall s)."""

    trace: Path | None = None  # None: the bundled openb trace
    start_seconds: float = DEFAULT_START
    hours: float = DEFAULT_HOURS
    multiplier: float = DEFAULT_MULTIPLIER  # < 1 thins the trace (fewer cells for a laptop)
    compression: float = 20.0  # x20: one hour in three minutes; see docs/simulation.md
    boot_seconds: float = 300.0  # trace time, both worlds
    scale_down_window_seconds: float = 600.0
    scale_down_delay_seconds: float = 600.0
    tick_seconds: float = 30.0
    drain_seconds: float = 30.0  # the simulator's cordon-to-gone; the twin measures its own
    react_seconds: float = 15.0  # the simulator's pending-pod -> decision delay (twin: real)
    max_cells: int = 40
    seed: int = 0
    # The pool's prometheus.staleAfter, in wall seconds (the simulator reads no Prometheus).
    stale_after_wall_seconds: float = 30.0

    def wall(self, trace_seconds: float) -> float:
        """A trace duration in wall (compressed) seconds."""
        return trace_seconds / self.compression

    @property
    def horizon_seconds(self) -> float:
        """Compressed seconds the replay lasts, then scale-down to zero."""
        tail = self.scale_down_window_seconds + self.scale_down_delay_seconds
        return self.wall(self.hours * HOUR + tail + 2 * self.boot_seconds)


def _whole(seconds: float) -> int:
    """API fields that are whole seconds; never 0 for a positive duration."""
    return max(1, round(seconds)) if seconds > 0 else 0


def pool_manifest(
    spec: DemoSpec, name: str, namespace: str, demand_label: tuple[str, str], prometheus_url: str
) -> dict[str, Any]:
    """The GPUCellPool the operator gets; windows are in compressed seconds."""
    from simulations.twin.scenario import swiftguest_pool  # noqa: PLC0415 - twin side only

    pool = swiftguest_pool(name, namespace, replicas=0)
    pool["spec"]["autoscaling"] = autoscaling(spec, demand_label, prometheus_url)
    return pool


def autoscaling(
    spec: DemoSpec, demand_label: tuple[str, str], prometheus_url: str
) -> dict[str, Any]:
    window = _whole(spec.wall(spec.scale_down_window_seconds))
    return {
        "enabled": True,
        "minReplicas": 0,
        "maxReplicas": spec.max_cells,
        "scaleDown": "Auto",
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": window}},
        "scaleDownDelayAfterScaleUp": f"{spec.wall(spec.scale_down_delay_seconds):g}s",
        "prewarm": {"bootTime": f"{spec.wall(spec.boot_seconds):g}s"},
        # the warm spare's look-back is a duration like the windows: compressed too
        "warmSpare": {"keepFor": f"{spec.wall(WarmSpare().keep_for.seconds):g}s"},
        "cellShape": {
            "gpuMemoryMiB": SHAPE.memory_mib,
            "gpuCores": SHAPE.cores_percent,
            "slots": SHAPE.slots,
        },
        "demand": {"podSelector": {"matchLabels": dict([demand_label])}},
        "prometheus": {"url": prometheus_url, "staleAfter": f"{spec.stale_after_wall_seconds:g}s"},
    }


def policy_config(spec: DemoSpec) -> PolicyConfig:
    """The simulator's policy config: from the same ``spec.autoscaling`` the operator reads."""
    pool = pool_manifest(spec, "demo", "demo", ("demo", "x"), "http://127.0.0.1:9090")
    return policy_config_from_spec(GPUCellPoolSpec.model_validate(pool["spec"]))


@dataclass(frozen=True, slots=True)
class ObservedBoots(BootModel):
    """Boot times replayed in creation order (the twin's, measured); then their median.

    A fresh instance per run: the cursor advances as the simulator creates cells.
    """

    observed: tuple[float, ...] = ()
    cursor: list[int] = field(default_factory=lambda: [0])

    def sample(self, rng: random.Random) -> tuple[float, bool]:
        del rng
        index = self.cursor[0]
        self.cursor[0] += 1
        seconds = self.observed[index] if index < len(self.observed) else self.median_seconds
        return seconds, False


def _spread(boots: list[float]) -> tuple[float, float]:
    """Median and log-sd of measured boot times (at least one)."""
    logs = [math.log(b) for b in boots if b > 0]
    return statistics.median(boots), statistics.pstdev(logs) if len(logs) > 1 else 0.0


@dataclass(frozen=True, slots=True)
class WorldTimings:
    """The world's latencies in compressed seconds: nominal (the spec) or measured on the twin.

    The simulator takes them as a user takes ``--boot-seconds`` / ``--boot-sigma`` from their
    own cluster: boot = cell asked for (the decision raising ``desiredReplicas``) to cell Ready
    (the provisioner creating the guest, KubeSwift's delay, and everything a loaded kubelet,
    HAMi and provisioner add; the simulator creates a cell at its decision, so the provisioning
    time belongs in the boot), drain = cell empty to guest gone, react = first pending pod to
    the first decision asking for cells. ``with_lag`` moves the provisioner's part out of the
    boot: execution lag = decision to guest created (or drain started), each cell's boot = its
    decision-timed boot less that lag, as the simulator's engine models them
    (``engine.exec_lag``).
    """

    boot_seconds: float
    boot_sigma: float
    drain_seconds: float
    react_seconds: float
    source: str = "nominal"
    boots: tuple[float, ...] = ()  # per cell, a wave's in its cells' name order, when measured
    exec_lag_seconds: float = 0.0  # decision to execution (0: boots count from the decision)
    cancel_seconds: float = 0.0  # a cancelled boot's cell, from its execution to its guest gone
    boot_react_seconds: float | None = None  # a cell Ready -> the decision it prompts (None: react)
    first_react_seconds: float | None = None  # the run's first pod -> first scale-up (None: react)
    bind_delay_seconds: float = 0.0  # a cell's boot end -> a pod waiting for it bound there
    removal_step_seconds: float = 0.0  # a guest gone -> the next gone, when it was queued behind

    @classmethod
    def nominal(cls, spec: DemoSpec) -> WorldTimings:
        return cls(
            spec.wall(spec.boot_seconds),
            0.0,
            spec.wall(spec.drain_seconds),
            spec.wall(spec.react_seconds),
        )

    @classmethod
    def measured(
        cls,
        spec: DemoSpec,
        boots: list[float],
        drains: list[float],
        react: float | None,
        boot_react: float | None = None,
        first_react: float | None = None,
    ) -> WorldTimings:
        """Median and log-sd of the twin's boots, median drain; nominal where none was seen.
        ``boot_react``: a cell Ready -> the decision it prompted; ``first_react``: the run's
        first pod -> its first scale-up (None: as ``react``)."""
        base = cls.nominal(spec)
        median, sigma = _spread(boots) if boots else (base.boot_seconds, 0.0)
        return cls(
            boot_seconds=median,
            boot_sigma=sigma,
            drain_seconds=statistics.median(drains) if drains else base.drain_seconds,
            react_seconds=react if react is not None else base.react_seconds,
            source="measured on the twin",
            boots=tuple(boots),
            boot_react_seconds=boot_react,
            first_react_seconds=first_react,
        )

    def with_lag(
        self, guest_boots: list[float], lags: list[float], cancels: Sequence[float] = ()
    ) -> WorldTimings:
        """These timings with the measured execution lag (its median) apart from the boots;
        unchanged when no lag was measured.

        ``cancels`` (decision -> a cancelled boot's guest gone): what the median takes beyond
        the execution lag is how long a cancelled cell stays (``cancel_seconds``). Removed at
        the execution, the simulator's cancelled spares left 10-20 trace seconds before the
        twin's (the provisioner deletes the guest in its pass; the guest is gone once KubeSwift
        has released its GPU), and a cancel moves 2-3 cells at once.

        Each cell's boot is its decision-timed boot less the median lag, so the simulator's
        cells of a wave, created together, become Ready at the instants (after the decision)
        the twin's did. The twin's guests of a wave are created one after another over a few
        seconds and a status update can report several Ready at once: given each guest's own
        boot instead, the wave's last guest had the shortest and the simulator's last cell was
        Ready first, so a wave's pods went to its cells in the reverse order and HAMi's ties
        between two equally used cells went to different neighbours in the two worlds (one
        emptied, one did not; a later whole-GPU pod found room in one world only). The median
        and spread still describe the guest-timed boots (the fallback for cells beyond them)."""
        if not lags or not guest_boots:
            return self
        median, sigma = _spread(guest_boots)
        lag = statistics.median(lags)
        cancel = max(0.0, statistics.median(cancels) - lag) if cancels else 0.0
        boots = [max(0.0, b - lag) for b in self.boots] if self.boots else guest_boots
        return replace(
            self,
            boot_seconds=median,
            boot_sigma=sigma,
            boots=tuple(boots),
            exec_lag_seconds=lag,
            cancel_seconds=cancel,
        )

    def with_binds(self, binds: Sequence[float]) -> WorldTimings:
        """These timings with the median of the twin's ``binds`` (a cell's boot end -> a pod
        that waited for it bound there) as the simulator's bind delay; unchanged when none was
        seen. The twin's HAMi binds such a pod on its next pass over the new node (2-5 trace s
        at x20); placed the instant the cell was Ready, the simulator's pods of a wave started
        and ended that much earlier, and a pod arriving in between met other neighbours."""
        if not binds:
            return self
        return replace(self, bind_delay_seconds=statistics.median(binds))

    def with_removal_step(self, step: float | None) -> WorldTimings:
        """These timings with the twin's removal step (``twin_measures.removal_step``: a queued
        guest gone -> the next), unchanged when no removal queued. The provisioner deletes a
        plan's guests together and KubeSwift releases their GPUs one after another: 12
        retirements left over 1.4 wall s at load 5, where the simulator removed all 12 at one
        instant and was 5-12 cells apart from the twin meanwhile."""
        if step is None:
            return self
        return replace(self, removal_step_seconds=step)

    def boot_model(self) -> BootModel:
        if self.boots:
            return ObservedBoots(median_seconds=self.boot_seconds, observed=self.boots)
        return BootModel(median_seconds=self.boot_seconds, sigma=self.boot_sigma, min_seconds=0.0)


def sim_config(spec: DemoSpec, timings: WorldTimings | None = None) -> SimConfig:
    """The simulator world matching the twin: cold start, compressed timings, same spec."""
    config = policy_config(spec)
    t = timings or WorldTimings.nominal(spec)
    return SimConfig(
        policy_config=config,
        tick_seconds=spec.wall(spec.tick_seconds),
        react_on_arrival=True,
        react_delay_seconds=t.react_seconds,
        boot=t.boot_model(),
        drain_seconds=t.drain_seconds,
        exec_lag_seconds=t.exec_lag_seconds,
        cancel_seconds=t.cancel_seconds,
        boot_react_delay_seconds=t.boot_react_seconds,
        first_react_delay_seconds=t.first_react_seconds,
        bind_delay_seconds=t.bind_delay_seconds,
        removal_step_seconds=t.removal_step_seconds,
        warm_start=False,  # the twin's pool starts empty too
        tail_seconds=spec.horizon_seconds,
        samples=4000,
        seed=spec.seed,
    )


def sim_policy(spec: DemoSpec, name: str = "gpucellpool") -> ProductionPolicy:
    """The production policy, ticking as often as the live loop does in the demo."""
    policy = ProductionPolicy(name)
    policy.tick_seconds = spec.wall(spec.tick_seconds)
    return policy


def load_pods(trace: Path | None) -> tuple[TracePod, ...]:
    """The trace's pods; ``TraceError`` (one line) if it is unreadable or has a malformed row."""
    loaded = load_trace(trace)
    require_well_formed(loaded, trace)
    return loaded.pods


def _window(spec: DemoSpec) -> tuple[TracePod, ...]:
    """The slice of the trace, thinned and compressed (arrivals and durations / compression)."""
    return rescale(
        load_pods(spec.trace),
        RescaleSpec(
            start_seconds=spec.start_seconds,
            end_seconds=spec.start_seconds + spec.hours * HOUR,
            time_compression=spec.compression,
            duration_scale=1.0 / spec.compression,
            arrival_multiplier=spec.multiplier,
            jitter_seconds=0.0,
            seed=spec.seed,
        ),
    )


def unhostable_count(spec: DemoSpec) -> int:
    """Pods of the slice no cell can ever host: left out of both worlds, shown in the report."""
    return sum(1 for p in _window(spec) if not sim_hami.fits_fresh_cell(p.ask, SHAPE))


def compressed_pods(spec: DemoSpec) -> tuple[TracePod, ...]:
    """The slice, thinned and compressed (arrivals and durations / ``compression``).

    Pods a 1-GPU cell can never host are left out (both worlds would only report them; the
    report counts them with ``unhostable_count``), and
    pods still running at the slice's end are cut there, so the run ends with a scale-down.
    """
    limit = spec.wall(spec.hours * HOUR)
    fitting = [p for p in _window(spec) if sim_hami.fits_fresh_cell(p.ask, SHAPE)]
    first = min((p.arrival_seconds for p in fitting), default=0.0)  # the player's time zero
    return tuple(
        replace(
            p,
            arrival_seconds=p.arrival_seconds - first + OFF_TICK,
            duration_seconds=min(p.duration_seconds, limit - p.arrival_seconds),
        )
        for p in fitting
    )
