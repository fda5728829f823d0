"""The webhook bounds the work one request can cost it (issue 12, finding 5).

Why this test exists: a body under the size cap could still hurt the server. JSON nested a
thousand deep made the decoder raise RecursionError (a 500 with a traceback); a large pool kept
the event loop busy for seconds of rule evaluation, so health checks and every other review
waited; a body the server could not read (a broken gzip upload) was a 500. Each case runs
against the real server over TLS on loopback.
"""

from __future__ import annotations

import asyncio
import copy
import json
import statistics
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_webhook_server import CASES, Pools, Running, admission, issue
from webhook.body_depth import MAX_DEPTH, nesting_depth
from webhook.server import HEALTH_PATH, VALIDATE_PATH, WebhookServer
from webhook.tls import ServingTLS


@pytest.fixture
async def start() -> AsyncIterator[Callable[[float], Any]]:
    servers: list[WebhookServer] = []

    async def _start(budget_seconds: float) -> Running:
        stored, tls, pools = issue(), ServingTLS(), Pools()
        tls.load_pair(stored.serving)
        server = WebhookServer(tls, pools, host="127.0.0.1", port=0, budget_seconds=budget_seconds)
        await server.start()
        servers.append(server)
        return Running(server, stored, pools)

    yield _start
    for server in servers:
        await server.stop()


def big_pool(items: int = 60_000) -> dict[str, Any]:
    """A valid-looking pool whose guestTemplate carries ~1.6 MB the rules must walk."""
    pool: dict[str, Any] = copy.deepcopy(CASES["good-ok-clusterip-port"].object)
    pool["spec"]["cell"]["guestTemplate"]["x"] = [{"a": [1, 2, {"b": "c"}]}] * items
    return pool


def nested(levels: int) -> bytes:
    review = admission(CASES["good-ok-clusterip-port"].object)
    review["request"]["object"]["spec"]["cell"]["guestTemplate"]["x"] = "HOLE"
    return json.dumps(review).encode().replace(b'"HOLE"', b"[" * levels + b"]" * levels)


def test_the_depth_scan_ignores_brackets_in_strings() -> None:
    assert nesting_depth(b'{"a": "[[[[{{{{\\"[[[", "b": [[1]]}') == 3
    assert nesting_depth(b"[" * 5000) == 5000
    assert nesting_depth(b'"just a string"') == 0


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(st.sampled_from('[]{}"\\/ax\n'), max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=_JSON, ascii_only=st.booleans())
def test_the_byte_scan_agrees_with_the_decoded_depth(value: Any, ascii_only: bool) -> None:
    body = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert nesting_depth(body) == _depth(value)


async def test_deep_nesting_is_a_400_not_a_traceback(start: Callable[[float], Any]) -> None:
    running: Running = await start(3.0)
    status, answer = await running.post(nested(1000))
    assert status == 400
    assert f"at most {MAX_DEPTH} are read" in answer["message"]
    assert running.server.stats.bad_requests == 1 and running.server.stats.errors == 0
    status, answer = await running.post(nested(20))
    assert status == 200 and "response" in answer, "a pool-shaped depth is still judged"


async def test_a_body_it_cannot_read_is_a_400(start: Callable[[float], Any]) -> None:
    running: Running = await start(3.0)
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            running.url + VALIDATE_PATH,
            data=b"this is not gzip",
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
            ssl=running.client_ssl(),
        ) as resp,
    ):
        assert resp.status == 400
        assert "cannot read the request body" in (await resp.json())["message"]
    assert running.server.stats.bad_requests == 1


async def test_a_slow_review_does_not_block_the_event_loop(
    start: Callable[[float], Any],
) -> None:
    running: Running = await start(120.0)
    body = json.dumps(admission(big_pool())).encode()
    started = time.monotonic()
    review = asyncio.create_task(running.post(body))
    latencies: list[float] = []
    async with aiohttp.ClientSession() as session:
        while not review.done():
            sent = time.monotonic()
            async with session.get(running.url + HEALTH_PATH, ssl=running.client_ssl()) as r:
                assert r.status == 200
            latencies.append(time.monotonic() - sent)
    status, answer = await review
    judged = time.monotonic() - started
    assert status == 200 and answer["response"]["allowed"] is False
    assert judged > 0.5, "the body must really cost the rules time for this test to mean much"
    # Blocked, the loop answers one health check before judging starts and one after it
    # ends; free, it keeps answering them (one at a time, so a slow answer cannot hide).
    assert len(latencies) >= 5, (latencies, judged)
    assert statistics.median(latencies) < judged / 4, (latencies, judged)


async def test_a_review_past_its_budget_is_denied_saying_so(
    start: Callable[[float], Any],
) -> None:
    running: Running = await start(0.05)
    status, answer = await running.post(admission(big_pool()))
    resp = answer["response"]
    assert status == 200 and resp["allowed"] is False
    assert resp["status"]["code"] == 504 and "0.05s budget" in resp["status"]["message"]
    assert running.server.stats.over_budget == 1 and running.server.stats.errors == 0
    running.server.budget_seconds = 30.0
    status, answer = await running.post(admission(CASES["good-ok-clusterip-port"].object))
    assert status == 200 and "budget" not in json.dumps(answer), "the next review is judged"
    assert running.server.stats.over_budget == 1
