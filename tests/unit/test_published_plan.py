"""The provisioner reads the autoscaler's plan from the pool's status (provisioner.planning).

What these prove: the plan in force is ``status.desiredReplicas`` with the victims of the acted
decision that set it, and of those the ones the decision chose while they ran no pod
(``lastDecision.emptyVictims``) - the ones the check keeps if they run a pod by then
(VictimInUse). A decision not in force (Shadow, another target) names no victim, so none is
marked either; an emptyVictims entry that is not a victim marks nothing.
"""

from __future__ import annotations

from typing import Any

from gpucellpool.api.pool import GPUCellPool
from provisioner.planning import published_plan
from simulations.twin.scenario import swiftguest_pool


def pool(desired: int, **last: Any) -> GPUCellPool:
    raw = swiftguest_pool("p", "ns", replicas=0)
    raw["spec"]["autoscaling"] = {"enabled": True, "minReplicas": 0, "maxReplicas": 8}
    decision = {"reason": "SparesCancelled", "act": True, "desiredReplicas": desired, **last}
    raw["status"] = {"desiredReplicas": desired, "lastDecision": decision}
    return GPUCellPool.model_validate(raw)


def test_the_plan_carries_which_victims_never_ran_a_pod() -> None:
    plan = published_plan(pool(2, victims=["p-4", "p-3", "p-1"], emptyVictims=["p-4", "p-3"]))
    assert (plan.target, plan.victims) == (2, ("p-4", "p-3", "p-1"))
    assert plan.empty_victims == ("p-4", "p-3")


def test_a_decision_not_in_force_marks_nothing() -> None:
    shadow = pool(2, act=False, victims=["p-4"], emptyVictims=["p-4"])
    assert published_plan(shadow).victims == () and published_plan(shadow).empty_victims == ()
    stray = pool(2, victims=["p-4"], emptyVictims=["p-9"])  # not a victim: no mark
    assert published_plan(stray).empty_victims == ()
    plain = pool(2, reason="ScaledDown", victims=["p-4"])  # written before the field existed
    assert published_plan(plain).empty_victims == ()
