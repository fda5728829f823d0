"""The one door to the apiserver: its error tree, its Retry-After rule, and the request
function against a small local HTTP server that answers as a throttled apiserver does (a real
apiserver cannot be made to answer 429 or 503 on demand)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpucellpool.kube import errors
from gpucellpool.kube.access import Access
from gpucellpool.kube.cache import JSON, Query
from gpucellpool.kube.errors import RetryPolicy, error_for, retry_decision, server_message
from gpucellpool.kube.events import EventNote, EventSink, event_body, rest_creator
from gpucellpool.kube.rest import LIST_PAGE_LIMIT, RestClient
from gpucellpool.kube.reviews import KubeAccessReviewer
from gpucellpool.kube.transport import Connection
from gpucellpool.operator.adapters import LeaseClient
from gpucellpool.runtime.metrics_access import ReviewUnavailable

TOKEN = "s3cr3t-bearer-token-value"


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, errors.Invalid),
        (401, errors.Forbidden),
        (403, errors.Forbidden),
        (404, errors.NotFound),
        (409, errors.Conflict),
        (410, errors.Gone),
        (422, errors.Invalid),
        (429, errors.Throttled),
        (500, errors.KubeError),
        (503, errors.KubeError),
    ],
)
def test_each_status_maps_to_one_class_of_the_tree(status: int, kind: type) -> None:
    error = error_for(status, "GET", "/api/v1/pods", "why")
    assert type(error) is kind and isinstance(error, errors.KubeError)
    assert error.status == status
    assert str(error) == f"GET /api/v1/pods: HTTP {status}: why"


def test_server_message_is_the_status_message_one_line_and_never_the_credential() -> None:
    body = json.dumps({"kind": "Status", "message": f"token {TOKEN} is\nnot valid"}).encode()
    assert server_message(body, TOKEN) == "token <redacted> is not valid"
    assert server_message(b"plain text " * 100) == ("plain text " * 100)[:300].strip()
    assert server_message(b"") == ""


@pytest.mark.parametrize(
    ("status", "retry_after", "attempt", "retry", "wait_s"),
    [
        (429, "2", 0, True, 2.0),  # the server's word
        (429, "0", 0, True, 0.0),
        (429, None, 1, True, 1.0),  # no header: backoff x attempt
        (429, "abc", 0, True, 0.5),  # unreadable: backoff
        (429, "-3", 0, True, 0.5),
        (429, "inf", 0, True, 0.5),
        (429, "600", 0, True, 10.0),  # capped
        (429, "1", 3, False, 0.0),  # attempts spent
        (503, "1", 0, True, 1.0),  # the apiserver's "try again"
        (503, None, 0, False, 0.0),  # a plain 503 is an error
        (500, "1", 0, False, 0.0),
        (404, None, 0, False, 0.0),
    ],
)
def test_retry_decision_honours_retry_after_with_a_cap(
    status: int, retry_after: str | None, attempt: int, retry: bool, wait_s: float
) -> None:
    decision = retry_decision(status, retry_after, attempt, RetryPolicy(3, 0.5, 10.0))
    assert (decision.retry, decision.wait_s) == (retry, wait_s), decision.reason


@dataclass
class Script:
    """What the fake apiserver answers, in order, and what it saw."""

    answers: list[Callable[[], web.Response]]
    seen: list[tuple[str, str, str]] = field(default_factory=list)
    hang: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.text()
        self.seen.append(
            (request.method, request.path_qs, request.headers.get("Authorization", ""))
        )
        if not self.answers:
            await self.hang.wait()  # never set: the client's timeout must end the call
        answer = self.answers.pop(0)()
        del body
        return answer


def status(code: int, message: str, retry_after: str | None = None) -> Callable[[], web.Response]:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    payload = {"kind": "Status", "apiVersion": "v1", "code": code, "message": message}
    return lambda: web.json_response(payload, status=code, headers=headers)


def ok(obj: dict[str, object]) -> Callable[[], web.Response]:
    return lambda: web.json_response(obj)


@dataclass
class Door:
    rest: RestClient
    script: Script
    slept: list[float]


@pytest.fixture
async def door() -> AsyncIterator[Door]:
    script = Script([])
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", script.handle)
    server = TestServer(app)
    await server.start_server()
    access = Access(str(server.make_url("")).rstrip("/"), token=TOKEN)  # a kubeconfig's token
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    rest = RestClient(Connection(access), timeout_s=2.0, sleep=sleep)
    yield Door(rest, script, slept)
    await rest.close()
    await server.close()


async def test_a_429_is_sent_again_after_its_retry_after(door: Door) -> None:
    door.script.answers += [
        status(429, "too many requests", "1"),
        status(429, "too many requests", "3"),
        ok({"kind": "Pod", "metadata": {"name": "p"}}),
    ]
    got = await door.rest.call("GET", "/api/v1/namespaces/a/pods/p")
    assert got["metadata"] == {"name": "p"}
    assert door.slept == [1.0, 3.0]
    assert len(door.script.seen) == 3
    assert all(auth == f"Bearer {TOKEN}" for _, _, auth in door.script.seen)


async def test_throttling_that_does_not_end_raises_throttled_after_the_cap(door: Door) -> None:
    door.script.answers += [status(429, "slow down", "120")] * 4
    with pytest.raises(errors.Throttled) as raised:
        await door.rest.call("GET", "/api/v1/pods")
    assert door.slept == [10.0, 10.0, 10.0]  # capped, three retries, then the error
    assert raised.value.status == 429
    assert str(raised.value) == "GET /api/v1/pods: HTTP 429: slow down"


async def test_a_503_with_retry_after_is_retried_and_one_without_is_not(door: Door) -> None:
    door.script.answers += [status(503, "storage initializing", "2"), ok({"major": "1"})]
    assert await door.rest.call("GET", "/version") == {"major": "1"}
    assert door.slept == [2.0]
    door.script.answers += [status(503, "unavailable")]
    with pytest.raises(errors.KubeError) as raised:
        await door.rest.call("GET", "/version")
    assert raised.value.status == 503 and door.slept == [2.0]


async def test_a_429_that_is_an_answer_is_not_retried(door: Door) -> None:
    refused = "Cannot evict pod as it would violate the pod's disruption budget."
    door.script.answers += [status(429, refused, "10")]
    with pytest.raises(errors.Throttled, match="disruption budget"):
        await door.rest.call("POST", "/api/v1/namespaces/a/pods/p/eviction", retry_throttled=False)
    assert door.slept == [] and len(door.script.seen) == 1


async def test_errors_carry_the_apiservers_message_and_never_the_token(door: Door) -> None:
    door.script.answers += [
        status(404, 'pods "p" not found'),
        status(409, "the object has been modified"),
        status(403, f"user with token {TOKEN} cannot get pods"),
    ]
    assert await door.rest.get("/api/v1/namespaces/a/pods/p") is None
    with pytest.raises(errors.Conflict, match="has been modified"):
        await door.rest.replace("/api/v1/namespaces/a/pods/p", {"metadata": {}})
    with pytest.raises(errors.Forbidden) as forbidden:
        await door.rest.call("GET", "/api/v1/pods")
    assert TOKEN not in str(forbidden.value) and "<redacted>" in str(forbidden.value)
    assert (
        door.script.seen[1][1] == "/api/v1/namespaces/a/pods/p?fieldManager=gpucellpool-autoscaler"
    )


async def test_no_answer_is_unreachable_within_the_timeout(door: Door) -> None:
    door.rest.timeout_s = 0.3
    with pytest.raises(errors.Unreachable) as raised:
        await door.rest.call("GET", "/api/v1/pods")  # the server never answers
    assert raised.value.status == 0 and "timed out" in str(raised.value)
    closed = RestClient(Connection(Access("http://127.0.0.1:1")))
    try:
        with pytest.raises(errors.Unreachable):
            await closed.call("GET", "/version")
    finally:
        await closed.close()


async def test_a_field_manager_per_writer_over_one_connection(door: Door) -> None:
    webhook = door.rest.for_manager("gpucellpool-webhook")
    door.script.answers += [ok({}), ok({})]
    await webhook.apply("/api/v1/namespaces/a/secrets/s", {"metadata": {"name": "s"}})
    await webhook.close()  # not the owner: the connection stays open
    await door.rest.merge_patch("/api/v1/namespaces/a/secrets/s", {"metadata": {}})
    assert [path for _, path, _ in door.script.seen] == [
        "/api/v1/namespaces/a/secrets/s?fieldManager=gpucellpool-webhook&force=true",
        "/api/v1/namespaces/a/secrets/s?fieldManager=gpucellpool-autoscaler",
    ]


async def test_an_answer_not_read_is_not_decoded_but_errors_still_are(door: Door) -> None:
    path = "/apis/cells.kubeswift.io/v1alpha1/namespaces/a/gpucellpools/p"
    door.script.answers += [
        lambda: web.Response(text="not json", content_type="application/json"),
        ok({"kind": "GPUCellPool"}),
        status(409, "conflict on lastDecision"),
    ]
    assert await door.rest.apply_status(path, {"status": {}}, answer=False) == {}
    assert await door.rest.apply_status(path, {"status": {}}) == {"kind": "GPUCellPool"}
    with pytest.raises(errors.Conflict, match="conflict on lastDecision"):
        await door.rest.apply_status(path, {"status": {}}, answer=False)


async def test_a_list_is_read_in_pages_of_one_snapshot(door: Door) -> None:
    """Pages of LIST_PAGE_LIMIT, each next one asked with the previous page's continue token;
    the items of every page, in order, with the kind a list item lacks; the last page's
    resourceVersion (every page of one list carries the snapshot's)."""

    def page(names: list[str], token: str) -> Callable[[], web.Response]:
        items = [{"metadata": {"name": n}} for n in names]
        meta = {"resourceVersion": "42", **({"continue": token} if token else {})}
        return ok({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items})

    door.script.answers += [page(["a", "b"], "t1"), page(["c"], "t2"), page([], "")]
    items, version = await door.rest.list(Query("/api/v1/pods", label_selector="x=y"))
    assert [i["metadata"]["name"] for i in items] == ["a", "b", "c"]
    assert {(i["kind"], i["apiVersion"]) for i in items} == {("Pod", "v1")}
    assert version == "42"
    limit = f"limit={LIST_PAGE_LIMIT}"
    assert [path for _, path, _ in door.script.seen] == [
        f"/api/v1/pods?labelSelector=x%3Dy&{limit}",
        f"/api/v1/pods?labelSelector=x%3Dy&{limit}&continue=t1",
        f"/api/v1/pods?labelSelector=x%3Dy&{limit}&continue=t2",
    ]


async def test_an_expired_continue_token_is_gone_so_the_cache_lists_again(door: Door) -> None:
    door.script.answers += [
        ok({"kind": "PodList", "metadata": {"continue": "t1"}, "items": []}),
        status(410, "The provided continue parameter is too old"),
    ]
    with pytest.raises(errors.Gone, match="too old"):
        await door.rest.list(Query("/api/v1/pods"))


async def test_the_event_sink_posts_unique_names_and_swallows_failures(door: Door) -> None:
    sink = EventSink(rest_creator(door.rest), lambda: 1000.0, "gpucellpool", "pod-a")
    pool = {"apiVersion": "cells.kubeswift.io/v1alpha1", "kind": "GPUCellPool", "name": "p"}
    door.script.answers += [ok({}), ok({}), status(403, "events is forbidden")]
    note = EventNote("ScaledUp", "x" * 2000, "Scale")
    assert await sink.post({**pool, "namespace": "team"}, note) is True
    assert await sink.post({**pool, "namespace": "team"}, note) is True
    assert await sink.post({"kind": "CustomResourceDefinition", "name": "c"}, note) is False
    paths = [path.split("?")[0] for _, path, _ in door.script.seen]
    assert paths == [
        "/apis/events.k8s.io/v1/namespaces/team/events",
        "/apis/events.k8s.io/v1/namespaces/team/events",
        "/apis/events.k8s.io/v1/namespaces/default/events",  # a cluster-scoped object's
    ]


def test_event_limits_count_utf8_bytes_as_the_apiserver_does() -> None:
    # events.k8s.io/v1 validation measures note (1024), reason, action and reportingInstance
    # (128) with Go's len(): bytes. 600 "é" is 600 characters but 1,200 bytes: refused whole.
    note = EventNote("Scaled" + "é" * 200, "é" * 600 + "x", "Sc" + "→" * 100, warning=True)
    body = event_body({"kind": "Pod", "name": "p"}, note, 1000.0, "gpucellpool", "ü" * 100)
    for field_name, limit in (("note", 1024), ("reason", 128), ("action", 128)):
        value = body[field_name]
        assert len(value.encode()) <= limit, field_name
        assert len(value.encode()) > limit - 4, field_name  # cut at the limit, not far below
    assert body["note"] == "é" * 512  # whole characters only
    assert body["reason"] == "Scaled" + "é" * 61  # 6 + 122 bytes; the 62nd would be 130
    assert body["action"] == "Sc" + "→" * 42  # 2 + 126 bytes: the 43rd (3 bytes) does not fit
    assert body["reportingInstance"] == "ü" * 64
    short = EventNote("ScaledUp", "2 cells → 3", "Scale")
    assert event_body({"name": "p"}, short, 1.0, "c", "i")["note"] == "2 cells → 3"


async def test_a_dropped_connection_or_a_page_that_is_not_json_is_in_the_tree() -> None:
    async def drop(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()  # the connection ends without an answer
        return web.Response()

    async def html(request: web.Request) -> web.StreamResponse:
        return web.Response(text="<html>a proxy's error page</html>")

    app = web.Application()
    app.router.add_route("*", "/drop", drop)
    app.router.add_route("*", "/html", html)
    server = TestServer(app)
    await server.start_server()
    host = str(server.make_url("")).rstrip("/")
    rest = RestClient(Connection(Access(host)), timeout_s=5.0)
    try:
        with pytest.raises(errors.Unreachable, match="Disconnected"):
            await rest.call("POST", "/drop", body={})
        with pytest.raises(errors.KubeError, match="answer is not JSON"):
            await rest.call("POST", "/html", body={})
    finally:
        await rest.close()
        await server.close()


async def test_a_lease_round_is_not_retried_within_itself(door: Door) -> None:
    """The elector's next round is the retry: a throttled renew must not outlast the renew
    deadline by sleeping in the door."""
    lease = LeaseClient(door.rest, "ops", "gpucellpool-autoscaler")
    door.script.answers += [status(429, "slow down", "5"), ok({"kind": "Lease"})]
    with pytest.raises(errors.Throttled):
        await lease.replace({"metadata": {"name": "gpucellpool-autoscaler"}})
    assert door.slept == [] and len(door.script.seen) == 1
    assert await lease.get() == {"kind": "Lease"}
    assert door.script.seen[0][1].endswith("?fieldManager=gpucellpool-autoscaler")


async def test_a_throttled_metrics_review_answers_at_once_within_the_scrape(door: Door) -> None:
    # A scrape waits 10 s (the chart's scrapeTimeout); the door's throttling retries could
    # hold a TokenReview 3 x 5 s here. The review fails fast (503), the next scrape retries.
    door.script.answers += [status(429, "too many requests", "5") for _ in range(4)]
    with pytest.raises(ReviewUnavailable, match=r"TokenReview failed \(429\)") as caught:
        await KubeAccessReviewer(door.rest).authenticate("scraper-token")
    assert door.slept == []
    assert len(door.script.seen) == 1
    assert "scraper-token" not in str(caught.value)


async def test_a_watch_streams_events_and_its_failures_are_in_the_tree() -> None:
    """410 is Gone (the cache relists), another status is the tree's class, a stream cut
    mid-way is Unreachable."""

    async def events(request: web.Request) -> web.StreamResponse:
        assert request.query["watch"] == "true" and request.query["resourceVersion"] == "7"
        response = web.StreamResponse()
        await response.prepare(request)
        for name in ("a", "b"):
            line = {"type": "ADDED", "object": {"metadata": {"name": name}}}
            await response.write(json.dumps(line).encode() + b"\n")
        if request.path == "/cut":
            assert request.transport is not None
            request.transport.close()  # the connection ends inside the chunked body
        else:
            await response.write_eof()
        return response

    async def old(request: web.Request) -> web.StreamResponse:
        return status(410, "too old resource version: 7 (9)")()

    async def denied(request: web.Request) -> web.StreamResponse:
        return status(403, "pods is forbidden")()

    app = web.Application()
    app.router.add_get("/events", events)
    app.router.add_get("/cut", events)
    app.router.add_get("/old", old)
    app.router.add_get("/denied", denied)
    server = TestServer(app)
    await server.start_server()
    host = str(server.make_url("")).rstrip("/")
    rest = RestClient(Connection(Access(host)), timeout_s=5.0)
    try:
        names = [e["object"]["metadata"]["name"] async for e in rest.watch(Query("/events"), "7")]
        assert names == ["a", "b"]
        with pytest.raises(errors.Gone, match="too old"):
            _ = [e async for e in rest.watch(Query("/old"), "7")]
        with pytest.raises(errors.Forbidden, match="forbidden"):
            _ = [e async for e in rest.watch(Query("/denied"), "7")]
        seen: list[JSON] = []
        with pytest.raises(errors.Unreachable):
            async for event in rest.watch(Query("/cut"), "7"):
                seen.append(event)
        assert len(seen) == 2
    finally:
        await rest.close()
        await server.close()
