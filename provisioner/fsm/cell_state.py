"""The cell state machine: one observation in, one phase decision out.

Why this module exists: a cell is Ready only when three independent layers agree - the VM runs
and has an address (KubeSwift, infrastructure cluster), its Node is Ready (workload cluster),
and HAMi advertises the GPU on that Node. This function turns one snapshot of those layers plus
the cell's previous status row into the next row, with a machine-readable reason. It is pure:
the caller passes ``now_s`` and every observation; nothing here reads a clock or the network.

Rules (reference §2.2, with the §11 defects fixed):

* per-phase budgets: a phase fails only after being held continuously for longer than its
  budget (``bootstrap.readyTimeout`` for AllocatingGPU..Joining, ``capacity.readyTimeout`` for
  AwaitingGPUCapacity); an incarnation that never became Ready also has a total budget, so the
  worst case is no longer 4 x 15 min + 5 min;
* regression is not failure: a Ready cell whose Node goes NotReady goes back to Joining and
  restarts that phase's clock;
* doubt freezes: while the workload cluster is unreachable, phases that need it are frozen
  (reason ``Unreachable``), and the first clear look afterwards restarts the phase clock;
* ``Pending`` is visible (row exists, outer object not yet observed), ``Deleting`` is used (the
  drain is finished and the outer objects are being deleted), and a launcher pod that cannot be
  scheduled is named in the AllocatingGPU message instead of only timing out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from provisioner.fsm.identity import Liveness
from provisioner.fsm.vocabulary import TEARDOWN_PHASES, CellPhase, CellReason

DEFAULT_BOOTSTRAP_READY_TIMEOUT_S = 15 * 60.0
DEFAULT_CAPACITY_READY_TIMEOUT_S = 5 * 60.0
_OUTER_PHASES = (CellPhase.ALLOCATING_GPU, CellPhase.GUEST_PROVISIONING, CellPhase.BOOTING)


@dataclass(frozen=True, slots=True)
class OuterStatus:
    """The outer object (SwiftGuest, or Machine + KubeSwiftMachine + its guest), normalised.

    ``failed`` means a *terminal* failure as judged by the observer; ``network_failed`` is a
    running guest that gave up on DHCP (``NetworkReady=False/DHCPTimeout``).
    ``waiting_message`` carries why the guest is not progressing (e.g. the launcher pod's
    ``PodScheduled=False`` message), shown in the cell message. ``provider_id``: the providerID
    the infrastructure provider assigned (Cluster API mode; "" otherwise) - proof that a Node
    carrying it is this cell's even before the operator has labelled it.
    """

    exists: bool = False
    uid: str = ""
    created_at_s: float | None = None
    deleting: bool = False
    gpu_devices: tuple[str, ...] = ()
    running: bool = False
    address: str = ""
    failed: bool = False
    failure_message: str = ""
    network_failed: bool = False
    waiting_message: str = ""
    provider_id: str = ""


@dataclass(frozen=True, slots=True)
class GPUCapacity:
    """HAMi's view of the cell's Node: the third layer of Ready.

    ``healthy_devices``: healthy entries of ``hami.io/node-nvidia-register`` (or devices in the
    HAMi DRA ResourceSlice), None when absent/unparseable; ``allocatable_gpus``: allocatable
    ``nvidia.com/gpu``, None when not applicable (HAMi DRA mode); ``gate_label_on``: the
    ``gpu=on`` label that schedules HAMi's device plugin (True when the mode needs none).
    """

    gate_label_on: bool = False
    healthy_devices: int | None = None
    allocatable_gpus: int | None = None
    preflight: str = ""


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """The workload Node named after the cell.

    ``instance_label``: value of ``cells.kubeswift.io/instance`` ("" if absent);
    ``owned``: the identity predicate says the Node is this pool's (see identity.node_ownership:
    labels, or the cell's providerID); ``foreign_detail``: why it is not, when it is not;
    ``liveness``: kubelet liveness from the Lease / NodeStatus heartbeat.
    """

    exists: bool = False
    ready: bool = False
    owned: bool = True
    foreign_detail: str = ""
    instance_label: str = ""
    liveness: Liveness = Liveness.UNKNOWN
    capacity: GPUCapacity = GPUCapacity()


@dataclass(frozen=True, slots=True)
class CellRow:
    """The parts of a ``status.cells[]`` row the state machine reads and writes."""

    phase: CellPhase = CellPhase.PENDING
    reason: str = ""
    message: str = ""
    guest_uid: str = ""
    last_transition_s: float | None = None
    ready_once: bool = False
    failure_count: int = 0


@dataclass(frozen=True, slots=True)
class Budgets:
    """Per-phase budgets; ``total_provision_s`` bounds a never-Ready incarnation end to end.

    ``total_provision_s`` None means twice the per-phase bootstrap budget.
    """

    bootstrap_ready_timeout_s: float = DEFAULT_BOOTSTRAP_READY_TIMEOUT_S
    capacity_ready_timeout_s: float = DEFAULT_CAPACITY_READY_TIMEOUT_S
    total_provision_s: float | None = None

    def for_phase(self, phase: CellPhase) -> float | None:
        if phase is CellPhase.AWAITING_GPU_CAPACITY:
            return self.capacity_ready_timeout_s
        if phase in (*_OUTER_PHASES, CellPhase.JOINING):
            return self.bootstrap_ready_timeout_s
        return None

    @property
    def total_s(self) -> float:
        if self.total_provision_s is not None:
            return self.total_provision_s
        return 2 * self.bootstrap_ready_timeout_s


@dataclass(frozen=True, slots=True)
class CellObservation:
    outer: OuterStatus
    node: NodeStatus
    workload_reachable: bool
    expected_devices: int = 1


@dataclass(frozen=True, slots=True)
class CellDecision:
    """The next row plus what the shell must do about it.

    ``failed``: this pass moved the cell into Failed (emit one Warning Event, record the
    failure in membership history); ``reap_node``: delete the stale same-named Node of a
    previous incarnation; ``relabel_node``: adopt a live Node with a wrong instance label;
    ``first_ready``: first Ready of this incarnation (observe the startup histogram).
    """

    row: CellRow
    failed: bool = False
    reap_node: bool = False
    relabel_node: bool = False
    first_ready: bool = False


@dataclass(frozen=True, slots=True)
class _Step:
    phase: CellPhase
    reason: str
    message: str
    timeout_reason: CellReason | None = None
    reap_node: bool = False
    relabel_node: bool = False
    frozen: bool = False


def _fresh_incarnation(prev: CellRow, outer: OuterStatus) -> CellRow:
    """A row whose guest UID differs from the live object starts over (keeps failureCount)."""
    if prev.guest_uid and outer.exists and outer.uid and prev.guest_uid != outer.uid:
        return CellRow(failure_count=prev.failure_count, last_transition_s=None)
    return prev


def _outer_step(outer: OuterStatus) -> _Step | None:
    """Layer one: the VM. None once the guest runs and has an address."""
    if not outer.exists:
        return _Step(CellPhase.PENDING, CellReason.GUEST_NOT_CREATED, "outer object not created")
    if not outer.gpu_devices:
        msg = outer.waiting_message or "waiting for KubeSwift to allocate a GPU"
        return _Step(
            CellPhase.ALLOCATING_GPU,
            CellReason.WAITING_FOR_GPU_ALLOCATION,
            msg,
            CellReason.CELL_PROVISION_TIMEOUT,
        )
    if not outer.running:
        msg = outer.waiting_message or "waiting for the guest VM to run"
        return _Step(
            CellPhase.GUEST_PROVISIONING,
            CellReason.WAITING_FOR_GUEST,
            msg,
            CellReason.CELL_PROVISION_TIMEOUT,
        )
    if not outer.address:
        return _Step(
            CellPhase.BOOTING,
            CellReason.WAITING_FOR_ADDRESS,
            "guest is running, waiting for its address",
            CellReason.CELL_PROVISION_TIMEOUT,
        )
    return None


def _node_step(obs: CellObservation) -> _Step | None:
    """Layer two: the workload Node. None once it is ours, current and Ready."""
    node, uid = obs.node, obs.outer.uid
    if not node.exists:
        return _Step(
            CellPhase.JOINING,
            CellReason.WAITING_FOR_NODE,
            "waiting for the Node to register",
            CellReason.NODE_NEVER_REGISTERED,
        )
    if not node.owned:
        return _Step(
            CellPhase.JOINING,
            CellReason.FOREIGN_NODE,
            "a Node with this name belongs to someone else; it is never touched"
            + (f" ({node.foreign_detail})" if node.foreign_detail else ""),
            CellReason.NODE_NAME_COLLISION,
        )
    stale = node.instance_label not in ("", uid)
    if stale and node.liveness is Liveness.DEAD:
        return _Step(
            CellPhase.JOINING,
            CellReason.NODE_NAME_COLLISION,
            "stale Node of a previous incarnation with a dead kubelet is being deleted",
            CellReason.NODE_NEVER_REGISTERED,
            reap_node=True,
        )
    if not node.ready:
        return _Step(
            CellPhase.JOINING,
            CellReason.NODE_NOT_READY,
            "Node registered but not Ready",
            CellReason.JOIN_TIMEOUT,
            relabel_node=stale,
        )
    return _Step(CellPhase.READY, CellReason.CELL_READY, "", relabel_node=stale)


def _capacity_step(obs: CellObservation) -> _Step | None:
    """Layer three: HAMi advertises the expected devices. None when it does."""
    cap, want = obs.node.capacity, obs.expected_devices
    have = cap.healthy_devices or 0
    missing = []
    if not cap.gate_label_on:
        missing.append("gpu=on label missing")
    if have < want:
        missing.append(f"{have} of {want} GPU devices advertised by HAMi")
    if cap.allocatable_gpus is not None and cap.allocatable_gpus <= 0:
        missing.append("allocatable nvidia.com/gpu is 0")
    if not missing:
        return None
    if cap.preflight:
        missing.append(f"preflight: {cap.preflight}")
    return _Step(
        CellPhase.AWAITING_GPU_CAPACITY,
        CellReason.WAITING_FOR_GPU_CAPACITY,
        "; ".join(missing),
        CellReason.GPU_NOT_ADVERTISED,
    )


def _frozen(prev: CellRow, node: NodeStatus) -> _Step:
    """Doubt holds the phase, except that a Node last seen as someone else's is never Ready."""
    if prev.phase is CellPhase.READY and node.exists and not node.owned:
        return _Step(
            CellPhase.JOINING,
            CellReason.UNREACHABLE,
            "workload cluster unreachable; the Node last seen with this name belongs to "
            "someone else, so the cell is not counted as Ready",
            frozen=True,
        )
    return _Step(
        prev.phase,
        CellReason.UNREACHABLE,
        "workload cluster unreachable; phase frozen",
        frozen=True,
    )


