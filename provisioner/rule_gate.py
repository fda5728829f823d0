"""The provisioner's own admission check: the webhook's rules, re-run before anything launches.

Why this module exists: the webhook is the first line, not the only one. A pool stored while
the webhook was disabled, or during an outage under ``failurePolicy: Ignore``, reaches the
provisioner exactly as written, and what the provisioner builds from it runs in a privileged
launcher pod (the guestTemplate is copied into the SwiftGuest: a ``filesystems`` hostPath,
``nodeName`` or ``schedulerName`` would go with it). So each pass re-runs the same pure rules on
the stored object before the provisioner writes anything outside the pool (guest, seed, Secret,
Machine). A pool that fails them gets ``Degraded=True`` naming each rule's field, one Warning
Event when that happens, and nothing else; once fixed, the next pass proceeds and clears it.

The rules are injected (``PoolRules``) by the composition root with the operator's rule
settings, so ``provisioner`` and ``webhook`` stay independent packages. They run off the event
loop (a large pool costs a second of CPU) and once per (uid, generation): the rules read only
the spec and the immutable name and namespace, and every spec change bumps the generation.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from gpucellpool.api.conditions import ConditionType
from gpucellpool.api.pool import GPUCellPool
from provisioner.events import EventSink, emit_all
from provisioner.fsm.events import condition_events
from provisioner.kube import JSON, KubeApi
from provisioner.status import (
    RULES_FAILED,
    apply_body,
    own_conditions,
    set_condition,
    stored_status,
    write_status,
)

LISTED = 3
"""Breaches named in the condition message (the rest are counted)."""
CACHED_POOLS = 1024


class Breach(Protocol):
    """One broken rule: the field path and what to do (``webhook.rules.FieldError`` fits)."""

    @property
    def path(self) -> str: ...

    @property
    def message(self) -> str: ...


PoolRules = Callable[[Mapping[str, Any]], Sequence[Breach]]
"""The create-time admission rules on a stored pool (raw object); empty when it passes."""


def degraded_message(breaches: Sequence[Breach]) -> str:
    """One line naming the first breaches by field, and what happens until they are fixed."""
    listed = "; ".join(f"{b.path}: {b.message}" for b in breaches[:LISTED])
    more = f" (and {len(breaches) - LISTED} more)" if len(breaches) > LISTED else ""
    noun = "rule" if len(breaches) == 1 else "rules"
    return (
        f"the stored pool breaks {len(breaches)} admission {noun}, so nothing is launched for "
        f"it until it is fixed (was the webhook bypassed?): {listed}{more}"
    )


def degraded_patch(pool: GPUCellPool, breaches: Sequence[Breach], now: float) -> JSON:
    """The status apply that marks ``pool`` Degraded (only its conditions change)."""
    conds = set_condition(
        [c.to_api() for c in pool.status.conditions or []],
        ConditionType.DEGRADED,
        True,
        RULES_FAILED,
        degraded_message(breaches),
        now,
        pool.metadata.generation,
    )
    # Only the conditions change; every other field the provisioner owns is sent back as
    # stored, since a server-side apply would remove what it leaves out.
    return apply_body(pool, {**stored_status(pool), "conditions": own_conditions(conds)})


class RuleGate:
    """Runs the injected rules (``None``: no re-check, for tests of other parts only)."""

    def __init__(self, rules: PoolRules | None) -> None:
        self.rules = rules
        self._seen: OrderedDict[tuple[str, ...], tuple[Breach, ...]] = OrderedDict()

    async def breaches(self, raw: Mapping[str, Any]) -> tuple[Breach, ...]:
        """What the stored pool breaks (cached per namespace, name, uid and generation)."""
        if self.rules is None:
            return ()
        meta = raw.get("metadata") or {}
        key = tuple(str(meta.get(k, "")) for k in ("namespace", "name", "uid", "generation"))
        if key in self._seen:
            self._seen.move_to_end(key)
            return self._seen[key]
        found = tuple(await asyncio.to_thread(self.rules, raw))
        self._seen[key] = found
        if len(self._seen) > CACHED_POOLS:
            self._seen.popitem(last=False)
        return found

    async def refuse(
        self,
        infra: KubeApi,
        events: EventSink,
        pool: GPUCellPool,
        breaches: Sequence[Breach],
        now: float,
    ) -> None:
        """Mark ``pool`` Degraded and announce it once; writes nothing but the pool's status."""
        before = own_conditions(c.to_api() for c in pool.status.conditions or [])
        written = await write_status(infra, pool, degraded_patch(pool, breaches, now))
        await emit_all(events, pool, condition_events(before, own_conditions(written)))
