"""Reshape a trace so one public trace can exercise pools of any size and any speed.

Why this module exists: the bundled trace spans five months on a cluster of ~6,000 GPUs; a
user wants "a busy week on a pool of tens of cells" or "ten times the arrival rate". These
knobs are pure functions of (pods, spec) and deterministic for a seed.

Order of operations: window (pods running at ``start_seconds`` start there with their
remaining duration; pods arriving at or after ``end_seconds`` are dropped; times shift so the
window starts at 0) -> time compression (arrival times divided, durations untouched, so load
rises by the factor) -> duration scale -> arrival multiplier (each pod is kept and replicated
``floor(m)`` - 1 more times, plus once more with probability ``frac(m)``; copies arrive with a
uniform jitter of +/- ``jitter_seconds``; ``m < 1`` thins the trace). A gang is copied whole:
its members share one draw of copies and jitters, and copy ``k`` of gang ``g`` is gang ``g#k``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from simulations.simulator.traces.model import TracePod, sort_pods


@dataclass(frozen=True, slots=True)
class RescaleSpec:
    start_seconds: float = 0.0
    end_seconds: float | None = None
    time_compression: float = 1.0
    duration_scale: float = 1.0
    arrival_multiplier: float = 1.0
    jitter_seconds: float = 300.0
    seed: int = 0


def window(pods: tuple[TracePod, ...], start: float, end: float | None) -> list[TracePod]:
    """Pods alive in [start, end), shifted so ``start`` becomes 0."""
    kept = []
    for pod in pods:
        finish = pod.arrival_seconds + pod.duration_seconds
        if finish <= start or (end is not None and pod.arrival_seconds >= end):
            continue
        arrival = max(pod.arrival_seconds, start)
        kept.append(
            replace(pod, arrival_seconds=arrival - start, duration_seconds=finish - arrival)
        )
    return kept


def _copies(rng: random.Random, multiplier: float) -> int:
    whole = math.floor(multiplier)
    return whole + (1 if rng.random() < multiplier - whole else 0)


def _jitters(rng: random.Random, spec: RescaleSpec) -> list[float | None]:
    """One pod's (or gang's) copies: None for the original, then each copy's jitter."""
    copies = _copies(rng, spec.arrival_multiplier)
    extra = [rng.uniform(-spec.jitter_seconds, spec.jitter_seconds) for _ in range(1, copies)]
    return [None, *extra] if copies else []


def rescale(pods: tuple[TracePod, ...], spec: RescaleSpec) -> tuple[TracePod, ...]:
    """Apply ``spec`` to ``pods`` (see the module docstring); returns a sorted tuple."""
    if spec.time_compression <= 0 or spec.duration_scale <= 0 or spec.arrival_multiplier < 0:
        raise ValueError("time_compression and duration_scale must be > 0, multiplier >= 0")
    rng = random.Random(spec.seed)
    out: list[TracePod] = []
    gang_jitters: dict[str, list[float | None]] = {}  # one draw per gang, shared by its members
    for pod in window(pods, spec.start_seconds, spec.end_seconds):
        base = replace(
            pod,
            arrival_seconds=pod.arrival_seconds / spec.time_compression,
            duration_seconds=max(1.0, pod.duration_seconds * spec.duration_scale),
        )
        jitters = gang_jitters.get(pod.gang) if pod.gang else None
        if jitters is None:
            jitters = _jitters(rng, spec)
            if pod.gang:
                gang_jitters[pod.gang] = jitters
        for copy, jitter in enumerate(jitters):
            if jitter is None:
                out.append(base)
                continue
            out.append(
                replace(
                    base,
                    key=f"{base.key}#{copy}",
                    arrival_seconds=max(0.0, base.arrival_seconds + jitter),
                    gang=f"{base.gang}#{copy}" if base.gang else "",
                )
            )
    return sort_pods(out)
