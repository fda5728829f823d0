"""``gpucellpool fidelity-diff DUMP``: where the twin and the simulator part, decision by decision.

Why this module exists: when the fidelity check misses, the question is which decision went
differently in the two worlds, and when. Four sessions answered it with throwaway scripts; this
keeps their method (docs/simulation.md, "Finding where the two worlds part"). It loads a dump
that a twin run wrote with ``GPUCELLPOOL_FIDELITY_DUMP`` set (``fidelity_dump``), simulates it
exactly as ``build_report`` does (``report.simulate_against``: the same spec, pods and measured
timings) with the production policy wrapped to log each decision that changed, and prints the
fidelity numbers, every interval where the two cell timelines differ by more than the
tolerance (one cell), both decision logs side by side around each interval (from one boot
before it to its end), and the pods whose start differs most. Re-simulating a dump shows a
simulator or policy change's effect on the simulator's side only; the twin's side needs a new
run. The pure parts (intervals, windows, the side-by-side rows, pod starts) are functions over
the frozen types below. Times are the run's compressed seconds since the replay started.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.policy.decision import Decision
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import Observation, PolicyMemory
from autoscaler.policy_memory import decode_memory
from simulations.demo.config import DemoSpec, WorldTimings, sim_policy
from simulations.demo.fidelity_dump import FidelityDump, PodSeen, load_dump
from simulations.demo.report import TwinSide, cells_of, fidelity_lines, simulate_against
from simulations.demo.run_log import CellEvent, DecisionSeen
from simulations.demo.twin_run import TRACE_PREFIX
from simulations.simulator import argtypes as at
from simulations.simulator.engine import ProductionPolicy, SimResult
from simulations.simulator.fidelity import Fidelity, Piece, Timeline, normalise, pieces
from simulations.simulator.traces import TracePod
from simulations.twin.player import pod_name

Idle = tuple[tuple[str, float], ...]  # (cell, idle since in the run's seconds), by cell
TIMINGS = {
    "measured": "the twin's measured timings (the report's fidelity)",
    "lag-free": "the measured timings without the execution lag and the bind delay",
    "nominal": "the nominal timings",
}


@dataclass(frozen=True, slots=True)
class DecisionEntry:
    """One decision in a log: when, why, the target, and the cells idle since when."""

    time_seconds: float
    reason: str
    desired_replicas: int
    message: str
    idle_since: Idle = ()

    def key(self) -> tuple[str, int, str, Idle]:
        """What makes it a change (the time aside)."""
        return (self.reason, self.desired_replicas, self.message, self.idle_since)


@dataclass(frozen=True, slots=True)
class Interval:
    """A stretch where the cell counts differ by more than the tolerance; the two counts of
    each of its pieces, in order."""

    start_seconds: float
    end_seconds: float
    twin_cells: tuple[float, ...]
    sim_cells: tuple[float, ...]

    @property
    def duration_seconds(self) -> float:
        return self.end_seconds - self.start_seconds


@dataclass(frozen=True, slots=True)
class PodStart:
    """One trace pod's start in each world (None: never bound in the twin)."""

    name: str
    arrival_seconds: float
    twin_bound_seconds: float | None
    sim_start_seconds: float

    @property
    def difference_seconds(self) -> float | None:
        """Twin bound minus simulator start (positive: the twin started it later)."""
        if self.twin_bound_seconds is None:
            return None
        return self.twin_bound_seconds - self.sim_start_seconds


@dataclass(frozen=True, slots=True)
class Replay:
    """The simulator's side of a dump."""

    fidelity: Fidelity
    result: SimResult
    log: tuple[DecisionEntry, ...]


# -- pure ---------------------------------------------------------------------------------------


def changes(entries: Iterable[DecisionEntry]) -> tuple[DecisionEntry, ...]:
    """Each entry that differs from the one kept before it (its time aside)."""
    kept: list[DecisionEntry] = []
    for entry in entries:
        if not kept or kept[-1].key() != entry.key():
            kept.append(entry)
    return tuple(kept)


