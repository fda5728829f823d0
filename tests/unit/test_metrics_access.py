"""``/metrics`` access rules: bearer parsing, the review outcome, and the review cache."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from gpucellpool.kube.errors import KubeError, Unreachable
from gpucellpool.kube.rest import RestClient
from gpucellpool.kube.reviews import KubeAccessReviewer
from gpucellpool.runtime.metrics_access import (
    Identity,
    MetricsGuard,
    ReviewUnavailable,
    bearer_token,
    decide,
    token_key,
)
from simulations.simulator.engine.clock import VirtualClock


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def", "abc.def"),
        ("bearer   abc  ", "abc"),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer", None),
        ("Bearer a b", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_decide_maps_reviews_to_http_answers() -> None:
    prom = Identity("system:serviceaccount:mon:prometheus")
    assert decide(None, False).status == 401
    denied = decide(prom, False)
    assert denied.status == 403 and "system:serviceaccount:mon:prometheus" in denied.reason
    assert decide(prom, True).allowed


@dataclass
class CountingReviewer:
    """Answers from tables and counts the calls (an in-memory AccessReviewer)."""

    users: dict[str, Identity]
    allowed: set[str]
    down: bool = False
    calls: list[str] = field(default_factory=list)

    async def authenticate(self, token: str) -> Identity | None:
        self.calls.append("authn")
        if self.down:
            raise ReviewUnavailable("apiserver timed out")
        return self.users.get(token)

    async def authorize(self, identity: Identity, verb: str, path: str) -> bool:
        self.calls.append(f"authz {verb} {path}")
        return identity.user in self.allowed


def reviewer() -> CountingReviewer:
    users = {"good": Identity("prom"), "other": Identity("bob")}
    return CountingReviewer(users, allowed={"prom"})


async def test_guard_answers_and_asks_for_get_metrics() -> None:
    r, clock = reviewer(), VirtualClock(1000.0)
    guard = MetricsGuard(r, clock.now)
    assert (await guard.check(None)).status == 401
    assert (await guard.check("Bearer unknown")).status == 401
    assert (await guard.check("Bearer other")).status == 403
    assert (await guard.check("Bearer good")).status == 200
    assert "authz get /metrics" in r.calls


async def test_guard_caches_per_token_until_the_ttl() -> None:
    r, clock = reviewer(), VirtualClock(1000.0)
    guard = MetricsGuard(r, clock.now, ttl_s=60)
    await guard.check("Bearer good")
    calls = len(r.calls)
    clock.t += 59
    assert (await guard.check("Bearer good")).allowed
    assert len(r.calls) == calls  # served from the cache
    clock.t += 2
    assert (await guard.check("Bearer good")).allowed
    assert len(r.calls) == 2 * calls  # reviewed again after the TTL


async def test_guard_never_caches_an_unavailable_review_and_keeps_no_raw_token() -> None:
    r, clock = reviewer(), VirtualClock(1000.0)
    guard = MetricsGuard(r, clock.now)
    r.down = True
    answer = await guard.check("Bearer good")
    assert answer.status == 503 and "good" not in answer.reason
    r.down = False
    assert (await guard.check("Bearer good")).allowed  # the outage was not remembered
    assert "good" not in guard._cache and token_key("good") in guard._cache


async def test_guard_cache_is_bounded() -> None:
    users = {f"t{i}": Identity(f"u{i}") for i in range(20)}
    r, clock = CountingReviewer(users, allowed=set()), VirtualClock(1000.0)
    guard = MetricsGuard(r, clock.now, max_entries=5)
    for i in range(20):
        assert (await guard.check(f"Bearer t{i}")).status == 403
        assert len(guard._cache) <= 5


@dataclass
class ScriptedRest:
    """A ``RestClient`` stand-in for ``KubeAccessReviewer``: answers (or raises) in turn."""

    answers: list[dict[str, Any] | BaseException]
    bodies: list[dict[str, Any]] = field(default_factory=list)

    async def call(
        self,
        method: str,
        path: str,
        query: Any = None,
        body: Any = None,
        retry_throttled: bool = True,
    ) -> dict[str, Any]:
        self.bodies.append(body)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


AUTHENTICATED = {"status": {"authenticated": True, "user": {"username": "prom"}}}
ALLOWED = {"status": {"allowed": True}}


@pytest.mark.parametrize(
    "failure",
    [
        # what the door (gpucellpool.kube.rest) raises for a dropped connection, a timeout,
        # an answer that is not JSON (a proxy's error page), an error status
        Unreachable(0, "POST /apis/x: ServerDisconnectedError: Server disconnected"),
        Unreachable(0, "POST /apis/x: timed out"),
        KubeError(200, "POST /apis/x: HTTP 200: answer is not JSON"),
        KubeError(500, "POST /apis/x: HTTP 500: etcd"),
        json.JSONDecodeError("Expecting value", "<html>", 0),
    ],
)
async def test_reviewer_reports_any_failed_call_as_unavailable(failure: Exception) -> None:
    reviewer = KubeAccessReviewer(cast(RestClient, ScriptedRest([failure])))
    with pytest.raises(ReviewUnavailable) as caught:
        await reviewer.authenticate("secret-token")
    assert "secret-token" not in str(caught.value)
    guard = MetricsGuard(
        KubeAccessReviewer(cast(RestClient, ScriptedRest([failure]))), VirtualClock(1000.0).now
    )
    assert (await guard.check("Bearer secret-token")).status == 503


async def test_guard_does_not_cache_a_token_review_that_reported_an_error() -> None:
    """The apiserver could not check the token (e.g. its authentication webhook is down):
    answer 401 now, but ask again next time, as kube-apiserver's own token cache does."""
    broken = {"status": {"authenticated": False, "error": "webhook authenticator: timeout"}}
    rest = ScriptedRest([broken, AUTHENTICATED, ALLOWED])
    guard = MetricsGuard(KubeAccessReviewer(cast(RestClient, rest)), VirtualClock(1000.0).now)
    first = await guard.check("Bearer tok")
    assert first.status == 401 and "timeout" not in first.reason
    assert (await guard.check("Bearer tok")).allowed  # same instant: not served from a cache
    assert len(rest.bodies) == 3


async def test_guard_caches_a_plain_rejection() -> None:
    rest = ScriptedRest([{"status": {"authenticated": False}}])
    guard = MetricsGuard(KubeAccessReviewer(cast(RestClient, rest)), VirtualClock(1000.0).now)
    assert (await guard.check("Bearer forged")).status == 401
    assert (await guard.check("Bearer forged")).status == 401
    assert len(rest.bodies) == 1
