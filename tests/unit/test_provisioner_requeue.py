"""When a converge pass asks to be looked at again: the earliest of its cadence and the holds.

A drain back-off (membership's ``requeue_after_s``) or a plan rejection with a retryAfter
(``CheckedPlan.requeue_after_s``) that ends before the idle cadence must bring the pool back
when it ends, so a lifted VictimInDrainBackoff row does not linger for up to 30 s.
"""

from __future__ import annotations

from provisioner.reconciler import BUSY_REQUEUE_S, IDLE_REQUEUE_S, ReconcileResult, sooner


def test_a_hold_ending_before_the_idle_cadence_wins() -> None:
    idle = ReconcileResult(requeue_after_s=IDLE_REQUEUE_S, ready=2)
    assert sooner(idle, 4.5, None) == ReconcileResult(requeue_after_s=4.5, ready=2)
    assert sooner(idle, None, 7.0).requeue_after_s == 7.0
    assert sooner(idle, 12.0, 7.0).requeue_after_s == 7.0


def test_the_cadence_stays_when_no_hold_ends_sooner() -> None:
    busy = ReconcileResult(requeue_after_s=BUSY_REQUEUE_S)
    assert sooner(busy, 20.0, None).requeue_after_s == BUSY_REQUEUE_S
    assert sooner(busy, None, None) == busy


def test_a_hold_already_over_requeues_at_once_never_negative() -> None:
    idle = ReconcileResult(requeue_after_s=IDLE_REQUEUE_S)
    assert sooner(idle, -3.0).requeue_after_s == 0.0
