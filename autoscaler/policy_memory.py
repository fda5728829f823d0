"""The policy memory as the autoscaler stores it: ``status.policyMemory``, compact JSON.

Why this module exists: ``decide`` is pure and remembers nothing itself; the caller hands back
the ``PolicyMemory`` of the last call. So that stabilisation windows, cooldowns, idle times and
the hedge's and warm spare's bookkeeping survive an operator restart or a new leader, the live
loop writes the memory with the rest of its status (one write per outcome) and reads it back on
the next pass. The encoding (versioned, short keys), its bound (the field's length limit, what
goes first when it is too long), and the fallbacks (the annotation earlier versions wrote, a
fresh memory when absent or unreadable) are decided here, purely, so they are unit-tested
without a server, and the demo's divergence tools decode a run's log with the same code.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from autoscaler.policy.types import GrowthEpisode, PolicyMemory
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import MAX_POLICY_MEMORY_CHARS

MEMORY_ANNOTATION = "autoscaler.cells.kubeswift.io/policy-memory"  # read only: before policyMemory
MEMORY_FIELD = "policyMemory"
MEMORY_VERSION = 1


def encode_memory(memory: PolicyMemory) -> str:
    return json.dumps(
        {
            "v": MEMORY_VERSION,
            "up": memory.last_scale_up_at,
            "down": memory.last_scale_down_at,
            "rec": [list(r) for r in memory.recommendations],
            "idle": dict(memory.idle_since),
            **({"il": [list(e) for e in memory.idle_left]} if memory.idle_left else {}),
            "dem": [list(d) for d in memory.demand_samples],
            "ev": [list(e) for e in memory.scale_events],
            "bp": memory.boots_proven,
            **({"nu": sorted(memory.never_used)} if memory.never_used else {}),
            **({"ups": [list(u) for u in memory.scale_ups]} if memory.scale_ups else {}),
            **({"ge": [list(g) for g in memory.growth_episodes]} if memory.growth_episodes else {}),
        },
        separators=(",", ":"),
    )


def memory_field(memory: PolicyMemory, limit: int = MAX_POLICY_MEMORY_CHARS) -> str:
    """``encode_memory`` within the status field's bound: when too long (idle times of
    thousands of cells), the rolling samples, the hedge's unused cells and the warm spare's
    growth episodes go first (a restart re-learns them; an unused cell forgotten waits out the
    idle window), then the rate events; when and how it last scaled always stays."""
    text = encode_memory(memory)
    if len(text) <= limit:
        return text
    slim = replace(
        memory,
        recommendations=(),
        idle_since={},
        idle_left=(),
        demand_samples=(),
        never_used=frozenset(),
        growth_episodes=(),
    )
    text = encode_memory(slim)
    return text if len(text) <= limit else encode_memory(replace(slim, scale_events=()))


def stored_memory(pool: GPUCellPool) -> PolicyMemory:
    """The memory the last autoscaler left: ``status.policyMemory``, else the annotation an
    earlier version wrote, else a fresh one."""
    text = pool.status.policy_memory or pool.metadata.annotations.get(MEMORY_ANNOTATION)
    return decode_memory(text)


def decode_memory(text: str | None) -> PolicyMemory:
    """The stored memory, or a fresh one when absent or unreadable (never raises)."""
    if not text:
        return PolicyMemory()
    try:
        data = json.loads(text)
        if data.get("v") != MEMORY_VERSION:
            return PolicyMemory()
        return PolicyMemory(
            last_scale_up_at=data.get("up"),
            last_scale_down_at=data.get("down"),
            recommendations=tuple((float(t), int(n)) for t, n in data.get("rec") or ()),
            idle_since={str(k): float(v) for k, v in (data.get("idle") or {}).items()},
            idle_left=tuple((float(s), float(t)) for s, t in data.get("il") or ()),
            demand_samples=tuple((float(t), float(n)) for t, n in data.get("dem") or ()),
            scale_events=tuple((float(t), int(n)) for t, n in data.get("ev") or ()),
            boots_proven=data.get("bp") is True,
            never_used=frozenset(str(n) for n in data.get("nu") or ()),
            scale_ups=tuple(_scale_up(u) for u in data.get("ups") or ()),
            growth_episodes=tuple(_growth(g) for g in data.get("ge") or ()),
        )
    except (ValueError, TypeError, AttributeError):
        return PolicyMemory()


def _growth(stored: Any) -> GrowthEpisode:
    first, last, cells, shared = stored
    return float(first), float(last), int(cells), shared is True


def _scale_up(stored: Any) -> tuple[float, int, float | None]:
    at, before, previous = stored
    return float(at), int(before), None if previous is None else float(previous)
