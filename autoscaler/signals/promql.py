"""Prometheus HTTP API responses as typed values, and safe PromQL string building.

Why this module exists: a monitoring server is an outside system that can answer with
anything: an ``error`` status, a half-written body, a scalar where a vector was expected,
``"NaN"`` or ``"+Inf"`` sample values. Turning the raw JSON into a small typed result (or a
precise :class:`ResponseError`) in pure code keeps that judgement testable without a
network and keeps the async adapter thin. Sample values stay raw strings here; deciding
which values are usable is the interpreter's job (see ``hami_metrics``).
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

RESULT_TYPES = ("vector", "matrix", "scalar", "string")
_MAX_DETAIL = 200


class ResponseError(Exception):
    """The server answered, but not with a usable query result.

    ``kind`` is machine-readable: ``malformed`` (not the Prometheus API JSON shape) or
    ``status_error`` (``"status": "error"``, with Prometheus' ``errorType`` in ``detail``).
    """

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a result: its labels and its ``(timestamp, raw value)`` samples.

    An instant vector has exactly one sample per series, a range (matrix) result one or
    more, oldest first (as Prometheus returns them).
    """

    labels: Mapping[str, str]
    samples: tuple[tuple[float, str], ...]

    @property
    def newest(self) -> tuple[float, str]:
        return max(self.samples, key=lambda sample: sample[0])


@dataclass(frozen=True, slots=True)
class QueryResult:
    """A successful ``/api/v1/query`` answer.

    For ``scalar`` and ``string`` results ``series`` holds one label-less series.
    """

    result_type: str
    series: tuple[Series, ...] = ()
    warnings: tuple[str, ...] = field(default=())


def parse_sample_value(raw: str) -> float | None:
    """A sample's float value, or None when it is not a finite number.

    Prometheus encodes values as strings, including ``"NaN"``, ``"+Inf"`` and ``"-Inf"``;
    none of those is a usable measurement, and neither is garbage.
    """
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def parse_response(body: bytes | str) -> QueryResult:
    """Parse a Prometheus ``/api/v1/query`` (or ``query_range``) response body.

    Raises :class:`ResponseError` for invalid JSON, a wrong shape, or ``status: error``.
    """
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ResponseError("malformed", f"body is not JSON ({_excerpt(body)!r})") from exc
    if not isinstance(document, dict):
        raise ResponseError("malformed", f"body is a JSON {type(document).__name__}, not object")
    status = document.get("status")
    if status == "error":
        kind = _text(document.get("errorType")) or "unknown"
        message = _text(document.get("error")) or "no message"
        raise ResponseError("status_error", f"{kind}: {message}"[:_MAX_DETAIL])
    if status != "success":
        raise ResponseError("malformed", f"status is {status!r}, not 'success' or 'error'")
    warnings = tuple(_text(w) for w in document.get("warnings") or () if isinstance(w, str))
    data = document.get("data")
    if not isinstance(data, dict):
        raise ResponseError("malformed", "'data' is missing or not an object")
    return _parse_data(data, warnings)


def _parse_data(data: Mapping[str, object], warnings: tuple[str, ...]) -> QueryResult:
    result_type = data.get("resultType")
    result = data.get("result")
    if result_type not in RESULT_TYPES:
        raise ResponseError("malformed", f"unknown resultType {result_type!r}")
    if result_type in ("scalar", "string"):
        sample = _parse_pair(result, "result")
        return QueryResult(str(result_type), (Series({}, (sample,)),), warnings)
    if not isinstance(result, list):
        raise ResponseError("malformed", f"{result_type} result is not a list")
    series = tuple(_parse_series(item, str(result_type)) for item in result)
    return QueryResult(str(result_type), series, warnings)


def _parse_series(item: object, result_type: str) -> Series:
    if not isinstance(item, dict):
        raise ResponseError("malformed", f"{result_type} element is not an object")
    metric = item.get("metric", {})
    if not isinstance(metric, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metric.items()
    ):
        raise ResponseError("malformed", "series 'metric' is not a string-to-string object")
    if result_type == "vector":
        samples: tuple[tuple[float, str], ...] = (_parse_pair(item.get("value"), "value"),)
    else:
        values = item.get("values")
        if not isinstance(values, list) or not values:
            raise ResponseError("malformed", "matrix series has no 'values' list")
        samples = tuple(_parse_pair(pair, "values[]") for pair in values)
    return Series(dict(metric), samples)


def _parse_pair(pair: object, where: str) -> tuple[float, str]:
    if not isinstance(pair, list) or len(pair) != 2:
        raise ResponseError("malformed", f"{where} is not a [timestamp, value] pair")
    timestamp, raw = pair
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float):
        raise ResponseError("malformed", f"{where} timestamp {timestamp!r} is not a number")
    if not math.isfinite(timestamp):
        raise ResponseError("malformed", f"{where} timestamp is not finite")
    if not isinstance(raw, str):
        raise ResponseError("malformed", f"{where} value {raw!r} is not a string")
    return float(timestamp), raw


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _excerpt(body: bytes | str) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return text[:60]


# ---------------------------------------------------------------------------------------------
# Building PromQL safely
# ---------------------------------------------------------------------------------------------

_REGEX_SPECIAL = frozenset(string.punctuation) - frozenset("_-")


def regex_escape(text: str) -> str:
    """Escape ``text`` so RE2 (Prometheus' regex engine) matches it literally.

    RE2 accepts a backslash before any ASCII punctuation (and rejects it before letters), so
    only punctuation is escaped.
    """
    return "".join("\\" + ch if ch in _REGEX_SPECIAL else ch for ch in text)


def string_literal(text: str) -> str:
    """``text`` as a double-quoted PromQL string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def any_of(values: Sequence[str]) -> str:
    """A regex matching exactly one of ``values`` (Prometheus anchors label regexes)."""
    return "|".join(regex_escape(value) for value in sorted(set(values)))


def duration(seconds: float) -> str:
    """A PromQL duration for ``seconds``, in whole milliseconds (at least 1 ms)."""
    return f"{max(1, round(seconds * 1000))}ms"