def _terminal_step(prev: CellRow, outer: OuterStatus) -> _Step | None:
    """Failure and deletion facts that override the layered walk."""
    if outer.exists and outer.failed:
        msg = outer.failure_message or "outer object failed"
        return _Step(CellPhase.FAILED, CellReason.GUEST_FAILED, msg)
    if prev.phase is CellPhase.FAILED:
        return _Step(CellPhase.FAILED, prev.reason or CellReason.GUEST_FAILED, prev.message)
    if outer.exists and outer.deleting:
        msg = "outer object deletion requested"
        return _Step(CellPhase.DRAINING, CellReason.CELL_DRAINING, msg)
    if outer.exists and outer.network_failed:
        msg = "guest runs but gave up on DHCP (NetworkReady=False)"
        return _Step(CellPhase.FAILED, CellReason.GUEST_NETWORK_FAILED, msg)
    return None


def _evaluate(prev: CellRow, obs: CellObservation) -> _Step:
    """Walk the layers in order; the first layer that is not done decides."""
    step = _terminal_step(prev, obs.outer) or _outer_step(obs.outer)
    if step is not None:
        return step
    if not obs.workload_reachable:
        return _frozen(prev, obs.node)
    step = _node_step(obs)
    if step is not None and step.phase is not CellPhase.READY:
        return step
    capacity = _capacity_step(obs)
    if capacity is not None:
        return capacity
    relabel = step is not None and step.relabel_node
    return _Step(CellPhase.READY, CellReason.CELL_READY, "", relabel_node=relabel)


