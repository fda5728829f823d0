"""``ListWatch`` over the Kubernetes REST API, and the few writes the autoscaler makes.

Why this module exists: it is the only place in the autoscaler's shell that imports
kubernetes_asyncio/aiohttp. Lists and writes are bounded by a timeout; a watch is bounded by
the server-side ``timeoutSeconds`` plus a read timeout, so a silent connection cannot hang a
cache forever. HTTP 410 becomes ``Gone`` so the cache relists.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

from gpucellpool.kube.cache import JSON, Gone, Query
from gpucellpool.kube.kubeconfig import load_configuration

HTTP_GONE = 410
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
WATCH_SERVER_TIMEOUT_S = 290
AUTOSCALER_FIELD_MANAGER = "gpucellpool-autoscaler"
log = logging.getLogger(__name__)


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RestClient:
    """JSON over one ApiClient: list (with resourceVersion), watch, get, create, patch."""

    def __init__(self, api_client: k8s_client.ApiClient, timeout_s: float = 10.0) -> None:
        self._client = api_client
        self.timeout_s = timeout_s

    @property
    def api_client(self) -> k8s_client.ApiClient:
        """The underlying client, to share its connection pool with other adapters."""
        return self._client

    async def _request(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        preload: bool = True,
        read_timeout: Any = None,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        params = list(query or [])
        await self._client.update_params_for_auth(headers, params, ["BearerToken"])
        url = f"{self._client.configuration.host}{path}"
        try:
            return await self._client.rest_client.request(
                method,
                url,
                query_params=params,  # type: ignore[arg-type]
                headers=headers,
                body=body,
                _preload_content=preload,
                _request_timeout=read_timeout or self.timeout_s,
            )
        except ApiException as exc:
            if exc.status == HTTP_GONE:
                raise Gone(str(exc.reason)) from exc
            detail = str(exc.body or exc.reason or "")[:300]
            raise ApiError(
                int(exc.status or 0), f"{method} {path}: HTTP {exc.status}: {detail}"
            ) from exc

    async def call(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSON:
        async with asyncio.timeout(self.timeout_s):
            resp = await self._request(method, path, query, body, content_type)
        parsed = json.loads(resp.data) if resp.data else {}
        return parsed if isinstance(parsed, dict) else {}

    @staticmethod
    def _selectors(query: Query) -> list[tuple[str, str]]:
        params = []
        if query.label_selector:
            params.append(("labelSelector", query.label_selector))
        if query.field_selector:
            params.append(("fieldSelector", query.field_selector))
        return params

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        result = await self.call("GET", query.path, self._selectors(query))
        items = [i for i in result.get("items") or [] if isinstance(i, dict)]
        kind = str(result.get("kind", "")).removesuffix("List")
        api_version = str(result.get("apiVersion", ""))
        for item in items:  # list items come without kind/apiVersion
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", api_version)
        return items, str((result.get("metadata") or {}).get("resourceVersion", ""))

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        params = [
            *self._selectors(query),
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(WATCH_SERVER_TIMEOUT_S)),
        ]
        if resource_version:
            params.append(("resourceVersion", resource_version))
        timeout = (self.timeout_s, WATCH_SERVER_TIMEOUT_S + 30)
        resp = await self._request("GET", query.path, params, preload=False, read_timeout=timeout)
        async with resp:
            if resp.status == HTTP_GONE:
                raise Gone("watch: 410")
            if resp.status >= 300:
                raise ApiError(resp.status, f"watch {query.path}: HTTP {resp.status}")
            async for line in resp.content:
                if line.strip():
                    yield json.loads(line)

    async def get(self, path: str) -> JSON | None:
        try:
            return await self.call("GET", path)
        except ApiError as exc:
            if exc.status == HTTP_NOT_FOUND:
                return None
            raise

    async def apply_status(self, path: str, body: Mapping[str, Any]) -> JSON:
        """Server-side apply of our own status fields (own field manager, forced)."""
        query = [("fieldManager", AUTOSCALER_FIELD_MANAGER), ("force", "true")]
        return await self.call(
            "PATCH", path + "/status", query, dict(body), "application/apply-patch+yaml"
        )

    async def merge_patch(self, path: str, body: Mapping[str, Any]) -> JSON:
        query = [("fieldManager", AUTOSCALER_FIELD_MANAGER)]
        return await self.call("PATCH", path, query, dict(body), "application/merge-patch+json")

    async def create(self, path: str, body: Mapping[str, Any]) -> JSON:
        return await self.call(
            "POST", path, [("fieldManager", AUTOSCALER_FIELD_MANAGER)], dict(body)
        )

    async def close(self) -> None:
        await self._client.close()


async def client_from_kubeconfig(
    kubeconfig: Mapping[str, Any], timeout_s: float = 10.0
) -> RestClient:
    configuration = k8s_client.Configuration()
    loader = k8s_config.kube_config.KubeConfigLoader(config_dict=dict(kubeconfig))
    await loader.load_and_set(configuration)
    return RestClient(k8s_client.ApiClient(configuration), timeout_s)


async def client_in_cluster_or(
    kubeconfig_path: str | None,
    timeout_s: float = 10.0,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> RestClient:
    """The kubeconfig file when given, else ``$KUBECONFIG``, in-cluster, ``~/.kube/config``.

    Raises ``KubeconfigError`` (one line naming what was tried) when none works.
    """
    configuration, source = await load_configuration(
        kubeconfig_path,
        os.environ if environ is None else environ,
        Path.home() if home is None else home,
    )
    log.info("cluster configuration: %s", source, extra={"server": configuration.host})
    return RestClient(k8s_client.ApiClient(configuration), timeout_s)
