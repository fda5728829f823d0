"""Which Nodes' Prometheus readings are older than their pods: the annotations alone count there.

Why this module exists: a Ready cell's allocation is its pods' HAMi annotations, raised GPU by
GPU to Prometheus's figure where Prometheus reports more (allocations the pod cache cannot
see; ``autoscaler.observe.ready_cell_usage``). But Prometheus's samples are up to a scrape
interval old: when a pod ends, the pod watch shows its GPU free within a second, while
Prometheus keeps reporting it allocated until the next scrape. Taking the larger figure then
reads the pod that just ended as still running, so a pod pending at that moment "needs a new
cell" that HAMi does not need (it places the pod on the freed GPU a moment later), and a cell
whose last pod ended is seen idle a scrape later than it was. Measured on the twin at x20 (1 s
scrape = 20 trace s): scale-downs decided 30-40 trace s after the simulator's, and a scale-up
for a pod whose GPU was being freed (session 16, docs/autoscaling.md).

The rule: a Node whose pods changed (one left, ended or arrived) after the oldest sample the
last read could hold (``now - MetricsHealth.age_seconds``, the stalest series' age) is read
from its annotations alone; from the first read whose every sample is newer than the change,
Prometheus raises it again. A change is timed when an observation first sees it, which is no
earlier than it happened, so the rule errs towards the annotations, never towards a stale
sample. No clock is read here: the caller passes ``now``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

JSON = dict[str, Any]
_Key = tuple[tuple[str, str], ...]


def _key(pods: Sequence[JSON]) -> _Key:
    """What of a Node's pods an allocation depends on: which pods, in which phase."""
    return tuple(
        sorted(
            (
                str((p.get("metadata") or {}).get("uid") or (p.get("metadata") or {}).get("name")),
                str((p.get("status") or {}).get("phase") or ""),
            )
            for p in pods
        )
    )


class PodChanges:
    """When each Node's pods were last seen to change (one record per Node the pool reads)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[Sequence[JSON], _Key, float]] = {}

    def see(
        self, node_pods: Mapping[str, Sequence[JSON]], names: Collection[str], now: float
    ) -> None:
        """Record ``names``' pods as seen at ``now``; a Node seen the first time counts as
        unchanged since long ago (what Prometheus says of it is taken, as before)."""
        for name in names:
            pods = node_pods.get(name, ())
            last = self._seen.get(name)
            if last is None:
                self._seen[name] = (pods, _key(pods), float("-inf"))
            elif last[0] is not pods:  # the pod index hands out a new tuple on a change
                key = _key(pods)
                self._seen[name] = (pods, key, now if key != last[1] else last[2])

    def forget_except(self, nodes: Collection[str]) -> None:
        """Drop the Nodes that are gone."""
        for name in [n for n in self._seen if n not in nodes]:
            del self._seen[name]

    def superseded(self, names: Collection[str], now: float, age_seconds: float) -> frozenset[str]:
        """The Nodes among ``names`` whose pods changed after ``now - age_seconds``."""
        oldest = now - max(0.0, age_seconds)
        return frozenset(n for n in names if n in self._seen and self._seen[n][2] > oldest)
