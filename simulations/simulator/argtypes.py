"""argparse ``type=`` validators shared by ``simulate``, ``sweep``, ``demo`` and ``trace record``.

Why this module exists: a bad flag must be refused when it is parsed, with argparse's one-line
usage error, not found later as a traceback, a hang or a silently nonsensical run. ``nan``,
``inf``, zero and negative numbers, missing files and malformed durations are all caught here;
durations go through the API's one parser (gpucellpool/api/durations.py).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

# Flags that are counts, sizes or factors are capped so a typo cannot ask for years of work.
MAX_FACTOR = 1e6


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def nonnegative_float(text: str) -> float:
    """A finite number >= 0."""
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def factor(text: str) -> float:
    """A finite number > 0 and at most ``MAX_FACTOR`` (a scale or compression)."""
    value = positive_float(text)
    if value > MAX_FACTOR:
        raise argparse.ArgumentTypeError(f"{text!r} must be <= {MAX_FACTOR:g}")
    return value


def probability(text: str) -> float:
    """A number in [0, 1]."""
    value = _finite(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1")
    return value


def int_at_least(low: int, high: int = 10**9) -> Callable[[str], int]:
    """An integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} must be between {low} and {high}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def existing_file(text: str) -> Path:
    """A path to a readable regular file (not a directory)."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: not a regular file")
    return path


def duration_seconds(text: str) -> float:
    """A Go duration ("15s", "1m30s") or plain seconds, > 0."""
    # imported here: the API package loads every model, a second a bad flag need not wait
    from gpucellpool.api.durations import parse_duration  # noqa: PLC0415

    try:
        seconds = parse_duration(text)
    except ValueError:
        seconds = positive_float(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than 0")
    return seconds


def comma_list(item: Callable[[str], object]) -> Callable[[str], list[object]]:
    """Comma-separated values each parsed by ``item``; at least one."""

    def parse(text: str) -> list[object]:
        values = [item(part.strip()) for part in text.split(",") if part.strip()]
        if not values:
            raise argparse.ArgumentTypeError("give at least one value")
        return values

    parse.__name__ = "comma-separated list"
    return parse


def bounded(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    """A finite number in [low, high] (``(low, high]`` with ``low_open``)."""

    def parse(text: str) -> float:
        value = _finite(text)
        if value < low or value > high or (low_open and value == low):
            opening = "(" if low_open else "["
            raise argparse.ArgumentTypeError(f"{text!r} must be in {opening}{low:g}, {high:g}]")
        return value

    parse.__name__ = "number"
    return parse


def output_file(text: str) -> Path:
    """A file path whose folder exists (checked before a long run, not after it)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a directory; give a file name")
    if not path.resolve().parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: folder {path.parent} does not exist")
    return path
