"""What one converge pass of the provisioner concluded, gathered for its status write.

Why this module exists: the pass (``provisioner.reconciler``) ends with many separate findings -
reachability, the membership plan and its stall, the rollout, the physical ledger, HAMi capacity,
the outer drain requests; ``status.PassSummary`` carries them to the conditions and capacity
objects. Turning the findings into that summary is one pure step, kept here out of the shell.
"""

from __future__ import annotations

from gpucellpool.api.status import CellStatus
from provisioner.fsm.drain_outer import OuterDrainPlan
from provisioner.fsm.inventory import physical_condition
from provisioner.fsm.membership import MembershipPlan
from provisioner.fsm.rollout import RolloutPlan
from provisioner.fsm.vocabulary import PRE_GPU_PHASES, StallReason
from provisioner.inventory import HamiReading
from provisioner.rollout_shell import updated_condition
from provisioner.status import PassSummary
from provisioner.workload import Reachability

__all__ = ["pass_summary"]


def pass_summary(
    reach: Reachability,
    desired: int,
    plan: MembershipPlan,
    created: int,
    rollout: RolloutPlan,
    free: int | None,
    rows: dict[str, CellStatus],
    *,
    hami: HamiReading,
    outer: OuterDrainPlan,
) -> PassSummary:
    """What a converge pass concluded, for the conditions and the capacity objects."""
    physical = physical_condition(
        free,
        sum(1 for r in rows.values() if r.phase in PRE_GPU_PHASES),
        plan.stall is StallReason.INSUFFICIENT_PHYSICAL_GPU,
    )
    return PassSummary(
        reach,
        desired,
        str(plan.stall) if plan.stall else None,
        plan.stall_message,
        created,
        updated_condition(rollout),
        physical,
        hami.condition,
        free,
        hami.capacity,
        drain_requested=outer.condition,
        provider=hami.provider,
    )