def _timeout(
    prev: CellRow, step: _Step, obs: CellObservation, budgets: Budgets, now_s: float
) -> _Step:
    """Fail a phase held longer than its budget, or a never-Ready incarnation past the total."""
    if step.frozen or step.timeout_reason is None or prev.reason == CellReason.UNREACHABLE:
        return step
    budget = budgets.for_phase(step.phase)
    held_since = prev.last_transition_s if prev.phase is step.phase else None
    if budget is not None and held_since is not None and now_s - held_since > budget:
        msg = f"{step.phase} for more than {budget:.0f}s: {step.message}"
        return _Step(CellPhase.FAILED, step.timeout_reason, msg)
    created = obs.outer.created_at_s
    if not prev.ready_once and created is not None and now_s - created > budgets.total_s:
        msg = f"not Ready {budgets.total_s:.0f}s after creation: {step.message}"
        return _Step(CellPhase.FAILED, CellReason.CELL_PROVISION_TIMEOUT, msg)
    return step


def decide_cell(
    prev: CellRow, obs: CellObservation, budgets: Budgets, now_s: float
) -> CellDecision:
    """Next status row for one cell. Pure; ``now_s`` is seconds on the caller's clock."""
    prev = _fresh_incarnation(prev, obs.outer)
    if prev.phase in TEARDOWN_PHASES:
        return CellDecision(row=replace(prev, guest_uid=obs.outer.uid or prev.guest_uid))
    step = _timeout(prev, _evaluate(prev, obs), obs, budgets, now_s)
    changed = step.phase is not prev.phase or prev.last_transition_s is None
    entered_failed = step.phase is CellPhase.FAILED and prev.phase is not CellPhase.FAILED
    ready = step.phase is CellPhase.READY
    # The first clear look after an unreachable spell restarts the phase clock.
    restart_clock = prev.reason == CellReason.UNREACHABLE and not step.frozen
    row = CellRow(
        phase=step.phase,
        reason=str(step.reason),
        message=step.message,
        guest_uid=obs.outer.uid or prev.guest_uid,
        last_transition_s=now_s if changed or restart_clock else prev.last_transition_s,
        ready_once=prev.ready_once or ready,
        failure_count=prev.failure_count + (1 if entered_failed else 0),
    )
    return CellDecision(
        row=row,
        failed=entered_failed,
        reap_node=step.reap_node,
        relabel_node=step.relabel_node,
        first_ready=ready and not prev.ready_once,
    )
