"""Typed, checked command-line values: the ``type=`` functions of ``gpucellpool run``'s flags.

Why this module exists: a newcomer's typo must stop the process at once with argparse's one-line
usage error naming the flag, not start an operator that spins (``--retry-period 0``), never
ticks (``--tick nan``), or dies later in a traceback (``--health-port 99999``). Every check is a
pure function from the flag's text to a value or an ``argparse.ArgumentTypeError`` whose message
says what was wrong and what is wanted; argparse adds the flag's name.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path

MAX_DURATION_S = 86_400.0
"""No loop period, lease or debounce of this operator is meaningful beyond a day."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL_MAX = 63
_DNS1123_SUBDOMAIN_MAX = 253


def _bad(text: str, want: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{text!r}: {want}")


def seconds_value(text: str) -> float:
    """Seconds as a plain number ("2.5") or a Go duration ("2s", "1m30s"); may be anything."""
    stripped = text.strip()
    try:
        return float(stripped)
    except ValueError:
        pass
    # Imported here: gpucellpool.api loads the pydantic models, a second on a busy machine.
    from gpucellpool.api.durations import parse_duration  # noqa: PLC0415

    try:
        return parse_duration(stripped)
    except ValueError:
        raise _bad(text, "want seconds (2.5) or a duration (2s, 1m30s)") from None


def duration_s(minimum_s: float = 0.0, inclusive: bool = False) -> Callable[[str], float]:
    """A finite duration above ``minimum_s`` (or at it, when ``inclusive``), at most a day."""
    lowest = f"at least {minimum_s:g}" if inclusive else f"more than {minimum_s:g}"

    def parse(text: str) -> float:
        seconds = seconds_value(text)
        too_low = seconds < minimum_s if inclusive else seconds <= minimum_s
        if not math.isfinite(seconds) or too_low or seconds > MAX_DURATION_S:
            raise _bad(text, f"want {lowest} and at most {MAX_DURATION_S:g} seconds")
        return seconds

    parse.__name__ = "duration"
    return parse


positive_seconds = duration_s()
"""A period that must pass between two actions: 0 would spin."""

non_negative_seconds = duration_s(0.0, inclusive=True)
"""A delay where 0 means "at once" (the debounce)."""

lease_seconds = duration_s(1.0, inclusive=True)
"""A Lease stores whole seconds (``leaseDurationSeconds``), so below 1 s it cannot be kept."""


def whole_number(minimum: int) -> Callable[[str], int]:
    """An integer of at least ``minimum`` (a count such as ``--shards``, an index)."""

    def parse(text: str) -> int:
        try:
            number = int(text.strip())
        except ValueError:
            raise _bad(text, f"want a whole number, at least {minimum}") from None
        if number < minimum:
            raise _bad(text, f"want a whole number, at least {minimum}")
        return number

    return parse


def port(text: str) -> int:
    """A TCP port, 1-65535."""
    try:
        number = int(text.strip())
    except ValueError:
        raise _bad(text, "want a port number 1-65535") from None
    if not 1 <= number <= 65535:
        raise _bad(text, "want a port number 1-65535")
    return number


def dns1123_label(text: str) -> str:
    """A Kubernetes namespace name: lowercase letters, digits and '-', at most 63 characters."""
    if len(text) > _DNS1123_LABEL_MAX or not _DNS1123_LABEL.fullmatch(text):
        raise _bad(
            text,
            "want a DNS-1123 label (lowercase a-z, 0-9 and '-', starting and ending "
            "alphanumeric, at most 63 characters)",
        )
    return text


def dns1123_subdomain(text: str) -> str:
    """An object name such as a Lease's: dot-separated DNS-1123 labels, at most 253 chars."""
    parts = text.split(".")
    if len(text) > _DNS1123_SUBDOMAIN_MAX or not all(_DNS1123_LABEL.fullmatch(p) for p in parts):
        raise _bad(
            text,
            "want a DNS-1123 subdomain (lowercase a-z, 0-9, '-' and '.', each part starting "
            "and ending alphanumeric, at most 253 characters)",
        )
    return text


def namespace_list(text: str) -> list[str]:
    """One or more comma-separated namespaces; blanks between commas are ignored."""
    return [dns1123_label(part.strip()) for part in text.split(",") if part.strip()]


def log_level(text: str) -> str:
    """A logging level name, any case, returned upper-case."""
    level = text.strip().upper()
    if level not in LOG_LEVELS:
        raise _bad(text, f"want one of {', '.join(LOG_LEVELS)} (any case)")
    return level


def non_empty(text: str) -> str:
    """A value that must say something (an identity, a host)."""
    if not text.strip():
        raise _bad(text, "must not be empty")
    if any(c.isspace() or not c.isprintable() for c in text):
        raise _bad(text, "must not contain spaces or control characters")
    return text


def directory_problem(path: Path) -> str | None:
    """Why ``path`` is not an existing directory (the files in it may come later), or None."""
    if path.is_dir():
        return None
    return "not a directory" if path.exists() else "no such directory"


def election_problem(lease_s: float, renew_deadline_s: float, retry_s: float) -> str | None:
    """Why these leader-election periods cannot work together, or None when they can.

    A leader must give up (renew deadline) before a standby may take over (lease), and it must
    get at least one retry inside its renew deadline, as client-go requires.
    """
    if not lease_s > renew_deadline_s:
        return (
            f"--lease-duration ({lease_s:g}s) must be longer than --renew-deadline "
            f"({renew_deadline_s:g}s): a leader must step down before a standby takes over"
        )
    if not renew_deadline_s > retry_s:
        return (
            f"--renew-deadline ({renew_deadline_s:g}s) must be longer than --retry-period "
            f"({retry_s:g}s): a leader needs a retry before its deadline"
        )
    return None
