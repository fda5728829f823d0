"""The drain start is stored precisely enough that a drain never times out early."""

from __future__ import annotations

import pytest

from provisioner.backends.base import rfc3339, rfc3339_micro
from provisioner.fsm.observations import parse_time_s


@pytest.mark.parametrize("now", [1_780_000_000.0, 1_780_000_000.999, 1_780_000_123.456789])
def test_drain_start_round_trips_to_the_microsecond(now: float) -> None:
    parsed = parse_time_s(rfc3339_micro(now))
    assert parsed is not None
    assert abs(parsed - now) < 1e-5


def test_whole_second_form_would_lose_up_to_a_second() -> None:
    now = 1_780_000_000.9
    parsed = parse_time_s(rfc3339(now))
    assert parsed is not None and now - parsed > 0.8  # why the drain start uses rfc3339_micro