def idle_of(since: Mapping[str, float], zero: float) -> Idle:
    """A memory's ``idle_since`` in the run's seconds (``zero``: its clock at the run's zero)."""
    return tuple(sorted((cell, t - zero) for cell, t in since.items()))


def twin_log(decisions: Sequence[DecisionSeen], epoch_at_zero: float) -> tuple[DecisionEntry, ...]:
    """The twin's published decisions as a log, idle times from its (wall-clock) memory."""
    return changes(
        DecisionEntry(
            d.time_seconds,
            d.reason,
            d.desired_replicas,
            d.message,
            idle_of(decode_memory(d.policy_memory).idle_since, epoch_at_zero),
        )
        for d in decisions
    )


def _interval(run: Sequence[Piece]) -> Interval:
    return Interval(run[0][0], run[-1][1], tuple(p[2] for p in run), tuple(p[3] for p in run))


def out_of_tolerance(
    twin: Timeline, sim: Timeline, start: float, end: float, tolerance: float = 1.0
) -> tuple[Interval, ...]:
    """The maximal stretches of [start, end) where the counts differ by more than
    ``tolerance``, in time order (the complement of the fidelity's "within")."""
    found: list[Interval] = []
    run: list[Piece] = []
    for piece in pieces(normalise(twin), normalise(sim), start, end):
        if abs(piece[2] - piece[3]) > tolerance:
            run.append(piece)
        elif run:
            found.append(_interval(run))
            run = []
    if run:
        found.append(_interval(run))
    return tuple(found)


def window(log: Sequence[DecisionEntry], start: float, end: float) -> tuple[DecisionEntry, ...]:
    """The entries of ``log`` (time order) from ``start`` to ``end`` inclusive, led by the one
    in force at ``start`` (the last before it), if any."""
    before = [e for e in log if e.time_seconds < start]
    inside = [e for e in log if start <= e.time_seconds <= end]
    return tuple(before[-1:] + inside)


def describe(entry: DecisionEntry) -> str:
    """``Reason target: message (idle cell@since ...)`` on one line (the reason ``-`` before
    the pool's first decision)."""
    text = f"{entry.reason or '-'} {entry.desired_replicas}"
    message = " ".join(entry.message.split())
    text += f": {message}" if message else ""
    idle = " ".join(f"{cell}@{t:.1f}" for cell, t in entry.idle_since)
    return text + (f" (idle {idle})" if idle else "")


def side_by_side(
    twin: Sequence[DecisionEntry], sim: Sequence[DecisionEntry], width: int = 60
) -> list[str]:
    """Both logs merged in time order (the twin's first at a tie): each entry's time, then its
    text wrapped to ``width`` in the twin's column or the simulator's."""
    rows = sorted(
        [(e.time_seconds, 0, e) for e in twin] + [(e.time_seconds, 1, e) for e in sim],
        key=lambda row: (row[0], row[1]),
    )
    lines = [f"{'time s':>9} | {'twin':<{width}} | simulator"]
    for seconds, side, entry in rows:
        wrapped = textwrap.wrap(describe(entry), width, break_on_hyphens=False)
        for n, text in enumerate(wrapped):
            left, right = (text, "") if side == 0 else ("", text)
            stamp = f"{seconds:9.2f}" if n == 0 else " " * 9
            lines.append(f"{stamp} | {left:<{width}} | {right}".rstrip())
    return lines


def pod_starts(
    pods: Sequence[TracePod], waits: Sequence[float], twin: Mapping[str, PodSeen]
) -> tuple[PodStart, ...]:
    """Per trace pod, in the player's order (named ``trace-<index>`` by it): the twin's bind
    against the simulator's start, its arrival plus its wait (the simulator's waits follow a
    stable sort on arrival; a pod it never placed starts at its end, the wait being censored
    there). Empty when the simulator left pods out (the two do not line up)."""
    if len(waits) != len(pods):
        return ()
    order = sorted(range(len(pods)), key=lambda i: pods[i].arrival_seconds)
    start = {i: pods[i].arrival_seconds + w for i, w in zip(order, waits, strict=True)}
    out = []
    for i, pod in enumerate(pods):
        name = pod_name(TRACE_PREFIX, i, len(pods))
        seen = twin.get(name)
        bound = seen.bound_seconds if seen is not None else None
        out.append(PodStart(name, pod.arrival_seconds, bound, start[i]))
    return tuple(out)


