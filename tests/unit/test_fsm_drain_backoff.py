"""Drain back-off: an abandoned scale-down drain is not retried until a doubling back-off passed."""
# ruff: noqa: E501  (the victim table keeps one case per line on purpose)

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from provisioner.fsm.drain_backoff import (
    DRAIN_ABANDON_COUNT_ANNOTATION,
    DRAIN_ABANDONED_ANNOTATION,
    DRAIN_BACKOFF_CAP_S,
    AbandonRecord,
    VictimCandidate,
    backoff_s,
    choose_victims,
    held_until_s,
    parse_record,
    record_abandon,
)

T0 = datetime(2026, 11, 30, 10, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("count", "timeout", "expected"),
    [
        (0, 60.0, 0.0),  # never abandoned: no hold
        (1, 60.0, 120.0),  # drain.timeout x 2^1
        (2, 60.0, 240.0),
        (5, 60.0, 1920.0),
        (6, 60.0, DRAIN_BACKOFF_CAP_S),  # 3840 s capped at 1 h
        (1000, 60.0, DRAIN_BACKOFF_CAP_S),  # no overflow
        (1, 7200.0, 7200.0),  # a timeout above the cap: held one timeout, not less
        (1, None, 600.0),  # drain.timeout unset since: the 5 min default as base
    ],
)
def test_backoff_doubles_from_the_drain_timeout_and_is_capped(
    count: int, timeout: float | None, expected: float
) -> None:
    assert backoff_s(count, timeout) == expected


def test_record_roundtrip_through_annotations() -> None:
    annotations = {
        DRAIN_ABANDON_COUNT_ANNOTATION: "2",
        DRAIN_ABANDONED_ANNOTATION: "2026-11-30T10:00:00.250000Z",
    }
    assert parse_record(annotations) == AbandonRecord(2, T0 + 0.25)
    assert record_abandon(AbandonRecord(2, T0), T0 + 9) == AbandonRecord(3, T0 + 9)
    assert held_until_s(AbandonRecord(2, T0), 10.0) == T0 + 40.0
    assert held_until_s(AbandonRecord(), 10.0) is None


@pytest.mark.parametrize(
    "annotations",
    [
        {},
        {DRAIN_ABANDON_COUNT_ANNOTATION: "x", DRAIN_ABANDONED_ANNOTATION: "2026-11-30T10:00:00Z"},
        {DRAIN_ABANDON_COUNT_ANNOTATION: "1", DRAIN_ABANDONED_ANNOTATION: "soon"},
        {DRAIN_ABANDON_COUNT_ANNOTATION: "-1", DRAIN_ABANDONED_ANNOTATION: "2026-11-30T10:00:00Z"},
        {DRAIN_ABANDON_COUNT_ANNOTATION: "1"},
    ],
)
def test_unreadable_record_is_no_record(annotations: dict[str, str]) -> None:
    assert parse_record(annotations) == AbandonRecord()


def cand(index: int, held_for: float | None = None, count: int = 1) -> VictimCandidate:
    until = None if held_for is None else T0 + held_for
    record = AbandonRecord(count, T0) if held_for is not None else AbandonRecord()
    return VictimCandidate(f"gpu-{index}", index, record, until)


# (id, planned victims, candidates, expected remove, expected held, expected substitutions)
CASES = [
    ("nothing-held", ("gpu-2",), (cand(0), cand(1), cand(2)), ("gpu-2",), (), ()),
    ("held-swapped-for-next-highest", ("gpu-2",), (cand(0), cand(1), cand(2, 60)), ("gpu-1",), (), (("gpu-2", "gpu-1"),)),
    ("hold-expired", ("gpu-2",), (cand(0), cand(2, 0)), ("gpu-2",), (), ()),
    ("all-held-waits", ("gpu-1",), (cand(0, 30), cand(1, 60)), (), ("gpu-1",), ()),
    ("stand-in-not-a-planned-victim", ("gpu-2", "gpu-1"), (cand(0), cand(1), cand(2, 60)), ("gpu-0", "gpu-1"), (), (("gpu-2", "gpu-0"),)),
    ("two-held-one-stand-in", ("gpu-2", "gpu-1"), (cand(0), cand(1, 60), cand(2, 60)), ("gpu-0",), ("gpu-1",), (("gpu-2", "gpu-0"),)),
    ("unknown-victim-kept", ("gpu-9",), (cand(0),), ("gpu-9",), (), ()),
]  # fmt: skip


@pytest.mark.parametrize(
    ("planned", "candidates", "remove", "held", "swapped"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_choose_victims(
    planned: tuple[str, ...],
    candidates: tuple[VictimCandidate, ...],
    remove: tuple[str, ...],
    held: tuple[str, ...],
    swapped: tuple[tuple[str, str], ...],
) -> None:
    choice = choose_victims(planned, candidates, T0)
    assert choice.remove == remove
    assert choice.held == held
    assert choice.substituted == swapped
    assert (choice.message != "") == bool(held)


def test_stand_in_follows_the_autoscalers_preference_then_the_highest_index() -> None:
    cands = (cand(0), cand(1), cand(2), cand(3, 60))
    assert choose_victims(("gpu-3",), cands, T0).remove == ("gpu-2",)
    assert choose_victims(("gpu-3",), cands, T0, preferred=("gpu-0",)).remove == ("gpu-0",)
    # A preferred cell that is itself held is skipped.
    cands = (cand(0, 30), cand(1), cand(2), cand(3, 60))
    assert choose_victims(("gpu-3",), cands, T0, preferred=("gpu-0",)).remove == ("gpu-2",)


def test_held_message_and_requeue_say_why_and_when() -> None:
    choice = choose_victims(("gpu-1",), (cand(0, 90, count=2), cand(1, 45)), T0)
    assert choice.held == ("gpu-1",)
    assert choice.requeue_after_s == 45.0
    assert choice.message.startswith("scale-down held: cell gpu-1: drain abandoned 1 time(s)")
    assert "PodDisruptionBudget" in choice.message
    assert "not drained again before 2026-11-30T10:00:45Z" in choice.message


def test_the_held_message_is_the_same_on_every_pass_of_the_hold() -> None:
    """It names the end, not a countdown: a status carrying it is not rewritten each pass."""
    cands = (cand(1, 45),)
    messages = {choose_victims(("gpu-1",), cands, T0 + t).message for t in (0.0, 10.0, 44.0)}
    assert len(messages) == 1


def test_a_cell_is_never_re_picked_within_its_backoff() -> None:
    """Abandon after abandon, the cell comes back as a victim only at drainTimeout x 2^n."""
    timeout, record, now = 10.0, AbandonRecord(), T0
    picked_at = []
    for _ in range(4):
        record = record_abandon(record, now)
        until = held_until_s(record, timeout)
        assert until is not None
        only = (VictimCandidate("gpu-1", 1, record, until),)
        for t in (now, until - 0.001):
            assert choose_victims(("gpu-1",), only, t).remove == ()
        assert choose_victims(("gpu-1",), only, until).remove == ("gpu-1",)
        picked_at.append(until - now)
        now = until + timeout  # drained again for one timeout, abandoned again
    assert picked_at == [20.0, 40.0, 80.0, 160.0]
