"""The KubeSwift twin keeps a failed launcher failed, as KubeSwift does.

With ``runPolicy: Always`` KubeSwift re-creates a failed launcher only after its restart backoff
(kubeswift-facts.md, "Telling failed apart"). A twin that revived a Failed guest at its next pass
once a test cleared the fault let the dead VM register a Node under the cell's name before the
provisioner replaced it; the replacement's kubelet then found the name taken (a flaky
test_failed_cell_is_replaced_after_backoff_keeping_its_failure_count).
"""

from __future__ import annotations

from provisioner.kube import JSON, KINDS, KubeApi
from simulations.simulator.engine.clock import VirtualClock
from simulations.twin import GuestFault
from simulations.twin.kubeswift import (
    RESTARTS_WHEN_FAILED,
    SimulatedKubeSwift,
    restart_backoff_s,
)
from tests.integration.provisioner_support import apis  # noqa: F401  (fixture)


def _guest(namespace: str) -> JSON:
    return {
        "apiVersion": "swift.kubeswift.io/v1alpha1",
        "kind": "SwiftGuest",
        "metadata": {"name": "tw-0", "namespace": namespace},
        "spec": {"guestClassRef": {"name": "gpu-small"}, "imageRef": {"name": "ubuntu"}},
    }


async def _status_after(twin: SimulatedKubeSwift, clock: VirtualClock, t: float) -> JSON:
    clock.move_to(t)
    await twin.step()
    guest = await twin.api.get(KINDS["SwiftGuest"], twin.namespace, "tw-0")
    assert guest is not None
    return dict(guest.get("status") or {})


async def test_a_failed_launcher_stays_failed_until_its_restart_backoff(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    namespace: str,
) -> None:
    clock = VirtualClock()
    twin = SimulatedKubeSwift(apis[0], clock, namespace)
    twin.faults["tw-0"] = GuestFault(fail=True)
    await apis[0].create(_guest(namespace))
    start = clock.now()
    await _status_after(twin, clock, start)  # first sight: the boot clock starts
    failed = await _status_after(twin, clock, start + 5.0)  # past allocate + run
    assert failed["phase"] == "Failed" and failed["restartCount"] == RESTARTS_WHEN_FAILED
    twin.faults.clear()  # the cause is gone; the launcher has not been re-created yet
    backoff = restart_backoff_s(RESTARTS_WHEN_FAILED)
    still = await _status_after(twin, clock, start + 5.0 + backoff - 1.0)
    assert still["phase"] == "Failed"
    restarted = await _status_after(twin, clock, start + 5.0 + backoff)
    assert restarted["phase"] == "Scheduling"  # boots again from the start
    await _status_after(twin, clock, start + 6.0 + backoff)  # launched
    running = await _status_after(twin, clock, start + 7.0 + backoff)
    assert running["phase"] == "Running" and running["network"]["primaryIP"]


def test_restart_backoff_doubles_and_caps() -> None:
    assert [restart_backoff_s(n) for n in (0, 1, 3, 5, 9)] == [10.0, 20.0, 80.0, 300.0, 300.0]
