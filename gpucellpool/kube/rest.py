"""The one door to every apiserver: one request function, one error tree, Retry-After honoured.

Why this module exists: every HTTP request the operator sends to a kube-apiserver (the
infrastructure cluster and every workload cluster; the autoscaler, the provisioner, the
webhook's adapters, the leader lease, the metrics access reviews, the Event sink) goes through
``RestClient.call`` (and ``watch`` for streams), so each one has the same timeout, auth, content
types, throttling retry and errors. Only this module and ``transport`` (the session, TLS and
credential of one apiserver, built from ``access``) use aiohttp's client; an import-linter
contract keeps it so. kubernetes_asyncio is not imported: its client package alone was ~61 MiB
of the operator's RSS (issue 13).

- Timeout: each attempt (send and read) is bounded by ``timeout_s``; a watch by the server-side
  ``timeoutSeconds`` plus a read timeout, so a silent connection cannot hang a cache forever.
- Throttling: a 429, or a 503 carrying Retry-After, is sent again after the server's
  Retry-After, capped (``errors.retry_decision``), at most ``RetryPolicy.attempts`` times;
  callers for whom a 429 is an answer (an eviction refused by a PodDisruptionBudget) say so.
- Errors: one tree (``gpucellpool.kube.errors``): ``NotFound``, ``Conflict``, ``Gone``,
  ``Forbidden``, ``Invalid``, ``Throttled``, ``Unreachable`` under ``KubeError``, each with the
  status and the apiserver's message, never a credential or a request body.
- Field managers: one per writer (``for_manager``), sharing one connection pool.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp

from gpucellpool.kube import access as accesses
from gpucellpool.kube.cache import JSON, Query
from gpucellpool.kube.errors import (
    HTTP_UNAUTHORIZED,
    MESSAGE_LIMIT,
    Forbidden,
    KubeError,
    NotFound,
    RetryPolicy,
    Unreachable,
    error_for,
    retry_decision,
    server_message,
)
from gpucellpool.kube.transport import Connection, CredentialError, connect

WATCH_SERVER_TIMEOUT_S = 290
AUTOSCALER_FIELD_MANAGER = "gpucellpool-autoscaler"
JSON_TYPE = "application/json"
APPLY_TYPE = "application/apply-patch+yaml"
MERGE_TYPE = "application/merge-patch+json"
JSON_PATCH_TYPE = "application/json-patch+json"
LIST_PAGE_LIMIT = 500
"""Items per list request, as client-go's reflectors ask; a server may answer with all."""
Sleep = Callable[[float], Awaitable[None]]
Items = list[JSON]  # (``list`` is also a method name inside RestClient)
log = logging.getLogger(__name__)


def _continue(token: str) -> list[tuple[str, str]]:
    """The ``continue`` parameter of the next page, none for the first."""
    return [("continue", token)] if token else []


