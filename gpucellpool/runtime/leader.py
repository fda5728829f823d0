"""Leader election on a coordination.k8s.io/v1 Lease, so that of N replicas exactly one acts.

Why this module exists: the chart runs two replicas for availability, but two autoscalers
writing the same pool's status would fight. This is client-go's algorithm, kept small:
candidates read the Lease every ``retry_s``; the holder renews it; a candidate takes the Lease
over only when the record has not changed for ``lease_s`` *on the candidate's own clock* (so
clock skew between replicas cannot shorten a lease), and only with a resourceVersion
precondition (so two candidates cannot both win). A leader that cannot renew within
``renew_deadline_s`` steps down before anyone may take over. On a clean shutdown the holder
releases the Lease so the standby takes over at its next retry instead of after a full lease.
Sharded (``--shards N``, issue 13) each shard has its own Lease and elector
(``ShardedElection``); which Lease a process may take, ask for or hand back is the pure rule
``gpucellpool.runtime.shards.claim``; unsharded that rule is the one above, on today's Lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from gpucellpool.api.clock import Clock
from gpucellpool.runtime.shards import (
    STANDING_IN_ANNOTATION,
    WANTED_BY_ANNOTATION,
    Action,
    LeaseSeen,
    ShardPlan,
    claim,
)

JSON = dict[str, Any]
log = logging.getLogger(__name__)

MIN_RETRY_S = 0.1
"""The shortest pause between rounds whatever ``retry_s`` says: 0 would spin on the apiserver."""


class LeaseConflict(Exception):
    """Someone else changed the Lease between our read and our write."""


class LeaseApi(Protocol):
    async def get(self) -> JSON | None: ...

    async def create(self, lease: JSON) -> JSON:
        """Raises ``LeaseConflict`` when it already exists."""
        ...

    async def replace(self, lease: JSON) -> JSON:
        """Raises ``LeaseConflict`` when ``metadata.resourceVersion`` is stale."""
        ...


@dataclass(frozen=True, slots=True)
class ElectionSettings:
    namespace: str
    name: str = "gpucellpool-autoscaler"
    identity: str = ""
    lease_s: float = 15.0
    """A standby takes over after the record stood still this long (client-go default 15 s)."""
    renew_deadline_s: float = 10.0
    """A leader that could not renew for this long steps down (must be < lease_s)."""
    retry_s: float = 2.0
    """How often candidates read and the leader renews."""
    preferred: bool = True
    """This Lease's shard is our own (always so unsharded): take it when free, ask for it
    back when another holds it; otherwise only stand by for it (``gpucellpool.runtime.shards``)."""


def micro_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """``is_leader`` is the one bit the rest of the operator consults before any write."""

    def __init__(
        self,
        api: LeaseApi,
        clock: Clock,
        settings: ElectionSettings,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.api = api
        self.clock = clock
        self.settings = settings
        self._leading = False  # we won the last round (``is_leader`` also bounds it in time)
        self._renewed_at = 0.0
        self.known = False  # a first attempt completed: we know whether we lead or stand by
        self.holder = ""
        self._on_change = on_change
        self._observed: tuple[str, float] = ("", 0.0)  # (record fingerprint, seen-at)

    @property
    def is_leader(self) -> bool:
        """We won the last round and renewed within ``renew_deadline_s`` (on our clock).

        Checked at each call, not only when a round ends: a round hung on a silent apiserver
        (each request may take the client's timeout) would otherwise keep a leader leading
        past the lease a standby waits out; client-go bounds a renewal by the same deadline.
        """
        return self._leading and self.is_leader_since(self._renewed_at)

    @is_leader.setter
    def is_leader(self, leader: bool) -> None:
        """Lead (renewed now) or not, by hand (tests)."""
        self._leading = leader
        if leader:
            self._renewed_at = self.clock.now()

    def term_left(self) -> float:
        """Seconds before another process could hold this Lease (0 when we do not lead): a
        standby takes it over only once the record of our last renewal, written after
        ``_renewed_at``, has stood still for ``lease_s`` on its own clock. A write answered
        within this time cannot land after the next holder's first one."""
        if not self.is_leader:
            return 0.0
        return max(0.0, self._renewed_at + self.settings.lease_s - self.clock.now())

    def is_leader_since(self, renewed_at: float) -> bool:
        """Whether a renewal made at ``renewed_at`` is still within the renew deadline."""
        return self.clock.now() - renewed_at < self.settings.renew_deadline_s

    def _set(self, leader: bool) -> None:
        if leader != self._leading:
            self._leading = leader
            log.info(
                "leadership changed: leader=%s holder=%r",
                leader,
                self.holder,
                extra={"leader": leader, "id": self.settings.identity},
            )
            if self._on_change is not None:
                self._on_change(leader)

    def _body(self, old: JSON | None, transitions: int) -> JSON:
        now = micro_time(self.clock.now())
        spec: JSON = {
            "holderIdentity": self.settings.identity,
            "leaseDurationSeconds": max(1, round(self.settings.lease_s)),
            "renewTime": now,
            "leaseTransitions": transitions,
        }
        old_spec = (old or {}).get("spec") or {}
        same_holder = old_spec.get("holderIdentity") == self.settings.identity
        spec["acquireTime"] = old_spec.get("acquireTime") if same_holder else now
        meta: JSON = {"name": self.settings.name, "namespace": self.settings.namespace}
        if old is not None:
            meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if not self.settings.preferred:
            meta["annotations"] = {STANDING_IN_ANNOTATION: "true"}
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": spec,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One round; True when we hold the Lease afterwards (the rule: ``shards.claim``)."""
        lease = await self.api.get()
        # After the read, as client-go does: a renewal the GET returned may have been written
        # while it was in flight, so it is timed no earlier than its answer (never early expiry).
        now = self.clock.now()
        spec = (lease or {}).get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        self.holder = holder
        # The record, not its resourceVersion: a wantedBy request is no renewal.
        fields = ("holderIdentity", "renewTime", "leaseTransitions")
        fingerprint = "|".join(str(spec.get(f)) for f in fields) if lease else "absent"
        if fingerprint != self._observed[0]:
            self._observed = (fingerprint, now)
        annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
        seen = LeaseSeen(
            holder,
            now - self._observed[1],
            float(spec.get("leaseDurationSeconds") or self.settings.lease_s),
            str(annotations.get(WANTED_BY_ANNOTATION) or ""),
            annotations.get(STANDING_IN_ANNOTATION) == "true",
        )
        decision = claim(seen, self.settings.identity, self.settings.preferred)
        log.debug("lease %s: %s (%s)", self.settings.name, decision.action.value, decision.reason)
        if decision.action in (Action.WAIT, Action.ASK, Action.YIELD):
            if lease is not None and decision.action is Action.ASK:
                await self._ask(lease)
            elif lease is not None and decision.action is Action.YIELD:
                await self._release(lease, for_asker=True)
            return False
        if lease is None:
            await self.api.create(self._body(None, 0))
            return True
        mine = decision.action is Action.RENEW
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        await self.api.replace(self._body(lease, transitions))
        return True

    async def _ask(self, lease: JSON) -> None:
        """Mark our own shard's Lease as wanted by us; its holder hands it back."""
        log.info("asking %r for our own shard's Lease %s", self.holder, self.settings.name)
        meta = lease.setdefault("metadata", {})
        meta.setdefault("annotations", {})[WANTED_BY_ANNOTATION] = self.settings.identity
        await self.api.replace(lease)

    async def _release(self, lease: JSON, for_asker: bool = False) -> None:
        """Write the Lease as free. On shutdown with a 1 s lease: the next candidate takes it.
        Handed back (``for_asker``) it keeps ``wanted-by`` and a whole lease: the asker takes
        it at once (its own shard), other stand-ins wait a lease for it (no race with it)."""
        self._set(False)
        body = self._body(lease, int((lease.get("spec") or {}).get("leaseTransitions") or 0))
        body["spec"]["holderIdentity"] = ""
        body["spec"]["leaseDurationSeconds"] = 1
        body["metadata"].pop("annotations", None)
        wanted_by = ((lease.get("metadata") or {}).get("annotations") or {}).get(
            WANTED_BY_ANNOTATION
        )
        if for_asker and wanted_by:
            body["spec"]["leaseDurationSeconds"] = max(1, round(self.settings.lease_s))
            body["metadata"]["annotations"] = {WANTED_BY_ANNOTATION: wanted_by}
        await self.api.replace(body)

    async def step(self) -> None:
        """One round with its consequences on ``is_leader`` (exposed for tests).

        Seeing another holder ends our leadership at once. A failed round (conflict, apiserver
        unreachable) keeps a leader leading only until ``renew_deadline_s`` since its last
        renewal, which is shorter than the lease a standby waits out: no overlap.
        """
        now = self.clock.now()
        try:
            won = await self.try_acquire_or_renew()
        except Exception as exc:  # a lost round, not a crash
            log.warning("lease round failed: %s: %s", type(exc).__name__, exc)
            if self._leading and not self.is_leader:  # past the renew deadline (now or during)
                self._set(False)
            self.known = True
            return
        if won:
            if self._leading and not self.is_leader:
                # A slow round (a loaded machine) let the deadline pass before this renewal
                # landed: writes stopped silently meanwhile, so that term ends; the next one
                # starts with on_change(True) (pools woken and re-read, as on a takeover).
                self._set(False)
            self._renewed_at = now
            self.holder = self.settings.identity
        # A renewal timed from the round's start may already be past the deadline when it
        # lands: then we lead again only once the next round renews.
        self._set(won and self.is_leader_since(now))
        self.known = True

    async def run(self) -> None:
        while True:
            await self.step()
            await self.clock.sleep(max(self.settings.retry_s, MIN_RETRY_S))

    async def release(self) -> None:
        """Give the Lease up (clean shutdown) so a standby need not wait a whole lease."""
        if not self._leading:
            return
        log.info("releasing the lease")
        self._set(False)
        with contextlib.suppress(Exception):
            lease = await self.api.get()
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.settings.identity:
                await self._release(lease)


class ShardedElection:
    """One ``LeaderElector`` per shard; ``owns(key)`` is the gate of every write about a pool.

    Unsharded (``ShardPlan()``) it is one elector on today's Lease, and ``owns`` is exactly
    ``is_leader``. ``make(shard)`` builds shard ``shard``'s elector (the composition root
    chooses the Lease client, the clock and what a change of that shard's leadership does).
    """

    def __init__(self, plan: ShardPlan, make: Callable[[int], LeaderElector]) -> None:
        self.plan = plan
        self.electors = [make(shard) for shard in range(plan.shards)]

    @property
    def own(self) -> LeaderElector:
        """The elector of this process's own shard (the only one when unsharded)."""
        return self.electors[self.plan.index]

    @property
    def known(self) -> bool:
        """Every shard's election completed a round: we know which pools are ours."""
        return all(e.known for e in self.electors)

    def held(self) -> frozenset[int]:
        """The shards this process holds now."""
        return frozenset(k for k, e in enumerate(self.electors) if e.is_leader)

    def owns(self, key: tuple[str, str]) -> bool:
        """Whether this process acts on the pool ``(namespace, name)`` now."""
        return self.electors[self.plan.of(key)].is_leader

    def term_left(self, key: tuple[str, str]) -> float:
        """``LeaderElector.term_left`` of the pool's shard."""
        return self.electors[self.plan.of(key)].term_left()

    async def run(self) -> None:
        await asyncio.gather(*(e.run() for e in self.electors))

    async def release(self) -> None:
        """Give every held Lease up (clean shutdown)."""
        for elector in self.electors:
            await elector.release()
