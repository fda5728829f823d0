"""The provisioner's pure core: cell state machine, membership, bootstrap, manifests, rollout,
drain and identity.

Why this package exists: every decision the provisioner takes about a cell is a pure function
of typed observations and ``now_s`` here, so it can be tested table-driven and replayed by the
simulator; the asyncio shell around it only observes, calls these functions and applies the
results. Nothing in this package does I/O, reads a clock or logs (import-linter enforces it).

Entry points (one module per concept):

* ``cell_state.decide_cell`` - next status row of one cell from one observation;
* ``observations.observe_swift_guest`` / ``observe_machine`` / ``observe_node`` - raw objects
  into that observation;
* ``membership.plan_membership`` - cells to create, replace, remove, or why not;
* ``bootstrap.render_template`` / ``bootstrap_secret`` / ``seed_profile`` - the join template;
* ``manifests.swift_guest`` / ``capi_objects`` - the outer objects of a cell;
* ``rollout.template_hash`` / ``plan_rollout`` - drift and rolling updates;
* ``drain.decide_drain`` / ``plan_pool_deletion`` - emptying and tearing down cells;
* ``identity`` - names, labels, ownership, kubelet liveness; ``rows`` - API status rows.
"""

from provisioner.fsm.bootstrap import RenderError, RenderInputs, render_template
from provisioner.fsm.cell_state import Budgets, CellDecision, CellObservation, CellRow, decide_cell
from provisioner.fsm.drain import DrainInput, DrainStep, decide_drain, plan_pool_deletion
from provisioner.fsm.identity import PoolIdentity, cell_name, parse_cell_index
from provisioner.fsm.membership import MembershipInput, MembershipPlan, plan_membership
from provisioner.fsm.rollout import RolloutInput, RolloutPlan, plan_rollout, template_hash
from provisioner.fsm.vocabulary import CellPhase, CellReason, StallReason

__all__ = [
    "Budgets",
    "CellDecision",
    "CellObservation",
    "CellPhase",
    "CellReason",
    "CellRow",
    "DrainInput",
    "DrainStep",
    "MembershipInput",
    "MembershipPlan",
    "PoolIdentity",
    "RenderError",
    "RenderInputs",
    "RolloutInput",
    "RolloutPlan",
    "StallReason",
    "cell_name",
    "decide_cell",
    "decide_drain",
    "parse_cell_index",
    "plan_membership",
    "plan_pool_deletion",
    "plan_rollout",
    "render_template",
    "template_hash",
]