class RestClient:
    """JSON over one ``Connection``: ``call`` (the request function), list, watch, get, writes."""

    def __init__(
        self,
        connection: Connection,
        timeout_s: float = 10.0,
        field_manager: str = AUTOSCALER_FIELD_MANAGER,
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        owns_client: bool = True,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._connection = connection
        self.timeout_s = timeout_s
        self.field_manager = field_manager
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._owns_client = owns_client
        self._on_close = on_close

    @property
    def connection(self) -> Connection:
        """The underlying connection (shared by the clients ``for_manager`` makes)."""
        return self._connection

    @property
    def host(self) -> str:
        """The apiserver's URL."""
        return self._connection.host

    def for_manager(
        self,
        field_manager: str,
        timeout_s: float | None = None,
        on_close: Callable[[], Awaitable[None]] | None = None,
        retry: RetryPolicy | None = None,
    ) -> RestClient:
        """The same connection writing as another field manager (with another timeout or
        retry policy when given). Its ``close`` leaves the connection to the client it came
        from and only calls ``on_close`` (once)."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        policy = self.retry if retry is None else retry
        return RestClient(
            self._connection, timeout, field_manager, policy, self._sleep, False, on_close
        )

    async def _send(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        body: Any,
        content_type: str,
        read_timeout: float | tuple[float, float],
    ) -> tuple[aiohttp.ClientResponse, str]:
        """One unread response and the credential to redact; no answer -> ``Unreachable``,
        no credential to send -> ``Forbidden`` (status 0)."""
        try:
            authorization, credential = await self._connection.credential.header()
        except CredentialError as exc:
            raise Forbidden(0, f"{method} {path}: no credential: {exc}") from exc
        headers = {"Accept": JSON_TYPE, "Content-Type": content_type}
        if authorization:
            headers["Authorization"] = authorization
        url = f"{self.host}{path}" + (f"?{urlencode(query)}" if query else "")
        try:
            response = await self._connection.request(
                method, url, headers, _encoded(body), _timeout(read_timeout)
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise _unreachable(method, path, exc) from exc
        if response.status == HTTP_UNAUTHORIZED:
            self._connection.credential.expire()
        return response, credential

    async def _attempt(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        body: Any,
        content_type: str,
    ) -> tuple[int, bytes, str | None, str]:
        """(status, body, Retry-After, credential) of one bounded attempt."""
        try:
            async with asyncio.timeout(self.timeout_s):
                response, credential = await self._send(
                    method, path, query, body, content_type, self.timeout_s
                )
                try:
                    data = await response.read()
                finally:
                    response.release()
        except TimeoutError as exc:
            raise Unreachable(0, f"{method} {path}: timed out after {self.timeout_s:g}s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise _unreachable(method, path, exc) from exc
        return response.status, data, response.headers.get("Retry-After"), credential

    async def call(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = JSON_TYPE,
        retry_throttled: bool = True,
        *,
        answer: bool = True,
    ) -> JSON:
        """The request function: one JSON request, throttling retried, errors mapped.

        ``answer`` False: the caller does not read a successful answer's body, which is then
        not decoded ({} is returned): a status apply is answered with the whole object."""
        attempt = 0
        while True:
            status, data, retry_after, credential = await self._attempt(
                method, path, list(query or []), body, content_type
            )
            if 200 <= status <= 299:
                return _parsed(data, method, path, status) if answer else {}
            decision = retry_decision(status, retry_after, attempt, self.retry)
            if not (retry_throttled and decision.retry):
                raise error_for(status, method, path, server_message(data, credential))
            log.info("%s %s throttled, retrying: %s", method, path, decision.reason)
            await self._sleep(decision.wait_s)
            attempt += 1

    @staticmethod
    def _selectors(query: Query) -> list[tuple[str, str]]:
        params = []
        if query.label_selector:
            params.append(("labelSelector", query.label_selector))
        if query.field_selector:
            params.append(("fieldSelector", query.field_selector))
        return params

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        """Every item, in pages of ``LIST_PAGE_LIMIT`` (one consistent snapshot), and the
        list's resourceVersion. A page is one request under the timeout, where 40,000 pods in
        one answer (~100 MB of JSON) may outlast it and be held whole while decoded."""
        items: list[JSON] = []
        version = ""
        async for page, page_version in self.pages(query):
            items += page
            version = page_version
        return items, version

    async def pages(self, query: Query) -> AsyncIterator[tuple[Items, str]]:
        """``list`` one page at a time: (its items, the list's resourceVersion), so a caller
        can trim each page before the next one is decoded (``kube.lean``)."""
        token = ""
        while True:
            params = [*self._selectors(query), ("limit", str(LIST_PAGE_LIMIT))]
            page = await self.call("GET", query.path, [*params, *_continue(token)])
            kind = str(page.get("kind", "")).removesuffix("List")
            api_version = str(page.get("apiVersion", ""))
            items: Items = []
            for item in page.get("items") or []:
                if isinstance(item, dict):  # list items come without kind/apiVersion
                    item.setdefault("kind", kind)
                    item.setdefault("apiVersion", api_version)
                    items.append(item)
            meta = page.get("metadata") or {}
            token = str(meta.get("continue") or "")
            yield items, str(meta.get("resourceVersion", ""))
            if not token:
                return

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        """Watch events from ``resource_version``; 410 raises ``Gone``, other errors the tree."""
        params = [
            *self._selectors(query),
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(WATCH_SERVER_TIMEOUT_S)),
        ]
        if resource_version:
            params.append(("resourceVersion", resource_version))
        timeout = (self.timeout_s, WATCH_SERVER_TIMEOUT_S + 30)
        try:
            async with asyncio.timeout(self.timeout_s):
                resp, cred = await self._send("GET", query.path, params, None, JSON_TYPE, timeout)
        except TimeoutError as exc:
            raise _unreachable("watch", query.path, exc) from exc
        async with resp:
            if resp.status >= 300:
                detail = server_message(await resp.read(), cred)
                raise error_for(resp.status, "watch", query.path, detail)
            try:
                async for line in resp.content:
                    if line.strip():
                        yield json.loads(line)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:  # the stream broke
                raise _unreachable("watch", query.path, exc) from exc

    async def get(self, path: str) -> JSON | None:
        """The object, or None when it does not exist."""
        try:
            return await self.call("GET", path)
        except NotFound:
            return None

    async def apply(self, path: str, body: Mapping[str, Any], *, answer: bool = True) -> JSON:
        """Server-side apply at ``path`` (this client's field manager, forced; ``answer``: as
        ``call``'s)."""
        query = [("fieldManager", self.field_manager), ("force", "true")]
        return await self.call("PATCH", path, query, dict(body), APPLY_TYPE, answer=answer)

    async def apply_status(
        self, path: str, body: Mapping[str, Any], *, answer: bool = True
    ) -> JSON:
        """Server-side apply of our own status fields (own field manager, forced)."""
        return await self.apply(path + "/status", body, answer=answer)

    async def merge_patch(self, path: str, body: Mapping[str, Any]) -> JSON:
        query = [("fieldManager", self.field_manager)]
        return await self.call("PATCH", path, query, dict(body), MERGE_TYPE)

    async def json_patch(self, path: str, ops: Sequence[JSON]) -> JSON:
        query = [("fieldManager", self.field_manager)]
        return await self.call("PATCH", path, query, list(ops), JSON_PATCH_TYPE)

    async def create(self, path: str, body: Mapping[str, Any]) -> JSON:
        return await self.call("POST", path, [("fieldManager", self.field_manager)], dict(body))

    async def replace(self, path: str, body: Mapping[str, Any]) -> JSON:
        return await self.call("PUT", path, [("fieldManager", self.field_manager)], dict(body))

    async def delete(self, path: str, grace_period_s: int | None = None) -> bool:
        """Request deletion; False when it was already gone."""
        query = [] if grace_period_s is None else [("gracePeriodSeconds", str(grace_period_s))]
        try:
            await self.call("DELETE", path, query)
        except NotFound:
            return False
        return True

    async def close(self) -> None:
        """Close the connection when this client owns it, else let go of it (``on_close``)."""
        if self._owns_client:
            await self._connection.close()
            return
        release, self._on_close = self._on_close, None
        if release is not None:
            await release()


def _unreachable(method: str, path: str, exc: BaseException) -> Unreachable:
    """No answer; the client library's own words (host, OS error), one line, shortened."""
    if isinstance(exc, TimeoutError):
        return Unreachable(0, f"{method} {path}: timed out")
    detail = " ".join(str(exc).split())[:MESSAGE_LIMIT]
    return Unreachable(0, f"{method} {path}: {type(exc).__name__}: {detail}".rstrip(": "))


def _parsed(data: bytes, method: str, path: str, status: int) -> JSON:
    if not data:
        return {}
    try:
        parsed = json.loads(data)
    except ValueError as exc:
        raise KubeError(status, f"{method} {path}: HTTP {status}: answer is not JSON") from exc
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def _encoded(body: Any) -> bytes | None:
    """The request body as sent: JSON for a mapping or list (an apply body too), bytes as is."""
    if body is None or isinstance(body, bytes):
        return body
    return json.dumps(body).encode()


def _timeout(read_timeout: float | tuple[float, float]) -> aiohttp.ClientTimeout:
    """A total bound, or (connect, read) bounds for a stream."""
    if isinstance(read_timeout, tuple):
        connect_s, read_s = read_timeout
        return aiohttp.ClientTimeout(connect=connect_s, sock_connect=connect_s, sock_read=read_s)
    return aiohttp.ClientTimeout(total=read_timeout)


async def client_for(
    access: accesses.Access,
    timeout_s: float = 10.0,
    field_manager: str = AUTOSCALER_FIELD_MANAGER,
) -> RestClient:
    """A client for one apiserver access (``access.from_kubeconfig``, ``access.in_cluster``)."""
    return RestClient(await connect(access), timeout_s, field_manager)


async def client_from_kubeconfig(
    kubeconfig: Mapping[str, Any],
    timeout_s: float = 10.0,
    field_manager: str = AUTOSCALER_FIELD_MANAGER,
) -> RestClient:
    """A client for a parsed kubeconfig (current context; relative file names from the
    working directory). ``KubeconfigError`` names the entry and field that is wrong."""
    return await client_for(accesses.from_kubeconfig(kubeconfig), timeout_s, field_manager)


async def client_in_cluster_or(
    kubeconfig_path: str | None,
    timeout_s: float = 10.0,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> RestClient:
    """The kubeconfig file when given, else ``$KUBECONFIG``, in-cluster, ``~/.kube/config``.

    Raises ``KubeconfigError`` (one line naming what was tried) when none works.
    """
    access, source = accesses.load(
        kubeconfig_path,
        os.environ if environ is None else environ,
        Path.home() if home is None else home,
    )
    log.info("cluster configuration: %s", source, extra={"server": access.server})
    return await client_for(access, timeout_s)
