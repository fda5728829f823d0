"""A workload cluster's pods indexed once for all its pools, and kept so one event at a time.

Why this module exists: every pool of a workload cluster asks the same two questions of its pods
- which unbound pods could be my demand, and which pods run on my cells' Nodes - and a decision
must not walk every pod of the cluster to answer them (40,000 pods, 200 pools). ``index_pods``
splits a list of pods once (``PodIndex``, shared by every pool deciding at that version);
``PodIndexer`` keeps the same index from the Pods watch events (``autoscaler.routing`` feeds
it), so an event costs work proportional to that one pod: the parts of the index it did not
touch are handed out again as they were, and only the label lists and Node tuples it touched
are rebuilt. (Rebuilding the whole index after each event cost ~6 ms at 40,000 pods, 2,200 of
them pending, paid by most decisions of a burst.) Pure: no I/O, clock or logging.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from autoscaler.policy.pool_demand import label_pairs
from gpucellpool.api.base import LabelSelector

JSON = dict[str, Any]
Pair = tuple[str, str]
G = TypeVar("G", bound=Hashable)


@dataclass(frozen=True, slots=True)
class PodIndex:
    """A workload cluster's pods split once, for every pool of that cluster to share.

    ``unbound`` holds the pods that could be pending demand (phase Pending, no nodeName: a
    superset of ``is_pending_hami_pod`` for any scheduler name and selection); ``by_node``
    the pods bound to each Node. A pool's decision then scans only the unbound pods and
    looks up its own cells' Nodes, instead of walking every pod of the cluster (10,000 pods
    x 50 pools per burst was the live operator's hot spot; see docs/benchmarks.md).
    """

    unbound: tuple[JSON, ...]
    by_node: Mapping[str, Sequence[JSON]]
    by_label: Mapping[Pair, Sequence[JSON]] | None = None
    """The ``unbound`` pods per (label key, value) they carry (``label_index``), so a pool whose
    demand selects by ``matchLabels`` looks at its own few pods, not at every unbound pod of
    the cluster; None: not indexed (``demand_candidates`` scans them all)."""


def label_index(unbound: Iterable[JSON]) -> dict[Pair, list[JSON]]:
    """Each unbound pod under every (key, value) of its labels."""
    out: dict[Pair, list[JSON]] = defaultdict(list)
    for pod in unbound:
        for pair in label_pairs(pod):
            out[pair].append(pod)
    return dict(out)


def demand_candidates(index: PodIndex, selector: LabelSelector | None) -> Sequence[JSON]:
    """The unbound pods a demand ``podSelector`` can match: the shortest ``by_label`` list of
    its ``matchLabels`` (a pod lacking one of them cannot match), else every unbound pod. A
    superset: the caller still applies ``counts_as_demand``."""
    wanted = selector.match_labels if selector is not None else None
    if not wanted or index.by_label is None:
        return index.unbound
    lists = [index.by_label.get((str(k), str(v)), ()) for k, v in wanted.items()]
    return min(lists, key=len)


def node_of(pod: Mapping[str, Any] | None) -> str:
    """The Node a pod is bound to ("" when none)."""
    spec = (pod or {}).get("spec")
    return str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else ""


def is_unbound_pending(pod: Mapping[str, Any]) -> bool:
    """Phase Pending and no Node: what ``PodIndex.unbound`` holds."""
    status = pod.get("status")
    return not node_of(pod) and isinstance(status, Mapping) and status.get("phase") == "Pending"


def index_pods(pods: Iterable[JSON]) -> PodIndex:
    unbound: list[JSON] = []
    by_node: dict[str, list[JSON]] = defaultdict(list)
    for pod in pods:
        node = node_of(pod)
        if node:
            by_node[node].append(pod)
        elif is_unbound_pending(pod):
            unbound.append(pod)
    return PodIndex(tuple(unbound), dict(by_node), label_index(unbound))


class _Grouped(Generic[G]):
    """Pods by key within groups (a Node, a label pair). A group's tuple is rebuilt only once
    it changed, and the mapping of all groups copied only once one did: a mapping handed out
    is never modified afterwards."""

    def __init__(self) -> None:
        self._members: dict[G, dict[str, JSON]] = {}
        self._tuples: dict[G, tuple[JSON, ...]] = {}
        self._dirty: set[G] = set()
        self._view: dict[G, tuple[JSON, ...]] = {}

    def put(self, group: G, key: str, pod: JSON) -> None:
        self._members.setdefault(group, {})[key] = pod
        self._dirty.add(group)

    def drop(self, group: G, key: str) -> None:
        members = self._members.get(group)
        if members is not None and members.pop(key, None) is not None:
            self._dirty.add(group)

    def view(self) -> dict[G, tuple[JSON, ...]]:
        """Each non-empty group's pods (in the order they were put): the last mapping when
        nothing changed since, else a new one."""
        if self._dirty:
            for group in self._dirty:
                members = self._members.get(group)
                if members:
                    self._tuples[group] = tuple(members.values())
                else:
                    self._members.pop(group, None)
                    self._tuples.pop(group, None)
            self._dirty.clear()
            self._view = dict(self._tuples)
        return self._view


class PodIndexer:
    """``index_pods`` kept up to date one event at a time (same content; order may differ).

    ``apply`` costs the pod's own groups (its Node, its label pairs); ``index`` after a change
    costs the tuples of the groups that changed, a tuple of the unbound pods when they changed
    and a copy of the top level of the mappings that changed (their tuples are shared between
    indexes), never a walk of every pod.
    """

    def __init__(self) -> None:
        self._unbound: dict[str, JSON] = {}
        self._unbound_tuple: tuple[JSON, ...] | None = ()
        self._labels_of: dict[str, frozenset[Pair]] = {}  # unbound pod key -> its label pairs
        self._node_of: dict[str, str] = {}  # bound pod key -> the Node it is indexed under
        self._nodes: _Grouped[str] = _Grouped()
        self._labels: _Grouped[Pair] = _Grouped()
        self._index: PodIndex | None = None
        self._known: set[str] = set()

    @property
    def pods(self) -> int:
        """How many pods the events reported (to compare with the cache holding them)."""
        return len(self._known)

    def apply(self, key: str, pod: JSON | None) -> None:
        """The pod ``key`` is now ``pod`` (None: deleted)."""
        self._index = None
        self._forget(key)
        if pod is None:
            self._known.discard(key)
            return
        self._known.add(key)
        node = node_of(pod)
        if node:
            self._nodes.put(node, key, pod)
            self._node_of[key] = node
        elif is_unbound_pending(pod):
            self._unbound[key] = pod
            self._unbound_tuple = None
            self._labels_of[key] = pairs = label_pairs(pod)
            for pair in pairs:
                self._labels.put(pair, key, pod)

    def _forget(self, key: str) -> None:
        """Take ``key``'s previous object out of every group it was in."""
        if self._unbound.pop(key, None) is not None:
            self._unbound_tuple = None
            for pair in self._labels_of.pop(key, frozenset()):
                self._labels.drop(pair, key)
        old_node = self._node_of.pop(key, "")
        if old_node:
            self._nodes.drop(old_node, key)

    def index(self) -> PodIndex:
        """A snapshot: later ``apply`` calls never change an index already handed out."""
        if self._index is None:
            if self._unbound_tuple is None:
                self._unbound_tuple = tuple(self._unbound.values())
            by_node, by_label = self._nodes.view(), self._labels.view()
            self._index = PodIndex(self._unbound_tuple, by_node, by_label)
        return self._index
