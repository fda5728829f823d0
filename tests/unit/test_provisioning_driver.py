"""The provisioner's driver on the keyed runner (virtual clock): which pool events reconcile, the
reconciler's requeue, backoff after a failed pass, the leader gate, and a gone pool forgotten."""

from __future__ import annotations

from typing import Any

from gpucellpool.operator.provisioning import ProvisionerDriver
from provisioner.reconciler import PoolKey, ReconcileResult
from simulations.simulator.engine.clock import VirtualClock

START = 1_000_000.0


class FakeReconciler:
    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.passes: list[tuple[str, float]] = []
        self.result = ReconcileResult(requeue_after_s=None)
        self.fail = False

    async def reconcile_once(self, key: PoolKey) -> ReconcileResult:
        self.passes.append((key.name, round(self.clock.now() - START, 3)))
        if self.fail:
            raise RuntimeError("apiserver said no")
        return self.result


def pool(name: str, generation: int = 1, desired: int = 0) -> dict[str, Any]:
    meta = {"namespace": "ns", "name": name, "generation": generation}
    return {"metadata": meta, "status": {"desiredReplicas": desired}}


def make(leader: bool = True) -> tuple[ProvisionerDriver, FakeReconciler, VirtualClock, list[bool]]:
    clock = VirtualClock(START)
    reconciler, leading = FakeReconciler(clock), [leader]
    driver = ProvisionerDriver(reconciler, clock, lambda: leading[0], idle_requeue_s=30.0)
    return driver, reconciler, clock, leading


async def test_only_relevant_pool_changes_reconcile_after_the_fixed_debounce() -> None:
    driver, reconciler, clock, _ = make()
    driver.pool_event("ADDED", pool("a"))
    await clock.advance(0.1)
    driver.pool_event("MODIFIED", pool("a", desired=2))  # inside the 0.2 s: same pass
    await clock.advance(0.15)
    assert reconciler.passes == [("a", 0.2)]  # 0.2 s after the first event, not the last
    driver.pool_event("MODIFIED", pool("a", desired=2))  # our own status write: nothing new
    await clock.advance(1.0)
    assert len(reconciler.passes) == 1
    driver.pool_event("MODIFIED", pool("a", generation=2, desired=2))
    await clock.advance(0.3)
    assert len(reconciler.passes) == 2 and driver.pools[("ns", "a")].passes == 2
    await driver.close()


async def test_requeue_after_then_the_idle_requeue() -> None:
    driver, reconciler, clock, _ = make()
    reconciler.result = ReconcileResult(requeue_after_s=5.0)
    driver.pool_event("ADDED", pool("a"))
    await clock.advance(5.3)
    reconciler.result = ReconcileResult(requeue_after_s=None)
    await clock.advance(40.0)
    assert [t for _, t in reconciler.passes] == [0.2, 5.2, 10.2, 40.2]
    await driver.close()


async def test_a_failing_pass_backs_off_and_other_pools_go_on() -> None:
    driver, reconciler, clock, _ = make()
    driver.pool_event("ADDED", pool("a"))
    await clock.advance(0.3)
    reconciler.fail = True
    driver.wake(("ns", "a"))
    await clock.advance(0.2 + 1 + 2 + 4 + 0.1)
    assert [t for _, t in reconciler.passes] == [0.2, 0.5, 1.5, 3.5, 7.5]
    state = driver.runner.keys[("ns", "a")]
    assert state.errors == 4 and driver.pools[("ns", "a")].passes == 1
    reconciler.fail = False
    driver.pool_event("ADDED", pool("b"))
    await clock.advance(0.3)
    assert reconciler.passes[-1] == ("b", 7.8)
    await driver.close()


async def test_a_standby_does_not_reconcile_until_it_leads_and_is_woken() -> None:
    driver, reconciler, clock, leading = make(leader=False)
    driver.pool_event("ADDED", pool("a"))
    await clock.advance(90.0)
    assert reconciler.passes == []
    leading[0] = True
    driver.wake_all()
    await clock.advance(0.3)
    assert [t for _, t in reconciler.passes] == [90.2]
    await driver.close()


async def test_a_gone_pool_is_forgotten_and_deleted_pools_stop() -> None:
    driver, reconciler, clock, _ = make()
    reconciler.result = ReconcileResult(gone=True)
    driver.pool_event("ADDED", pool("a"))
    await clock.advance(0.3)
    assert ("ns", "a") not in driver.runner and len(reconciler.passes) == 1
    driver.pool_event("MODIFIED", pool("a", generation=3))  # finalizer gone: nothing to do
    await clock.advance(60.0)
    assert len(reconciler.passes) == 1
    reconciler.result = ReconcileResult()
    driver.pool_event("ADDED", pool("b"))
    await clock.advance(0.3)
    driver.pool_event("DELETED", pool("b"))
    await clock.advance(60.0)
    assert [n for n, _ in reconciler.passes] == ["a", "b"] and ("ns", "b") not in driver.pools
    await driver.close()


async def test_only_owned_pools_reconcile() -> None:
    clock = VirtualClock(START)
    reconciler = FakeReconciler(clock)
    driver = ProvisionerDriver(reconciler, clock, lambda: True, owns=lambda key: key[1] == "a")
    driver.pool_event("ADDED", pool("a"))
    driver.pool_event("ADDED", pool("b"))
    await clock.advance(60.0)
    assert {name for name, _ in reconciler.passes} == {"a"}
    await driver.close()


def with_plan(raw: dict[str, Any], victims: list[str] | None, act: bool = True) -> dict[str, Any]:
    decision = {"reason": "ScaledDown", "desiredReplicas": raw["status"]["desiredReplicas"]}
    decision |= {"act": act, **({"victims": victims} if victims is not None else {})}
    return {**raw, "status": {**raw["status"], "lastDecision": decision}}


async def test_a_plan_that_changes_only_its_victims_wakes_the_pool() -> None:
    driver, reconciler, clock, _ = make()
    driver.pool_event("ADDED", with_plan(pool("a", desired=3), ["a-4"]))
    await clock.advance(0.3)
    assert len(reconciler.passes) == 1
    driver.pool_event("MODIFIED", with_plan(pool("a", desired=3), ["a-4"]))  # same plan
    await clock.advance(1.0)
    assert len(reconciler.passes) == 1
    driver.pool_event("MODIFIED", with_plan(pool("a", desired=3), ["a-2"]))  # same target
    await clock.advance(0.3)
    assert reconciler.passes[-1] == ("a", 1.5)
    driver.pool_event("MODIFIED", with_plan(pool("a", desired=3), ["a-1"], act=False))  # shadow
    driver.pool_event("MODIFIED", with_plan(pool("a", desired=3), ["a-0"], act=False))
    await clock.advance(1.0)
    assert len(reconciler.passes) == 3  # leaving the acted plan wakes once; shadow picks do not
    await driver.close()
