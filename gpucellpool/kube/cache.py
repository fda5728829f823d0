"""An in-memory mirror of one kind, kept current by list + watch (a client-go style reflector).

Why this module exists: the autoscaler must react to a new pending pod within about a second,
which rules out polling. A ``WatchCache`` lists once, then watches from the list's
resourceVersion with bookmarks, applies every event to its store and calls ``on_change`` so
the loop can wake the pools that care. When the server says the resourceVersion is too old
(410 Gone, as an HTTP status or an ERROR event) it relists and reports the difference as
changes. Every other failure backs off and retries; the cache never dies on its own. The REST
details live behind ``ListWatch`` (see ``gpucellpool.kube.rest``), so tests can feed events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from gpucellpool.kube.errors import Forbidden, Gone

JSON = dict[str, Any]
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Query:
    """What to mirror: an API collection path plus optional selectors."""

    path: str  # e.g. /api/v1/pods or /apis/cells.kubeswift.io/v1alpha1/gpucellpools
    label_selector: str = ""
    field_selector: str = ""


class ListWatch(Protocol):
    """The two verbs a cache needs. ``watch`` raises ``Gone`` on 410."""

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        """Items and the list's resourceVersion."""
        ...

    def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        """Watch events ({type, object}) from ``resource_version``, bookmarks included."""
        ...


def object_key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


ChangeFn = Callable[[str, JSON], None]  # (event type ADDED|MODIFIED|DELETED, object)


class WatchCache:
    """One kind's store. ``synced`` is set after the first successful list."""

    def __init__(
        self,
        source: ListWatch,
        query: Query,
        on_change: ChangeFn | None = None,
        retry_s: float = 1.0,
        max_retry_s: float = 30.0,
    ) -> None:
        self.source = source
        self.query = query
        self.objects: dict[str, JSON] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.relists = 0
        self.last_error = ""
        self.forbidden = False
        """True while the last failure was a 403/401 and nothing has succeeded since: RBAC (or
        the credential) refuses this mirror, which retrying alone will not change."""
        self.live = False
        """True while the last list or watch request succeeded (a list, a watch event) and no
        failure since: a live watch proves its apiserver reachable with this client's
        credential (the provisioner then skips its ``/version`` probe)."""
        self.version = 0
        """Bumped on every change to ``objects``: readers may reuse what they derived from it."""
        self._frozen: tuple[int, tuple[JSON, ...]] | None = None
        self._frozen_by_key: tuple[int, Mapping[str, JSON]] | None = None
        self._on_change = on_change
        self._retry_s = retry_s
        self._max_retry_s = max_retry_s

    def items(self) -> list[JSON]:
        return list(self.objects.values())

    def get(self, key: str) -> JSON | None:
        return self.objects.get(key)

    def frozen(self) -> tuple[JSON, ...]:
        """The objects as a read-only copy made once per ``version``: every reader at the same
        version shares it. (A decision's snapshot copied 40,000 pods, ~0.3 MB, per pool; a
        round's decisions held ~100 such copies at once while waiting for their writes.)"""
        if self._frozen is None or self._frozen[0] != self.version:
            self._frozen = (self.version, tuple(self.objects.values()))
        return self._frozen[1]

    def frozen_by_key(self) -> Mapping[str, JSON]:
        """The objects by key, read-only, likewise made once per ``version``."""
        if self._frozen_by_key is None or self._frozen_by_key[0] != self.version:
            self._frozen_by_key = (self.version, MappingProxyType(dict(self.objects)))
        return self._frozen_by_key[1]

    def _notify(self, kind: str, obj: JSON) -> None:
        if self._on_change is not None:
            try:
                self._on_change(kind, obj)
            except Exception:  # a subscriber's bug must not stop the mirror
                log.exception("watch subscriber failed", extra={"path": self.query.path})

    async def _relist(self) -> None:
        items, version = await self.source.list(self.query)
        fresh = {object_key(o): o for o in items}
        old = self.objects
        self.objects = fresh
        self.resource_version = version
        self.relists += 1
        self.version += 1
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._notify("ADDED", obj)
            elif _rv(before) != _rv(obj):
                self._notify("MODIFIED", obj)
        for key, obj in old.items():
            if key not in fresh:
                self._notify("DELETED", obj)
        self.synced.set()

    def apply_event(self, event: JSON) -> None:
        """Apply one watch event to the store (exposed for tests)."""
        kind, obj = str(event.get("type", "")), event.get("object") or {}
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            self.resource_version = version or self.resource_version
            return
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone(str(obj.get("message", "")))
            raise RuntimeError(f"watch error: {obj.get('message', obj)}")
        key = object_key(obj)
        if kind == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.version += 1
        self.resource_version = version or self.resource_version
        self._notify(kind, obj)

    async def run(self) -> None:
        """List, then watch forever; relist on Gone; back off on every other failure."""
        delay = self._retry_s
        need_list = True
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                    self.live, self.forbidden = True, False
                async for event in self.source.watch(self.query, self.resource_version):
                    self.apply_event(event)
                    self.live = True
                    delay = self._retry_s
            except asyncio.CancelledError:
                raise
            except Gone:
                need_list = True
                continue
            except Exception as exc:  # any failure: back off, keep mirroring
                self.live, self.forbidden = False, isinstance(exc, Forbidden)
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "watch failed; retrying: %s",
                    self.last_error,
                    extra={"path": self.query.path, "error": self.last_error},
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._max_retry_s)


def _rv(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
