"""What a twin run logs beyond its timeline: each published decision and each cell's steps.

Why this module exists: the recorder (``simulations.demo.recorder``) measures a run; these two
records are what the fidelity dump (``simulations.demo.fidelity_dump``) carries so that
``gpucellpool fidelity-diff`` can read a divergence decision by decision and cell by cell.
Kept apart so the dump's format is one small module, not a corner of the recorder.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DecisionSeen:
    """The pool's published decision and policy memory as the recorder saw them change.

    ``time_seconds`` is the recorder's (seconds since the replay started); ``decided_at`` is
    ``lastDecision.time`` as written (RFC 3339, whole seconds); ``policy_memory`` is
    ``status.policyMemory`` verbatim (``autoscaler.policy_memory.decode_memory`` reads it; its times
    are the operator's wall clock). The fidelity dump carries these (``fidelity_dump``).
    """

    time_seconds: float
    reason: str
    desired_replicas: int
    message: str
    decided_at: str = ""
    policy_memory: str = ""

    def same_as(self, other: DecisionSeen) -> bool:
        """The same decision and memory (the time it was seen aside)."""
        return (self.reason, self.desired_replicas, self.message, self.policy_memory) == (
            other.reason,
            other.desired_replicas,
            other.message,
            other.policy_memory,
        )


@dataclass(frozen=True, slots=True)
class CellEvent:
    """One cell's step as the recorder saw it: its guest created or gone, its status row's
    phase changed, or its Node first placeable (HAMi may bind there). The fidelity dump carries
    these, so a divergence can be read cell by cell (a boot cancelled as its Node joined)."""

    time_seconds: float
    cell: str
    event: str
