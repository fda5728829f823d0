"""Execute a checked plan: how many cells to create and which live cells to remove, now.

Why this module exists: the simulator and the live provisioner must carry out the autoscaler's
plan by one rule, or the simulator's fidelity is measured instead of true by construction
(issue 13). ``plan_check`` decides which steps are accepted; this rule turns the accepted plan
into actions over the live cells, and both ``fsm.membership`` (live) and
``simulations.simulator.engine.actuator`` (simulated) call it:

* up: create ``target - live`` cells, at most the check's ``create_limit`` (physical GPUs);
* down: Failed cells first (highest index first: they serve no pod), then the accepted
  victims in the plan's order - a Booting victim (a cancelled hedged boot) like a Ready one -
  down to the target less the held victims; a victim that is gone or held is not replaced by
  another cell (the next plan chooses again, with the rejection published);
* a plan that names no victim at all (a decision not in force: Shadow mode, a stale target)
  still converges: the highest indexes go, as for a pool without autoscaling.

Membership layers its own churn rules on top (in-flight cap, replacement back-off, guards,
a rollout's surge); the simulated world has none of those states, so the two agree whenever
those rules are quiet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from provisioner.fsm.plan_check import CheckedPlan


@dataclass(frozen=True, slots=True)
class LiveCell:
    """A cell that counts toward the pool's size: its ``name``, ``index`` and whether it is
    ``failed`` (still an object, serving nothing)."""

    name: str
    index: int
    failed: bool = False


@dataclass(frozen=True, slots=True)
class Execution:
    """What to do now: ``create`` new cells, mark ``remove`` (in order) for draining."""

    create: int = 0
    remove: tuple[str, ...] = ()


def creatable(checked: CheckedPlan, wanted: int) -> int:
    """Of ``wanted`` new cells, how many the checked plan allows (its physical bound)."""
    if wanted <= 0:
        return 0
    return wanted if checked.create_limit is None else min(wanted, checked.create_limit)


def removals(
    checked: CheckedPlan, live: Sequence[LiveCell], keep_extra: int = 0
) -> tuple[str, ...]:
    """The cells to remove so that ``live`` comes down to the plan's target (plus
    ``keep_extra`` cells a rollout's surge holds): Failed first, then the accepted victims in
    the plan's order; a held victim's slot waits and no other cell stands in for a victim
    the check did not accept, unless the plan named none."""
    names = {c.name for c in live}
    held = {h for h in checked.held if h in names}
    excess = len(live) - max(checked.target + max(keep_extra, 0), 0) - len(held)
    if excess <= 0:
        return ()
    highest_first = sorted(live, key=lambda c: -c.index)
    ordered = [c.name for c in highest_first if c.failed]
    ordered += [v for v in checked.victims if v in names and v not in ordered]
    if not checked.victims_named:
        ordered += [c.name for c in highest_first if c.name not in ordered and c.name not in held]
    return tuple(ordered[:excess])


def execute(checked: CheckedPlan, live: Sequence[LiveCell]) -> Execution:
    """The checked plan carried out over ``live``: creations up to the target within the
    physical bound, or removals down to it (never both)."""
    wanted = checked.target - len(live)
    if wanted > 0:
        return Execution(create=creatable(checked, wanted))
    return Execution(remove=removals(checked, live))
