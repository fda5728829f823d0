"""Go-style duration strings ("90s", "10m", "1h30m") as the API spells them.

Why this module exists: the original Go operator typed its timeouts and windows as
``metav1.Duration``, so every manifest in the wild writes them as Go duration strings. We must
accept exactly those strings, keep the user's spelling when we write the object back, and give
the rest of the code plain seconds. ``Duration`` is a ``str`` that remembers its text and knows
its length in seconds; ``parse_duration`` is the parser both use.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

_UNIT_SECONDS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_TERM = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
# The OpenAPI pattern the CRD enforces; the same grammar as ``_TERM`` (plus a bare "0").
DURATION_PATTERN = r"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$"
_WHOLE = re.compile(DURATION_PATTERN)


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string; raises ValueError on anything Go would reject.

    Negative durations are rejected: no window or timeout in this API can be negative.
    """
    if not isinstance(text, str) or not _WHOLE.fullmatch(text):
        raise ValueError(f"invalid duration {text!r}: want a Go duration such as 90s, 10m, 1h30m")
    if text == "0":
        return 0.0
    return sum(float(num) * _UNIT_SECONDS[unit] for num, unit in _TERM.findall(text))


def format_duration(seconds: float) -> str:
    """The shortest Go-style spelling of a whole number of seconds ("1h30m", "90s" -> "1m30s")."""
    total = round(seconds)
    if total < 0:
        raise ValueError("durations cannot be negative")
    if total == 0:
        return "0s"
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{secs}s" if secs else "",
    ]
    return "".join(parts)


class Duration(str):
    """A Go duration string that keeps its spelling and exposes ``.seconds``."""

    __slots__ = ()

    @property
    def seconds(self) -> float:
        """Length of this duration in seconds."""
        return parse_duration(str(self))

    @classmethod
    def _validate(cls, value: Any) -> Duration:
        if isinstance(value, Duration):
            return value
        if not isinstance(value, str):
            raise ValueError("a duration must be a string such as 10m")
        parse_duration(value)
        return cls(value)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls._validate,
            serialization=core_schema.plain_serializer_function_ser_schema(str),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string", "pattern": DURATION_PATTERN}
