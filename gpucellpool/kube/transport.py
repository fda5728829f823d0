"""One HTTPS connection pool to one apiserver, and the credential it sends, kept fresh.

Why this module exists: ``rest.RestClient`` sends every request through a ``Connection``: one
aiohttp session (its TLS context from ``access.tls_context``, its connection pool, the proxy
and TLS server name of the kubeconfig, else the environment's proxy) and the ``Authorization``
header of the moment. A credential can change while the operator runs: a token file (the
kubelet rotates a pod's service-account token) is re-read each minute as client-go does,
keeping the last good token when a read fails; an exec plugin's token is fetched again when it
expires or after the server answered 401. When the plugin hands out a client certificate
instead (or as well), the new certificate replaces the old one in a new session: requests
already running finish on the old session, which is closed at the next rotation. The plugin
runs without a terminal, with the kubeconfig's environment and ``KUBERNETES_EXEC_INFO``. Only
this module and ``rest`` use aiohttp's client.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import ssl
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from gpucellpool.api.clock import Clock
from gpucellpool.kube.access import Access, ExecPlugin, tls_context
from gpucellpool.kube.kubeconfig import KubeconfigError
from gpucellpool.runtime.clock import SystemClock

TOKEN_FILE_PERIOD_S = 60.0
"""How long a token read from a file is used before the file is read again (client-go: 1 min)."""
EXPIRY_SKEW_S = 60.0
"""An exec token this close to its expirationTimestamp is fetched again."""
EXEC_TIMEOUT_S = 60.0
POOL_LIMIT = 100
"""Connections per apiserver (kubernetes_asyncio's default, kept)."""
READ_BUFFER = 2**21
"""A watch event line may hold an object of up to etcd's 1.5 MiB request limit."""
log = logging.getLogger(__name__)
RunPlugin = Callable[[ExecPlugin], Awaitable[Mapping[str, Any]]]


class CredentialError(Exception):
    """No credential could be had now (an exec plugin failed, a token file never read)."""


async def run_plugin(plugin: ExecPlugin) -> Mapping[str, Any]:
    """The plugin's ``ExecCredential.status``; ``CredentialError`` naming the command and why."""
    info: dict[str, Any] = {"interactive": False}
    if plugin.cluster_info is not None:
        info["cluster"] = dict(plugin.cluster_info)
    env = {**os.environ, **dict(plugin.env)}
    env["KUBERNETES_EXEC_INFO"] = json.dumps(
        {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": info}
    )
    name = f"exec plugin {plugin.command}"
    try:
        proc = await asyncio.create_subprocess_exec(
            plugin.command, *plugin.args, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(EXEC_TIMEOUT_S):
            out, err = await proc.communicate()
    except OSError as exc:
        raise CredentialError(f"{name}: {exc.strerror or type(exc).__name__}") from exc
    except TimeoutError as exc:
        proc.kill()
        raise CredentialError(f"{name}: no answer within {EXEC_TIMEOUT_S:g}s") from exc
    if proc.returncode != 0:
        said = " ".join(err.decode(errors="replace").split())[:200]
        raise CredentialError(f"{name}: exit status {proc.returncode}: {said}".rstrip(": "))
    return _exec_status(out, plugin, name)


def _exec_status(out: bytes, plugin: ExecPlugin, name: str) -> Mapping[str, Any]:
    try:
        answer = json.loads(out)
    except ValueError as exc:
        raise CredentialError(f"{name}: its output is not JSON") from exc
    if not isinstance(answer, dict) or answer.get("kind") != "ExecCredential":
        raise CredentialError(f"{name}: its output is not an ExecCredential")
    if answer.get("apiVersion") != plugin.api_version:
        raise CredentialError(f"{name}: apiVersion {answer.get('apiVersion')!r}, asked for "
                              f"{plugin.api_version}")  # fmt: skip
    status = answer.get("status")
    has_cert = isinstance(status, dict) and status.get("clientCertificateData")
    if not isinstance(status, dict) or not (status.get("token") or has_cert):
        raise CredentialError(f"{name}: status: no token and no clientCertificateData")
    if has_cert and not status.get("clientKeyData"):
        raise CredentialError(f"{name}: status: clientCertificateData without clientKeyData")
    return status


def _expiry(status: Mapping[str, Any]) -> float | None:
    stamp = status.get("expirationTimestamp")
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class Credential:
    """The ``Authorization`` header value of the moment, and the secret part to redact."""

    def __init__(self, access: Access, clock: Clock, run: RunPlugin = run_plugin) -> None:
        self._access = access
        self._clock = clock
        self._run = run
        self._token = access.token
        self._until = float("inf") if access.token else float("-inf")
        self._lock = asyncio.Lock()
        self.client_pair: tuple[bytes, bytes] | None = None
        """The exec plugin's last client certificate and key (PEM), when it gives one."""

    async def header(self) -> tuple[str, str]:
        """(the header value or "", the secret to redact); ``CredentialError`` when none."""
        access = self._access
        if access.basic is not None:
            secret = base64.b64encode(":".join(access.basic).encode()).decode()
            return f"Basic {secret}", secret
        if access.token is not None:
            return f"Bearer {access.token}", access.token
        if access.token_file is None and access.exec_plugin is None:
            return "", ""
        if self._clock.now() >= self._until:
            async with self._lock:
                if self._clock.now() >= self._until:
                    await self._refresh()
        token = self._token or ""
        return (f"Bearer {token}", token) if token else ("", "")

    def expire(self) -> None:
        """The server refused the credential (401): fetch a refreshable one again."""
        if self._access.token is None:
            self._until = float("-inf")

    async def _refresh(self) -> None:
        if self._access.exec_plugin is not None:
            status = await self._run(self._access.exec_plugin)
            self._token = str(status.get("token") or "") or None
            if status.get("clientCertificateData"):
                cert, key = status["clientCertificateData"], status["clientKeyData"]
                self.client_pair = (str(cert).encode(), str(key).encode())
            expiry = _expiry(status)
            self._until = float("inf") if expiry is None else expiry - EXPIRY_SKEW_S
            return
        path = self._access.token_file
        assert path is not None
        try:
            token = (await asyncio.to_thread(path.read_text, encoding="utf-8")).strip()
        except (OSError, UnicodeDecodeError) as exc:
            if self._token is None:
                raise CredentialError(f"token file {path}: unreadable") from exc
            log.warning("token file %s unreadable, keeping the last token", path)
            token = ""
        self._token = token or self._token
        self._until = self._clock.now() + TOKEN_FILE_PERIOD_S


class Connection:
    """One session to ``access.server`` and the credential ``RestClient`` sends with each
    request (by default the access's own, refreshed on the system clock)."""

    def __init__(
        self,
        access: Access,
        credential: Credential | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.access = access
        self.host = access.server
        self.credential = credential or Credential(access, SystemClock())
        self.session = _session(tls or tls_context(access))
        self._pair = (access.client_cert_pem, access.client_key_pem)
        self._retired: aiohttp.ClientSession | None = None
        self._extra: dict[str, Any] = {}
        proxy = access.proxy or env_proxy(access.server)
        if proxy:
            self._extra["proxy"] = proxy
        if access.tls_server_name:
            self._extra["server_hostname"] = access.tls_server_name

    async def request(
        self, method: str, url: str, headers: dict[str, str], data: bytes | None,
        bounds: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:  # fmt: skip
        """The session's response (unread), sent with the credential's current certificate."""
        await self._rotate()
        return await self.session.request(
            method, url, headers=headers, data=data, timeout=bounds, **self._extra
        )

    async def _rotate(self) -> None:
        """A new session when the exec plugin gave a client certificate other than the one in
        use; the session retired at the previous rotation is closed now (its requests had a
        whole certificate lifetime to finish). A pair that does not load is reported and the
        current session kept: the server's 401 then makes the plugin run again."""
        pair = self.credential.client_pair
        if pair is None or pair == self._pair:
            return
        self._pair = pair
        access = self.access.with_client_cert(*pair, self.access.origin)
        try:
            session = _session(tls_context(access))
        except KubeconfigError as exc:
            log.warning("exec plugin's new client certificate not used: %s", exc)
            return
        if self._retired is not None:
            await self._retired.close()
        self._retired, self.session, self.access = self.session, session, access

    async def close(self) -> None:
        if self._retired is not None:
            await self._retired.close()
        await self.session.close()


def _session(tls: ssl.SSLContext) -> aiohttp.ClientSession:
    """A session that does not consult the environment per request (``env_proxy`` did, once):
    with ``trust_env`` aiohttp read ``~/.netrc`` and the proxy variables in a worker thread for
    every request, two thread hops per call: a third of the twin's process's CPU on the CI
    fidelity slice (its controllers share this client, as the operator's do)."""
    connector = aiohttp.TCPConnector(limit=POOL_LIMIT, ssl=tls)
    return aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=READ_BUFFER)


def env_proxy(server: str) -> str | None:
    """The proxy the environment names for ``server`` (``HTTPS_PROXY`` for https, ``HTTP_PROXY``
    for http, either case), None when there is none or ``NO_PROXY`` exempts the host, as
    client-go's ``ProxyFromEnvironment`` does for a kubeconfig without ``proxy-url``. Read once
    per connection: a process's environment does not change under it."""
    parts = urlsplit(server)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


async def connect(
    access: Access, clock: Clock | None = None, run: RunPlugin = run_plugin
) -> Connection:
    """A connection for ``access``; an exec plugin runs now (its client certificate is part of
    the TLS context, and a broken plugin is reported when the connection is made)."""
    credential = Credential(access, clock or SystemClock(), run)
    if access.exec_plugin is not None:
        try:
            status = await run(access.exec_plugin)
        except CredentialError as exc:
            raise KubeconfigError(f"{access.origin}: {exc}") from exc
        if status.get("clientCertificateData"):
            cert = str(status["clientCertificateData"]).encode()
            key = str(status["clientKeyData"]).encode()
            access = access.with_client_cert(cert, key, f"{access.origin}: exec plugin")
        credential = Credential(access, clock or SystemClock(), _replay(status, run))
    return Connection(access, credential)


def _replay(first: Mapping[str, Any], run: RunPlugin) -> RunPlugin:
    """``run`` whose first call answers ``first`` (the status ``connect`` already fetched)."""
    pending = [first]

    async def once(plugin: ExecPlugin) -> Mapping[str, Any]:
        return pending.pop() if pending else await run(plugin)

    return once
