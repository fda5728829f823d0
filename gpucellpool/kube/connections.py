"""One connection per workload cluster credential, shared by the autoscaler and the provisioner.

Why this module exists: both controllers reach each pool's workload cluster through the same
kubeconfig Secret; the autoscaler's caches (``gpucellpool.kube.workload``) and the
provisioner's client cache (``provisioner.workload``) each used to build their own client, so
every workload cluster had two connection pools, two TLS sessions and two sets of credentials
in memory. ``Connections`` keys a connection by the kubeconfig's content (a digest, never the
credential itself): whoever asks for the same kubeconfig gets the same connection, under its
own field manager, and the connection is closed when the last holder closes its handle. A
rotated credential is a new content, hence a new connection; the old one closes when both
controllers have moved on.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpucellpool.kube.rest import RestClient, client_from_kubeconfig

Connect = Callable[[Mapping[str, Any], float], Awaitable[RestClient]]


def _connect(kubeconfig: Mapping[str, Any], timeout_s: float) -> Awaitable[RestClient]:
    return client_from_kubeconfig(kubeconfig, timeout_s)


def fingerprint(kubeconfig: Mapping[str, Any]) -> str:
    """A digest of the kubeconfig's content (the same document gives the same digest)."""
    canonical = json.dumps(kubeconfig, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(slots=True)
class _Open:
    client: RestClient
    holders: int


class Connections:
    """Reference-counted connections, one per distinct kubeconfig."""

    def __init__(self, connect: Connect = _connect, timeout_s: float = 10.0) -> None:
        self._connect = connect
        self.timeout_s = timeout_s
        self._open: dict[str, _Open] = {}
        self._lock = asyncio.Lock()
        self.opened = 0  # connections made so far (a second holder of a kubeconfig makes none)

    @property
    def open_count(self) -> int:
        """Connections currently open."""
        return len(self._open)

    @property
    def holders(self) -> int:
        """Handles currently held, over all connections."""
        return sum(entry.holders for entry in self._open.values())

    async def acquire(
        self, kubeconfig: Mapping[str, Any], field_manager: str, timeout_s: float | None = None
    ) -> RestClient:
        """A handle on the kubeconfig's connection writing as ``field_manager``; closing the
        handle lets go of it (the connection closes with its last holder)."""
        key = fingerprint(kubeconfig)
        async with self._lock:
            entry = self._open.get(key)
            if entry is None:
                entry = _Open(await self._connect(kubeconfig, self.timeout_s), 0)
                self._open[key] = entry
                self.opened += 1
            entry.holders += 1

        async def release() -> None:
            await self._release(key, entry)

        return entry.client.for_manager(field_manager, timeout_s, on_close=release)

    async def _release(self, key: str, entry: _Open) -> None:
        async with self._lock:
            entry.holders -= 1
            if entry.holders > 0 or self._open.get(key) is not entry:
                return
            del self._open[key]
        await entry.client.close()

    def factory(
        self, field_manager: str, timeout_s: float | None = None
    ) -> Callable[[Mapping[str, Any]], Awaitable[RestClient]]:
        """``acquire`` for one controller, in the shape the client caches take."""

        async def acquire(kubeconfig: Mapping[str, Any]) -> RestClient:
            return await self.acquire(kubeconfig, field_manager, timeout_s)

        return acquire

    async def close(self) -> None:
        """Close every connection still open (shutdown)."""
        async with self._lock:
            entries, self._open = list(self._open.values()), {}
        for entry in entries:
            await entry.client.close()