def largest_differences(starts: Iterable[PodStart], count: int) -> tuple[PodStart, ...]:
    """The ``count`` pods whose starts differ most (never bound in the twin: first)."""

    def size(start: PodStart) -> float:
        diff = start.difference_seconds
        return float("inf") if diff is None else abs(diff)

    return tuple(sorted(starts, key=size, reverse=True)[:count])


# -- the simulator's side -----------------------------------------------------------------------


class LoggedPolicy(ProductionPolicy):
    """``sim_policy``'s production policy, unchanged, logging each decision (``changes``
    keeps those that changed)."""

    def __init__(self, spec: DemoSpec) -> None:
        base = sim_policy(spec, "simulator, logged")
        super().__init__(base.name, base.overrides, base.gang_scale_up)
        self.tick_seconds = base.tick_seconds
        self.log: list[DecisionEntry] = []

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision:
        decision = super().decide(observation, memory, config, now)
        entry = DecisionEntry(
            now,
            str(decision.reason),
            decision.desired_replicas,
            decision.message,
            idle_of(decision.memory.idle_since, 0.0),
        )
        self.log.append(entry)
        return decision


def timings_of(dump: FidelityDump, which: str) -> WorldTimings:
    """The timings ``which`` (a key of ``TIMINGS``) the report simulates with."""
    if which == "measured":
        return dump.timings
    if which == "lag-free":
        return dump.timings_lag_free
    return WorldTimings.nominal(dump.spec)


def resimulate(dump: FidelityDump, timings: WorldTimings) -> Replay:
    """The dump's inputs through the simulator, as ``build_report`` runs them, logged."""
    policy = LoggedPolicy(dump.spec)
    twin = TwinSide(dump.spec, dump.pods, dump.twin_cells, dump.end_seconds)
    result, fidelity = simulate_against(twin, timings, policy)
    return Replay(fidelity, result, changes(policy.log))


# -- the printout -------------------------------------------------------------------------------


def _counts(values: Sequence[float]) -> str:
    return " ".join(f"{v:g}" for v in values)


def interval_lines(intervals: Sequence[Interval], factor: float) -> list[str]:
    """One line per interval: compressed and trace seconds, each side's counts in order."""
    total = sum(i.duration_seconds for i in intervals)
    lines = [f"{len(intervals)} interval(s) out of tolerance, {total:.2f} s in all:"]
    for i in intervals:
        lines.append(
            f"- {i.start_seconds:.2f}-{i.end_seconds:.2f} s (trace "
            f"{i.start_seconds * factor:.0f}-{i.end_seconds * factor:.0f} s): "
            f"twin {_counts(i.twin_cells)} cells, simulator {_counts(i.sim_cells)}"
        )
    return lines


def cell_event_lines(events: Sequence[CellEvent], start: float, end: float) -> list[str]:
    """The twin's cell steps within [start, end], one line per cell and instant (to 10 ms):
    which boots joined, were cancelled, turned Ready or left."""
    grouped: dict[tuple[float, str], list[str]] = {}
    for e in events:
        if start <= e.time_seconds <= end:
            grouped.setdefault((round(e.time_seconds, 2), e.cell), []).append(e.event)
    if not grouped:
        return []
    lines = [f"the twin's cells from {start:.2f} to {end:.2f} s:"]
    lines += [f"  {at:7.2f} {cell}: {', '.join(steps)}" for (at, cell), steps in grouped.items()]
    return lines


