"""The provisioner's reads answered from the operator's watch caches, with read-your-writes.

Why this module exists: a pass used to GET its pool and its kubeconfig Secret from the
apiserver every time, though the composition root already mirrors both (the pool watch that
wakes the driver, the Secret watch of each workload cluster). ``CachedReads`` is a ``KubeApi``
whose ``get`` asks a ``StoreLookup`` for the cache that holds the object and answers from it;
every other verb, and every object no cache holds, goes to the apiserver as before.

A cache lags the provisioner's own writes by a watch event, and a pass that read its pool from
before its own finalizer patch or status write would act on a state it has already replaced
(and lose the next write to a 409, or worse). The rule, using only resourceVersion equality
(resourceVersions are opaque and must not be ordered): the resourceVersion of the newest copy
the provisioner itself saw of an object (its own write's answer, or a GET's) is remembered;
while one is remembered the cache is used only once it holds that very version (then the
memory is dropped: the watch delivers later versions in order), otherwise the read is a GET,
whose answer becomes the remembered version. A delete, or a write that lost a 409, remembers
"unknown", which only an absent cached object matches: the next read is a GET until the
cache has dropped the object too.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from provisioner.kube import JSON, Conflict, Kind
from provisioner.kube_delegate import DelegatingKubeApi, Write

T = TypeVar("T")
UNKNOWN = ""  # a remembered version no cached object has: read with a GET


class Store(Protocol):
    """A mirror of one kind (``gpucellpool.kube.cache.WatchCache``): objects by
    ``namespace/name`` (cluster-scoped: ``name``), ``synced`` once first listed."""

    synced: asyncio.Event

    def get(self, key: str) -> JSON | None: ...


StoreLookup = Callable[[str, str | None, str], Store | None]
"""(kind, namespace, name) -> the cache that mirrors that object, or None (read it with a GET)."""

WorkloadReads = Callable[[str, str], StoreLookup]
"""(namespace, kubeconfig Secret name) -> the caches of the workload cluster that Secret reaches."""


def _key(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _version(obj: JSON | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or UNKNOWN)


@dataclass
class CachedReads(DelegatingKubeApi):
    """``get`` from the caches ``stores`` names (read-your-writes, see the module); the rest
    passes through. ``served`` and ``fetched`` count the gets answered each way."""

    stores: StoreLookup = field(default=lambda kind, namespace, name: None)
    served: int = 0
    fetched: int = 0
    _seen: dict[tuple[str, str], str] = field(default_factory=dict)

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        store = self.stores(kind.kind, namespace, name)
        ident = (kind.kind, _key(namespace, name))
        if store is not None and store.synced.is_set():
            cached = store.get(_key(namespace, name))
            seen = self._seen.get(ident)
            if seen is None or _version(cached) == seen:
                self._seen.pop(ident, None)
                self.served += 1
                # A copy: the cached object is shared with the autoscaler's view, and a pass that
                # edits what it read (a status built in place) must not change that view.
                return copy.deepcopy(cached)
        self.fetched += 1
        fresh = await self.inner.get(kind, namespace, name)
        if store is not None:
            self._seen[ident] = _version(fresh)
        return fresh

    async def _write(self, write: Write, call: Callable[[], Awaitable[T]]) -> T:
        ident = (write.kind, _key(write.namespace, write.name))
        if write.verb == "evict" or self.stores(write.kind, write.namespace, write.name) is None:
            return await call()
        try:
            result = await call()
        except Conflict:
            self._seen[ident] = UNKNOWN
            raise
        self._seen[ident] = _version(result) if isinstance(result, dict) else UNKNOWN
        return result


__all__ = ["CachedReads", "Store", "StoreLookup", "WorkloadReads"]
