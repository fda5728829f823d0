"""The operator's execution lag: a decision's actions carried out some time after the decision.

Why this module exists: the live autoscaler publishes a plan (``status.desiredReplicas`` and
``lastDecision.victims``) and the provisioner carries it out on its next pass - a guest created,
a drain started - which on a busy machine happens seconds after the decision (0.6-6.6 wall s
measured on the twin at load 8-13, 12-130 trace s at x20). The simulator applied each decision
at its instant, so given the twin's measured boots and drains its cells still appeared and left
earlier than the twin's. With ``SimConfig.exec_lag_seconds`` above 0 the engine holds each acted
decision that long, then checks and executes it against the world as it is then (the
provisioner checks a plan against fresh state too); meanwhile the policy sees the cells as the
provisioner will have them once it has caught up (``autoscaler.observe.with_requested``, what
the live loop hands ``decide``). At 0 nothing is held and the engine runs exactly as before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from autoscaler.explain import carry_victims, outcome
from autoscaler.observe import with_requested
from autoscaler.policy.decision import Decision
from autoscaler.policy.types import Observation
from simulations.simulator.engine.actuator import LIVE
from simulations.simulator.engine.world import SimCell


@dataclass(slots=True)
class ExecLag:
    """Acted decisions waiting for their execution, oldest first, and the plan in force."""

    seconds: float = 0.0
    held: deque[tuple[float, Decision]] = field(default_factory=deque)
    plan: Decision | None = None
    """The newest held decision: what the provisioner will have carried out once caught up."""
    _view: tuple[Observation, Decision, Observation] | None = None

    def __post_init__(self) -> None:
        if self.seconds < 0:
            raise ValueError(f"exec_lag_seconds must be >= 0, got {self.seconds}")

    @property
    def active(self) -> bool:
        return self.seconds > 0

    def hold(self, decision: Decision, now: float, cells: Iterable[SimCell]) -> float:
        """Hold ``decision`` until its execution; returns when that is due.

        Its victims are published as the live loop publishes them (``explain.carry_victims``):
        the held plan's victims still live first, then its own, up to its excess - a hold at the
        target of a scale-down not carried out yet keeps that scale-down's victims, and a
        victim chosen empty stays marked so (``Decision.empty_victims``).
        """
        live = [c.name for c in cells if c.state in LIVE]
        in_force = self.plan.victims if self.plan is not None else ()
        empty = self.plan.empty_victims if self.plan is not None else ()
        out = carry_victims(outcome(decision, True), in_force, live, empty)
        if (out.victims, out.empty_victims) != (decision.victims, decision.empty_victims):
            decision = replace(decision, victims=out.victims, empty_victims=out.empty_victims)
        due = now + self.seconds
        self.held.append((due, decision))
        self.plan = decision
        return due

    def release(self) -> Decision:
        """The oldest held decision, now due (the same lag for all keeps them in order)."""
        _, decision = self.held.popleft()
        if not self.held:
            self.plan = None
        return decision

    def view(self, observation: Observation, since: float) -> Observation:
        """``observation`` with the cells of the held plan: Booting placeholders for cells asked
        for and not created yet, its victims Draining. The same object while neither changes
        (so the decider's idle-tick skipping still applies)."""
        plan = self.plan
        if plan is None:
            return observation
        cached = self._view
        if cached is not None and cached[0] is observation and cached[1] is plan:
            return cached[2]
        cells = with_requested(observation.cells, plan.desired_replicas, since, plan.victims)
        view = replace(observation, cells=cells)
        self._view = (observation, plan, view)
        return view
