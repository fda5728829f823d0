"""The one Event sink: every Kubernetes Event the operator records is built and posted here.

Why this module exists: the autoscaler (scale decisions), the provisioner (cell and condition
changes) and the start-up CRD check each had their own poster, with two Event APIs and three
naming schemes. ``EventSink`` is the single one. Its contract:

- ``events.k8s.io/v1`` Events, in the regarding object's namespace (``default`` for a
  cluster-scoped object such as the CRD, where ``kubectl get events -A`` and ``kubectl
  describe`` find it); ``reportingController`` names the writer (one per controller),
  ``reportingInstance`` the process.
- ``reason`` is UpperCamelCase and at most 128 bytes, ``action`` at most 128, ``note`` a human
  sentence cut to 1,024 (the apiserver's limits, which count UTF-8 bytes, not characters: a
  note of 600 "é" is refused; cut at a character boundary), ``type`` Normal or Warning.
- Names are ``<object>.<eventTime in ns, hex>``, unique within a process even when several
  Events are posted in the same instant (the clock is bumped by 1 µs).
- Posting never raises: an Event that cannot be posted is logged and dropped, because the
  status that carries the same explanation was already written.

The sink posts through a ``create`` function (the one door's ``RestClient.create`` at the
Events path, or the provisioner's ``KubeApi.create``) so fault-injecting test APIs see Events
like any other write.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpucellpool.api.pool import GPUCellPool
from gpucellpool.kube.errors import KubeError
from gpucellpool.kube.rest import RestClient
from gpucellpool.runtime.leader import micro_time

JSON = dict[str, Any]
EVENTS_API = "events.k8s.io/v1"
REASON_LIMIT = 128
ACTION_LIMIT = 128
NOTE_LIMIT = 1024
INSTANCE_LIMIT = 128
CLUSTER_SCOPED_NAMESPACE = "default"
CreateFn = Callable[[JSON], Awaitable[Any]]
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EventNote:
    """What an Event says: why (``reason``), what was done (``action``), for whom (``note``)."""

    reason: str
    note: str
    action: str
    warning: bool = False


def regarding(pool: GPUCellPool) -> JSON:
    """A pool as an Event's ``regarding`` reference (the autoscaler's and the provisioner's)."""
    meta = pool.metadata
    return {
        "apiVersion": pool.api_version,
        "kind": pool.kind,
        "name": meta.name,
        "namespace": meta.namespace,
        "uid": meta.uid,
    }


def event_namespace(regarding: Mapping[str, Any]) -> str:
    """Where an Event about ``regarding`` lives."""
    return str(regarding.get("namespace") or CLUSTER_SCOPED_NAMESPACE)


def utf8_prefix(text: str, limit_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits ``limit_bytes`` (never half a
    character): the apiserver measures an Event's note in bytes, not characters."""
    return text.encode(errors="replace")[:limit_bytes].decode(errors="ignore")


def event_body(
    regarding: Mapping[str, Any], event: EventNote, now: float, controller: str, instance: str
) -> JSON:
    """The ``events.k8s.io/v1`` Event about ``regarding`` (apiVersion, kind, name, ...)."""
    namespace = event_namespace(regarding)
    return {
        "apiVersion": EVENTS_API,
        "kind": "Event",
        "metadata": {
            "name": f"{regarding.get('name') or 'object'}.{int(now * 1e9):x}",
            "namespace": namespace,
        },
        "eventTime": micro_time(now),
        "reportingController": controller,
        "reportingInstance": utf8_prefix(instance, INSTANCE_LIMIT),
        "action": utf8_prefix(event.action, ACTION_LIMIT),
        "reason": utf8_prefix(event.reason, REASON_LIMIT),
        "type": "Warning" if event.warning else "Normal",
        "note": utf8_prefix(event.note, NOTE_LIMIT),
        "regarding": {k: v for k, v in regarding.items() if v},
    }


class EventSink:
    """Posts Events for one controller (``reportingController``); never raises."""

    def __init__(
        self, create: CreateFn, now: Callable[[], float], controller: str, instance: str
    ) -> None:
        self._create, self._now = create, now
        self.controller, self.instance = controller, instance
        self._last = 0.0

    async def post(self, regarding: Mapping[str, Any], event: EventNote) -> bool:
        """Record one Event; False (after a warning in the log) when it could not be posted."""
        now = max(self._now(), self._last + 1e-6)  # unique names within a burst
        self._last = now
        body = event_body(regarding, event, now, self.controller, self.instance)
        try:
            await self._create(body)
        except (KubeError, TimeoutError, OSError) as exc:
            log.warning(
                "event %s not posted: %s",
                event.reason,
                exc,
                extra={"regarding": regarding.get("name"), "controller": self.controller},
            )
            return False
        return True


def rest_creator(rest: RestClient) -> CreateFn:
    """``create`` for an ``EventSink`` posting through the one door."""

    async def create(body: JSON) -> JSON:
        namespace = body["metadata"]["namespace"]
        return await rest.create(f"/apis/{EVENTS_API}/namespaces/{namespace}/events", body)

    return create


class ObjectEvents:
    """``gpucellpool.operator.crdcheck.EventSink`` on the one sink: Events about any object."""

    def __init__(self, sink: EventSink, action: str) -> None:
        self.sink, self.action = sink, action

    async def emit(self, involved: Mapping[str, str], kind: str, reason: str, message: str) -> None:
        """Record one Event (``kind`` is Normal or Warning)."""
        note = EventNote(reason, message, self.action, warning=kind == "Warning")
        await self.sink.post(involved, note)
