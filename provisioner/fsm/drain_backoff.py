"""Per-cell drain back-off: a drain that was abandoned is not retried at once.

Why this module exists: an implicit drain (scale-down) that cannot finish - a
PodDisruptionBudget allows no disruption, or GPU pods never leave - is abandoned at
``drain.timeout`` (uncordon, keep the cell). Without memory the next pass picks the same cell
again, cordons it again and waits another timeout, for ever: the cell flaps between cordoned and
schedulable and the pool never says why it does not shrink. So every abandon is recorded on the
cell (count and time), and the cell is not chosen as a scale-down victim again until a doubling
back-off has passed: ``drain.timeout x 2^n`` after its n-th abandoned drain, capped at
``DRAIN_BACKOFF_CAP_S`` (never below one timeout). Meanwhile another cell is preferred (the next
by membership's order: the autoscaler's victims, then the highest index); when every candidate
is held, the scale-down waits and says so (``ScaleDownHeld``). A rolling update honours the
same hold (``fsm.rollout``): it drains another stale cell meanwhile, or waits and says so in
the ``Updated`` condition.

The record lives in two annotations on the cell's outer object (SwiftGuest or Machine), written
in the same patch that removes the drain mark: an operator restart finds it (status can be
rebuilt, an annotation on the object is the cell's own memory), and no crash can separate
"back in service" from "remember why". It lives as long as that incarnation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from provisioner.fsm.identity import API_GROUP
from provisioner.fsm.observations import parse_time_s

DRAIN_ABANDONED_ANNOTATION = f"{API_GROUP}/drain-abandoned"
DRAIN_ABANDON_COUNT_ANNOTATION = f"{API_GROUP}/drain-abandon-count"
DRAIN_BACKOFF_CAP_S = 3600.0
DEFAULT_DRAIN_TIMEOUT_S = 300.0  # back-off base when drain.timeout was unset later
_MAX_EXPONENT = 32


@dataclass(frozen=True, slots=True)
class AbandonRecord:
    """How many drains of this incarnation were abandoned, and when the last one was."""

    count: int = 0
    last_s: float | None = None


def parse_record(annotations: Mapping[str, str]) -> AbandonRecord:
    """The record from the outer object's annotations (absent or unreadable = none)."""
    raw_count = annotations.get(DRAIN_ABANDON_COUNT_ANNOTATION, "")
    count = int(raw_count) if raw_count.isdigit() else 0
    last = parse_time_s(annotations.get(DRAIN_ABANDONED_ANNOTATION))
    return AbandonRecord(count, last) if count > 0 and last is not None else AbandonRecord()


def record_abandon(record: AbandonRecord, now_s: float) -> AbandonRecord:
    return AbandonRecord(record.count + 1, now_s)


def backoff_s(
    count: int, drain_timeout_s: float | None, cap_s: float = DRAIN_BACKOFF_CAP_S
) -> float:
    """``drain.timeout x 2^count`` after ``count`` abandoned drains, capped (0 when none)."""
    if count <= 0:
        return 0.0
    base = drain_timeout_s if drain_timeout_s else DEFAULT_DRAIN_TIMEOUT_S
    return float(min(base * 2 ** min(count, _MAX_EXPONENT), max(cap_s, base)))


def held_until_s(
    record: AbandonRecord, drain_timeout_s: float | None, cap_s: float = DRAIN_BACKOFF_CAP_S
) -> float | None:
    """When the cell may be a scale-down victim again; None when it never was held."""
    if record.count <= 0 or record.last_s is None:
        return None
    return record.last_s + backoff_s(record.count, drain_timeout_s, cap_s)


@dataclass(frozen=True, slots=True)
class VictimCandidate:
    """A cell that could be drained for a scale-down (live, not already draining)."""

    name: str
    index: int
    record: AbandonRecord = AbandonRecord()
    held_until_s: float | None = None

    def held(self, now_s: float) -> bool:
        return self.held_until_s is not None and now_s < self.held_until_s


@dataclass(frozen=True, slots=True)
class VictimChoice:
    """``remove``: the victims to drain now. ``held``: planned victims in back-off for which no
    other cell could stand in (the scale-down waits for them). ``substituted``: (held, stand-in)
    pairs. ``message``: why the scale-down is held ("" when nothing is). ``requeue_after_s``:
    when the earliest hold ends."""

    remove: tuple[str, ...]
    held: tuple[str, ...] = ()
    substituted: tuple[tuple[str, str], ...] = ()
    message: str = ""
    requeue_after_s: float | None = None


def hold_note(name: str, count: int, until_s: float) -> str:
    """Why one cell is not drained now (shared by scale-down and rolling-update holds). It
    names the end of the back-off (RFC 3339), not a countdown: the same hold reads the same on
    every pass, so the status it lands in is not rewritten each pass while the cell is held."""
    until = datetime.fromtimestamp(int(until_s), tz=UTC)
    return (
        f"cell {name}: drain abandoned {count} time(s) at drain.timeout "
        f"(a PodDisruptionBudget or busy GPU pods blocked it); not drained again before "
        f"{until:%Y-%m-%dT%H:%M:%SZ}"
    )


def _hold_message(held: list[VictimCandidate], now_s: float) -> str:
    parts = [hold_note(c.name, c.record.count, c.held_until_s or now_s) for c in held]
    return "scale-down held: " + "; ".join(parts)


def choose_victims(
    planned: tuple[str, ...],
    candidates: tuple[VictimCandidate, ...],
    now_s: float,
    preferred: tuple[str, ...] = (),
) -> VictimChoice:
    """Keep membership's victims unless held; replace a held one by the best candidate that is
    neither held nor already chosen or planned - membership's order: the autoscaler's
    ``preferred`` victims first (cheapest to drain), then the highest index; with none, hold
    it back."""
    by_name = {c.name: c for c in candidates}
    rank = {name: i for i, name in enumerate(preferred)}
    spare = [
        c
        for c in sorted(candidates, key=lambda c: (rank.get(c.name, len(rank)), -c.index))
        if c.name not in planned and not c.held(now_s)
    ]
    remove: list[str] = []
    held: list[VictimCandidate] = []
    substituted: list[tuple[str, str]] = []
    for name in planned:
        cand = by_name.get(name)
        if cand is None or not cand.held(now_s):
            remove.append(name)
        elif spare:
            stand_in = spare.pop(0)
            remove.append(stand_in.name)
            substituted.append((name, stand_in.name))
        else:
            held.append(cand)
    waits = [(c.held_until_s or now_s) - now_s for c in held]
    return VictimChoice(
        remove=tuple(remove),
        held=tuple(c.name for c in held),
        substituted=tuple(substituted),
        message=_hold_message(held, now_s) if held else "",
        requeue_after_s=min(waits) if waits else None,
    )
