"""Pure tests: Prometheus HTTP API response parsing and PromQL escaping (signals.promql)."""

from __future__ import annotations

import json
import math

import pytest

from autoscaler.signals.promql import (
    QueryResult,
    ResponseError,
    any_of,
    duration,
    parse_response,
    parse_sample_value,
    regex_escape,
    string_literal,
)


def _ok(result_type: str, result: object) -> str:
    return json.dumps({"status": "success", "data": {"resultType": result_type, "result": result}})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", 1.0),
        ("0", 0.0),
        ("-3.5", -3.5),
        ("1e3", 1000.0),
        ("NaN", None),
        ("+Inf", None),
        ("-Inf", None),
        ("", None),
        ("abc", None),
        ("1,5", None),
    ],
)
def test_parse_sample_value(raw: str, expected: float | None) -> None:
    assert parse_sample_value(raw) == expected


def test_vector_result() -> None:
    body = _ok("vector", [{"metric": {"__name__": "up", "job": "x"}, "value": [1700000000.5, "1"]}])
    result = parse_response(body)
    assert result.result_type == "vector"
    assert len(result.series) == 1
    assert result.series[0].labels == {"__name__": "up", "job": "x"}
    assert result.series[0].samples == ((1700000000.5, "1"),)


def test_matrix_result_keeps_all_samples_and_newest() -> None:
    values = [[100, "1"], [115, "2"], [130, "NaN"]]
    body = _ok("matrix", [{"metric": {"a": "b"}, "values": values}])
    series = parse_response(body).series[0]
    assert series.samples == ((100.0, "1"), (115.0, "2"), (130.0, "NaN"))
    assert series.newest == (130.0, "NaN")


def test_scalar_and_string_results() -> None:
    assert parse_response(_ok("scalar", [5, "3"])).series[0].samples == ((5.0, "3"),)
    assert parse_response(_ok("string", [5, "hi"])).series[0].labels == {}


def test_empty_vector_is_a_valid_empty_result() -> None:
    assert parse_response(_ok("vector", [])) == QueryResult("vector", ())


def test_warnings_are_kept() -> None:
    doc = {
        "status": "success",
        "warnings": ["partial response"],
        "data": {"resultType": "vector", "result": []},
    }
    assert parse_response(json.dumps(doc)).warnings == ("partial response",)


def test_status_error_carries_prometheus_error_type_and_message() -> None:
    body = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error at 3"})
    with pytest.raises(ResponseError) as info:
        parse_response(body)
    assert info.value.kind == "status_error"
    assert info.value.detail == "bad_data: parse error at 3"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"", "not JSON"),
        (b"<html>502 Bad Gateway</html>", "not JSON"),
        (b'{"status": "success", "data": {"resultType": "vec', "not JSON"),
        (b"\xff\xfe\x00garbage", "not JSON"),
        (b"[]", "JSON list, not object"),
        (b'"success"', "JSON str, not object"),
        (b'{"data": {}}', "status is None"),
        (b'{"status": "ok"}', "status is 'ok'"),
        (b'{"status": "success"}', "'data' is missing"),
        (b'{"status": "success", "data": []}', "'data' is missing"),
        (b'{"status": "success", "data": {"resultType": "table", "result": []}}', "unknown"),
        (b'{"status": "success", "data": {"resultType": "vector", "result": {}}}', "not a list"),
        (b'{"status": "success", "data": {"resultType": "vector", "result": [1]}}', "element"),
        (_ok("vector", [{"metric": {"a": 1}, "value": [1, "1"]}]).encode(), "string-to-string"),
        (_ok("vector", [{"metric": {}, "value": [1, 1]}]).encode(), "not a string"),
        (_ok("vector", [{"metric": {}, "value": ["1", "1"]}]).encode(), "not a number"),
        (_ok("vector", [{"metric": {}, "value": [True, "1"]}]).encode(), "not a number"),
        (_ok("vector", [{"metric": {}, "value": [1]}]).encode(), "pair"),
        (_ok("vector", [{"metric": {}}]).encode(), "pair"),
        (_ok("matrix", [{"metric": {}, "values": []}]).encode(), "no 'values'"),
        (_ok("matrix", [{"metric": {}, "value": [1, "1"]}]).encode(), "no 'values'"),
        (_ok("scalar", "3").encode(), "pair"),
    ],
)
def test_malformed_bodies_raise_with_a_precise_detail(body: bytes, fragment: str) -> None:
    with pytest.raises(ResponseError) as info:
        parse_response(body)
    assert info.value.kind == "malformed"
    assert fragment in info.value.detail


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("cell-0", "cell-0"),
        ("cell_0", "cell_0"),
        ("node.example.com", r"node\.example\.com"),
        ("a|b", r"a\|b"),
        ("x(y)+*?[]{}^$", r"x\(y\)\+\*\?\[\]\{\}\^\$"),
        ("ünï", "ünï"),
    ],
)
def test_regex_escape(text: str, escaped: str) -> None:
    assert regex_escape(text) == escaped


def test_any_of_sorts_and_deduplicates() -> None:
    assert any_of(["b.x", "a", "b.x"]) == r"a|b\.x"


def test_string_literal_escapes_backslash_quote_newline() -> None:
    assert string_literal('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'


@pytest.mark.parametrize(
    ("seconds", "text"), [(180, "180000ms"), (0.5, "500ms"), (0, "1ms"), (1.0004, "1000ms")]
)
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_nan_timestamp_is_malformed() -> None:
    # json.dumps writes NaN for float('nan'); Python's json reads it back.
    body = _ok("vector", [{"metric": {}, "value": [math.nan, "1"]}])
    with pytest.raises(ResponseError, match="not finite"):
        parse_response(body)
