"""Go-style durations: the strings the original accepted parse to the right seconds."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from gpucellpool.api import Duration, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("10m", 600.0),
        ("30m", 1800.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("2h0m0s", 7200.0),
        ("0", 0.0),
        ("0s", 0.0),
        ("300ms", 0.3),
        ("1m0.5s", 60.5),
        ("1500us", 0.0015),
        ("1500µs", 0.0015),  # Go's micro sign
        ("10ns", 1e-8),
        (".5m", 30.0),
    ],
)
def test_parse_duration_accepts_go_spellings(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "1d", "-5m", "m", "10 m", "1h 30m", "5M", "1w", "abc"])
def test_parse_duration_rejects_what_go_rejects_or_we_forbid(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59, "59s"), (90, "1m30s"), (600, "10m"), (5400, "1h30m"), (3601, "1h1s")],
)
def test_format_duration_round_trips(seconds: int, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


def test_format_duration_rejects_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        format_duration(-1)


class _Holder(BaseModel):
    window: Duration


def test_duration_field_keeps_spelling_and_exposes_seconds() -> None:
    held = _Holder.model_validate({"window": "1h30m"})
    assert held.window == "1h30m"
    assert held.window.seconds == 5400.0
    assert held.model_dump(mode="json") == {"window": "1h30m"}


@pytest.mark.parametrize("value", ["ten minutes", 600, None, "-1m"])
def test_duration_field_rejects_non_durations(value: object) -> None:
    with pytest.raises(ValidationError):
        _Holder.model_validate({"window": value})
