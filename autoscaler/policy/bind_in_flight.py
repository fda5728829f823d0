"""A pending pod HAMi has already placed: its bind is in flight, it waits for no capacity.

Why this module exists: HAMi's ``/filter`` writes the chosen node on the pod
(``hami.io/vgpu-node``) and ``/bind`` marks it ``hami.io/bind-phase: allocating`` with
``hami.io/bind-time`` before the Binding gives the pod its ``spec.nodeName`` (hami-facts §2.2,
"If ``hami.io/vgpu-node`` is present on a pod that is still Pending, a filter succeeded and the
bind or allocation is what is stuck"). Until then the pod is still Pending, unbound, and its
``PodScheduled`` condition still says Unschedulable from the attempt before, so the §3.3
predicate counts it as demand, while HAMi's allocation metrics already put its GPU share on the
chosen node. A decision in that window saw the pod twice: pending, and its own allocation
filling the one cell that could take it, and started a cell for it (measured on the twin at
load ~6: a boot and a spare started, then cancelled 0.8 s later once the Binding landed; the
simulator, which binds at once, never did). Such a pod is left out of demand for
``BIND_GRACE_SECONDS`` after its bind-time: a bind that has not landed by then (a Binding
refused after the annotations were written, then a filter that failed and left them stale)
counts as demand again, so no pod waits on a stale annotation for longer than that.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

VGPU_NODE = "hami.io/vgpu-node"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
BIND_GRACE_SECONDS = 30.0
"""How long after ``hami.io/bind-time`` an unbound ``allocating`` pod is taken as being bound
(a Binding takes well under a second; HAMi's node lock expires after five minutes)."""


def bind_in_flight(
    pod: Mapping[str, Any],
    now: float,
    nodes: Container[str] | None = None,
    grace_s: float = BIND_GRACE_SECONDS,
) -> bool:
    """Whether HAMi placed ``pod`` on a node (one of ``nodes``, the pool's cells' Nodes that
    exist; None: any) and its bind started within ``grace_s`` of ``now`` (Unix seconds;
    ``bind-time`` is whole seconds, written by HAMi's clock), the pod still unbound. A node
    gone (a cancelled boot's, the usual reason a bind fails) leaves the pod demand at once.
    Anything malformed or missing: False (the pod is judged as any other)."""
    meta = pod.get("metadata")
    spec = pod.get("spec")
    if not isinstance(meta, Mapping) or (isinstance(spec, Mapping) and spec.get("nodeName")):
        return False
    notes = meta.get("annotations")
    if not isinstance(notes, Mapping) or notes.get(BIND_PHASE) != "allocating":
        return False
    node = notes.get(VGPU_NODE)
    if not node or (nodes is not None and node not in nodes):
        return False
    try:
        started = float(str(notes.get(BIND_TIME)))
    except ValueError:
        return False
    return abs(now - started) <= grace_s  # either side: the two clocks may differ a little
