"""The trace value types every loader produces and the simulator consumes.

Why this module exists: loaders for different trace formats must hand the simulator one shape
of data, immutable so a trace can be shared between policy runs without copying, and with
malformed input reported (line number and reason) rather than raised. A file that cannot be
read as a trace at all (missing, a directory, binary, not UTF-8) is a ``TraceError``: one line
naming the file, the line when known, and the reason.

Every time in a trace must lie within ``HORIZON_SECONDS`` (ten 365-day years): a row whose
arrival or end is later is malformed. The event loop ticks every few simulated seconds, so an
unbounded time (``1e300``) would never finish; ten years is far beyond any real trace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from autoscaler.policy.types import GPUAsk, PlacementConstraints

HORIZON_SECONDS = 10 * 365 * 86400.0
# Python's csv module refuses longer fields; JSON lines are held to the same limit.
MAX_FIELD_CHARS = 131072


class TraceError(ValueError):
    """A trace file that cannot be read at all; ``str()`` is the one-line message."""

    def __init__(self, path: object, reason: str, line: int | None = None) -> None:
        self.path, self.reason, self.line = str(path), reason, line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")

    def __reduce__(self) -> tuple[type[TraceError], tuple[str, str, int | None]]:
        # rebuilt from its fields: a trace loaded in a worker process (``simulate --jobs``,
        # a Dask worker, tests/bench/policy_vs_ca.py) must fail with this message in the
        # parent, not with a TypeError that breaks the process pool
        return (TraceError, (self.path, self.reason, self.line))


def check_times(arrival_seconds: float, duration_seconds: float) -> None:
    """ValueError unless both times are finite and the pod ends within ``HORIZON_SECONDS``."""
    if not (math.isfinite(arrival_seconds) and math.isfinite(duration_seconds)):
        raise ValueError("times must be finite numbers")
    if arrival_seconds < 0 or duration_seconds < 0:
        raise ValueError("times must be >= 0")
    if arrival_seconds + duration_seconds > HORIZON_SECONDS:
        raise ValueError(
            f"ends at {arrival_seconds + duration_seconds:.4g} s, beyond the "
            f"{HORIZON_SECONDS:.0f} s (10-year) horizon"
        )


@dataclass(frozen=True, slots=True)
class TracePod:
    """One pod of a trace: it arrives, asks HAMi for ``ask``, and runs ``duration_seconds``.

    ``node_selector`` and ``labels`` are sorted (key, value) pairs so the value stays hashable.
    ``gang`` names the gang the pod belongs to ("" for none): pods sharing a gang id are one
    distributed job that starts only when every member is placed
    (``simulations.simulator.engine.gangs``).
    """

    key: str
    arrival_seconds: float
    duration_seconds: float
    ask: GPUAsk
    node_selector: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    gang: str = ""
    # The fraction of its run the pod computes on its GPU, from its start; idle (allocated, no
    # kernels) for the rest. 1 = busy to the end. Read by scaleDownOn: Usage (engine.usage).
    usage: float = 1.0

    def constraints(self) -> PlacementConstraints:
        """The pod's placement constraints as the policy contract spells them."""
        if not self.node_selector:
            return _NO_CONSTRAINTS
        return PlacementConstraints(node_selector=dict(self.node_selector))


_NO_CONSTRAINTS = PlacementConstraints()


@dataclass(frozen=True, slots=True)
class Malformed:
    """A row a loader could not use: where it was and why."""

    line: int
    reason: str


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What a loader read: the pods (sorted by arrival, then key) and what it left out.

    ``skipped`` counts rows that were well-formed but deliberately not used (for example
    CPU-only pods), by reason.
    """

    pods: tuple[TracePod, ...]
    malformed: tuple[Malformed, ...] = ()
    skipped: tuple[tuple[str, int], ...] = field(default=())

    def summary(self) -> str:
        """One human line: how many pods, how many rows skipped and malformed."""
        parts = [f"{len(self.pods)} pods"]
        parts += [f"{count} skipped ({reason})" for reason, count in self.skipped]
        if self.malformed:
            first = ", ".join(f"line {m.line}: {m.reason}" for m in self.malformed[:3])
            parts.append(f"{len(self.malformed)} malformed ({first})")
        return "; ".join(parts)


def sort_pods(pods: list[TracePod]) -> tuple[TracePod, ...]:
    """Arrival order, ties broken by key, so every consumer sees the same sequence."""
    return tuple(sorted(pods, key=lambda pod: (pod.arrival_seconds, pod.key)))