def decision_lines(
    interval: Interval,
    twin: Sequence[DecisionEntry],
    replay: Replay,
    before_s: float,
    width: int,
    cells: Sequence[CellEvent] = (),
) -> list[str]:
    """Both logs around ``interval``, from ``before_s`` before its start to its end, and the
    twin's cell steps over the same time."""
    lo, hi = interval.start_seconds - before_s, interval.end_seconds
    return [
        f"decisions from {lo:.2f} s (one boot before the interval) to {hi:.2f} s; each side's "
        "first row is the decision in force then:",
        *side_by_side(window(twin, lo, hi), window(replay.log, lo, hi), width),
        *cell_event_lines(cells, lo, hi),
        "",
    ]


def pod_lines(starts: Sequence[PodStart], count: int) -> list[str]:
    """The ``count`` pods whose starts differ most, one line each (none for 0)."""
    if not starts or count <= 0:
        return []
    shown = largest_differences(starts, count)
    lines = [f"the {len(shown)} pods whose start differs most (twin bound - simulator start):"]
    for s in shown:
        twin = "never bound" if s.twin_bound_seconds is None else f"{s.twin_bound_seconds:.2f} s"
        diff = "" if s.difference_seconds is None else f" ({s.difference_seconds:+.2f} s)"
        lines.append(
            f"- {s.name} arrived {s.arrival_seconds:.2f} s: twin {twin}, "
            f"simulator {s.sim_start_seconds:.2f} s{diff}"
        )
    return lines


def _longest(intervals: Sequence[Interval], count: int) -> list[Interval]:
    """The ``count`` longest (0: all), in time order."""
    if count <= 0:
        return list(intervals)
    chosen = sorted(intervals, key=lambda i: i.duration_seconds, reverse=True)[:count]
    return sorted(chosen, key=lambda i: i.start_seconds)


def report_lines(dump: FidelityDump, args: argparse.Namespace) -> list[str]:
    """The whole printout: the report's three fidelity blocks, the intervals against
    ``args.timings``, the decision logs around them, the pods."""
    k = dump.spec.compression
    lines = [
        f"{len(dump.pods)} pods, x{k:g}: times are compressed seconds since the replay started "
        f"(x{k:g} for trace seconds)",
        "",
    ]
    replays = {name: resimulate(dump, timings_of(dump, name)) for name in TIMINGS}
    for name, label in TIMINGS.items():
        lines += [f"simulator given {label}:", *fidelity_lines(replays[name].fidelity, k), ""]
    replay = replays[args.timings]
    f = replay.fidelity
    intervals = out_of_tolerance(dump.twin_cells, cells_of(replay.result), 0.0, f.end_seconds)
    lines += [f"against {TIMINGS[args.timings]}:", *interval_lines(intervals, k), ""]
    twin = twin_log(dump.decisions, dump.epoch_at_zero_seconds)
    boot = timings_of(dump, args.timings).boot_seconds
    for interval in _longest(intervals, args.longest):
        lines += decision_lines(interval, twin, replay, boot, args.width, dump.cell_events)
    starts = pod_starts(dump.pods, replay.result.waits_seconds, dump.pod_times)
    return lines + pod_lines(starts, args.pods)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dump", type=at.existing_file, help="a dump a twin run wrote")
    parser.add_argument(
        "--timings",
        choices=tuple(TIMINGS),
        default="measured",
        help="the simulator's timings the intervals and logs are for (default: measured)",
    )
    parser.add_argument(
        "--longest",
        metavar="N",
        type=at.int_at_least(0),
        default=0,
        help="decision logs for the N longest intervals only (default 0: every interval)",
    )
    parser.add_argument(
        "--pods",
        metavar="N",
        type=at.int_at_least(0),
        default=10,
        help="list the N pods whose start differs most (default: 10; 0: none)",
    )
    parser.add_argument(
        "--width",
        metavar="CHARS",
        type=at.int_at_least(20, 2000),
        default=60,
        help="a decision log column's width (default: 60)",
    )


def run(args: argparse.Namespace) -> int:
    dump = load_dump(args.dump)
    print(f"fidelity dump {args.dump} (twin namespace {dump.namespace})")
    print("\n".join(report_lines(dump, args)))
    return 0
