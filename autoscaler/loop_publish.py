"""Publishing one pool's decision: status, the Event on a new reason, the policy memory.

Why this module exists: deciding and telling are separate jobs. The loop (``autoscaler.loop``)
observes and decides; this module turns a ``Decision`` into the writes a user and the provisioner
read, and decides when a write is due at all: status only when the outcome changed (a
message-only change at most every ``message_refresh_s``) or the policy memory must be saved
(``status.policyMemory``, in the same write: when its scale facts changed or every
``memory_persist_s``), an Event only when the reason changed. A decision that is only the
consequence of the action in force (``explain.follows_from``: the cells a scale-up asked for now
cover its pods) is no new outcome: neither written nor announced. One status write per changed
outcome is the whole cost of a new pending pod on the pool object. Writes go through the
``PoolWriter`` port, at most ``writes_in_flight`` status applies at once across pools; Events
have slots of their own, so an Event never holds another pool's status apply in the queue.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import replace

from autoscaler.explain import (
    Outcome,
    carry_victims,
    follows_from,
    note,
    outcome,
    parse_rfc3339,
    scale_times,
    status_apply_body,
    with_cell_shape,
    with_demand,
    with_share,
)
from autoscaler.loop_measure import add_to_status, due
from autoscaler.loop_ports import PoolWriter
from autoscaler.loop_state import LoopSettings, PoolState, scale_facts
from autoscaler.measured_use import published
from autoscaler.observe import live_cell_names, refused_victims
from autoscaler.policy.config import pool_shape
from autoscaler.policy.decision import Decision
from autoscaler.policy_memory import MEMORY_FIELD, memory_field


def victims_in_force(state: PoolState) -> tuple[str, ...]:
    """The cells our scale-down in force chose (the provisioner drains exactly those), less
    those it rejected (``status.planRejections``): a rejected victim stays, and is not carried
    into the next plan."""
    refused = refused_victims(state.pool)
    if state.published is not None:
        chosen = state.published.victims if state.published.act else ()
        return tuple(v for v in chosen if v not in refused)
    last = state.raw_status.get("lastDecision") or {}
    victims = last.get("victims") if last.get("act") else None
    chosen = tuple(str(v) for v in victims) if isinstance(victims, list) else ()
    return tuple(v for v in chosen if v not in refused)


def empty_in_force(state: PoolState) -> frozenset[str]:
    """Of ``victims_in_force``, those chosen while they ran no pod
    (``lastDecision.emptyVictims``): carried, they stay marked so."""
    if state.published is not None:
        return frozenset(state.published.empty_victims if state.published.act else ())
    last = state.raw_status.get("lastDecision") or {}
    empty = last.get("emptyVictims") if last.get("act") else None
    return frozenset(str(v) for v in empty) if isinstance(empty, list) else frozenset()


def requested_target(state: PoolState) -> int:
    """The target the provisioner is working toward (ours once we have acted)."""
    if state.published is not None and state.published.act:
        return state.published.desired
    value = state.raw_status.get("desiredReplicas")
    return value if isinstance(value, int) else 0


class Publisher:
    """Writes each pool's outcome when it is due (``is_leader`` is checked by the caller)."""

    def __init__(
        self,
        writer: PoolWriter,
        settings: LoopSettings,
        term_left: Callable[[], float] = lambda: math.inf,
        *,
        now: Callable[[], float] = lambda: 0.0,
        stage: Callable[[str, float], None] = lambda _stage, _seconds: None,
    ) -> None:
        self.writer = writer
        self.settings = settings
        self.term_left = term_left
        """Seconds our leadership of the pool being published lasts at the latest (the
        caller's Lease: ``LeaderElector.term_left``); a request still unanswered then is
        abandoned."""
        self.now, self.stage = now, stage  # the clock, and where a write's stages are told
        self._writes = asyncio.Semaphore(settings.writes_in_flight)
        self._events = asyncio.Semaphore(settings.writes_in_flight)  # never ahead of a status

    async def publish(
        self,
        state: PoolState,
        decision: Decision,
        reachable: bool,
        now: float,
        gate: Callable[[], bool] = lambda: True,
    ) -> None:
        """Write what is due. ``gate`` (the caller's leadership of the pool) is asked again
        right before each request, and a request must be answered within ``term_left``: a
        write queued behind others (``writes_in_flight``) while this process stepped down is
        dropped, not sent after the next holder's, and so is the Event of a status written
        just before; one still unanswered when the term could end is abandoned (nothing of it
        is recorded as published: leading again, this process writes it again)."""
        pool, persist_s = state.pool, self.settings.memory_persist_s
        live = live_cell_names(pool)
        shared = with_share(outcome(decision, reachable), state.share)
        out = carry_victims(shared, victims_in_force(state), live, empty_in_force(state))
        out = self._with_status_facts(state, out, decision, reachable, now)
        # The memory rides on the status write: at once when its scaling facts changed (a
        # restart must not scale down just after a scale-up), else every memory_persist_s.
        facts = scale_facts(decision.memory)
        remember = facts != state.facts_written or now - state.memory_written_at >= persist_s
        follow_up = state.published is not None and follows_from(state.published, out)
        if follow_up:  # the announced action's consequence: not news, no Event for it either
            state.event_reason = out.reason
        fresh = not follow_up and self._due(state, out, now)
        changed = fresh or due(state.measured, state.measured_published)
        if changed or remember:
            if state.event_reason is None:  # after a restart or takeover: what status says,
                # read before our write (its watch event may update raw_status meanwhile)
                state.event_reason = str((state.raw_status.get("lastDecision") or {}).get("reason"))
            body = status_apply_body(pool, out, state.raw_status, now)
            body["status"][MEMORY_FIELD] = memory_field(decision.memory)
            body["status"].update(scale_times(decision.memory, out.act, state.raw_status))
            if state.measured is not None:
                add_to_status(body, pool, state.measured, state.raw_status, now)
                state.measured_published = published(state.measured)
            if not await self._write(lambda: self.writer.apply_status(body), gate):
                return
            state.published, state.status_written_at = out, now
            state.memory_written_at, state.facts_written = now, facts
            if state.event_reason != out.reason:
                warn = not reachable
                async with self._events:  # after our status, and not queued with statuses
                    sent = gate() and await self._within_term(
                        lambda: self.writer.event(pool, out.reason, note(out), warn)
                    )
                if sent:
                    state.event_reason = out.reason

    @staticmethod
    def _with_status_facts(
        state: PoolState, out: Outcome, decision: Decision, read: bool, now: float
    ) -> Outcome:
        """``out`` with ``status.demand`` / ``demandFreeSince`` (``read``: the pending pods were
        read) and the ``CellShapeKnown`` condition of the shape this decision packed with."""
        if state.published is not None:
            previous = state.published.demand_free_since
        else:  # after a restart or takeover: what status says
            previous = parse_rfc3339(state.raw_status.get("demandFreeSince"))
        out = with_demand(out, decision, read, previous, now)
        choice = pool_shape(state.pool)
        return with_cell_shape(out, choice.source.value, choice.message)

    async def _write(self, call: Callable[[], Awaitable[None]], gate: Callable[[], bool]) -> bool:
        """One write, at most ``writes_in_flight`` at once across pools: a request queued here
        does not run its timeout down while an overloaded apiserver works through the others.
        False (nothing sent) when ``gate`` says no once its turn comes. The time waiting for a
        slot and the request's own are told to ``stage``."""
        queued = self.now()
        async with self._writes:
            sent = self.now()
            if not gate():
                return False
            self.stage("write_slot", sent - queued)
            written = await self._within_term(call)
        if written:
            self.stage("write", self.now() - sent)
        return written

    async def _within_term(self, call: Callable[[], Awaitable[None]]) -> bool:
        """``call()``, abandoned (False) if unanswered when our term could end (``term_left``),
        so it cannot land after the next holder's writes; a term already over sends nothing."""
        left = self.term_left()
        if left <= 0:
            return False
        try:
            async with asyncio.timeout(None if math.isinf(left) else left) as term:
                await call()
        except TimeoutError:
            if term.expired():
                return False
            raise
        return True

    def _due(self, state: PoolState, out: Outcome, now: float) -> bool:
        """Whether ``out`` must be written to status now.

        Yes when it differs from what we published in anything but the message. A message-only
        change (a hold's text counts the seconds since the last scale-up, so it changes on every
        decision) is written at most every ``message_refresh_s``: the status stays consistent
        (its ``lastDecision.time`` says when that text was true) without a write per decision.
        """
        published = state.published
        if published is None:
            return True
        if out == published:
            return False
        if replace(out, message=published.message) != published:
            return True
        return now - state.status_written_at >= self.settings.message_refresh_s
