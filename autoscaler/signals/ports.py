"""Ports for the utilisation signal: what the control loop needs from a metrics backend.

Why this module exists: the loop, its tests and the simulator depend on these Protocols and
value types, never on the httpx adapter, so importing them pulls in no client library.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from autoscaler.signals.hami_metrics import MetricsReading
from autoscaler.signals.promql import QueryResult


class MetricsSource(Protocol):
    """Prometheus (or anything answering like it) as the control loop sees it."""

    async def query(self, promql: str) -> QueryResult:
        """An instant query; raises :class:`PrometheusUnavailable` on any fault."""
        ...

    async def node_gpu_usage(
        self, node_names: Sequence[str], *, dra: bool = False
    ) -> MetricsReading:
        """Per-node per-GPU HAMi allocations and a freshness verdict; never raises.
        ``dra``: the pool runs HAMi in DRA mode, read HAMi-DRA's ``hami_dra_*`` series."""
        ...


class PrometheusUnavailable(Exception):
    """A query did not produce a usable result.

    ``kind``: ``timeout``, ``connect``, ``transport``, ``redirect`` (3xx: never followed, so
    the token cannot travel elsewhere), ``http_4xx``, ``http_5xx``, ``too_large``,
    ``malformed`` or ``status_error``. ``detail`` is safe to log and to put in a condition.
    """

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
